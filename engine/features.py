"""Item features as a prior: the check of a feature matrix a researcher supplies and the space the
learners read it in (standardised columns, their leading principal components).

Features tell which items are alike before anyone is asked (an image embedding, ingredients, a
generated parameter); the learners start from them and let the answers overrule them. Numpy/scipy
only; must never import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike
from scipy.spatial import cKDTree

#: most principal components of the standardised features kept (a learner's state holds them as
#: float32: 50,000 items x 32 components is 6.4 MB)
FEATURE_COMPONENTS = 32
#: components kept must explain at least this share of a column's variance ... (relative to the first)
MIN_COMPONENT_SHARE = 1e-6
#: what an item's offset from where its features map it costs in a fit, in answers
#: (``engine.embedding.fit_embedding``'s ``stiffness``): the features weigh as much as about this many
#: answers about the item, so a few answers leave it where its features put it and many move it
PRIOR_STIFFNESS = 2.0
#: nearest neighbours in the features are found by brute force (a k-d tree in 32 dimensions is no faster)
#: in blocks of rows holding at most this many distances (128 MB)
NEIGHBOUR_CELLS = 1 << 24
#: ... but by a k-d tree in spaces of at most 3 dimensions, and from KD_TREE_ITEMS items in spaces of at most
#: KD_TREE_DIMS: 50,000 items of a study's 8-D features space took 29 s by brute force in a live study's first
#: pass (n x n distances), 0.9 s by the tree (benchmarks/live_vs_offline.py --items 50000 --features .7
#: --local 50 --cost); in 16 dimensions the tree is no faster. Below KD_TREE_ITEMS the neighbours are those of
#: the brute force to the bit (at 20,000 items the tree gives the same sets, in another order in 0.15% of
#: rows: float64 against float32 distances of near ties).
KD_TREE_DIMS = 8
KD_TREE_ITEMS = 20000


def check_features(features: ArrayLike, n_items: int) -> np.ndarray:
    """``features`` as a float64 array of shape (n_items, n_features), or ValueError in words: one row
    per item, in item order, every value a finite number, at least one column that varies."""
    try:
        X = np.array(features, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError("features must be numbers: an array of shape (n_items, n_features)") from None
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2 or X.shape[0] != n_items or X.shape[1] < 1:
        raise ValueError(f"features must have one row per item: shape ({n_items}, n_features), got {X.shape}")
    bad = ~np.isfinite(X)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        raise ValueError(f"features hold {int(bad.sum())} missing or infinite value(s) (the first: item {row}, "
                         f"column {col}); give every item a number in every column")
    if not (np.ptp(X, axis=0) > 0).any():
        raise ValueError("every feature column holds one value for all items: such features tell nothing")
    return X


class FeatureSpace:
    """The map from raw feature rows to the space the learners read them in, fitted on a study's items
    (:func:`feature_space` is this map of the items it was fitted on): which columns vary, their means and
    spreads, the leading principal components kept and the scale of the first. An item added to the study
    later is read through the same map (:meth:`transform`), so it lands among the items it is like."""

    def __init__(self, columns: np.ndarray, mean: np.ndarray, std: np.ndarray, vectors: np.ndarray,
                 scale: float) -> None:
        self.columns, self.mean, self.std, self.vectors, self.scale = columns, mean, std, vectors, scale

    @classmethod
    def fit(cls, features: ArrayLike, n_items: int, components: int = FEATURE_COMPONENTS) -> FeatureSpace:
        """The space of ``features`` (n_items rows, checked by :func:`check_features`)."""
        X = check_features(features, n_items)
        columns = np.ptp(X, axis=0) > 0
        X = X[:, columns]
        mean, std = X.mean(axis=0), X.std(axis=0)
        Z = (X - mean) / std
        n, p = Z.shape
        if p <= n:
            values, vectors = np.linalg.eigh(Z.T @ Z)
        else:  # more columns than items: the same components from the items' Gram matrix
            values, left = np.linalg.eigh(Z @ Z.T)
            vectors = Z.T @ left / np.sqrt(np.maximum(values, 1e-300))
        order = np.argsort(values)[::-1]
        values, vectors = values[order], vectors[:, order]
        keep = values > MIN_COMPONENT_SHARE * max(values[0], 1e-300)
        k = int(min(components, keep.sum()))
        V = vectors[:, :k]
        V = V * np.where(V[np.argmax(np.abs(V), axis=0), np.arange(k)] < 0, -1.0, 1.0)
        return cls(columns, mean, std, V, float(np.sqrt(values[0] / n)))

    def transform(self, features: ArrayLike) -> np.ndarray:
        """Rows of raw features (m, n_features: the columns the space was fitted on) in the space:
        float32 (m, p). ValueError in words for rows of another width or with a missing value."""
        X = np.asarray(features, np.float64)
        X = X[:, None] if X.ndim == 1 else X
        if X.ndim != 2 or X.shape[1] != len(self.columns):
            raise ValueError(f"feature rows must have {len(self.columns)} columns, got shape {X.shape}")
        if not np.isfinite(X).all():
            raise ValueError("feature rows hold missing or infinite values; give every item a number in every column")
        Z = (X[:, self.columns] - self.mean) / self.std
        return (Z @ self.vectors / self.scale).astype(np.float32)


def feature_space(features: ArrayLike, n_items: int, components: int = FEATURE_COMPONENTS) -> np.ndarray:
    """The items in the space the learners read their features in: float32 (n_items, p), p <= ``components``.

    Each varying column is standardised (constant columns dropped), then the items are projected on
    the leading principal components (at most ``components``; those carrying next to no variance are
    dropped), scaled so the first has unit standard deviation: distances are those of the standardised
    features, up to the components left out. Each component's sign is fixed (its largest loading
    positive), so the same features give the same space on every machine (:class:`FeatureSpace`)."""
    return FeatureSpace.fit(features, n_items, components).transform(check_features(features, n_items))


def feature_neighbors(space: np.ndarray, k: int) -> np.ndarray:
    """Each item's k nearest other items in ``space`` (n_items, p), nearest first, ties to the smaller
    index: int64 (n_items, k). Brute force in blocks of rows (no n x n array), or a k-d tree where it is
    faster (:data:`KD_TREE_DIMS`)."""
    Y = np.asarray(space, np.float64)
    n = len(Y)
    k = int(min(k, n - 1))
    if Y.shape[1] <= 3 or (n >= KD_TREE_ITEMS and Y.shape[1] <= KD_TREE_DIMS):
        _, near = cKDTree(Y).query(Y, k=k + 1)
        near = np.asarray(near, np.int64).reshape(n, k + 1)
        rows = np.arange(n)[:, None]
        d = ((Y[near] - Y[:, None, :]) ** 2).sum(axis=2)
        d = np.where(near == rows, np.inf, d)
        order = np.lexsort((near, d), axis=1)[:, :k]
        return np.take_along_axis(near, order, axis=1)
    Y32 = Y.astype(np.float32)  # (the distances only order the items: float32 halves the time)
    sq = (Y32**2).sum(axis=1)
    out = np.empty((n, k), np.int64)
    block = max(1, NEIGHBOUR_CELLS // n)
    for lo in range(0, n, block):
        hi = min(n, lo + block)
        D = sq[lo:hi, None] + sq[None, :] - 2.0 * (Y32[lo:hi] @ Y32.T)
        D[np.arange(hi - lo), np.arange(lo, hi)] = np.inf
        part = np.argpartition(D, k - 1, axis=1)[:, :k] if k < n - 1 else np.tile(np.arange(n), (hi - lo, 1))
        d = np.take_along_axis(D, part, axis=1)
        order = np.lexsort((part, d), axis=1)
        out[lo:hi] = np.take_along_axis(part, order, axis=1)[:, :k]
    return out


def triplet_agreement(space: np.ndarray, triplets: np.ndarray) -> tuple[int, int]:
    """(answers the features predict, answers): rows (i, j, k) where j is strictly nearer i than k in
    ``space``; ties count as half (rounded down over the whole)."""
    t = np.asarray(triplets, np.int64).reshape(-1, 3)
    if not len(t):
        return 0, 0
    Y = np.asarray(space, np.float64)
    dij = ((Y[t[:, 0]] - Y[t[:, 1]]) ** 2).sum(axis=1)
    dik = ((Y[t[:, 0]] - Y[t[:, 2]]) ** 2).sum(axis=1)
    right = float((dij < dik).sum()) + 0.5 * float((dij == dik).sum())
    return int(right), int(len(t))


#: how an added item's neighbours were predicted: through a learner's learned map from the features to the
#: space its answers give (duels' prior), or in the standardised features themselves
BY_LEARNED_MAP = "learned map"
BY_FEATURES = "features"


def nearest_of(points: ArrayLike, rows: ArrayLike, k: int) -> np.ndarray:
    """The k nearest other points of each of ``rows`` (indices into ``points`` (n, p)), nearest first, ties
    to the smaller index: int64 (len(rows), k). Brute force, in blocks of rows."""
    Y = np.asarray(points, np.float64)
    rows = np.asarray(rows, np.int64).reshape(-1)
    n = len(Y)
    k = int(min(k, n - 1))
    out = np.empty((len(rows), k), np.int64)
    sq = (Y**2).sum(axis=1)
    block = max(1, NEIGHBOUR_CELLS // max(n, 1))
    for lo in range(0, len(rows), block):
        part = rows[lo:lo + block]
        D = sq[part, None] + sq[None, :] - 2.0 * (Y[part] @ Y.T)
        D[np.arange(len(part)), part] = np.inf
        order = np.lexsort((np.broadcast_to(np.arange(n), D.shape), D), axis=1)
        out[lo:lo + len(part)] = order[:, :k]
    return out


def study_space(features: ArrayLike, n_known: int) -> np.ndarray:
    """Every item of a study in its features' space as its learners read it: fitted on the first ``n_known``
    (the items they were built with), the items added later read through it. float32 (n_items, p)."""
    X = np.asarray(features, np.float64)
    return FeatureSpace.fit(X[:n_known], n_known).transform(X)


def predicted_neighbors(space: ArrayLike, n_known: int, k: int,
                        place: Callable[[np.ndarray], tuple[ArrayLike, ArrayLike] | None] | None = None
                        ) -> tuple[np.ndarray, str]:
    """The k nearest items, among all, of each item past the first ``n_known`` (items added to a study after its
    learners were built), predicted from the features, and how (:data:`BY_LEARNED_MAP`, :data:`BY_FEATURES`).

    ``space`` (n_items, p) is every item in the features' space (:func:`study_space`). ``place`` is a learner's
    map (``engine.registry.feature_placement``): given the added items in that space it returns (its own items'
    coordinates, the added items' coordinates), or None while it has no map; the neighbours are then the
    nearest in those coordinates, else in the features' space."""
    Y = np.asarray(space, np.float64)
    n = len(Y)
    placed = place(Y[n_known:]) if place is not None and n > n_known else None
    if placed is not None:
        known, added = placed
        points, how = np.vstack([np.asarray(known, np.float64), np.asarray(added, np.float64)]), BY_LEARNED_MAP
    else:
        points, how = Y, BY_FEATURES
    return nearest_of(points, np.arange(n_known, n), k), how
