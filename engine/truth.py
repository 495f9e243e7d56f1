"""A known truth: its distance matrix (checked, or computed from points when read) and how far a learned
nearest-neighbour graph is from it.

What the engine scores against when the truth is known: ``proxima plan``'s accuracy (engine.planning),
the update pass's error curve of demo and simulated studies, the simulated raters (``simulation``) and
the benchmarks. Conventions: ``distances`` ndarray of shape (n_items, n_items), symmetric with a zero
diagonal. numpy/scipy only: must never import Flask, Redis, RQ, ``webapp``, ``workers`` or ``simulation``.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy.spatial import cKDTree
from scipy.spatial.distance import cdist

#: items from which :func:`point_distances` (the simulated raters' ``from_points``) computes distances
#: when read (:class:`PointDistances`) instead of holding the n x n matrix (8 bytes per pair: 200 MB at
#: 5,000 items, 20 GB at 50,000)
DENSE_ITEMS = 5000

#: points of at most this many dimensions find their true neighbours with a k-d tree (exact at any
#: dimension, but no faster than reading all rows above about this many)
KD_TREE_DIMS = 16


class PointDistances:
    """The Euclidean distance matrix of ``points`` / ``scale``, computed when read: O(n·d) memory.

    Reads as the matrix does where the simulated raters and the scores read it: ``D[rows, cols]`` with integer
    arrays that broadcast (or integers), ``D[i]`` (one row), ``shape``, ``len``, ``max()``. Turning
    it into an array (``np.asarray``) builds the dense matrix, refused above ``DENSE_ITEMS``
    items with the size it would take."""

    ndim = 2
    dtype = np.dtype(np.float64)

    def __init__(self, points: ArrayLike, scale: float = 1.0) -> None:
        X = _points(points)
        if X.ndim != 2 or len(X) < 1 or not np.all(np.isfinite(X)):
            raise ValueError(f"points must be a finite array of shape (n_items, d), got shape {X.shape}")
        if not scale > 0:
            raise ValueError(f"scale must be > 0, got {scale}")
        self.points = X / float(scale)
        self.shape = (len(X), len(X))

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: Any) -> np.ndarray | float:
        if not isinstance(key, tuple):
            key = (key, slice(None))
        if len(key) != 2:
            raise IndexError("a distance matrix takes two indices")
        rows, cols = (np.arange(self.shape[0])[k] if isinstance(k, slice) else np.asarray(k, np.int64)
                      for k in key)
        if isinstance(key[0], slice) or isinstance(key[1], slice):  # a block: outer product of the two
            rows, cols = np.atleast_1d(rows)[:, None], np.atleast_1d(cols)[None, :]
            out = self._between(rows, cols)
            return out.reshape(-1) if np.ndim(key[0]) == 0 and not isinstance(key[0], slice) else out
        out = self._between(rows, cols)
        return float(out) if out.ndim == 0 else out

    def _between(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        rows, cols = np.broadcast_arrays(rows, cols)
        diff = self.points[rows] - self.points[cols]
        return np.sqrt(np.einsum("...d,...d->...", diff, diff))

    def max(self) -> float:
        """The largest distance (the diameter): over the convex hull's vertices where there is one."""
        return float(diameter(self.points))

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        n = self.shape[0]
        if n > DENSE_ITEMS:
            raise ValueError(f"{n:,} items: the full distance matrix would take {8 * n * n / 2**30:.1f} GiB; "
                             "read the distances you need by index instead")
        return cdist(self.points, self.points).astype(dtype or np.float64)


def diameter(points: ArrayLike) -> float:
    """The largest Euclidean distance between two of ``points`` (n, d), without an n x n array: the
    farthest pair lies on the convex hull, so only its vertices are compared (all points, a block of
    rows at a time, where the hull is degenerate or the dimension too high for one)."""
    X = _points(points)
    cand = X
    if 2 <= X.shape[1] <= 6 and len(X) > X.shape[1] + 1:
        from scipy.spatial import ConvexHull, QhullError

        try:
            cand = X[ConvexHull(X).vertices]
        except QhullError:
            cand = X
    elif X.shape[1] == 1:
        return float(X.max() - X.min())
    top = 0.0
    for start in range(0, len(cand), _POINT_ROWS):
        top = max(top, float(cdist(cand[start:start + _POINT_ROWS], cand).max()))
    return top


def check_distance_matrix(distances: ArrayLike) -> np.ndarray:
    if isinstance(distances, PointDistances):
        return distances  # finite, non-negative and symmetric by construction
    D = np.asarray(distances, dtype=np.float64)
    if D.ndim != 2 or D.shape[0] != D.shape[1]:
        raise ValueError(f"a distance matrix must be square, got shape {D.shape}")
    if not np.all(np.isfinite(D)):
        raise ValueError("a distance matrix must be finite")
    if np.any(D < 0):
        raise ValueError("distances must be non-negative")
    if not np.allclose(D, D.T):
        raise ValueError("a distance matrix must be symmetric")
    return D


