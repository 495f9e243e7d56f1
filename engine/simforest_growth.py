"""How a similarity forest grows (:class:`engine.simforest.SimilarityForest`, and through it
:class:`engine.simforest.ActiveSimilarityForest`): the node statuses and sentinels, the split kernel
(:func:`best_thresholds`), and the growing as functions over the forest's node arrays: open the NEW nodes
(count their objects, make leaves, draw candidate pairs), list the similarities their splits need, split
the WAITING ones. Conventions: the docstring of :mod:`engine.simforest`. Numpy only: must never import
Flask, Redis, RQ, scikit-learn or anything from ``webapp``/``workers``.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .utils import child_keys, group_starts, mix64, unit_floats

NO_NODE = -1
NO_ITEM = -1
NEW, WAITING, SPLIT, LEAF = 0, 1, 2, 3
STATUS_NAMES = ("new", "waiting", "split", "leaf")

#: A split pair is drawn up to this many times until the pair's own similarity is observed
#: (the paper asks for observed pairs); the last draw is kept if none is.
PAIR_DRAWS = 6


# ----------------------------------------------------------------------------------------
# counter-based randomness: a node's pairs depend only on its tree's seed and its path
# ----------------------------------------------------------------------------------------
def uniforms(keys: np.ndarray, k: int) -> np.ndarray:
    """ndarray of shape (len(keys), k) of uniforms in [0, 1), a pure function of the keys."""
    keys = np.asarray(keys, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = keys[:, None] ^ mix64(np.arange(1, k + 1, dtype=np.uint64))[None, :]
    return unit_floats(mix64(z))


# ----------------------------------------------------------------------------------------
# the split kernel
# ----------------------------------------------------------------------------------------
def best_thresholds(candidate: np.ndarray, projection: np.ndarray, label: np.ndarray, n_candidates: int,
                    n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Gini-optimal threshold of every candidate split, all candidates at once.

    Rows are (candidate id, projection of one object, its class code); rows with a NaN
    projection are ignored (their objects stay at the node). Returns ``gini`` (the weighted
    Gini index of the two children, ``inf`` where a candidate has fewer than two distinct
    projections) and ``threshold`` (midway between the two projections it separates, NaN where
    there is none), both of shape (n_candidates,). Ties go to the lowest threshold.
    """
    gini = np.full(n_candidates, np.inf)
    threshold = np.full(n_candidates, np.nan)
    ok = np.isfinite(projection)
    candidate, projection, label = candidate[ok], projection[ok], label[ok]
    m = candidate.size
    if m == 0:
        return gini, threshold
    order = np.lexsort((projection, candidate))
    candidate, projection, label = candidate[order], projection[order], label[order]
    starts = group_starts(candidate)
    sizes = np.diff(np.r_[starts, m])
    seg = np.repeat(np.arange(starts.size), sizes)
    onehot = np.zeros((m, n_classes), np.int64)
    onehot[np.arange(m), label] = 1
    cum = np.cumsum(onehot, axis=0)
    left = cum - (cum[starts] - onehot[starts])[seg]
    right = left[starts + sizes - 1][seg] - left
    n_left = np.arange(m) - starts[seg] + 1
    n_right = sizes[seg] - n_left
    valid = (n_right > 0) & (np.r_[projection[1:], np.inf] > projection)
    purity = (left * left).sum(axis=1) / n_left + (right * right).sum(axis=1) / np.maximum(n_right, 1)
    g = np.where(valid, (sizes[seg] - purity) / sizes[seg], np.inf)
    gmin = np.minimum.reduceat(g, starts)
    first = np.minimum.reduceat(np.where(g == gmin[seg], np.arange(m), m), starts)
    has = np.isfinite(gmin)
    ids = candidate[starts[has]]
    t = first[has]
    lo, hi = projection[t], projection[t + 1]
    mid = lo + (hi - lo) / 2
    gini[ids] = gmin[has]
    threshold[ids] = np.where(mid > lo, mid, hi)
    return gini, threshold


