"""How a comparison forest grows (:class:`engine.comparison_tree.ComparisonForest`): its node arrays and
their sentinels, fresh roots (:func:`plant`), and the growing itself as functions over the forest's arrays
(:class:`GrowingForest`): open the ready nodes, draw their pivots, resolve the items whose triplets are
decided, finish the nodes nobody waits in. Conventions: the docstring of :mod:`engine.comparison_tree`.
Numpy only; must never import Flask, Redis, RQ, scikit-learn or anything from ``webapp``/``workers``.
"""
from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from .utils import GOLDEN, child_keys, mix64, unit_floats

NO_NODE = -1
NO_ITEM = -1
NO_CODE = -1  # a slot (tree, item) not waiting for a triplet

# node status; the order matters: status >= SPLIT means "built"
FILLING, READY, SPLITTING, SPLIT, LEAF = 0, 1, 2, 3, 4
STATUS_NAMES = ("filling", "ready", "splitting", "split", "leaf")

SUPERVISED_DRAWS = 6  # one pivot pair plus up to five re-draws (ALGORITHMS.md §2)

#: the arrays of one entry per node (``n_nodes_`` of them in use, more allocated): dtype, shape
#: of one entry, value of a node not made yet
NODE_ARRAYS = {
    "node_tree": (np.int64, (), -1), "node_parent": (np.int64, (), NO_NODE), "node_depth": (np.int64, (), 0),
    "node_key": (np.uint64, (), 0), "node_status": (np.int8, (), FILLING), "node_size": (np.int64, (), 0),
    "node_waiting": (np.int64, (), 0), "node_pivots": (np.int64, (2,), NO_ITEM),
    "node_children": (np.int64, (2,), NO_NODE),
}


class GrowingForest(Protocol):
    """What the growing reads and writes of a forest: its parameters, the node arrays of
    :data:`NODE_ARRAYS` (each ``<name>_``), where each item is and which triplet it waits for, and the
    table of the triplets it wants (``engine.comparison_tree._TripletTable``)."""

    n_items: int
    leaf_size: int
    label_codes_: np.ndarray | None
    tree_seeds_: np.ndarray
    n_nodes_: int
    node_tree_: np.ndarray
    node_parent_: np.ndarray
    node_depth_: np.ndarray
    node_key_: np.ndarray
    node_status_: np.ndarray
    node_size_: np.ndarray
    node_waiting_: np.ndarray
    node_pivots_: np.ndarray
    node_children_: np.ndarray
    item_node_: np.ndarray
    slot_code_: np.ndarray
    table_: Any