# ---------------------------------------------------------------------------- nearest-neighbour error
#: A chosen neighbour within TIE_TOLERANCE·max(d, 1) of the true k-th nearest distance d is right (ties).
TIE_TOLERANCE = 1e-9
#: Rows of the distance matrix computed at once from points (memory: this many rows of n_items).
_POINT_ROWS = 256


def point_distances(points: ArrayLike, scale: float = 1.0) -> np.ndarray | PointDistances:
    """The distance matrix of ``points`` / ``scale``: dense up to ``DENSE_ITEMS`` items, else read on
    demand (:class:`PointDistances`)."""
    X = _points(points)
    if len(X) > DENSE_ITEMS:
        return PointDistances(X, scale)
    return cdist(X, X) / float(scale) if scale != 1.0 else cdist(X, X)


def _points(points) -> np.ndarray:
    X = np.asarray(points, dtype=np.float64)
    return X[:, None] if X.ndim == 1 else X


def true_kth_distances(distances: ArrayLike | None = None, *, points: ArrayLike | None = None,
                       rank: int = 1) -> np.ndarray:
    """Each item's distance to its true ``rank``-th nearest other item: ndarray of shape (n_items,).

    The truth is ``distances`` (shape (n_items, n_items)) or ``points`` (shape (n_items, d), Euclidean
    distances, computed a few rows at a time so that memory stays linear in n_items). ``rank`` is at
    most n_items − 1.
    """
    if (distances is None) == (points is None):
        raise ValueError("give the truth as either distances or points")
    if distances is not None:
        D = np.array(distances, dtype=np.float64)
        r = max(1, min(int(rank), len(D) - 1))
        np.fill_diagonal(D, np.inf)
        return np.partition(D, r - 1, axis=1)[:, r - 1]
    X = _points(points)
    n = len(X)
    r = max(1, min(int(rank), n - 1))
    if X.shape[1] <= KD_TREE_DIMS:
        # a k-d tree finds each item's r nearest others in O(n log n) (rows of all n items: 3.5 minutes at
        # 50,000 items); the distance is then computed as the scores compute a chosen neighbour's, so a
        # true neighbour is never "too far" by a rounding. Column r of r + 1 is the r-th other item
        # (column 0 is the item itself, or a copy of it at distance 0)
        _, idx = cKDTree(X).query(X, k=r + 1)
        far = np.asarray(idx, np.int64).reshape(n, -1)[:, r]
        return np.sqrt(((X - X[far]) ** 2).sum(axis=-1))
    out = np.empty(n)
    for start in range(0, n, _POINT_ROWS):
        block = X[start:start + _POINT_ROWS]
        d = np.sqrt(((block[:, None, :] - X[None, :, :]) ** 2).sum(axis=-1))
        d[np.arange(len(block)), np.arange(start, start + len(block))] = np.inf
        out[start:start + len(block)] = np.partition(d, r - 1, axis=1)[:, r - 1]
    return out


def neighbor_wrong(neighbors: ArrayLike, distances: ArrayLike | None = None, tol: float = TIE_TOLERANCE, *,
                   points: ArrayLike | None = None, rank: int | None = None,
                   kth: ArrayLike | None = None) -> np.ndarray:
    """Which items' chosen neighbours are not among their true nearest: bool ndarray of shape (n_items,).

    ``neighbors``: int array of shape (n_items,) or (n_items, k), ``engine.graph.NO_NEIGHBOR`` (-1) where an item
    has none yet (wrong). Row i is right when every chosen neighbour is another item at most as far
    from i as i's true ``rank``-th nearest one (default rank: k, a true k-NN set), ties within
    ``tol``·max(that distance, 1) counting as right. The truth is ``distances`` or ``points`` (as in
    :func:`true_kth_distances`); ``kth``, if given, is :func:`true_kth_distances` of that truth
    computed beforehand (with ``points`` the check then takes time linear in n_items).
    """
    nb = np.asarray(neighbors, dtype=np.int64)
    if nb.ndim == 1:
        nb = nb[:, None]
    n = nb.shape[0]
    if kth is None:
        kth = true_kth_distances(distances, points=points, rank=nb.shape[1] if rank is None else rank)
    kth = np.asarray(kth, dtype=np.float64)
    missing = (nb < 0) | (nb == np.arange(n)[:, None])
    safe = np.where(missing, 0, nb)
    if distances is not None:
        chosen = np.take_along_axis(np.asarray(distances, dtype=np.float64), safe, axis=1)
    else:
        X = _points(points)
        chosen = np.sqrt(((X[:, None, :] - X[safe]) ** 2).sum(axis=-1))
    too_far = chosen > (kth + tol * np.maximum(kth, 1.0))[:, None]
    return np.any(missing | too_far, axis=1)


def neighbor_error(neighbors: ArrayLike, distances: ArrayLike | None = None, tol: float = TIE_TOLERANCE, *,
                   points: ArrayLike | None = None, rank: int | None = None, kth: ArrayLike | None = None) -> float:
    """Share of items whose chosen neighbours are not a true nearest set: the mean of :func:`neighbor_wrong`
    (same arguments); 0 for no items."""
    wrong = neighbor_wrong(neighbors, distances, tol, points=points, rank=rank, kth=kth)
    return float(wrong.mean()) if len(wrong) else 0.0
