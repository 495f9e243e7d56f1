"""Questions to a comparison forest's trees (:class:`engine.comparison_tree.ComparisonForest`), as functions
over its arrays: the members of each leaf (:func:`leaf_index`), whether items sit below a node
(:func:`descends`) and each item's most frequent leaf-mates (:func:`leaf_mates_graph`, the forest's
``neighbor_graph``). Conventions: the docstring of :mod:`engine.comparison_tree`. Numpy and scipy only;
must never import Flask, Redis, RQ, scikit-learn or anything from ``webapp``/``workers``.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from scipy import sparse

from .comparison_growth import NO_NODE
from .graph import NO_NEIGHBOR, NeighborGraph
from .utils import group_starts


def leaf_index(f: Any) -> tuple[np.ndarray, np.ndarray]:
    """(sorted node ids, the items in that order) of every (tree, item) slot of the forest ``f``: the
    members of node v are ``items[searchsorted(keys, v, "left"):searchsorted(keys, v, "right")]``. Cached
    on the forest (``_leaf_cache``) while its number of nodes stays the same."""
    cache = f._leaf_cache
    if cache is not None and cache[0] == f.n_nodes_:
        return cache[1]
    flat = f.item_node_.reshape(-1)
    order = np.argsort(flat, kind="stable")
    index = (flat[order], order % int(f.n_items))
    f._leaf_cache = (f.n_nodes_, index)
    return index


def descends(f: Any, item_nodes: np.ndarray, node: int) -> np.ndarray:
    """Mask of the items (of one tree, given their nodes) that sit in ``node``'s subtree."""
    current = item_nodes.copy()
    inside = current == node
    depth = f.node_depth_[node]
    while True:
        deeper = ~inside & (f.node_depth_[current] > depth)
        if not deeper.any():
            return inside
        current[deeper] = f.node_parent_[current[deeper]]
        inside |= current == node


def leaf_mates_graph(f: Any, k: int, max_group: int) -> NeighborGraph:
    """Each item's ``k`` most frequent leaf-mates across the trees of ``f`` (see
    ``ComparisonForest.neighbor_graph``, which checks ``k``)."""
    n, m = int(f.n_items), int(f.n_trees)
    leaf = f.item_node_.reshape(-1)
    alone = f.node_size_[leaf] < 2
    group = np.where(alone & (f.node_parent_[leaf] != NO_NODE), f.node_parent_[leaf], leaf)
    slots = np.arange(n * m)
    order = np.argsort(group, kind="stable")
    group, slots = group[order], slots[order]
    starts = group_starts(group)
    sizes = np.diff(np.r_[starts, group.size])
    # a tree's root says nothing yet (every item is in it): no neighbours before answers
    keep = (sizes >= 2) & (sizes <= max_group) & (f.node_parent_[group[starts]] != NO_NODE)
    rows, cols, weights = [], [], []
    for size in np.unique(sizes[keep]):
        st = starts[keep & (sizes == size)]
        members = slots[st[:, None] + np.arange(size)[None, :]] % n  # (groups, size)
        i = np.repeat(members, size, axis=1).ravel()
        j = np.tile(members, (1, size)).ravel()
        off = i != j
        rows.append(i[off])
        cols.append(j[off])
        weights.append(np.full(int(off.sum()), 1.0 / (size - 1)))
    neighbors = np.full((n, k), NO_NEIGHBOR, np.int64)
    scores = np.zeros((n, k))
    if not rows:
        return NeighborGraph.from_neighbors(neighbors)
    mat = sparse.coo_matrix((np.concatenate(weights), (np.concatenate(rows), np.concatenate(cols))),
                            shape=(n, n)).tocsr().tocoo()  # tocsr sums duplicate pairs
    order = np.lexsort((mat.col, -mat.data, mat.row))
    r, c, d = mat.row[order].astype(np.int64), mat.col[order].astype(np.int64), mat.data[order]
    starts = group_starts(r)
    rank = np.arange(r.size) - np.repeat(starts, np.diff(np.r_[starts, r.size]))
    keep = rank < k
    neighbors[r[keep], rank[keep]] = c[keep]
    scores[r[keep], rank[keep]] = d[keep]
    return NeighborGraph.from_neighbors(neighbors, estimates=1.0 - scores / m)
