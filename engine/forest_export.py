"""JSON export of comparison forests (the researcher's format, docs/forest-schema.md).

The document is stable across versions and carries ``schema_version``; it describes trees,
nodes, pivots and leaf members, not the in-flight votes (resume a build with ``to_state``).
Must never import Flask, Redis, RQ or anything from ``webapp``/``workers``.
"""
from __future__ import annotations

import numpy as np

from .comparison_tree import (
    NO_NODE,
    SPLIT,
    SPLITTING,
    STATUS_NAMES,
    ComparisonForest,
    _child_keys,
    _mix64,
)

SCHEMA_VERSION = 1
KIND = "comparison_forest"


def forest_to_json(forest: ComparisonForest) -> dict:
    """A JSON-safe dict (``json.dumps`` it as is) describing every tree of ``forest``.

    Node ids are local to their tree and numbered in creation order, the root being 0.
    """
    res = forest.result()
    progress = forest.progress()
    labels = None
    if forest.classes_ is not None:
        labels = [v.item() for v in forest.classes_[forest.label_codes_]]
    trees = []
    for t in range(res.n_trees):
        nodes = np.flatnonzero(res.node_tree == t)  # ascending global id = creation order
        local = {int(g): i for i, g in enumerate(nodes.tolist())}
        members = res.item_node[t]
        order = np.argsort(members, kind="stable")
        keys = members[order]
        out = []
        for g in nodes.tolist():
            status = int(res.node_status[g])
            entry = {
                "id": local[g],
                "parent": None if res.node_parent[g] == NO_NODE else local[int(res.node_parent[g])],
                "depth": int(res.node_depth[g]),
                "status": STATUS_NAMES[status],
                "size": int(res.node_size[g]) if status >= SPLITTING else None,
            }
            if status in (SPLITTING, SPLIT):
                entry["pivots"] = [int(p) for p in res.node_pivots[g]]
                entry["children"] = [local[int(c)] for c in res.node_children[g]]
            if status != SPLIT:
                lo, hi = np.searchsorted(keys, g, "left"), np.searchsorted(keys, g, "right")
                entry["members"] = sorted(int(i) for i in order[lo:hi])
            out.append(entry)
        trees.append({"tree": t, "seed": str(int(forest.tree_seeds_[t])), "nodes": out})
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": KIND,
        "n_items": res.n_items,
        "n_trees": res.n_trees,
        "leaf_size": int(forest.leaf_size),
        "redundancy": forest.rule_.redundancy,
        "labels": labels,
        "values": None if forest.values_ is None else [float(v) for v in forest.values_],
        "done": res.done,
        "questions_issued": progress["questions_issued"],
        "answers_counted": progress["answers_counted"],
        "trees": trees,
    }