# ----------------------------------------------------------------------------------------
# small pure kernels
# ----------------------------------------------------------------------------------------
def uniforms(keys: np.ndarray, k: int) -> np.ndarray:
    """ndarray of shape (len(keys), k) of uniforms in [0, 1), a pure function of the keys.

    Pivots are drawn from a node's key rather than from a stateful generator, so a tree depends
    only on its seed and on the answers, never on the order in which answers arrived.
    """
    keys = np.asarray(keys, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = keys[:, None] + np.arange(1, k + 1, dtype=np.uint64)[None, :] * GOLDEN
    return unit_floats(mix64(z))


def grow_array(arr: np.ndarray, size: int, fill: Any) -> np.ndarray:
    """``arr`` with room for ``size`` rows (at least doubled when it grows), new rows ``fill``."""
    if size <= arr.shape[0]:
        return arr
    new = np.full((max(size, 2 * arr.shape[0], 16),) + arr.shape[1:], fill, dtype=arr.dtype)
    new[: arr.shape[0]] = arr
    return new


def ranges(sizes: np.ndarray) -> np.ndarray:
    """Concatenated aranges: [0..s0-1, 0..s1-1, ...]."""
    if sizes.size == 0:
        return np.empty(0, np.int64)
    ends = np.cumsum(sizes)
    return np.arange(ends[-1]) - np.repeat(ends - sizes, sizes)


def triplet_codes(n: int, x: Any, a: Any, b: Any) -> np.ndarray:
    """The int64 codes ``(x * n + a) * n + b`` of triplets (x, a, b), a < b, in a study of ``n`` items."""
    n = np.int64(n)
    return (np.asarray(x, np.int64) * n + a) * n + b


# ----------------------------------------------------------------------------------------
# growing
# ----------------------------------------------------------------------------------------
def plant(f: GrowingForest, seeds: np.ndarray, table: Any) -> None:
    """Fresh roots, one per tree of ``seeds`` (uint64, the trees' seeds), every item in each: the node
    arrays, where the items are, the triplets they wait for (none) and the triplet ``table``."""
    n, m = int(f.n_items), int(seeds.size)
    f.tree_seeds_ = seeds
    f.n_nodes_ = m
    cap = max(16, 4 * m)
    for name, (dtype, shape, fill) in NODE_ARRAYS.items():
        setattr(f, name + "_", np.full((cap, *shape), fill, dtype))
    f.node_tree_[:m] = np.arange(m)
    f.node_key_[:m] = mix64(f.tree_seeds_)
    f.node_status_[:m] = READY
    f.item_node_ = np.repeat(np.arange(m, dtype=np.int64)[:, None], n, axis=1)
    f.slot_code_ = np.full((m, n), NO_CODE, np.int64)
    f.table_ = table


def reserve(f: GrowingForest, extra: int) -> None:
    """Room for ``extra`` more nodes in every node array."""
    size = f.n_nodes_ + extra
    for name, (_, _, fill) in NODE_ARRAYS.items():
        setattr(f, name + "_", grow_array(getattr(f, name + "_"), size, fill))


def advance(f: GrowingForest) -> None:
    """Open every node whose members are complete, until none is left (cached decisions cascade)."""
    while True:
        ready = np.flatnonzero(f.node_status_[: f.n_nodes_] == READY)
        if ready.size == 0:
            return
        open_nodes(f, ready)


def open_nodes(f: GrowingForest, ready: np.ndarray) -> None:
    """Make leaves of small ready nodes, draw pivots for the others and pose their triplets."""
    n = int(f.n_items)
    mark = np.zeros(f.n_nodes_, bool)
    mark[ready] = True
    flat_nodes = f.item_node_.reshape(-1)
    slots = np.flatnonzero(mark[flat_nodes])
    node_of = flat_nodes[slots]
    supervised = f.label_codes_ is not None
    label = f.label_codes_[slots % n] if supervised else np.zeros(slots.size, np.int64)
    order = np.lexsort((label, node_of))
    slots, node_of, label = slots[order], node_of[order], label[order]
    nodes, starts, sizes = np.unique(node_of, return_index=True, return_counts=True)
    f.node_size_[nodes] = sizes
    is_leaf = sizes <= f.leaf_size
    f.node_status_[nodes[is_leaf]] = LEAF
    split = ~is_leaf
    nodes, starts, sizes = nodes[split], starts[split], sizes[split]
    if nodes.size == 0:
        return
    i1, i2 = draw_pivots(f.node_key_[nodes], starts, sizes, node_of, label, f.label_codes_)
    p1, p2 = slots[starts + i1] % n, slots[starts + i2] % n
    trees = f.node_tree_[nodes]
    k = nodes.size
    reserve(f, 2 * k)
    first_child = f.n_nodes_ + 2 * np.arange(k)
    for side in (0, 1):
        child = first_child + side
        f.node_tree_[child] = trees
        f.node_parent_[child] = nodes
        f.node_depth_[child] = f.node_depth_[nodes] + 1
        f.node_key_[child] = child_keys(f.node_key_[nodes], side)
        f.node_status_[child] = FILLING
        f.node_children_[nodes, side] = child
    f.n_nodes_ += 2 * k
    f.node_pivots_[nodes, 0], f.node_pivots_[nodes, 1] = p1, p2
    f.item_node_[trees, p1] = first_child
    f.item_node_[trees, p2] = first_child + 1
    f.node_status_[nodes] = SPLITTING
    f.node_waiting_[nodes] = sizes - 2
    # every other member waits for its triplet (x, p1, p2)
    in_split = np.zeros(slots.size, bool)
    in_split[np.repeat(starts, sizes) + ranges(sizes)] = True
    in_split[starts + i1] = False
    in_split[starts + i2] = False
    wait = slots[in_split]
    wait_node = node_of[in_split]
    pa, pb = f.node_pivots_[wait_node, 0], f.node_pivots_[wait_node, 1]
    codes = triplet_codes(n, wait % n, np.minimum(pa, pb), np.maximum(pa, pb))
    f.slot_code_.reshape(-1)[wait] = codes
    finish(f, nodes[sizes == 2])
    known, a_wins = f.table_.find_decided(codes)
    if known.any():
        resolve(f, wait[known], a_wins[known])
    f.table_.add_live(codes[~known], f.node_depth_[wait_node[~known]])


def draw_pivots(keys: np.ndarray, starts: np.ndarray, sizes: np.ndarray, node_of: np.ndarray, label: np.ndarray,
                label_codes: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Positions (within each node's member run) of the two pivots; members sorted by label."""
    u = uniforms(keys, 2 * SUPERVISED_DRAWS + 2)
    s = sizes[:, None]
    i1 = np.minimum((u[:, 0:2 * SUPERVISED_DRAWS:2] * s).astype(np.int64), s - 1)
    i2 = np.minimum((u[:, 1:2 * SUPERVISED_DRAWS:2] * (s - 1)).astype(np.int64), s - 2)
    i2 = i2 + (i2 >= i1)
    if label_codes is None:
        return i1[:, 0], i2[:, 0]
    st = starts[:, None]
    differ = label[st + i1] != label[st + i2]
    pick = np.where(differ.any(axis=1), np.argmax(differ, axis=1), SUPERVISED_DRAWS - 1)
    rows = np.arange(keys.size)
    j1, j2 = i1[rows, pick], i2[rows, pick]
    # A node holding two labels always gets pivots with different labels: when all draws
    # failed, draw p1 uniformly and p2 uniformly among the members of the other labels.
    mixed = label[starts] != label[starts + sizes - 1]
    fallback = np.flatnonzero(mixed & ~differ.any(axis=1))
    if fallback.size:
        st, sz = starts[fallback], sizes[fallback]
        f1 = np.minimum((u[fallback, -2] * sz).astype(np.int64), sz - 1)
        run_key = node_of * (np.int64(label.max()) + 1) + label
        k1 = run_key[st + f1]
        lo = np.searchsorted(run_key, k1, "left") - st
        hi = np.searchsorted(run_key, k1, "right") - st
        others = sz - (hi - lo)
        f2 = np.minimum((u[fallback, -1] * others).astype(np.int64), others - 1)
        f2 = np.where(f2 < lo, f2, f2 + (hi - lo))
        j1[fallback], j2[fallback] = f1, f2
    return j1, j2


def resolve(f: GrowingForest, slots: np.ndarray, a_wins: np.ndarray) -> None:
    """Move decided items to the winning pivot's child; finish nodes with nobody waiting."""
    if slots.size == 0:
        return
    n = int(f.n_items)
    trees, items = slots // n, slots % n
    nodes = f.item_node_[trees, items]
    pivots = f.node_pivots_[nodes]
    winner = np.where(a_wins, pivots.min(axis=1), pivots.max(axis=1))
    side = (winner != pivots[:, 0]).astype(np.int64)
    f.item_node_[trees, items] = f.node_children_[nodes, side]
    f.slot_code_[trees, items] = NO_CODE
    touched, counts = np.unique(nodes, return_counts=True)
    f.node_waiting_[touched] -= counts
    finish(f, touched[f.node_waiting_[touched] == 0])


def finish(f: GrowingForest, nodes: np.ndarray) -> None:
    """``nodes`` are split: their children are ready to open."""
    if nodes.size == 0:
        return
    f.node_status_[nodes] = SPLIT
    f.node_status_[f.node_children_[nodes].ravel()] = READY
