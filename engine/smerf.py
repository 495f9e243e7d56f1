"""SMERF (Tomita & Vogelstein): random forests that learn a distance between items from their features.

Trained on item features X and a partly observed distance matrix Z (e.g. the crowd's estimates),
a forest predicts the distance between any two feature vectors, so also to items added later, and
reports which features drive the distances. Numpy only; must never import Flask, Redis, RQ,
scikit-learn or anything from ``webapp``/``workers``.

Conventions used throughout (documented once, referred to elsewhere):

- ``X`` : ndarray of shape (n, p), finite floats, one row per item. ``Z`` : ndarray of shape
  (n, n), symmetric; ``NaN`` marks an unobserved pair; the diagonal is ignored (an item is at
  distance 0 from itself). ``pair_weight`` (optional, (n, n), non-negative) weighs observed pairs,
  e.g. by how many answers stand behind an estimate; weight 0 is the same as ``NaN``.
- Item weights ``w`` (bootstrap counts; 1 without bootstrap): a copy of an item is at distance 0
  from the other copies. Of a set S, ``W = Σ w_i``, ``Q = Σ w_i²``, and the observed mean
  ``m(S) = Σ w_i w_j π_ij z_ij / Σ w_i w_j π_ij`` over observed pairs i < j in S (π the pair weight).
- The split criterion is the paper's eq. (2.1), gain = n_S·I(S) − n_L·I(S_L) − n_R·I(S_R), with
  I(S) the mean of z over all ordered pairs of S *including the diagonal* (z_ii = 0), i.e. the
  paper's I(S) = (1/n_S²) Σ_{i,j ∈ S} z_ij. This normalisation, not a mean over distinct pairs, is
  the one under which a SMERF tree is exactly a Gini tree (z_ij = 1[c_i ≠ c_j]) and a variance
  regression tree (z_ij = ½(y_i − y_j)²), Propositions 1 and 2. With missing pairs each
  unobserved pair of S counts at the observed mean m(S), so
  ``I(S) = (1 − Q/W²)·m(S)`` and ``n_S·I(S) = (W − Q/W)·m(S)``; with every pair observed and unit
  weights this is the paper's value. A set with no observed pair takes its parent's m.
- Trees are numbered in preorder (left subtree first), like scikit-learn's; a node whose
  ``feature`` is ``LEAF`` (-1) is a leaf; an item goes left when ``x[feature] <= threshold``.
  Leaves are numbered ``0..n_leaves-1`` in node order.
- Leaf-pair table h (eq. 2.2): h(a, b) = m over the observed pairs between leaf a and leaf b; a
  leaf with itself h(a, a) = I(leaf) (so 0 for a leaf holding one item, as in the paper's §4).
  A leaf pair with no observed pair falls back to the observed mean of the pairs that their
  lowest common ancestor's split separated, and if that split separated no observed pair, to
  the ancestor's observed mean m. A tree predicts h(leaf(x), leaf(x')); a forest averages trees.
"""
from __future__ import annotations

import numbers
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from .utils import MaxFeatures, RandomState, StateMixin, check_int, check_random_state, json_seed, store_params

__all__ = [
    "KIND",
    "LEAF",
    "NO_NODE",
    "SCHEMA_VERSION",
    "DistanceForest",
    "DistanceTree",
    "check_distances",
    "check_features",
]

STATE_VERSION = 1
SCHEMA_VERSION = 1
KIND = "distance_forest"

LEAF = -1  # ``feature`` of a leaf node
NO_NODE = -1  # missing child / parent
#: Two feature values closer than this are one value (no threshold between them), as in scikit-learn.
FEATURE_THRESHOLD = 1e-7
#: Split gains closer than this, relative to the node's n·I, are ties (broken by feature order).
TIE_TOLERANCE = 1e-10
#: Elements of the (features, m, m) temporaries one split search builds at once.
SPLIT_CHUNK_ELEMENTS = 1 << 22
_MAX_SEED = 2**53  # tree seeds stay exact in JSON readers that use doubles


