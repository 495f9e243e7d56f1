"""ANNTri's estimates: confidence intervals of the pair means and the effective bounds U*, L*.

Stored bound matrices (symmetric planners, float32 above ``FLOAT64_MAX_ITEMS`` items, rounded
outward) or bounds derived from mean and count (head-based planners, the tighter pairs in
``tight``), owned by one :class:`Estimates` per planner. Numpy/scipy only; must never import
Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from ..bounds import UNIT_INTERVAL_BOUNDS, confidence_interval

#: Above this many items the bound matrices are float32 (half the memory, ~1e-7 relative rounding).
FLOAT64_MAX_ITEMS = 2048
#: Elements of the (rows, n) temporaries built at once (whole bound matrices, current neighbours).
ROW_CHUNK_ELEMENTS = 1 << 21


def outward(hi: ArrayLike, lo: ArrayLike, dtype: DTypeLike) -> tuple[ArrayLike, ArrayLike]:
    """Bounds stored in ``dtype``, rounded outward (U* up, L* down): a float32 bound never claims
    more than the float64 one it stores, so rounding closes no round wrongly."""
    t = np.dtype(dtype).type
    if t is np.float64:
        return hi, lo
    h = np.asarray(hi).astype(t)
    lw = np.asarray(lo).astype(t)
    with np.errstate(invalid="ignore"):
        h = np.where(h < hi, np.nextafter(h, t(np.inf)), h)
        lw = np.where(lw > lo, np.nextafter(lw, t(-np.inf)), lw)
    return h, lw


def outward_one(hi: float, lo: float) -> tuple[float, float]:
    """:func:`outward` for one float32 pair of bounds, as Python floats."""
    h = float(np.float32(hi))
    if h < hi:
        h = float(np.nextafter(np.float32(h), np.float32(np.inf)))
    low = float(np.float32(lo))
    if low > lo:
        low = float(np.nextafter(np.float32(low), np.float32(-np.inf)))
    return h, low


def interval_step(mean: float, count: int, value: float, radius: float, upper: float,
                  lower: float) -> tuple[float, float, float, bool]:
    """One answer ``value`` for a pair of ``count`` answers averaging ``mean``, in Python floats:
    the new mean, U* and L* (the confidence interval of ``radius`` around the new mean, clipped
    at 0 and intersected with ``[lower, upper]``) and whether that intersection was empty, in
    which case the confidence event failed somewhere and today's interval stands alone. Every
    scalar answer outside the overlay takes it (:func:`engine.anntri.observe.observe_pair`); the overlay's
    hot loop inlines the same arithmetic."""
    m1 = (mean * count + value) / (count + 1)
    conf_lo = max(m1 - radius, 0.0)
    conf_hi = m1 + radius
    hi = min(upper, conf_hi)
    lo = max(lower, conf_lo)
    if lo > hi:
        return m1, conf_hi, min(conf_lo, conf_hi), True
    return m1, hi, lo, False


_TOKENS = itertools.count(1)


class RowChanges:
    """Which rows of a planner's (n, n) state arrays changed between two of its states.

    ``to_state(copy=False)`` hands out its (n, n) arrays as :class:`RowTracked` views labelled
    with one of these (planner token, state number); ``later.rows_since(earlier)`` is the rows
    written after the state ``earlier`` was handed out (a superset is possible, a subset never),
    or None when unknown (another planner, or states out of order): then diff everything."""

    __slots__ = ("token", "epoch", "_row_epoch")

    def __init__(self, token: int, epoch: int, row_epoch: np.ndarray) -> None:
        self.token, self.epoch, self._row_epoch = token, epoch, row_epoch

    def rows_since(self, earlier: object) -> np.ndarray | None:
        if (not isinstance(earlier, RowChanges) or earlier.token != self.token
                or earlier.epoch > self.epoch):
            return None
        return np.flatnonzero(self._row_epoch > earlier.epoch)


class RowTracked(np.ndarray):
    """A view of a planner's own (n, n) array, carrying ``row_changes`` (a :class:`RowChanges`);
    arrays derived from it (slices, arithmetic, copies) carry none."""

    row_changes = None

    def __array_finalize__(self, obj: np.ndarray | None) -> None:
        self.row_changes = None


def exact_mean(m: ArrayLike, T: ArrayLike) -> np.ndarray:
    """Float64 means of the given stored means and counts: a float32 mean of 0/1 answers is
    read back as exactly k / T (k = round(m * T), exact below 2**23 answers)."""
    m = np.asarray(m)
    if m.dtype != np.float32:
        return m.astype(np.float64, copy=False)
    T = np.asarray(T, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(T > 0, np.round(m.astype(np.float64) * T) / np.maximum(T, 1.0), 0.0)


def bound_dtype(n_items: int) -> type:
    """The dtype of stored bound matrices for ``n_items`` items (float32 above FLOAT64_MAX_ITEMS)."""
    return np.float64 if n_items <= FLOAT64_MAX_ITEMS else np.float32


class Estimates:
    """The pair estimates of one planner, and their own state: D̂ (``mean``), answers (``count``),
    questions pending (``pending``), all (n, n), and the effective bounds U*, L*.

    Symmetric estimates store ``upper``/``lower`` (n, n); head-based ones (``symmetric=False``) store
    none (``upper is lower is None``): their bounds follow from ``mean`` and ``count`` (today's
    anytime interval), except at the pairs whose running intersection is tighter, kept in
    ``tight`` ({head: {arm: (U*, L*)}}). The arrays are plain attributes: a planner's scalar overlay
    (``engine.anntri.overlay``) writes its entries back before anything reads them through the
    planner. ``dirty`` queues the pairs sampled since the last triangle step. Built by :meth:`empty`
    or :meth:`from_state`, saved by :meth:`arrays`, :meth:`dirty_state` and :meth:`tight_state`.
    """

    def __init__(self, n_items: int, delta: float, sigma: float, bound: str, symmetric: bool, mean: np.ndarray,
                 count: np.ndarray, pending: np.ndarray, upper: np.ndarray | None = None,
                 lower: np.ndarray | None = None, tight: dict | None = None, dirty: dict | None = None) -> None:
        self.n_items, self.delta, self.sigma, self.bound = n_items, delta, sigma, bound
        self.derived = not symmetric
        self.mean, self.count, self.pending = mean, count, pending
        self.upper, self.lower = upper, lower
        self.tight = {} if tight is None else tight
        # pairs i * n + j (i < j) sampled since the last triangle step, oldest first (a dict as an ordered set)
        self.dirty = {} if dirty is None else dirty
        # rows of the (n, n) arrays written since the planner last labelled a state (RowChanges): every
        # writer adds its rows to ``touched`` or sets ``touched_all`` (nothing known about earlier states)
        self.touched: set = set()
        self.touched_all = True
        # fold() stamps them into row_epoch (the state in which each row last changed); token names these arrays
        self.row_epoch = np.zeros(n_items, dtype=np.int64)
        self.epoch = 0
        self.token = next(_TOKENS)
        # set by a scalar overlay holding entries of these arrays: writes them back (see sync)
        self.writeback = None
        self.radius_table = self.radius_list = None

    @classmethod
    def empty(cls, n_items: int, delta: float, sigma: float, bound: str, symmetric: bool) -> Estimates:
        """No answers yet: D̂ = 0, bounds [0, inf) off the diagonal."""
        n = n_items
        fdtype = bound_dtype(n)
        derived = not symmetric
        # A mean of 0/1 answers (triplet-derived samples) is k / T: above FLOAT64_MAX_ITEMS items the
        # head-based estimates store it in float32 and read k back exactly (see exact_mean).
        mean = np.zeros((n, n), dtype=np.float32 if derived and fdtype == np.float32 else np.float64)
        upper = lower = None
        if not derived:
            upper = np.full((n, n), np.inf, dtype=fdtype)
            lower = np.zeros((n, n), dtype=fdtype)
            np.fill_diagonal(upper, 0.0)
        return cls(n, delta, sigma, bound, symmetric, mean, np.zeros((n, n), dtype=np.int32),
                   np.zeros((n, n), dtype=np.int32), upper, lower)

    #: the (n, n) arrays, in the order of a planner's state
    SQUARE = ("mean", "count", "pending", "upper", "lower")

    def arrays(self) -> dict:
        """The stored (n, n) arrays by state key (no ``upper``/``lower`` when head-based)."""
        return {name: getattr(self, name) for name in self.SQUARE if not (self.derived and name in ("upper", "lower"))}

    def dirty_state(self) -> np.ndarray:
        """``dirty`` as the state's int array, oldest first."""
        return np.fromiter(self.dirty, dtype=np.int64, count=len(self.dirty))

    def tight_state(self) -> dict:
        """``tight`` as the state's sorted arrays ``tight_keys`` (i * n + j), ``tight_upper``, ``tight_lower``."""
        n = self.n_items
        items = sorted((i * n + j, hi, lo) for i, row in self.tight.items() for j, (hi, lo) in row.items())
        return {"tight_keys": np.array([t[0] for t in items], dtype=np.int64),
                "tight_upper": np.array([t[1] for t in items], dtype=np.float64),
                "tight_lower": np.array([t[2] for t in items], dtype=np.float64)}

    @classmethod
    def from_state(cls, state: dict, n_items: int, delta: float, sigma: float, bound: str,
                   symmetric: bool) -> Estimates:
        """The estimates a planner's state (``to_state``) holds, copied; ValueError on a wrong shape."""
        n = n_items
        fdtype = bound_dtype(n)
        derived = not symmetric
        # head-based means of 0/1 answers are float32 above FLOAT64_MAX_ITEMS items
        mdtype = np.float32 if derived and np.asarray(state["mean"]).dtype == np.float32 else np.float64
        dtypes = {"mean": mdtype, "count": np.int32, "pending": np.int32, "upper": fdtype, "lower": fdtype}
        arrays = {}
        for name in cls.SQUARE:
            if derived and name in ("upper", "lower"):
                continue
            arr = np.array(state[name], dtype=dtypes[name], copy=True)
            if arr.shape != (n, n):
                raise ValueError(f"state array {name!r} has shape {arr.shape}")
            arrays[name] = arr
        tight: dict = {}
        if derived:
            keys = np.asarray(state["tight_keys"], dtype=np.int64).tolist()
            his = np.asarray(state["tight_upper"], dtype=np.float64).tolist()
            los = np.asarray(state["tight_lower"], dtype=np.float64).tolist()
            for key, hi, lo in zip(keys, his, los, strict=True):
                i, j = divmod(key, n)
                tight.setdefault(i, {})[j] = (hi, lo)
        dirty = dict.fromkeys(np.asarray(state["dirty"], dtype=np.int64).tolist())
        return cls(n, delta, sigma, bound, symmetric, tight=tight, dirty=dirty, **arrays)

    def fold(self) -> int:
        """Stamp the rows written since the last fold with a new tick in ``row_epoch``; the tick."""
        self.epoch += 1
        if self.touched_all:
            self.row_epoch[:] = self.epoch
        elif self.touched:
            self.row_epoch[np.fromiter(self.touched, dtype=np.int64, count=len(self.touched))] = self.epoch
        self.touched.clear()
        self.touched_all = False
        return self.epoch

    def changes(self) -> RowChanges:
        """The label of the state handed out now (rows written later get a later tick)."""
        return RowChanges(self.token, self.fold(), self.row_epoch)

    def sync(self) -> Estimates:
        """These estimates with a scalar overlay's entries written back (a no-op without one)."""
        if self.writeback is not None:
            self.writeback()
        return self

    def radius_lookup(self, top: int) -> list:
        """The LIL/Hoeffding radius C(T) for T = 0..top (and beyond), as a cached float list."""
        table = self.radius_list
        if table is None or top >= len(table):
            size = max(1024, 2 * top + 1)
            lo, _ = confidence_interval(np.zeros(size), np.arange(size), self.n_items, self.delta,
                                        self.sigma, self.bound)
            self.radius_table = -lo
            table = self.radius_list = (-lo).tolist()
        return table

    def confidence(self, mean: np.ndarray, count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The anytime confidence interval (lo, hi) of means ``mean`` after ``count`` answers."""
        if self.bound in UNIT_INTERVAL_BOUNDS:
            return confidence_interval(mean, count, self.n_items, self.delta, self.sigma, self.bound)
        # LIL and Hoeffding radii depend on the count only: look them up in a growing table.
        self.radius_lookup(int(count.max()))
        r = self.radius_table[count]
        return mean - r, mean + r

    def interval(self, m: ArrayLike, T: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """Today's anytime interval (L, U) of entries with float64 means ``m`` and counts ``T``
        ((0, inf) where T = 0), as the observe paths compute it."""
        T = np.asarray(T)
        if self.bound in UNIT_INTERVAL_BOUNDS:
            # bisections (KL) are costly: only where there are answers (the rest is (0, inf) anyway)
            m = np.asarray(m, dtype=np.float64)
            lo, hi = np.zeros(T.shape), np.full(T.shape, np.inf)
            sampled = T > 0
            if sampled.any():
                lo[sampled], hi[sampled] = confidence_interval(m[sampled], T[sampled], self.n_items, self.delta,
                                                               self.sigma, self.bound)
            return np.maximum(lo, 0.0), hi
        else:
            self.radius_lookup(int(T.max()) if T.size else 0)
            r = self.radius_table[T]
            lo, hi = m - r, m + r
        lo = np.maximum(lo, 0.0)
        sampled = T > 0
        return np.where(sampled, lo, 0.0), np.where(sampled, hi, np.inf)

    def interval_one(self, m: float, T: int) -> tuple[float, float]:
        """:meth:`interval` of one entry with T > 0, as Python floats (same arithmetic)."""
        if self.bound in UNIT_INTERVAL_BOUNDS:
            lo, hi = self.interval(np.array([m]), np.array([T]))
            return float(lo[0]), float(hi[0])
        radius = self.radius_lookup(T)
        r = radius[T]
        lo = m - r
        return (lo if lo > 0.0 else 0.0), m + r

    def bounds_at(self, j: int, cols: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """(U*, L*) of head j at the columns ``cols`` (int array), float64."""
        cols = np.asarray(cols, dtype=np.int64)
        if not self.derived:
            return (self.upper[j, cols].astype(np.float64), self.lower[j, cols].astype(np.float64))
        T = self.count[j, cols]
        lo, hi = self.interval(exact_mean(self.mean[j, cols], T), T)
        tight = self.tight.get(j)
        if tight:
            for pos, a in enumerate(cols.tolist()):
                t = tight.get(a)
                if t is not None:
                    hi[pos], lo[pos] = t
        return hi, lo

    def row_bounds(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        """Row j of (U*, L*): the stored rows (float64 or float32), or computed (float64)."""
        if not self.derived:
            return self.upper[j], self.lower[j]
        U, L = self.bounds_at(j, np.arange(self.n_items))
        U[j] = 0.0  # the diagonal, as the stored arrays hold it
        return U, L

    def rows_bounds(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(U*, L*) of the given rows, shape (len(rows), n), float64."""
        if not self.derived:
            return self.upper[rows].astype(np.float64), self.lower[rows].astype(np.float64)
        T = self.count[rows]
        lo, hi = self.interval(exact_mean(self.mean[rows], T), T)
        for r, j in enumerate(np.asarray(rows).tolist()):
            tight = self.tight.get(j)
            if tight:
                for a, (h, l_) in tight.items():
                    hi[r, a], lo[r, a] = h, l_
            hi[r, j] = 0.0
        return hi, lo

    def materialise_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """The whole (U*, L*) matrices of head-based estimates (O(n²), for readers from outside)."""
        n = self.n_items
        fdtype = bound_dtype(n)
        U = np.empty((n, n), dtype=fdtype)
        L = np.empty((n, n), dtype=fdtype)
        step = max(1, ROW_CHUNK_ELEMENTS // n)
        for start in range(0, n, step):
            rows = np.arange(start, min(start + step, n))
            hi, lo = self.rows_bounds(rows)
            U[rows], L[rows] = outward(hi, lo, fdtype)
        return U, L

    def set_bounds(self, upper: ArrayLike | None = None, lower: ArrayLike | None = None) -> None:
        """Adopt U*/L* matrices assigned to head-based estimates: keep, as ``tight`` entries, the
        sampled pairs where they are tighter than today's interval (float32 matrices are read as
        rounded: within one float32 step of the interval counts as equal)."""
        n = self.n_items
        cur_U, cur_L = self.materialise_bounds() if upper is None or lower is None else (None, None)
        U = np.asarray(upper if upper is not None else cur_U)
        L = np.asarray(lower if lower is not None else cur_L)
        if U.shape != (n, n) or L.shape != (n, n):
            raise ValueError(f"bound matrices must have shape {(n, n)}")
        tight: dict = {}
        count = self.count
        for j in range(n):
            cols = np.flatnonzero(count[j])
            if not len(cols):
                continue
            T = count[j, cols]
            lo, hi = self.interval(exact_mean(self.mean[j, cols], T), T)
            u = U[j, cols].astype(np.float64)
            low = L[j, cols].astype(np.float64)
            tol_u = np.abs(hi) * 2.0 ** -22 if U.dtype == np.float32 else 0.0
            tol_l = np.abs(lo) * 2.0 ** -22 if L.dtype == np.float32 else 0.0
            tighter = (u < hi - tol_u) | (low > lo + tol_l)
            if tighter.any():
                u = np.where(u < hi - tol_u, u, hi)
                low = np.where(low > lo + tol_l, low, lo)
                tight[j] = {int(a): (float(h), float(l_)) for a, h, l_ in
                            zip(cols[tighter].tolist(), u[tighter].tolist(), low[tighter].tolist(), strict=True)}
        self.tight = tight

    def upgrade_mean(self) -> None:
        """A value other than 0 or 1 arrived: keep the means in float64 from now on (exact k / T;
        every row of ``mean`` is new)."""
        if self.mean.dtype == np.float32:
            self.mean = exact_mean(self.mean, self.count)
            self.touched_all = True

    def tighten_many(self, i: np.ndarray, j: np.ndarray, m_old: np.ndarray, T_old: np.ndarray, m1: np.ndarray,
                     T1: np.ndarray) -> None:
        """:meth:`tighten` for arrays of distinct pairs (head i, arm j), vectorised where no entry
        of ``tight`` is involved."""
        lo0, hi0 = self.interval(m_old, T_old)
        conf_lo, conf_hi = self.interval(m1, T1)
        tight_rows = self.tight
        if tight_rows:
            for pos, (a, b) in enumerate(zip(i.tolist(), j.tolist(), strict=True)):
                t = tight_rows.get(a)
                t = t.get(b) if t else None
                if t is not None:
                    hi0[pos], lo0[pos] = t
        hi = np.minimum(hi0, conf_hi)
        lo = np.maximum(lo0, conf_lo)
        crossed = lo > hi
        if crossed.any():
            hi = np.where(crossed, conf_hi, hi)
            lo = np.where(crossed, np.minimum(conf_lo, conf_hi), lo)
        keep = (hi < conf_hi) | (lo > conf_lo)
        for pos in np.flatnonzero(keep).tolist():
            a, b = int(i[pos]), int(j[pos])
            self.tight.setdefault(a, {})[b] = (float(hi[pos]), float(lo[pos]))
        if tight_rows:
            for pos in np.flatnonzero(~keep).tolist():
                a, b = int(i[pos]), int(j[pos])
                t = tight_rows.get(a)
                if t and b in t:
                    del t[b]
                    if not t:
                        del tight_rows[a]

    def tighten(self, i: int, j: int, m_old: float, T_old: int, m1: float, T1: int) -> bool:
        """The derived-bounds update of head i's pair (i, j) after answers took it from (m_old, T_old)
        to (m1, T1) (float64 means): U* = min(U*_old, U), L* = max(L*_old, L), today's interval when
        they cross; an entry of ``tight`` only where that is tighter than today's interval. True when
        they crossed (the confidence event failed somewhere: cached decisions of rows i, j are stale)."""
        tight = self.tight.get(i)
        t = tight.get(j) if tight else None
        if t is not None:
            hi0, lo0 = t
        elif T_old > 0:
            lo0, hi0 = self.interval_one(m_old, T_old)
        else:
            hi0, lo0 = math.inf, 0.0
        conf_lo, conf_hi = self.interval_one(m1, T1)
        hi = min(hi0, conf_hi)
        lo = max(lo0, conf_lo)
        failed = lo > hi
        if failed:  # the confidence event failed somewhere: fall back to today's interval
            hi, lo = conf_hi, min(conf_lo, conf_hi)
        if hi < conf_hi or lo > conf_lo:
            if tight is None:
                tight = self.tight[i] = {}
            tight[j] = (hi, lo)
        elif t is not None:
            del tight[j]
            if not tight:
                del self.tight[i]
        return failed
