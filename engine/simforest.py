"""SimForest (Sathe & Aggarwal, KDD 2017): random forests learned from pairwise similarities alone.

:class:`SimilarityForest` fits on a similarity (or distance) matrix with missing entries allowed;
:class:`ActiveSimilarityForest` is a question planner that asks, as ``rating`` questions, only the
similarities its splits need. Both grow their trees through :mod:`engine.simforest_growth` (the split
kernel, opening and splitting nodes: functions over the forest's node arrays). Numpy only: must never
import Flask, Redis, RQ, scikit-learn or anything from ``webapp``/``workers``.

Conventions used throughout (documented once, referred to elsewhere):

- training objects are ``0..n-1``; ``S : ndarray of shape (n, n)``, ``S[k, i]`` the similarity of
  k to i, NaN where it is missing; a test matrix ``S_test : ndarray of shape (m, n)`` holds the
  similarities of m new objects to the n training objects. With ``metric="distance"`` the same
  shapes hold distances ``D`` instead.
- a split of node v uses an ordered pair ``(i, j)`` and a threshold ``a``. The projection of
  object k on the direction i -> j is, up to constants that do not change the order,
  ``p(k) = S[k, j] - S[k, i]`` (distances: ``D[k, i]**2 - D[k, j]**2``). ``p(k) < a`` sends k to
  child 0, ``p(k) >= a`` to child 1; when p(k) is undefined (a similarity is missing) k stays at v
  for good. Every node, internal or leaf, carries the class counts of the objects that reached it
  and their majority label (ties: the smallest class); a test object whose projection is
  undefined stops there and is labelled by that node.
- nodes of all trees share one global numbering; node ``t`` is the root of tree ``t``;
  ``item_node_ : ndarray of shape (n_trees, n)`` is the deepest node each training object reached
  in each tree (its leaf, or the internal node where it stayed).
- node status: ``NEW`` (created, not looked at), ``WAITING`` (candidate pairs drawn, waiting for
  similarities), ``SPLIT``, ``LEAF``. Sentinels ``NO_NODE`` and ``NO_ITEM`` are ``-1``.
- in active mode a pair is keyed by the int64 code ``a * n + b`` with ``a < b``; ratings are
  similarities in [0, 1] (1 = identical) and an object's similarity to itself is 1.

JSON export (``to_json``, ``schema_version`` 1, ``kind`` ``"similarity_forest"``)::

    {"schema_version": 1, "kind": "similarity_forest",
     "params": {"n_trees", "n_pairs", "metric", "max_depth", "min_samples_split"},
     "n_items": n, "classes": [...], "labels": [label of each training object], "done": bool,
     "trees": [{"tree": t, "seed": "<uint64 as a string>", "nodes": [
         {"id": 0, "parent": null, "depth": 0, "status": "split" | "leaf" | "waiting",
          "size": objects that reached the node, "counts": [per class], "label": majority label,
          "pair": [i, j] or null, "threshold": a or null, "children": [id0, id1] or null,
          "members": [objects whose final node this is]}, ...]}],
     "questions": {...}}          # active mode only: what the crowd was asked

Node ids are local to their tree, breadth-first (root 0, child 0 before child 1). ``from_json`` reads it back.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Hashable, Iterable, Sequence

import numpy as np
from numpy.typing import ArrayLike

from . import simforest_growth as growth
from .graph import NO_NEIGHBOR, NeighborGraph
from .simforest_growth import (
    LEAF,
    NEW,
    NO_ITEM,
    NO_NODE,
    PAIR_DRAWS,
    SPLIT,
    STATUS_NAMES,
    WAITING,
    best_thresholds,
)
from .utils import (
    CodeTable,
    RandomState,
    StateMixin,
    arrays_state,
    check_int,
    check_random_state,
    check_state,
    counters_state,
    json_seed,
    load_arrays,
    load_counters,
    lowest_per_code,
    read_forest_doc,
    store_params,
)
from .utils import mix64 as _mix64

__all__ = [
    "KIND",
    "LEAF",
    "NEW",
    "NO_ITEM",
    "NO_NODE",
    "PAIR_DRAWS",
    "SCHEMA_VERSION",
    "SPLIT",
    "STATE_VERSION",
    "STATUS_NAMES",
    "WAITING",
    "best_thresholds",
    "ActiveSimilarityForest",
    "SimilarityForest",
]

STATE_VERSION = 1
SCHEMA_VERSION = 1
KIND = "similarity_forest"
METRICS = ("similarity", "distance")


# ----------------------------------------------------------------------------------------
# boundary checks
# ----------------------------------------------------------------------------------------
def _encode_labels(labels, n: int | None = None) -> tuple[list, np.ndarray]:
    """(classes as a list, int64 codes of shape (n,)). Classes are sorted when they can be,
    else kept in order of first appearance."""
    if isinstance(labels, np.ndarray):
        if labels.ndim != 1:
            raise ValueError(f"labels must be one-dimensional, got shape {labels.shape}")
        values = labels.tolist()
    elif isinstance(labels, (str, bytes)) or not isinstance(labels, Iterable):
        raise ValueError("labels must be a sequence with one label per object")
    else:
        values = list(labels)
    if n is not None and len(values) != n:
        raise ValueError(f"labels has {len(values)} entries, expected one per object ({n})")
    if not values:
        raise ValueError("labels must not be empty")
    for v in values:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            raise ValueError("labels must not be None or NaN")
        try:
            hash(v)
        except TypeError as exc:
            raise ValueError(f"labels must be hashable, got {v!r}") from exc
    distinct = list(dict.fromkeys(values))
    try:
        classes = sorted(distinct)
    except TypeError:
        classes = distinct
    index = {c: k for k, c in enumerate(classes)}
    return classes, np.fromiter((index[v] for v in values), dtype=np.int64, count=len(values))


def _json_label(value):
    value = value.item() if isinstance(value, np.generic) else value
    if not isinstance(value, (str, int, float, bool)):
        raise ValueError(f"only str, int, float or bool labels can be exported, not {value!r}")
    return value


def _check_matrix(values, name: str, n_cols: int | None = None, square: bool = False,
                  distance: bool = False) -> np.ndarray:
    try:
        arr = np.array(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a numeric matrix (NaN for missing values)") from exc
    if arr.ndim != 2:
        raise ValueError(f"{name} must be two-dimensional, got shape {arr.shape}")
    if square and arr.shape[0] != arr.shape[1]:
        raise ValueError(f"{name} must be square (n, n), got shape {arr.shape}")
    if n_cols is not None and arr.shape[1] != n_cols:
        raise ValueError(f"{name} must have one column per training object ({n_cols}), got shape {arr.shape}")
    if np.isinf(arr).any():
        raise ValueError(f"{name} must not contain infinite values (use NaN for missing ones)")
    if distance and (arr < 0).any():
        raise ValueError(f"{name}: distances must be non-negative")
    return arr


def _affinity(arr: np.ndarray, metric: str) -> np.ndarray:
    """A matrix A with projection p(k) = A[k, j] - A[k, i]: S itself, or -D**2."""
    return arr if metric == "similarity" else -(arr * arr)


# ----------------------------------------------------------------------------------------
# the forest
# ----------------------------------------------------------------------------------------
class SimilarityForest(StateMixin):
    """SimForest: a random forest whose splits need only similarities between objects.

    Parameters
    ----------
    n_trees : number of trees; each gets its own integer seed.
    n_pairs : r, the pairs (O_i, O_j) tried at each node (the best Gini split is kept); the
        paper finds 1 or 2 enough. A pair's two objects have different classes, and (when
        fitting on a matrix) an observed similarity between them whenever possible.
    metric : ``"similarity"`` (order by S_kj - S_ki) or ``"distance"`` (order by
        D_ki**2 - D_kj**2, the paper's cosine-law simplification; a NaN diagonal counts as 0).
    max_depth : None (grow to pure leaves, as the paper) or the depth at which nodes become leaves.
    min_samples_split : nodes reached by fewer objects become leaves.
    random_state : None, int or numpy Generator, drawn once for the tree seeds.

    Attributes after ``fit``: ``classes_`` (list), ``n_items_``, ``n_trees_``, ``tree_seeds_``,
    ``label_codes_ : ndarray of shape (n_items_,)``, the node arrays ``node_tree_``,
    ``node_parent_``, ``node_depth_``, ``node_status_``, ``node_size_``,
    ``node_counts_ : (n_nodes, n_classes)``, ``node_pair_ : (n_nodes, 2)``, ``node_threshold_``,
    ``node_children_ : (n_nodes, 2)`` and ``item_node_ : (n_trees, n_items_)``.
    """

    def __init__(self, n_trees: int = 50, n_pairs: int = 1, metric: str = "similarity", max_depth: int | None = None,
                 min_samples_split: int = 2, random_state: RandomState = None) -> None:
        store_params(self, locals())

    # -- validation and set-up ----------------------------------------------------------
    def _check_params(self) -> None:
        check_int("n_trees", self.n_trees, 1)
        check_int("n_pairs", self.n_pairs, 1)
        check_int("max_depth", self.max_depth, 0, allow_none=True)
        check_int("min_samples_split", self.min_samples_split, 2)
        if self.metric not in METRICS:
            raise ValueError(f"metric must be one of {METRICS}, not {self.metric!r}")

    def _start(self, classes: list, label_codes: np.ndarray) -> None:
        """Fresh roots, one per tree, holding every training object."""
        self._check_params()
        n, m = int(label_codes.size), int(self.n_trees)
        rng = check_random_state(self.random_state)
        self.classes_ = list(classes)
        self.label_codes_ = label_codes.astype(np.int64)
        self.n_items_ = n
        self.n_trees_ = m
        self.tree_seeds_ = rng.integers(0, 2**63 - 1, size=m, dtype=np.int64).astype(np.uint64)
        self.node_tree_ = np.arange(m, dtype=np.int64)
        self.node_parent_ = np.full(m, NO_NODE, np.int64)
        self.node_depth_ = np.zeros(m, np.int64)
        self.node_key_ = _mix64(self.tree_seeds_)
        self.node_status_ = np.full(m, NEW, np.int8)
        self.node_size_ = np.zeros(m, np.int64)
        self.node_counts_ = np.zeros((m, len(self.classes_)), np.int64)
        self.node_candidates_ = np.full((m, int(self.n_pairs), 2), NO_ITEM, np.int64)
        self.node_pair_ = np.full((m, 2), NO_ITEM, np.int64)
        self.node_threshold_ = np.full(m, np.nan)
        self.node_children_ = np.full((m, 2), NO_NODE, np.int64)
        self.item_node_ = np.repeat(np.arange(m, dtype=np.int64)[:, None], n, axis=1)

    @property
    def n_nodes_(self) -> int:
        return int(self.node_tree_.size)

    @property
    def done_(self) -> bool:
        return bool(np.all(self.node_status_ >= SPLIT))

    # -- building ------------------------------------------------------------------------
    # -- the estimator interface -----------------------------------------------------------
    def fit(self, S: ArrayLike, y: Sequence[Hashable] | np.ndarray) -> SimilarityForest:
        """Grow every tree, breadth-first, to pure leaves (or ``max_depth``).

        S : array-like of shape (n, n), similarities (or distances), NaN = missing.
        y : n labels of any hashable type (they become ``classes_``).
        """
        self._check_params()
        S = _check_matrix(S, "S", square=True, distance=self.metric == "distance")
        n = S.shape[0]
        if n < 2:
            raise ValueError("fitting needs at least 2 objects")
        classes, codes = _encode_labels(y, n)
        if self.metric == "distance":
            diag = np.arange(n)
            S[diag, diag] = np.where(np.isnan(S[diag, diag]), 0.0, S[diag, diag])
        A = _affinity(S, self.metric)
        observed = np.isfinite(S) & np.isfinite(S.T)
        self._start(classes, codes)
        while True:
            growth.open_new(self, observed)
            waiting = np.flatnonzero(self.node_status_ == WAITING)
            if waiting.size == 0:
                break
            growth.split_nodes(self, waiting, lambda k, p: A[k, p])
        return self

    def _check_fitted(self) -> None:
        if not hasattr(self, "item_node_"):
            raise ValueError("this SimilarityForest is not fitted yet; call fit first")

    def apply(self, S_test: ArrayLike) -> np.ndarray:
        """ndarray of shape (m, n_trees) of the node where each test object stops in each tree:
        a leaf, or the node where a needed similarity is missing (or a node still waiting)."""
        self._check_fitted()
        A = _affinity(_check_matrix(S_test, "S_test", n_cols=self.n_items_, distance=self.metric == "distance"),
                      self.metric)
        m, t = A.shape[0], self.n_trees_
        node = np.repeat(np.arange(t, dtype=np.int64)[None, :], m, axis=0)
        active = np.ones((m, t), bool)
        while True:
            rows, trees = np.nonzero(active & (self.node_status_[node] == SPLIT))
            if rows.size == 0:
                return node
            v = node[rows, trees]
            pair = self.node_pair_[v]
            p = A[rows, pair[:, 1]] - A[rows, pair[:, 0]]
            ok = np.isfinite(p)
            side = (p[ok] >= self.node_threshold_[v[ok]]).astype(np.int64)
            node[rows[ok], trees[ok]] = self.node_children_[v[ok], side]
            active[:] = False
            active[rows[ok], trees[ok]] = True

    def predict_proba(self, S_test: ArrayLike) -> np.ndarray:
        """ndarray of shape (m, n_classes): the class shares of the nodes reached, averaged over trees."""
        node = self.apply(S_test)
        counts = self.node_counts_[node].astype(np.float64)  # (m, trees, classes)
        shares = counts / np.maximum(counts.sum(axis=2, keepdims=True), 1)
        return shares.mean(axis=1)

    def predict(self, S_test: ArrayLike) -> np.ndarray:
        """Labels of shape (m,): the class with the largest averaged share (ties: smallest class)."""
        proba = self.predict_proba(S_test)
        picked = [self.classes_[k] for k in np.argmax(proba, axis=1).tolist()]
        kinds = {type(c) for c in self.classes_}
        if len(kinds) == 1 and issubclass(kinds.pop(), (str, int, float, np.generic)):
            return np.array(picked)
        out = np.empty(len(picked), dtype=object)  # e.g. tuples: keep them whole
        out[:] = picked
        return out

    def node_labels(self) -> list:
        """The majority label of every node (ties: the smallest class)."""
        self._check_fitted()
        return [self.classes_[k] for k in np.argmax(self.node_counts_, axis=1)]

    def depth(self) -> int:
        self._check_fitted()
        return int(self.node_depth_.max())

    # -- state ---------------------------------------------------------------------------
    STATE_VERSIONS = (STATE_VERSION,)
    _FITTED_ATTRIBUTE = "item_node_"
    _NODE_ARRAYS = {
        "node_tree": np.int64, "node_parent": np.int64, "node_depth": np.int64, "node_key": np.uint64,
        "node_status": np.int8, "node_size": np.int64, "node_counts": np.int64, "node_candidates": np.int64,
        "node_pair": np.int64, "node_threshold": np.float64, "node_children": np.int64,
    }
    #: every learned array, as saved in a state
    _FITTED_ARRAYS = {"label_codes": np.int64, "tree_seeds": np.uint64, "item_node": np.int64, **_NODE_ARRAYS}

    def _params(self) -> dict:
        return {
            "n_trees": int(self.n_trees), "n_pairs": int(self.n_pairs), "metric": str(self.metric),
            "max_depth": None if self.max_depth is None else int(self.max_depth),
            "min_samples_split": int(self.min_samples_split),
            "random_state": json_seed(self.random_state),
        }

    def to_state(self) -> dict:
        """Plain numpy arrays plus JSON-safe values (never pickle), version ``STATE_VERSION``."""
        self._check_params()
        return super().to_state()

    def _fitted_state(self) -> dict:
        """``classes`` (list) and the learned arrays, named like the attributes without the underscore."""
        return {"classes": [_json_label(c) for c in self.classes_], **arrays_state(self, self._FITTED_ARRAYS)}

    def _load_fitted(self, state: dict) -> None:
        self.classes_ = list(state["classes"])
        load_arrays(self, state, self._FITTED_ARRAYS)
        self.n_items_ = int(self.label_codes_.size)
        self.n_trees_ = int(self.n_trees)
        self._check_arrays()

    def _check_arrays(self) -> None:
        k, r, c = self.n_nodes_, int(self.n_pairs), len(self.classes_)
        shapes = {"node_counts": (k, c), "node_candidates": (k, r, 2), "node_pair": (k, 2),
                  "node_children": (k, 2)}
        for name in self._NODE_ARRAYS:
            arr = getattr(self, name + "_")
            if arr.shape != shapes.get(name, (k,)):
                raise ValueError(f"state array {name!r} has shape {arr.shape}, expected {shapes.get(name, (k,))}")
        if self.item_node_.shape != (self.n_trees_, self.n_items_):
            raise ValueError(f"item_node must have shape {(self.n_trees_, self.n_items_)}")
        if self.tree_seeds_.shape != (self.n_trees_,):
            raise ValueError("one tree seed per tree expected")
        if k < self.n_trees_ or ((self.item_node_ < 0) | (self.item_node_ >= k)).any():
            raise ValueError("item_node refers to nodes that do not exist")
        if ((self.label_codes_ < 0) | (self.label_codes_ >= c)).any():
            raise ValueError("label codes out of range")

    # -- the researcher's export ---------------------------------------------------------
    def to_json(self) -> dict:
        """The forest as a JSON-safe dict (``schema_version`` 1, see the module docstring)."""
        self._check_fitted()
        classes = [_json_label(c) for c in self.classes_]
        labels = [classes[k] for k in self.label_codes_.tolist()]
        trees = []
        for t in range(self.n_trees_):
            nodes = [t]  # breadth-first, child 0 before child 1: the same tree always reads the same
            for g in nodes:
                if self.node_status_[g] == SPLIT:
                    nodes.extend(int(c) for c in self.node_children_[g])
            local = {g: i for i, g in enumerate(nodes)}
            order = np.argsort(self.item_node_[t], kind="stable")
            keys = self.item_node_[t][order]
            out = []
            for g in nodes:
                status = int(self.node_status_[g])
                split = status == SPLIT
                lo, hi = np.searchsorted(keys, g, "left"), np.searchsorted(keys, g, "right")
                counts = self.node_counts_[g]
                out.append({
                    "id": local[g],
                    "parent": None if self.node_parent_[g] == NO_NODE else local[int(self.node_parent_[g])],
                    "depth": int(self.node_depth_[g]),
                    "status": STATUS_NAMES[status],
                    "size": int(self.node_size_[g]),
                    "counts": [int(x) for x in counts],
                    "label": classes[int(np.argmax(counts))] if counts.sum() else None,
                    "pair": [int(x) for x in self.node_pair_[g]] if split else None,
                    "threshold": float(self.node_threshold_[g]) if split else None,
                    "children": [local[int(x)] for x in self.node_children_[g]] if split else None,
                    "members": sorted(int(i) for i in order[lo:hi]),
                })
            trees.append({"tree": t, "seed": str(int(self.tree_seeds_[t])), "nodes": out})
        params = self._params()
        params.pop("random_state")
        return {"schema_version": SCHEMA_VERSION, "kind": KIND, "params": params, "n_items": int(self.n_items_),
                "classes": classes, "labels": labels, "done": self.done_, "trees": trees}

    @classmethod
    def from_json(cls, doc: dict) -> SimilarityForest:
        """A forest that predicts exactly like the exported one (waiting nodes act as leaves)."""
        if doc.get("kind") != KIND:
            raise ValueError(f"not a similarity forest document (kind={doc.get('kind')!r})")
        version = doc.get("schema_version")
        if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= SCHEMA_VERSION:
            raise ValueError(f"unsupported schema_version {version!r} (this code reads 1..{SCHEMA_VERSION})")
        forest = cls(**doc["params"])
        classes = list(doc["classes"])
        index = {c: k for k, c in enumerate(classes)}
        try:
            codes = np.array([index[v] for v in doc["labels"]], np.int64)
        except KeyError as exc:
            raise ValueError(f"label {exc.args[0]!r} is not one of the classes") from exc
        n, m = int(doc["n_items"]), int(doc["params"]["n_trees"])
        if codes.size != n or len(doc["trees"]) != m:
            raise ValueError("labels or trees disagree with n_items / n_trees")
        forest._start(classes, codes)
        nodes, arrays = read_forest_doc(doc["trees"], n, STATUS_NAMES)
        for name, arr in arrays.items():
            setattr(forest, name + "_", arr)
        total, c, r = forest.n_nodes_, len(classes), int(forest.n_pairs)
        forest.node_size_ = np.zeros(total, np.int64)
        forest.node_counts_ = np.zeros((total, c), np.int64)
        forest.node_candidates_ = np.full((total, r, 2), NO_ITEM, np.int64)
        forest.node_pair_ = np.full((total, 2), NO_ITEM, np.int64)
        forest.node_threshold_ = np.full(total, np.nan)
        for g, nd in nodes:
            forest.node_size_[g] = nd["size"]
            forest.node_counts_[g] = nd["counts"]
            if nd["pair"] is not None:
                forest.node_pair_[g] = nd["pair"]
                forest.node_threshold_[g] = nd["threshold"]
        forest._check_arrays()
        return forest

    def _copy_fitted(self) -> SimilarityForest:
        twin = SimilarityForest(**self._params())
        for name in ("classes_", "n_items_", "n_trees_"):
            setattr(twin, name, getattr(self, name) if name != "classes_" else list(self.classes_))
        for name in self._FITTED_ARRAYS:
            setattr(twin, name + "_", getattr(self, name + "_").copy())
        return twin


# ----------------------------------------------------------------------------------------
# active mode: the similarities a split needs, asked as rating questions
# ----------------------------------------------------------------------------------------
class _PairTable(CodeTable):
    """Every pair the planner wanted or heard about, sorted by code: the sum and number of
    its ratings, whether a copy is outstanding, and (for wanted pairs) its priority and age."""

    COLUMNS = {"sums": (np.float64, (), 0.0), "counts": (np.int64, (), 0), "outstanding": (bool, (), False),
               "wanted": (bool, (), False)}
    WHAT = "pair"

    def want(self, codes: np.ndarray, priority: np.ndarray) -> None:
        """Mark ``codes`` wanted; a pair wanted twice keeps the more urgent (lower) priority."""
        codes, priority = lowest_per_code(codes, priority)
        pos = self.rows_of(codes)
        fresh = ~self.wanted[pos]
        self.priority[pos] = np.where(fresh, priority, np.minimum(self.priority[pos], priority))
        self.wanted[pos] = True

    def add(self, codes: np.ndarray, values: np.ndarray) -> int:
        """Add ratings (in order); clears the outstanding mark. Returns how many were unrequested."""
        uniq, inverse = np.unique(codes, return_inverse=True)
        pos = self.rows_of(uniq)
        unrequested = int((~self.wanted[pos][inverse]).sum())
        np.add.at(self.sums, pos[inverse], values)
        np.add.at(self.counts, pos[inverse], 1)
        self.outstanding[pos] = False
        return unrequested

    def complete(self, codes: np.ndarray, repeats: int) -> np.ndarray:
        pos, found = self.find(codes)
        out = np.zeros(codes.shape, bool)
        out[found] = self.counts[pos[found]] >= repeats
        return out

    def mean(self, codes: np.ndarray) -> np.ndarray:
        pos, found = self.find(codes)
        out = np.full(codes.shape, np.nan)
        rated = found.copy()
        rated[found] = self.counts[pos[found]] > 0
        out[rated] = self.sums[pos[rated]] / self.counts[pos[rated]]
        return out

    def plan(self, budget: int, repeats: int) -> np.ndarray:
        """Rows to ask now: wanted, short of ``repeats`` ratings, not outstanding; most urgent
        first, then oldest. Marks them outstanding."""
        if budget <= 0:
            return np.empty(0, np.int64)
        rows = np.flatnonzero(self.wanted & (self.counts < repeats) & ~self.outstanding)
        rows = self.by_urgency(rows)[:budget]
        self.outstanding[rows] = True
        return rows

    def release(self, codes: np.ndarray) -> int:
        pos, found = self.find(np.unique(codes))
        rows = pos[found]
        released = int(self.outstanding[rows].sum())
        self.outstanding[rows] = False
        return released


def _check_pairs(rows, n: int, width: int, what: str) -> tuple[np.ndarray, list]:
    """(int64 array of shape (m, 2) of item indices, the rows as a list)."""
    rows = list(rows)
    if not rows:
        return np.empty((0, 2), np.int64), rows
    for row in rows:
        if isinstance(row, (str, bytes)) or not isinstance(row, Sequence | np.ndarray) or len(row) != width:
            raise ValueError(f"each {what} must have {width} entries, got {row!r}")
        for x in row[:2]:
            if isinstance(x, bool) or not isinstance(x, (numbers.Integral, np.integer)):
                raise ValueError(f"{what} {tuple(row)!r}: item indices must be integers")
    ij = np.array([(int(row[0]), int(row[1])) for row in rows], np.int64)
    bad = (ij < 0) | (ij >= n)
    if bad.any():
        r = rows[int(np.argmax(bad.any(axis=1)))]
        raise ValueError(f"{what} {tuple(r)!r} has an item index outside 0..{n - 1}")
    same = ij[:, 0] == ij[:, 1]
    if same.any():
        raise ValueError(f"{what} {tuple(rows[int(np.argmax(same))])!r} pairs an item with itself")
    return ij, rows


class ActiveSimilarityForest:
    """SimForest as a question planner over ``rating`` questions (labelled items, no matrix).

    Parameters
    ----------
    n_items : number of items (``0..n_items-1``), at least 2.
    labels : one label per item (any hashable; they become ``classes_``).
    n_trees, n_pairs, max_depth, min_samples_split : as :class:`SimilarityForest`.
    repeats : ratings averaged per pair before it is used (1 for trusted raters).
    random_state : None, int or numpy Generator (the tree seeds).

    All trees grow breadth-first at once: every waiting node of every tree wants S(k, i) and
    S(k, j) for each member k and each of its r candidate pairs (i, j), shallow nodes first.
    A rating serves every node and tree that needs its pair. A pair is never handed out again
    while a copy is outstanding (unanswered and not forgotten). Ratings of pairs the planner
    did not ask for are kept and used (counted as unrequested).
    """

    _COUNTERS = ("n_issued", "n_answers", "n_unrequested", "n_released")

    def __init__(self, n_items: int, labels: Sequence[Hashable] | np.ndarray, n_trees: int = 10, n_pairs: int = 1,
                 repeats: int = 1, max_depth: int | None = None, min_samples_split: int = 2,
                 random_state: RandomState = None) -> None:
        store_params(self, locals())
        self._check_params()  # fail at construction, before any question is planned

    def _check_params(self) -> tuple[list, np.ndarray]:
        n = check_int("n_items", self.n_items, 2)
        check_int("repeats", self.repeats, 1)
        self._forest()._check_params()
        return _encode_labels(self.labels, n)

    def _forest(self) -> SimilarityForest:
        """An unfitted :class:`SimilarityForest` with this planner's tree parameters."""
        return SimilarityForest(self.n_trees, self.n_pairs, "similarity", self.max_depth, self.min_samples_split,
                                self.random_state)

    def _ensure_init(self) -> None:
        if hasattr(self, "forest_"):
            return
        classes, codes = self._check_params()
        self.classes_ = classes
        self.forest_ = self._forest()
        self.forest_._start(classes, codes)
        self.table_ = _PairTable()
        load_counters(self, self._COUNTERS)
        self._advance()

    def _codes(self, a, b) -> np.ndarray:
        a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
        return np.minimum(a, b) * np.int64(self.n_items) + np.maximum(a, b)

    def _affinity(self, k: np.ndarray, p: np.ndarray) -> np.ndarray:
        out = self.table_.mean(self._codes(k, p))
        out[k == p] = 1.0
        return out

    def _advance(self) -> None:
        """Open new nodes and split every node whose similarities are all in, until none is left
        (ratings cached for one tree let other trees' nodes split at once)."""
        f = self.forest_
        while True:
            opened = growth.open_new(f, None)
            if opened.size:
                node, k, piv = growth.needed(f, opened)
                self.table_.want(self._codes(k, piv), f.node_depth_[node])
            waiting = np.flatnonzero(f.node_status_ == WAITING)
            if waiting.size == 0:
                return
            node, k, piv = growth.needed(f, waiting)
            missing = ~self.table_.complete(self._codes(k, piv), int(self.repeats))
            blocked = np.zeros(f.n_nodes_, bool)
            blocked[node[missing]] = True
            ready = waiting[~blocked[waiting]]
            if ready.size == 0:
                return
            growth.split_nodes(f, ready, self._affinity)

    # -- the planner interface -----------------------------------------------------------
    def next_questions(self, budget: int) -> list[tuple[int, int]]:
        """Up to ``budget`` distinct item pairs to rate, the most urgent first."""
        budget = check_int("budget", budget, 0)
        self._ensure_init()
        rows = self.table_.plan(budget, int(self.repeats))
        self.n_issued_ += int(rows.size)
        codes = self.table_.codes[rows]
        n = np.int64(self.n_items)
        a, b = codes // n, codes % n
        # which item shows first is a pseudo-random function of the pair and of how often it was rated
        swap = (_mix64(codes.astype(np.uint64) ^ _mix64(self.table_.counts[rows])) & np.uint64(1)).astype(bool)
        first, second = np.where(swap, b, a), np.where(swap, a, b)
        return list(zip(first.tolist(), second.tolist(), strict=True))

    def observe(self, answers: Iterable[Sequence]) -> None:
        """Apply ratings ``(i, j, similarity)``, similarity a float in [0, 1] (1 = identical).

        Raises ValueError (and changes nothing) for a bad index, a self pair or a similarity
        outside [0, 1]. Several ratings of one pair (in either order) are averaged.
        """
        self._ensure_init()
        ij, rows = _check_pairs(answers, int(self.n_items), 3, "answer")
        if not rows:
            return
        values = []
        for row in rows:
            s = row[2]
            if isinstance(s, bool) or not isinstance(s, (numbers.Real, np.floating, np.integer)):
                raise ValueError(f"answer {tuple(row)!r}: the similarity must be a number in [0, 1]")
            values.append(float(s))
        s = np.array(values)
        bad = ~((s >= 0.0) & (s <= 1.0))
        if bad.any():
            raise ValueError(f"answer {tuple(rows[int(np.argmax(bad))])!r}: the similarity must lie in [0, 1]")
        self.n_unrequested_ += self.table_.add(self._codes(ij[:, 0], ij[:, 1]), s)
        self.n_answers_ += len(rows)
        self._advance()

    def forget(self, pairs: Iterable[Sequence[int]]) -> int:
        """Questions that expired unanswered: they may be handed out again. Returns how many
        outstanding pairs were released (pairs not outstanding are ignored)."""
        self._ensure_init()
        ij, rows = _check_pairs(pairs, int(self.n_items), 2, "pair")
        if not rows:
            return 0
        released = self.table_.release(self._codes(ij[:, 0], ij[:, 1]))
        self.n_released_ += released
        return released

    @property
    def done(self) -> bool:
        """True once every node of every tree is split or a leaf."""
        self._ensure_init()
        return self.forest_.done_

    def progress(self) -> dict:
        """Numbers for a dashboard (JSON-safe)."""
        self._ensure_init()
        f, t = self.forest_, self.table_
        n, m = int(self.n_items), int(self.n_trees)
        open_trees = np.unique(f.node_tree_[f.node_status_ < SPLIT])
        full = n * (n - 1) // 2
        rated = int((t.counts > 0).sum())
        return {
            "n_items": n,
            "n_trees": m,
            "questions_asked": int(self.n_issued_),
            "answers_received": int(self.n_answers_),
            "answers": int(self.n_answers_),
            "questions_issued": int(self.n_issued_),
            "items_certified": 0,
            "unrequested_answers": int(self.n_unrequested_),
            "released_questions": int(self.n_released_),
            "pending_questions": int(t.outstanding.sum()),
            "pairs_rated": rated,
            "pairs_complete": int((t.counts >= int(self.repeats)).sum()),
            "pairs_waiting": int((t.wanted & (t.counts < int(self.repeats))).sum()),
            "all_pairs": full,
            "share_of_all_pairs": rated / full,
            "nodes_split": int((f.node_status_ == SPLIT).sum()),
            "nodes_open": int((f.node_status_ < SPLIT).sum()),
            "leaves": int((f.node_status_ == LEAF).sum()),
            "trees_done": m - int(open_trees.size),
            "depth": int(f.node_depth_.max()),
            "done": self.done,
        }

    def neighbor_graph(self, k: int = 1) -> NeighborGraph:
        """No neighbour graph: the forest learns to classify items by label, so every item has
        :data:`engine.graph.NO_NEIGHBOR` (the table says so: ``Algorithm.yields_graph``)."""
        return NeighborGraph.from_neighbors(np.full((int(self.n_items), max(int(k), 1)), NO_NEIGHBOR, np.int64))

    def result(self) -> SimilarityForest:
        """A fitted :class:`SimilarityForest` (a copy) over the ratings so far; before ``done``
        its waiting nodes act as leaves labelled by their majority."""
        self._ensure_init()
        return self.forest_._copy_fitted()

    def forest(self) -> SimilarityForest:
        """Same as :meth:`result`."""
        return self.result()

    def predict(self, S_test: ArrayLike) -> np.ndarray:
        """Labels for new items from their similarities to the training items, shape (m, n_items);
        only the pivots on each item's path are read, NaN elsewhere is fine."""
        return self.result().predict(S_test)

    def similarities(self) -> np.ndarray:
        """ndarray of shape (n_items, n_items): the mean rating of each rated pair, NaN elsewhere,
        1 on the diagonal."""
        self._ensure_init()
        n = int(self.n_items)
        out = np.full((n, n), np.nan)
        rated = self.table_.counts > 0
        codes = self.table_.codes[rated]
        mean = self.table_.sums[rated] / self.table_.counts[rated]
        a, b = codes // n, codes % n
        out[a, b] = mean
        out[b, a] = mean
        np.fill_diagonal(out, 1.0)
        return out

    # -- state and export ------------------------------------------------------------------
    def _params(self) -> dict:
        return {
            "n_items": int(self.n_items), "n_trees": int(self.n_trees), "n_pairs": int(self.n_pairs),
            "repeats": int(self.repeats), "max_depth": None if self.max_depth is None else int(self.max_depth),
            "min_samples_split": int(self.min_samples_split),
            "random_state": json_seed(self.random_state),
        }

    def to_state(self) -> dict:
        """Plain numpy arrays plus JSON-safe values, one flat dict (version ``STATE_VERSION``):
        ``params``, ``labels`` (list), the forest's arrays prefixed ``forest_``, the pair table
        prefixed ``pairs_`` and the counters. A restored planner continues identically."""
        self._ensure_init()
        classes = [_json_label(c) for c in self.classes_]
        state = {"class": type(self).__name__, "version": STATE_VERSION, "params": self._params(),
                 "labels": [classes[k] for k in self.forest_.label_codes_.tolist()],
                 **counters_state(self, self._COUNTERS)}
        state["forest_classes"] = classes
        state.update(arrays_state(self.forest_, SimilarityForest._FITTED_ARRAYS, "forest_"))
        state.update(self.table_.to_state("pairs_"))
        return state

    @classmethod
    def from_state(cls, state: dict) -> ActiveSimilarityForest:
        check_state(state, cls.__name__, (STATE_VERSION,))
        params = dict(state["params"])
        planner = cls(labels=state["labels"], **params)
        planner.classes_ = list(state["forest_classes"])
        planner.forest_ = planner._forest()
        planner.forest_._load_fitted({"classes": planner.classes_,
                                      **{name: state[f"forest_{name}"] for name in SimilarityForest._FITTED_ARRAYS}})
        if planner.forest_.n_items_ != planner.n_items:
            raise ValueError("state arrays disagree with n_items")
        planner.table_ = _PairTable.from_state(state, "pairs_")
        load_counters(planner, cls._COUNTERS, state)
        return planner

    def to_json(self) -> dict:
        """The researcher's export: the forest document plus a ``questions`` block."""
        self._ensure_init()
        doc = self.forest_.to_json()
        p = self.progress()
        doc["questions"] = {key: p[key] for key in ("questions_asked", "answers_received", "unrequested_answers",
                                                    "pairs_rated", "all_pairs", "share_of_all_pairs")}
        doc["questions"]["repeats"] = int(self.repeats)
        return doc