def forest_from_json(doc: dict) -> ComparisonForest:
    """Rebuild a forest from :func:`forest_to_json` output (structure and item positions).

    Votes on undecided triplets are not part of the export: a forest still being built comes
    back with its pending nodes re-asking their open triplets.
    """
    if doc.get("kind") != KIND:
        raise ValueError(f"not a comparison forest document (kind={doc.get('kind')!r})")
    version = doc.get("schema_version")
    if not isinstance(version, int) or version < 1 or version > SCHEMA_VERSION:
        raise ValueError(f"unsupported schema_version {version!r} (this code reads 1..{SCHEMA_VERSION})")
    n, m = int(doc["n_items"]), int(doc["n_trees"])
    if len(doc["trees"]) != m:
        raise ValueError("n_trees disagrees with the number of trees")
    forest = ComparisonForest(n, n_trees=m, leaf_size=int(doc["leaf_size"]), labels=doc.get("labels"),
                              redundancy=doc["redundancy"], values=doc.get("values"))
    forest._check_params()
    offsets = np.cumsum([0] + [len(t["nodes"]) for t in doc["trees"]])
    total = int(offsets[-1])
    # global ids: tree roots first (0..m-1), then the remaining nodes tree by tree
    gid = []
    nxt = m
    for t, tree in enumerate(doc["trees"]):
        ids = [t]
        for _ in tree["nodes"][1:]:
            ids.append(nxt)
            nxt += 1
        gid.append(ids)
    node_tree = np.zeros(total, np.int64)
    node_parent = np.full(total, NO_NODE, np.int64)
    node_depth = np.zeros(total, np.int64)
    node_status = np.zeros(total, np.int8)
    node_size = np.zeros(total, np.int64)
    node_pivots = np.full((total, 2), -1, np.int64)
    node_children = np.full((total, 2), NO_NODE, np.int64)
    item_node = np.full((m, n), NO_NODE, np.int64)
    seeds = np.zeros(m, np.uint64)
    for t, tree in enumerate(doc["trees"]):
        seeds[t] = np.uint64(int(tree["seed"]))
        ids = gid[t]
        for node in tree["nodes"]:
            g = ids[node["id"]]
            node_tree[g] = t
            node_parent[g] = NO_NODE if node["parent"] is None else ids[node["parent"]]
            node_depth[g] = node["depth"]
            node_status[g] = STATUS_NAMES.index(node["status"])
            node_size[g] = node["size"] or 0
            if "pivots" in node:
                node_pivots[g] = node["pivots"]
                node_children[g] = [ids[c] for c in node["children"]]
            if "members" in node:
                item_node[t, node["members"]] = g
    if (item_node == NO_NODE).any():
        raise ValueError("every item must be a member of one node per tree")
    # node keys are recomputed from the seeds, so pivots drawn later match the original forest
    node_key = np.zeros(total, np.uint64)
    node_key[:m] = _mix64(seeds)
    for g in np.argsort(node_depth, kind="stable"):
        for side in (0, 1):
            c = node_children[g, side]
            if c != NO_NODE:
                node_key[c] = _child_keys(node_key[g:g + 1], side)[0]
    slot_code = np.full((m, n), -1, np.int64)
    waiting = np.zeros(total, np.int64)
    splitting = np.flatnonzero(node_status == SPLITTING)
    for g in splitting:
        t = node_tree[g]
        items = np.flatnonzero(item_node[t] == g)
        a, b = node_pivots[g].min(), node_pivots[g].max()
        slot_code[t, items] = (items * n + a) * n + b
        waiting[g] = items.size
    state = {
        "class": "ComparisonForest", "version": 1, "n_items": n, "n_trees": m,
        "leaf_size": int(doc["leaf_size"]), "redundancy": forest.rule_.redundancy,
        "label_classes": forest.classes_, "label_codes": forest.label_codes_, "values": forest.values_,
        "tree_seeds": seeds, "n_nodes": total, "node_tree": node_tree, "node_parent": node_parent,
        "node_depth": node_depth, "node_key": node_key, "node_status": node_status, "node_size": node_size,
        "node_waiting": waiting, "node_pivots": node_pivots, "node_children": node_children,
        "item_node": item_node, "slot_code": slot_code,
        "n_issued": int(doc.get("questions_issued", 0)), "n_answers": int(doc.get("answers_counted", 0)),
        "n_late": 0, "n_released": 0,
        "triplets_live_codes": np.empty(0, np.int64), "triplets_live_votes": np.empty((0, 2), np.int64),
        "triplets_live_outstanding": np.empty(0, np.int64), "triplets_live_priority": np.empty(0, np.int64),
        "triplets_live_seq": np.empty(0, np.int64), "triplets_next_seq": 0,
        "triplets_decided_codes": np.empty(0, np.int64), "triplets_decided_a_wins": np.empty(0, bool),
    }
    rebuilt = ComparisonForest.from_state(state)
    codes = slot_code[slot_code >= 0]
    if codes.size:
        rebuilt.table_.add_live(codes, node_depth[item_node[slot_code >= 0]])
    return rebuilt


__all__ = ["SCHEMA_VERSION", "forest_from_json", "forest_to_json"]