# ----------------------------------------------------------------------------------------
# validation at the public boundary
# ----------------------------------------------------------------------------------------
def check_features(X: ArrayLike, n_features: int | None = None, what: str = "X") -> np.ndarray:
    """X as a C-contiguous float64 array of shape (n, p) with finite entries."""
    arr = np.asarray(X)
    if arr.dtype == object or arr.dtype.kind not in "biuf":
        raise ValueError(f"{what} must hold numbers")
    arr = np.ascontiguousarray(arr, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(f"{what} must be 2-D (items × features), got shape {arr.shape}")
    if arr.shape[1] == 0:
        raise ValueError(f"{what} needs at least one feature")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{what} must be finite (no NaN or inf)")
    if n_features is not None and arr.shape[1] != n_features:
        raise ValueError(f"{what} has {arr.shape[1]} features, the model was fitted with {n_features}")
    return arr


def check_distances(Z: ArrayLike, n: int, pair_weight: ArrayLike | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(values, weights), both of shape (n, n), symmetric, zero diagonal.

    ``values`` holds z with 0 where unobserved; ``weights`` is the pair weight π (1 for observed
    pairs unless ``pair_weight`` says otherwise, 0 for unobserved ones and on the diagonal).
    """
    arr = np.asarray(Z)
    if arr.dtype == object or arr.dtype.kind not in "biuf":
        raise ValueError("Z must hold numbers (NaN for unobserved pairs)")
    arr = np.array(arr, dtype=np.float64)
    if arr.shape != (n, n):
        raise ValueError(f"Z must have shape ({n}, {n}), got {arr.shape}")
    if np.isinf(arr).any():
        raise ValueError("Z must not contain inf (use NaN for unobserved pairs)")
    np.fill_diagonal(arr, 0.0)
    observed = ~np.isnan(arr)
    if not np.array_equal(observed, observed.T):
        raise ValueError("Z must be symmetric: pair (i, j) is observed but (j, i) is NaN")
    values = np.where(observed, arr, 0.0)
    if not np.allclose(values, values.T, rtol=1e-9, atol=1e-12):
        raise ValueError("Z must be symmetric")
    if pair_weight is None:
        weights = observed.astype(np.float64)
    else:
        weights = np.array(pair_weight, dtype=np.float64)
        if weights.shape != (n, n):
            raise ValueError(f"pair_weight must have shape ({n}, {n}), got {weights.shape}")
        if not np.all(np.isfinite(weights)) or (weights < 0).any():
            raise ValueError("pair_weight must be finite and non-negative")
        if not np.allclose(weights, weights.T, rtol=1e-9, atol=1e-12):
            raise ValueError("pair_weight must be symmetric")
        weights = np.where(observed, weights, 0.0)
    np.fill_diagonal(weights, 0.0)
    upper = np.triu(np.ones((n, n), dtype=bool), 1)
    # use one triangle only, so the matrices are exactly symmetric
    values = np.where(upper, values, values.T)
    weights = np.where(upper, weights, weights.T)
    np.fill_diagonal(values, 0.0)
    np.fill_diagonal(weights, 0.0)
    if not (weights > 0).any():
        raise ValueError("Z has no observed pair (every off-diagonal entry is NaN or has weight 0)")
    return values, weights


def _check_max_features(value):
    if value is None or value == "sqrt" or value == "log2":
        return value
    if isinstance(value, bool):
        raise ValueError(f"max_features must be 'sqrt', 'log2', an int, a float in (0, 1] or None, not {value!r}")
    if isinstance(value, (numbers.Integral, np.integer)):
        return check_int("max_features", value, 1)
    if isinstance(value, (numbers.Real, np.floating)) and 0.0 < float(value) <= 1.0:
        return float(value)
    raise ValueError(f"max_features must be 'sqrt', 'log2', an int, a float in (0, 1] or None, not {value!r}")


def _n_features_to_try(max_features, p: int) -> int:
    if max_features is None:
        return p
    if max_features == "sqrt":
        return max(1, int(np.sqrt(p)))
    if max_features == "log2":
        return max(1, int(np.log2(p)))
    if isinstance(max_features, int):
        return min(max_features, p)
    return max(1, int(max_features * p))


# ----------------------------------------------------------------------------------------
# the split kernel: all thresholds of several features in O(m²) per feature
# ----------------------------------------------------------------------------------------
def _scaled_impurity(W, Q, mean):
    """n_S·I(S) = (W − Q/W)·m(S) for arrays of sets (W > 0)."""
    return (W - Q / W) * mean


def _split_gains(xs, Zs, Cs, z_rows, c_rows, ws, node_mean: float, min_samples_leaf: int):
    """Gains of every threshold of every feature, from prefix sums.

    ``xs`` (k, m) feature values sorted per feature, ``Zs``/``Cs`` (k, m, m) the node's weighted
    distance/weight matrices (``w_i w_j π_ij z_ij`` / ``w_i w_j π_ij``, zero diagonal) with rows
    and columns in that feature's sorted order, ``ws`` (k, m) the sorted item weights. Threshold
    position t (1..m-1) puts the first t sorted items left. The within-left sum for t adds, to
    that for t-1, the new item's row against the earlier ones (a cumulative sum of the lower
    triangle's row sums); the right side likewise with the upper triangle read from the end.

    Returns ``gain`` (k, m-1), -inf where no threshold is allowed, and the prefix sums
    ``(s_left, c_left, s_right, c_right)`` (each (k, m-1)) the caller records for the best one.
    """
    k, m = xs.shape
    lower = np.tri(m, m, -1)
    z_low = np.einsum("fij,ij->fi", Zs, lower)  # row i against earlier items
    z_up = z_rows - z_low  # row i against later items
    c_low = np.einsum("fij,ij->fi", Cs, lower)
    c_up = c_rows - c_low
    s_left = np.cumsum(z_low, axis=1)[:, :-1]
    c_left = np.cumsum(c_low, axis=1)[:, :-1]
    s_right = np.cumsum(z_up[:, ::-1], axis=1)[:, ::-1][:, 1:]
    c_right = np.cumsum(c_up[:, ::-1], axis=1)[:, ::-1][:, 1:]
    w_left = np.cumsum(ws, axis=1)[:, :-1]
    q_left = np.cumsum(ws * ws, axis=1)[:, :-1]
    w_all = ws.sum(axis=1, keepdims=True)
    q_all = (ws * ws).sum(axis=1, keepdims=True)
    w_right = w_all - w_left
    q_right = q_all - q_left
    with np.errstate(invalid="ignore", divide="ignore"):
        m_left = np.where(c_left > 0, s_left / np.where(c_left > 0, c_left, 1.0), node_mean)
        m_right = np.where(c_right > 0, s_right / np.where(c_right > 0, c_right, 1.0), node_mean)
        gain = (_scaled_impurity(w_all, q_all, node_mean)
                - _scaled_impurity(w_left, q_left, m_left)
                - _scaled_impurity(w_right, q_right, m_right))
    t = np.arange(1, m)
    valid = (xs[:, 1:] > xs[:, :-1] + FEATURE_THRESHOLD) & (t >= min_samples_leaf) & (m - t >= min_samples_leaf)
    gain = np.where(valid, gain, -np.inf)
    return gain, (s_left, c_left, s_right, c_right)


# ----------------------------------------------------------------------------------------
# one tree
# ----------------------------------------------------------------------------------------
class DistanceTree(StateMixin):
    """One SMERF tree: axis-aligned splits maximising the drop of n·I (module docstring).

    Parameters
    ----------
    max_features : "sqrt", "log2", int, float in (0, 1] or None (all features)
        Features tried per node, drawn at random without replacement; features constant inside
        the node are skipped and do not count (as in scikit-learn).
    min_samples_leaf : int, distinct training items a child must keep.
    max_depth : int or None; the root has depth 0.
    random_state : None, int or numpy Generator (``engine.utils.check_random_state``).

    A node becomes a leaf at ``max_depth``, with fewer than 2·``min_samples_leaf`` (or 2) distinct
    items, with no observed pair among its items, when every observed distance among them is 0
    (nothing left to separate: the pure node of Proposition 1), or when no tried feature has a
    threshold leaving ``min_samples_leaf`` items on each side. Otherwise it takes the best split
    even if its gain is not positive (as scikit-learn does); gains within ``TIE_TOLERANCE`` of the
    best count as ties, won by the feature drawn first.

    Fitted attributes: ``n_features_in_``, ``feature_names_in_`` (or None), ``node_count_``,
    ``n_leaves_``, the node arrays (shape (node_count_,)) ``feature_`` (``LEAF`` for leaves),
    ``threshold_`` (NaN for leaves), ``left_``, ``right_``, ``parent_`` (``NO_NODE`` where none),
    ``depth_``, ``n_items_`` (distinct training items), ``weight_`` (W), ``impurity_`` (I),
    ``mean_`` (m, inherited from the parent where the node has no observed pair), ``gain_``
    (n·I decrease of the split, 0 for leaves), ``cross_mean_`` (observed mean of the pairs the
    split separated, NaN if none or a leaf), ``leaf_`` (leaf number or ``NO_NODE``);
    ``leaf_node_`` (n_leaves_,) node of each leaf; ``leaf_distances_`` (n_leaves_, n_leaves_) the
    table h; ``feature_importances_`` (p,).
    """

    def __init__(self, max_features: MaxFeatures = None, min_samples_leaf: int = 1, max_depth: int | None = None,
                 random_state: RandomState = None) -> None:
        store_params(self, locals())

    def _check_params(self) -> None:
        _check_max_features(self.max_features)
        check_int("min_samples_leaf", self.min_samples_leaf, 1)
        check_int("max_depth", self.max_depth, 0, allow_none=True)

    def _params(self) -> dict:
        return {
            "max_features": _check_max_features(self.max_features),
            "min_samples_leaf": int(self.min_samples_leaf),
            "max_depth": None if self.max_depth is None else int(self.max_depth),
            "random_state": json_seed(self.random_state),
        }

    # -- fitting -------------------------------------------------------------------------
    def fit(self, X: ArrayLike, Z: ArrayLike, sample_weight: ArrayLike | None = None, *,
            pair_weight: ArrayLike | None = None, feature_names: Sequence[str] | None = None) -> DistanceTree:
        """Grow the tree on items X (n, p) and distances Z (n, n) (module docstring).

        ``sample_weight`` (n,), non-negative (bootstrap counts; items of weight 0 are left out).
        """
        self._check_params()
        X = check_features(X)
        n = X.shape[0]
        values, weights = check_distances(Z, n, pair_weight)
        w = np.ones(n) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        if w.shape != (n,) or not np.all(np.isfinite(w)) or (w < 0).any() or not (w > 0).any():
            raise ValueError("sample_weight must be n non-negative finite numbers, not all 0")
        self._fit_checked(X, values, weights, w, check_random_state(self.random_state),
                          _global_mean(values, weights))
        self.feature_names_in_ = _check_names(feature_names, X.shape[1])
        return self

    def _fit_checked(self, X, values, weights, w, rng, global_mean: float) -> None:
        items = np.flatnonzero(w > 0)
        Xb, wb = X[items], w[items]
        ww = np.outer(wb, wb)
        pw = weights[np.ix_(items, items)] * ww  # w_i w_j π_ij
        zw = values[np.ix_(items, items)] * pw  # w_i w_j π_ij z_ij
        c_total = pw.sum()
        root_mean = float(zw.sum() / c_total) if c_total > 0 else float(global_mean)
        p = X.shape[1]
        n_try = _n_features_to_try(_check_max_features(self.max_features), p)
        msl = int(self.min_samples_leaf)
        max_depth = np.inf if self.max_depth is None else int(self.max_depth)

        cols = {name: [] for name in ("feature", "threshold", "left", "right", "parent", "depth", "n_items",
                                      "weight", "impurity", "mean", "gain", "cross_mean")}
        item_leaf = np.empty(items.size, np.int64)
        leaf_nodes = []
        # stack entries: (positions into items, depth, parent node, is_left, inherited mean)
        stack = [(np.arange(items.size), 0, NO_NODE, False, root_mean)]
        while stack:
            members, depth, parent, is_left, inherited = stack.pop()
            node = len(cols["feature"])
            if parent != NO_NODE:
                cols["left" if is_left else "right"][parent] = node
            zn = zw[np.ix_(members, members)]
            cn = pw[np.ix_(members, members)]
            c_sum = cn.sum() / 2
            mean = float(zn.sum() / 2 / c_sum) if c_sum > 0 else float(inherited)
            wm = wb[members]
            W, Q = float(wm.sum()), float((wm * wm).sum())
            m = members.size
            for name, value in (("parent", parent), ("depth", depth), ("n_items", m), ("weight", W),
                                ("impurity", (1.0 - Q / (W * W)) * mean), ("mean", mean)):
                cols[name].append(value)
            split = None
            if depth < max_depth and m >= 2 and m >= 2 * msl and c_sum > 0 and zn.any():
                split = self._best_split(Xb[members], zn, cn, wm, mean, n_try, msl, rng)
            if split is None:
                cols["feature"].append(LEAF)
                cols["threshold"].append(np.nan)
                cols["gain"].append(0.0)
                cols["cross_mean"].append(np.nan)
                cols["left"].append(NO_NODE)
                cols["right"].append(NO_NODE)
                item_leaf[members] = len(leaf_nodes)
                leaf_nodes.append(node)
                continue
            f, threshold, gain, left_pos, right_pos, cross = split
            cols["feature"].append(f)
            cols["threshold"].append(threshold)
            cols["gain"].append(gain)
            cols["cross_mean"].append(cross)
            cols["left"].append(NO_NODE)
            cols["right"].append(NO_NODE)
            stack.append((members[right_pos], depth + 1, node, False, mean))
            stack.append((members[left_pos], depth + 1, node, True, mean))

        int_cols = ("feature", "left", "right", "parent", "depth", "n_items")
        for name, values_ in cols.items():
            setattr(self, name + "_", np.asarray(values_, dtype=np.int64 if name in int_cols else np.float64))
        self.node_count_ = int(self.feature_.size)
        self.leaf_node_ = np.asarray(leaf_nodes, dtype=np.int64)
        self.n_leaves_ = int(self.leaf_node_.size)
        self.leaf_ = np.full(self.node_count_, NO_NODE, np.int64)
        self.leaf_[self.leaf_node_] = np.arange(self.n_leaves_)
        self.n_features_in_ = int(p)
        self.feature_names_in_ = None
        self.global_mean_ = float(global_mean)
        self.leaf_distances_ = self._leaf_table(item_leaf, zw, pw)
        self.feature_importances_ = _tree_importances(self.feature_, self.gain_, self.weight_, p)

    def _best_split(self, Xn, zn, cn, wm, mean, n_try, msl, rng):
        """(feature, threshold, gain, left positions, right positions, cross mean) or None."""
        m = Xn.shape[0]
        order = rng.permutation(Xn.shape[1])
        spread = Xn.max(axis=0) - Xn.min(axis=0)
        candidates = order[spread[order] > FEATURE_THRESHOLD][:n_try]
        if candidates.size == 0:
            return None
        best = None  # (gain, feature, t, sorted order, stats)
        chunk = max(1, SPLIT_CHUNK_ELEMENTS // (m * m))
        z_rows, c_rows = zn.sum(axis=1), cn.sum(axis=1)
        W, Q = wm.sum(), (wm * wm).sum()
        tol = TIE_TOLERANCE * (abs(_scaled_impurity(W, Q, mean)) + abs(mean))
        for start in range(0, candidates.size, chunk):
            feats = candidates[start:start + chunk]
            sort = np.argsort(Xn[:, feats], axis=0, kind="stable").T  # (k, m)
            xs = np.take_along_axis(Xn[:, feats].T, sort, axis=1)
            rows, cols_ = sort[:, :, None], sort[:, None, :]
            gain, stats = _split_gains(xs, zn[rows, cols_], cn[rows, cols_], z_rows[sort], c_rows[sort], wm[sort],
                                       mean, msl)
            flat = gain.reshape(-1)
            top = flat.max()
            if np.isneginf(top):
                continue
            # gains within rounding of the best are ties (e.g. several features cutting off the same
            # items): the first in the random feature order wins, whatever the last bits say
            pos = int(np.argmax(flat >= top - tol))
            if best is None or flat[pos] > best[0] + tol:
                fi, ti = divmod(pos, m - 1)
                best = (float(flat[pos]), int(feats[fi]), ti + 1, sort[fi], xs[fi], [s[fi, ti] for s in stats])
        if best is None:
            return None
        gain, f, t, sort, xs, (s_l, c_l, s_r, c_r) = best
        threshold = xs[t - 1] / 2.0 + xs[t] / 2.0
        if threshold == xs[t] or not np.isfinite(threshold):
            threshold = xs[t - 1]
        c_total, s_total = c_rows.sum() / 2, z_rows.sum() / 2
        c_cross = c_total - c_l - c_r
        s_cross = s_total - s_l - s_r
        cross = float(s_cross / c_cross) if c_cross > 1e-12 * max(c_total, 1.0) else np.nan
        return f, float(threshold), gain, np.sort(sort[:t]), np.sort(sort[t:]), cross

    def _leaf_table(self, item_leaf, zw, pw) -> np.ndarray:
        L = self.n_leaves_
        keys = (item_leaf[:, None] * L + item_leaf[None, :]).ravel()
        sums = np.bincount(keys, weights=zw.ravel(), minlength=L * L).reshape(L, L)
        counts = np.bincount(keys, weights=pw.ravel(), minlength=L * L).reshape(L, L)
        observed = counts > 0
        table = np.divide(sums, counts, out=np.zeros((L, L)), where=observed)
        lower = np.tril(np.ones((L, L), dtype=bool), -1)
        table[lower] = table.T[lower]  # h(a, b) and h(b, a) summed in different orders: keep one
        table[np.diag_indices(L)] = self.impurity_[self.leaf_node_]
        missing = ~observed
        missing[np.diag_indices(L)] = False
        a, b = np.nonzero(np.triu(missing, 1))
        if a.size:
            lca = _lowest_common_ancestors(self.leaf_node_[a], self.leaf_node_[b], self.parent_, self.depth_)
            fallback = np.where(np.isnan(self.cross_mean_[lca]), self.mean_[lca], self.cross_mean_[lca])
            table[a, b] = fallback
            table[b, a] = fallback
        return table

    # -- prediction ----------------------------------------------------------------------
    def _check_fitted(self) -> None:
        if not hasattr(self, "leaf_distances_"):
            raise ValueError(f"this {type(self).__name__} is not fitted yet: call fit(X, Z) first")

    def _apply_checked(self, X: np.ndarray) -> np.ndarray:
        node = np.zeros(X.shape[0], np.int64)
        active = np.flatnonzero(self.feature_[node] != LEAF)
        while active.size:
            cur = node[active]
            go_left = X[active, self.feature_[cur]] <= self.threshold_[cur]
            node[active] = np.where(go_left, self.left_[cur], self.right_[cur])
            active = active[self.feature_[node[active]] != LEAF]
        return self.leaf_[node]

    def apply(self, X: ArrayLike) -> np.ndarray:
        """Leaf number (0..n_leaves_-1) of every row of X; int array of shape (m,)."""
        self._check_fitted()
        return self._apply_checked(check_features(X, self.n_features_in_))

    def predict(self, X1: ArrayLike, X2: ArrayLike | None = None) -> np.ndarray:
        """Predicted distances, shape (m1, m2): entry (i, j) for X1[i] and X2[j] (X2 defaults to X1)."""
        self._check_fitted()
        l1 = self.apply(X1)
        l2 = l1 if X2 is None else self.apply(X2)
        return self.leaf_distances_[np.ix_(l1, l2)]

    def predict_pairs(self, X1: ArrayLike, X2: ArrayLike) -> np.ndarray:
        """Predicted distance of each row-aligned pair (X1[i], X2[i]); shape (m,)."""
        self._check_fitted()
        l1, l2 = self.apply(X1), self.apply(X2)
        if l1.shape != l2.shape:
            raise ValueError("X1 and X2 must have the same number of rows")
        return self.leaf_distances_[l1, l2]

    # -- state ---------------------------------------------------------------------------
    STATE_VERSIONS = (STATE_VERSION,)
    _FITTED_ATTRIBUTE = "leaf_distances_"
    _INT_NODE_ARRAYS = ("feature", "left", "right", "parent", "depth", "n_items")
    _FLOAT_NODE_ARRAYS = ("threshold", "weight", "impurity", "mean", "gain", "cross_mean")

    def _fitted_state(self) -> dict:
        """JSON-safe (plain lists, no NaN): ``"n_features_in"``, ``"feature_names"``,
        ``"global_mean"``, ``"nodes"`` (one list per node array, ``None`` for NaN),
        ``"leaf_distances"`` (upper triangle by rows: ``leaf_distances[a][b - a] = h(a, b)`` for
        b ≥ a) and ``"feature_importances"``.
        """
        nodes = {name: [int(v) for v in getattr(self, name + "_")] for name in self._INT_NODE_ARRAYS}
        for name in self._FLOAT_NODE_ARRAYS:
            nodes[name] = _floats_or_none(getattr(self, name + "_"))
        return {
            "n_features_in": self.n_features_in_,
            "feature_names": self.feature_names_in_,
            "global_mean": float(self.global_mean_),
            "nodes": nodes,
            "leaf_distances": _upper_rows(self.leaf_distances_),
            "feature_importances": [float(v) for v in self.feature_importances_],
        }

    def _load_fitted(self, state: dict) -> None:
        self._load_arrays(state["nodes"], state["leaf_distances"], int(state["n_features_in"]))
        self.feature_names_in_ = _check_names(state.get("feature_names"), self.n_features_in_)
        self.global_mean_ = float(state["global_mean"])
        self.feature_importances_ = np.asarray(state["feature_importances"], np.float64)
        if self.feature_importances_.shape != (self.n_features_in_,):
            raise ValueError("feature_importances must have one entry per feature")

    def _load_arrays(self, nodes: dict, leaf_rows, n_features: int) -> None:
        for name in self._INT_NODE_ARRAYS:
            setattr(self, name + "_", np.asarray(nodes[name], dtype=np.int64))
        for name in self._FLOAT_NODE_ARRAYS:
            setattr(self, name + "_", np.array([np.nan if v is None else v for v in nodes[name]], np.float64))
        self.node_count_ = int(self.feature_.size)
        for name in self._INT_NODE_ARRAYS + self._FLOAT_NODE_ARRAYS:
            if getattr(self, name + "_").shape != (self.node_count_,):
                raise ValueError(f"node array {name!r} must have one entry per node")
        self.n_features_in_ = n_features
        internal = self.feature_ != LEAF
        if ((self.feature_ < LEAF) | (self.feature_ >= n_features)).any() or \
                not _children_ok(self.left_, self.right_, internal) or np.isnan(self.threshold_[internal]).any():
            raise ValueError("inconsistent tree: bad features, thresholds or children")
        self.leaf_node_ = np.flatnonzero(~internal)
        self.n_leaves_ = int(self.leaf_node_.size)
        self.leaf_ = np.full(self.node_count_, NO_NODE, np.int64)
        self.leaf_[self.leaf_node_] = np.arange(self.n_leaves_)
        self.leaf_distances_ = _from_upper_rows(leaf_rows, self.n_leaves_)


def _children_ok(left, right, internal) -> bool:
    n = left.size
    if (left[~internal] != NO_NODE).any() or (right[~internal] != NO_NODE).any():
        return False
    kids = np.concatenate([left[internal], right[internal]])
    # preorder numbering: every child comes after its parent, each node (but the root) is a child once
    parents = np.concatenate([np.flatnonzero(internal)] * 2)
    return bool(((kids > parents) & (kids < n)).all() and np.unique(kids).size == kids.size == n - 1)


def _lowest_common_ancestors(u, v, parent, depth) -> np.ndarray:
    """Node-wise lowest common ancestor of nodes u[i] and v[i] (climbing parent pointers)."""
    u, v = u.copy(), v.copy()
    while True:
        differ = u != v
        if not differ.any():
            return u
        du, dv = depth[u], depth[v]
        up_u = differ & (du >= dv)
        up_v = differ & (dv >= du)
        u[up_u] = parent[u[up_u]]
        v[up_v] = parent[v[up_v]]


def _tree_importances(feature, gain, weight, p: int) -> np.ndarray:
    """Mean decrease of n·I per feature, over the root weight, normalised to sum 1 (0s if no split)."""
    internal = feature != LEAF
    imp = np.bincount(feature[internal], weights=np.maximum(gain[internal], 0.0) / weight[0], minlength=p)
    total = imp.sum()
    return imp / total if total > 0 else imp


def _global_mean(values, weights) -> float:
    total = weights.sum()
    return float((values * weights).sum() / total)


def _check_names(names, p: int):
    if names is None:
        return None
    names = [str(v) for v in names]
    if len(names) != p:
        raise ValueError(f"feature_names must have {p} entries, got {len(names)}")
    return names


def _floats_or_none(arr) -> list:
    return [None if np.isnan(v) else float(v) for v in arr]


def _upper_rows(table: np.ndarray) -> list:
    return [[float(v) for v in table[a, a:]] for a in range(table.shape[0])]


def _from_upper_rows(rows, L: int) -> np.ndarray:
    if len(rows) != L or any(len(row) != L - a for a, row in enumerate(rows)):
        raise ValueError(f"leaf_distances must have {L} rows, row a holding h(a, a..{L - 1})")
    table = np.zeros((L, L))
    for a, row in enumerate(rows):
        table[a, a:] = row
    upper = np.triu(np.ones((L, L), dtype=bool), 1)
    table[upper.T] = table.T[upper.T]
    if not np.all(np.isfinite(table)):
        raise ValueError("leaf_distances must be finite")
    return table


# ----------------------------------------------------------------------------------------
# the forest
# ----------------------------------------------------------------------------------------
class DistanceForest(StateMixin):
    """Similarity and Metric Random Forest: ``n_trees`` randomised :class:`DistanceTree` s.

    Parameters
    ----------
    n_trees : int, default 100.
    max_features : as :class:`DistanceTree`; default "sqrt".
    min_samples_leaf, max_depth : as :class:`DistanceTree`.
    bootstrap : bool, default True: each tree sees a bootstrap sample (copies of an item are at
        distance 0 from each other). False: each tree sees all items, or ``max_samples`` drawn
        without replacement.
    max_samples : None (n), int, or float in (0, 1] (a share of n): items per tree.
    random_state : None, int or numpy Generator; each tree gets its own integer seed.

    Fitted attributes: ``estimators_`` (list of DistanceTree), ``tree_seeds_``, ``n_features_in_``,
    ``feature_names_in_``, ``feature_importances_`` (p,): each tree's normalised mean decrease of
    n·I (split gains over the root weight; a negative gain counts 0), averaged over the trees
    that split at all, normalised to sum 1 (all 0 when no tree split).
    """

    def __init__(self, n_trees: int = 100, max_features: MaxFeatures = "sqrt", min_samples_leaf: int = 1,
                 max_depth: int | None = None, bootstrap: bool = True, max_samples: int | float | None = None,
                 random_state: RandomState = None) -> None:
        store_params(self, locals())

    def _check_params(self) -> None:
        check_int("n_trees", self.n_trees, 1)
        DistanceTree(self.max_features, self.min_samples_leaf, self.max_depth)._check_params()
        if not isinstance(self.bootstrap, (bool, np.bool_)):
            raise ValueError(f"bootstrap must be True or False, not {self.bootstrap!r}")
        ms = self.max_samples
        if ms is not None:
            if isinstance(ms, bool):
                raise ValueError(f"max_samples must be None, an int >= 1 or a float in (0, 1], not {ms!r}")
            if isinstance(ms, (numbers.Integral, np.integer)):
                check_int("max_samples", ms, 1)
            elif not (isinstance(ms, (numbers.Real, np.floating)) and 0.0 < float(ms) <= 1.0):
                raise ValueError(f"max_samples must be None, an int >= 1 or a float in (0, 1], not {ms!r}")

    def _params(self) -> dict:
        tree = DistanceTree(self.max_features, self.min_samples_leaf, self.max_depth)._params()
        ms = self.max_samples
        return {
            "n_trees": int(self.n_trees),
            "max_features": tree["max_features"],
            "min_samples_leaf": tree["min_samples_leaf"],
            "max_depth": tree["max_depth"],
            "bootstrap": bool(self.bootstrap),
            "max_samples": None if ms is None else (int(ms) if isinstance(ms, (numbers.Integral, np.integer))
                                                    else float(ms)),
            "random_state": json_seed(self.random_state),
        }

    def _sample_size(self, n: int) -> int:
        ms = self.max_samples
        if ms is None:
            return n
        if isinstance(ms, (numbers.Integral, np.integer)):
            if not self.bootstrap and ms > n:
                raise ValueError(f"max_samples={ms} exceeds the {n} items (bootstrap=False)")
            return int(ms)
        return max(1, int(round(float(ms) * n)))

    def fit(self, X: ArrayLike, Z: ArrayLike, *, pair_weight: ArrayLike | None = None,
            feature_names: Sequence[str] | None = None) -> DistanceForest:
        """Grow the forest on items X (n, p) and distances Z (n, n), NaN = unobserved (module docstring)."""
        self._check_params()
        X = check_features(X)
        n = X.shape[0]
        if n < 2:
            raise ValueError("a distance forest needs at least 2 items")
        values, weights = check_distances(Z, n, pair_weight)
        names = _check_names(feature_names, X.shape[1])
        rng = check_random_state(self.random_state)
        self.tree_seeds_ = rng.integers(0, _MAX_SEED, size=int(self.n_trees), dtype=np.int64)
        size = self._sample_size(n)
        global_mean = _global_mean(values, weights)
        self.estimators_ = []
        for seed in self.tree_seeds_:
            tree_rng = np.random.default_rng(int(seed))
            if self.bootstrap:
                w = np.bincount(tree_rng.integers(0, n, size=size), minlength=n).astype(np.float64)
            elif size < n:
                w = np.zeros(n)
                w[tree_rng.choice(n, size=size, replace=False)] = 1.0
            else:
                w = np.ones(n)
            tree = DistanceTree(self.max_features, self.min_samples_leaf, self.max_depth, random_state=int(seed))
            tree._fit_checked(X, values, weights, w, tree_rng, global_mean)
            tree.feature_names_in_ = names
            self.estimators_.append(tree)
        self.n_features_in_ = int(X.shape[1])
        self.feature_names_in_ = names
        self.feature_importances_ = _forest_importances(self.estimators_, self.n_features_in_)
        return self

    def _check_fitted(self) -> None:
        if not hasattr(self, "estimators_"):
            raise ValueError("this DistanceForest is not fitted yet: call fit(X, Z) first")

    def apply(self, X: ArrayLike) -> np.ndarray:
        """Leaf numbers, int array of shape (m, n_trees)."""
        self._check_fitted()
        X = check_features(X, self.n_features_in_)
        return np.stack([t._apply_checked(X) for t in self.estimators_], axis=1)

    def predict(self, X1: ArrayLike, X2: ArrayLike | None = None) -> np.ndarray:
        """Predicted distances, shape (m1, m2): the trees' h(leaf(X1[i]), leaf(X2[j])) averaged (eq. 2.3)."""
        self._check_fitted()
        X1 = check_features(X1, self.n_features_in_, "X1")
        X2 = X1 if X2 is None else check_features(X2, self.n_features_in_, "X2")
        out = np.zeros((X1.shape[0], X2.shape[0]))
        for tree in self.estimators_:
            l1 = tree._apply_checked(X1)
            l2 = l1 if X2 is X1 else tree._apply_checked(X2)
            out += tree.leaf_distances_[np.ix_(l1, l2)]
        return out / len(self.estimators_)

    def predict_pairs(self, X1: ArrayLike, X2: ArrayLike) -> np.ndarray:
        """Predicted distance of each row-aligned pair (X1[i], X2[i]); shape (m,)."""
        self._check_fitted()
        X1 = check_features(X1, self.n_features_in_, "X1")
        X2 = check_features(X2, self.n_features_in_, "X2")
        if X1.shape[0] != X2.shape[0]:
            raise ValueError("X1 and X2 must have the same number of rows")
        out = np.zeros(X1.shape[0])
        for tree in self.estimators_:
            out += tree.leaf_distances_[tree._apply_checked(X1), tree._apply_checked(X2)]
        return out / len(self.estimators_)

    # -- state and export ----------------------------------------------------------------
    STATE_VERSIONS = (STATE_VERSION,)
    _FITTED_ATTRIBUTE = "estimators_"

    def _fitted_state(self) -> dict:
        """JSON-safe (``json.dumps`` it as is): ``"n_features_in"``, ``"feature_names"``,
        ``"tree_seeds"``, ``"feature_importances"`` and ``"trees"`` (each a :meth:`DistanceTree.to_state`)."""
        return {
            "n_features_in": self.n_features_in_,
            "feature_names": self.feature_names_in_,
            "tree_seeds": [int(s) for s in self.tree_seeds_],
            "feature_importances": [float(v) for v in self.feature_importances_],
            "trees": [t.to_state() for t in self.estimators_],
        }

    def _load_fitted(self, state: dict) -> None:
        self.estimators_ = [DistanceTree.from_state(t) for t in state["trees"]]
        self._finish_load(state, [int(s) for s in state["tree_seeds"]])

    def _finish_load(self, doc: dict, seeds: list) -> None:
        self.n_features_in_ = int(doc["n_features_in"] if "n_features_in" in doc else doc["n_features"])
        if not self.estimators_ or any(t.n_features_in_ != self.n_features_in_ for t in self.estimators_):
            raise ValueError("a fitted forest needs trees, all with the forest's number of features")
        self.feature_names_in_ = _check_names(doc.get("feature_names"), self.n_features_in_)
        self.tree_seeds_ = np.asarray(seeds, dtype=np.int64)
        self.feature_importances_ = np.asarray(doc["feature_importances"], np.float64)
        if self.feature_importances_.shape != (self.n_features_in_,):
            raise ValueError("feature_importances must have one entry per feature")

    def to_json(self) -> dict:
        """The fitted forest as a researcher's JSON document (``json.dumps`` it as is).

        ``{"schema_version": 1, "kind": "distance_forest", "params", "n_features",
        "feature_names", "feature_importances", "trees": [{"tree", "seed", "n_leaves",
        "nodes", "leaf_distances"}]}``. ``nodes`` lists the nodes in preorder, each
        ``{"id", "parent", "depth", "n_items", "weight", "impurity", "mean"}`` plus, for a
        split, ``"feature"``, ``"threshold"``, ``"children": [left, right]``, ``"gain"`` and
        ``"cross_mean"`` (null if the split separated no observed pair) and, for a leaf,
        ``"leaf"`` (its row in the table). ``leaf_distances[a][b - a]`` = h(a, b) for b ≥ a.
        """
        self._check_fitted()
        trees = []
        for b, tree in enumerate(self.estimators_):
            nodes = []
            for v in range(tree.node_count_):
                entry = {"id": v, "parent": None if tree.parent_[v] == NO_NODE else int(tree.parent_[v]),
                         "depth": int(tree.depth_[v]), "n_items": int(tree.n_items_[v]),
                         "weight": float(tree.weight_[v]), "impurity": float(tree.impurity_[v]),
                         "mean": float(tree.mean_[v])}
                if tree.feature_[v] == LEAF:
                    entry["leaf"] = int(tree.leaf_[v])
                else:
                    cross = tree.cross_mean_[v]
                    entry.update({"feature": int(tree.feature_[v]), "threshold": float(tree.threshold_[v]),
                                  "children": [int(tree.left_[v]), int(tree.right_[v])],
                                  "gain": float(tree.gain_[v]),
                                  "cross_mean": None if np.isnan(cross) else float(cross)})
                nodes.append(entry)
            trees.append({"tree": b, "seed": int(self.tree_seeds_[b]), "n_leaves": tree.n_leaves_,
                          "global_mean": tree.global_mean_, "nodes": nodes,
                          "leaf_distances": _upper_rows(tree.leaf_distances_)})
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": KIND,
            "params": self._params(),
            "n_features": self.n_features_in_,
            "feature_names": self.feature_names_in_,
            "feature_importances": [float(v) for v in self.feature_importances_],
            "trees": trees,
        }

    @classmethod
    def from_json(cls, doc: dict) -> DistanceForest:
        """A forest that predicts as the exported one did, from :meth:`to_json` output."""
        if doc.get("kind") != KIND:
            raise ValueError(f"not a {KIND} document (kind={doc.get('kind')!r})")
        if doc.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"unsupported schema_version {doc.get('schema_version')!r} (expected {SCHEMA_VERSION})")
        forest = cls(**doc["params"])
        forest._check_params()
        p = int(doc["n_features"])
        forest.estimators_ = []
        for entry in doc["trees"]:
            nodes = entry["nodes"]
            if [nd["id"] for nd in nodes] != list(range(len(nodes))):
                raise ValueError("nodes must be listed in id order 0, 1, 2, ...")
            arrays = {name: [] for name in DistanceTree._INT_NODE_ARRAYS + DistanceTree._FLOAT_NODE_ARRAYS}
            for nd in nodes:
                split = "children" in nd
                arrays["feature"].append(nd["feature"] if split else LEAF)
                arrays["left"].append(nd["children"][0] if split else NO_NODE)
                arrays["right"].append(nd["children"][1] if split else NO_NODE)
                arrays["parent"].append(NO_NODE if nd["parent"] is None else nd["parent"])
                arrays["threshold"].append(nd["threshold"] if split else None)
                arrays["gain"].append(nd["gain"] if split else 0.0)
                arrays["cross_mean"].append(nd["cross_mean"] if split else None)
                for name in ("depth", "n_items", "weight", "impurity", "mean"):
                    arrays[name].append(nd[name])
            tree = DistanceTree(forest.max_features, forest.min_samples_leaf, forest.max_depth,
                                random_state=int(entry["seed"]))
            tree._load_arrays(arrays, entry["leaf_distances"], p)
            leaves = [nd["leaf"] for nd in nodes if "children" not in nd]
            if leaves != list(range(tree.n_leaves_)):
                raise ValueError("leaves must be numbered 0, 1, ... in node order")
            tree.feature_names_in_ = _check_names(doc.get("feature_names"), p)
            tree.global_mean_ = float(entry["global_mean"])
            tree.feature_importances_ = _tree_importances(tree.feature_, tree.gain_, tree.weight_, p)
            forest.estimators_.append(tree)
        forest._finish_load(doc, [int(t["seed"]) for t in doc["trees"]])
        return forest


def _forest_importances(trees: list[DistanceTree], p: int) -> np.ndarray:
    split = [t.feature_importances_ for t in trees if t.node_count_ > 1]
    if not split:
        return np.zeros(p)
    imp = np.mean(split, axis=0)
    total = imp.sum()
    return imp / total if total > 0 else imp