# ----------------------------------------------------------------------------------------
# growing: functions over the forest's node arrays (``f`` a SimilarityForest)
# ----------------------------------------------------------------------------------------
def members(f: Any, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(slots, node, item, label) of the objects sitting in nodes where ``mask`` is True,
    sorted by node, then label, then item; a slot is ``tree * n + item``."""
    flat = f.item_node_.reshape(-1)
    slots = np.flatnonzero(mask[flat])
    node = flat[slots]
    item = slots % f.n_items_
    label = f.label_codes_[item]
    order = np.lexsort((item, label, node))
    return slots[order], node[order], item[order], label[order]


def open_new(f: Any, observed: np.ndarray | None = None) -> np.ndarray:
    """Count the objects of every NEW node, make leaves, and draw the candidate pairs of
    the others (which become WAITING and are returned)."""
    new = f.node_status_ == NEW
    if not new.any():
        return np.empty(0, np.int64)
    _, node, item, label = members(f, new)
    c = len(f.classes_)
    nodes, starts, sizes = np.unique(node, return_index=True, return_counts=True)
    counts = np.bincount(np.searchsorted(nodes, node) * c + label, minlength=nodes.size * c)
    counts = counts.reshape(nodes.size, c)
    f.node_counts_[nodes] = counts
    f.node_size_[nodes] = sizes
    leaf = (counts.max(axis=1) == sizes) | (sizes < f.min_samples_split)
    if f.max_depth is not None:
        leaf |= f.node_depth_[nodes] >= f.max_depth
    f.node_status_[nodes[leaf]] = LEAF
    # a NEW node nobody reached cannot occur (children of a split hold >= 1 object each)
    split = ~leaf
    nodes, starts, sizes = nodes[split], starts[split], sizes[split]
    if nodes.size == 0:
        return nodes
    r = int(f.n_pairs)
    draws = PAIR_DRAWS  # the same uniforms either way: a node's first draw never depends on the mode
    u = uniforms(f.node_key_[nodes], 2 * r * draws).reshape(nodes.size, r, draws, 2)
    if observed is None:
        u = u[:, :, :1]
    st, sz = starts[:, None, None], sizes[:, None, None]
    pi = np.minimum((u[..., 0] * sz).astype(np.int64), sz - 1)
    run_key = node * c + label
    key_i = run_key[st + pi]
    lo = np.searchsorted(run_key, key_i, "left") - st
    hi = np.searchsorted(run_key, key_i, "right") - st
    others = sz - (hi - lo)  # > 0: the node is impure
    pj = np.minimum((u[..., 1] * others).astype(np.int64), others - 1)
    pj = np.where(pj < lo, pj, pj + (hi - lo))
    i, j = item[st + pi], item[st + pj]
    if observed is not None:
        ok = observed[i, j]
        pick = np.where(ok.any(axis=2), np.argmax(ok, axis=2), draws - 1)
        i = np.take_along_axis(i, pick[..., None], axis=2)[..., 0]
        j = np.take_along_axis(j, pick[..., None], axis=2)[..., 0]
    else:
        i, j = i[..., 0], j[..., 0]
    f.node_candidates_[nodes] = np.stack([i, j], axis=-1)
    f.node_status_[nodes] = WAITING
    return nodes


def needed(f: Any, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(node, k, pivot) rows: every similarity S(k, pivot) the splits of ``nodes`` need,
    k a member and pivot one of the node's candidate objects (k == pivot left out)."""
    mask = np.zeros(f.n_nodes_, bool)
    mask[nodes] = True
    _, node, item, _ = members(f, mask)
    piv = f.node_candidates_[node].reshape(node.size, -1)  # (members, 2r)
    k = np.repeat(item, piv.shape[1])
    node = np.repeat(node, piv.shape[1])
    piv = piv.reshape(-1)
    keep = k != piv
    return node[keep], k[keep], piv[keep]


def split_nodes(f: Any, nodes: np.ndarray, affinity: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> None:
    """Split WAITING ``nodes``; ``affinity(k, p)`` gives A[k, p] (NaN = missing), the
    projection being A[k, j] - A[k, i]. Nodes with no usable split become leaves."""
    nodes = np.unique(nodes)
    mask = np.zeros(f.n_nodes_, bool)
    mask[nodes] = True
    slots, node, item, label = members(f, mask)
    r = int(f.n_pairs)
    rank = np.searchsorted(nodes, node)
    cand = f.node_candidates_[node]  # (members, r, 2)
    k = np.repeat(item, r)
    proj = (affinity(k, cand[:, :, 1].reshape(-1)) - affinity(k, cand[:, :, 0].reshape(-1))).reshape(-1, r)
    cand_id = (rank[:, None] * r + np.arange(r)[None, :]).reshape(-1)
    gini, threshold = best_thresholds(cand_id, proj.reshape(-1), np.repeat(label, r), nodes.size * r,
                                      len(f.classes_))
    gini, threshold = gini.reshape(-1, r), threshold.reshape(-1, r)
    q = np.argmin(gini, axis=1)
    usable = np.isfinite(gini[np.arange(nodes.size), q])
    f.node_status_[nodes[~usable]] = LEAF
    nodes, q = nodes[usable], q[usable]
    if nodes.size == 0:
        return
    thr = threshold[usable][np.arange(nodes.size), q]
    f.node_pair_[nodes] = f.node_candidates_[nodes, q]
    f.node_threshold_[nodes] = thr
    f.node_status_[nodes] = SPLIT
    # children: two per split node, appended in node order
    k_new = nodes.size
    first = f.n_nodes_ + 2 * np.arange(k_new)
    child = np.stack([first, first + 1], axis=1)
    f.node_children_[nodes] = child
    append_nodes(f, tree=np.repeat(f.node_tree_[nodes], 2), parent=np.repeat(nodes, 2),
                 depth=np.repeat(f.node_depth_[nodes] + 1, 2),
                 key=np.stack([child_keys(f.node_key_[nodes], 0), child_keys(f.node_key_[nodes], 1)],
                              axis=1).reshape(-1))
    # move the members whose projection on the chosen pair is defined
    at = np.full(f.n_nodes_, -1, np.int64)
    at[nodes] = np.arange(k_new)
    row = at[node]
    moving = row >= 0
    p = proj[np.flatnonzero(moving), q[row[moving]]]
    defined = np.isfinite(p)
    rows_moving = row[moving][defined]
    side = (p[defined] >= thr[rows_moving]).astype(np.int64)
    f.item_node_.reshape(-1)[slots[moving][defined]] = child[rows_moving, side]


def append_nodes(f: Any, tree: np.ndarray, parent: np.ndarray, depth: np.ndarray, key: np.ndarray) -> None:
    """New NEW nodes at the end of every node array (one per entry of ``tree``)."""
    k = tree.size
    r, c = int(f.n_pairs), len(f.classes_)
    f.node_tree_ = np.concatenate([f.node_tree_, tree])
    f.node_parent_ = np.concatenate([f.node_parent_, parent])
    f.node_depth_ = np.concatenate([f.node_depth_, depth])
    f.node_key_ = np.concatenate([f.node_key_, key.astype(np.uint64)])
    f.node_status_ = np.concatenate([f.node_status_, np.full(k, NEW, np.int8)])
    f.node_size_ = np.concatenate([f.node_size_, np.zeros(k, np.int64)])
    f.node_counts_ = np.concatenate([f.node_counts_, np.zeros((k, c), np.int64)])
    f.node_candidates_ = np.concatenate([f.node_candidates_, np.full((k, r, 2), NO_ITEM, np.int64)])
    f.node_pair_ = np.concatenate([f.node_pair_, np.full((k, 2), NO_ITEM, np.int64)])
    f.node_threshold_ = np.concatenate([f.node_threshold_, np.full(k, np.nan)])
    f.node_children_ = np.concatenate([f.node_children_, np.full((k, 2), NO_NODE, np.int64)])
