"""ANNTri's estimates: confidence intervals of the pair means and the effective bounds U*, L*.

Stored bound matrices (symmetric planners, float32 above ``FLOAT64_MAX_ITEMS`` items, rounded
outward) or bounds derived from mean and count (head-based planners, the tighter pairs in
``_tight``). Numpy/scipy only; must never import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

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
    scalar answer outside the overlay takes it (``AnswerUpdates._observe_pair``); the overlay's
    hot loop inlines the same arithmetic."""
    m1 = (mean * count + value) / (count + 1)
    conf_lo = max(m1 - radius, 0.0)
    conf_hi = m1 + radius
    hi = min(upper, conf_hi)
    lo = max(lower, conf_lo)
    if lo > hi:
        return m1, conf_hi, min(conf_lo, conf_hi), True
    return m1, hi, lo, False


class Estimates:
    """Mixin of the planner (``engine.anntri.planner``): intervals, bounds read and tightened."""

    def _radius_lookup(self, top: int):
        """The LIL/Hoeffding radius C(T) for T = 0..top (and beyond), as a cached float list."""
        table = getattr(self, "_radius_list", None)
        if table is None or top >= len(table):
            size = max(1024, 2 * top + 1)
            lo, _ = confidence_interval(np.zeros(size), np.arange(size), self.n_items, self.delta,
                                        self.sigma, self.bound)
            self._radius_table = -lo
            table = self._radius_list = (-lo).tolist()
        return table

    def _confidence(self, mean, count):
        if self.bound in UNIT_INTERVAL_BOUNDS:
            return confidence_interval(mean, count, self.n_items, self.delta, self.sigma, self.bound)
        # LIL and Hoeffding radii depend on the count only: look them up in a growing table.
        self._radius_lookup(int(count.max()))
        r = self._radius_table[count]
        return mean - r, mean + r

    def _exact_mean(self, m, T):
        """Float64 means of the given stored means and counts: a float32 mean of 0/1 answers is
        read back as exactly k / T (k = round(m * T), exact below 2**23 answers)."""
        m = np.asarray(m)
        if m.dtype != np.float32:
            return m.astype(np.float64, copy=False)
        T = np.asarray(T, dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(T > 0, np.round(m.astype(np.float64) * T) / np.maximum(T, 1.0), 0.0)

    def _interval(self, m, T):
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
            self._radius_lookup(int(T.max()) if T.size else 0)
            r = self._radius_table[T]
            lo, hi = m - r, m + r
        lo = np.maximum(lo, 0.0)
        sampled = T > 0
        return np.where(sampled, lo, 0.0), np.where(sampled, hi, np.inf)

    def _interval_one(self, m: float, T: int):
        """:meth:`_interval` of one entry with T > 0, as Python floats (same arithmetic)."""
        if self.bound in UNIT_INTERVAL_BOUNDS:
            lo, hi = self._interval(np.array([m]), np.array([T]))
            return float(lo[0]), float(hi[0])
        radius = self._radius_lookup(T)
        r = radius[T]
        lo = m - r
        return (lo if lo > 0.0 else 0.0), m + r

    def _bounds_at(self, j: int, cols):
        """(U*, L*) of head j at the columns ``cols`` (int array), float64."""
        cols = np.asarray(cols, dtype=np.int64)
        if not self._derived_bounds:
            return (self.upper_[j, cols].astype(np.float64), self.lower_[j, cols].astype(np.float64))
        d = self.__dict__
        T = d["_a_count_"][j, cols]
        lo, hi = self._interval(self._exact_mean(d["_a_mean_"][j, cols], T), T)
        tight = self._tight.get(j)
        if tight:
            for pos, a in enumerate(cols.tolist()):
                t = tight.get(a)
                if t is not None:
                    hi[pos], lo[pos] = t
        return hi, lo

    def _row_bounds(self, j: int):
        """Row j of (U*, L*): the stored rows (float64 or float32), or computed (float64)."""
        if not self._derived_bounds:
            return self.upper_[j], self.lower_[j]
        U, L = self._bounds_at(j, np.arange(self.n_items))
        U[j] = 0.0  # the diagonal, as the stored arrays hold it
        return U, L

    def bounds_of(self, rows: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """(U*, L*) of the given rows, shape (len(rows), n), float64: what ``upper_``/``lower_`` hold
        for them, without building the whole matrices of a head-based planner (O(len(rows) x n))."""
        return self._rows_bounds(np.asarray(rows, dtype=np.int64))

    def _rows_bounds(self, rows):
        """(U*, L*) of the given rows, shape (len(rows), n), float64."""
        if not self._derived_bounds:
            return self.upper_[rows].astype(np.float64), self.lower_[rows].astype(np.float64)
        d = self.__dict__
        T = d["_a_count_"][rows]
        lo, hi = self._interval(self._exact_mean(d["_a_mean_"][rows], T), T)
        for r, j in enumerate(np.asarray(rows).tolist()):
            tight = self._tight.get(j)
            if tight:
                for a, (h, l_) in tight.items():
                    hi[r, a], lo[r, a] = h, l_
            hi[r, j] = 0.0
        return hi, lo

    def _materialise_bounds(self):
        """The whole (U*, L*) matrices of a head-based planner (O(n²), for readers from outside)."""
        fdtype = np.float64 if self.n_items <= FLOAT64_MAX_ITEMS else np.float32
        n = self.n_items
        U = np.empty((n, n), dtype=fdtype)
        L = np.empty((n, n), dtype=fdtype)
        step = max(1, ROW_CHUNK_ELEMENTS // n)
        for start in range(0, n, step):
            rows = np.arange(start, min(start + step, n))
            hi, lo = self._rows_bounds(rows)
            U[rows], L[rows] = outward(hi, lo, fdtype)
        return U, L

    def _set_bounds(self, upper_=None, lower_=None):
        """Adopt U*/L* matrices assigned to ``upper_``/``lower_`` of a head-based planner: keep, as ``_tight``
        entries, the sampled pairs where they are tighter than today's interval (float32 matrices
        are read as rounded: within one float32 step of the interval counts as equal)."""
        n = self.n_items
        d = self.__dict__
        cur_U, cur_L = self._materialise_bounds() if upper_ is None or lower_ is None else (None, None)
        U = np.asarray(upper_ if upper_ is not None else cur_U)
        L = np.asarray(lower_ if lower_ is not None else cur_L)
        if U.shape != (n, n) or L.shape != (n, n):
            raise ValueError(f"bound matrices must have shape {(n, n)}")
        tight: dict = {}
        count = d["_a_count_"]
        for j in range(n):
            cols = np.flatnonzero(count[j])
            if not len(cols):
                continue
            T = count[j, cols]
            lo, hi = self._interval(self._exact_mean(d["_a_mean_"][j, cols], T), T)
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
        self._tight = tight

    def _upgrade_mean(self):
        """A value other than 0 or 1 arrived: keep the means in float64 from now on (exact k / T)."""
        d = self.__dict__
        mean = d["_a_mean_"]
        if mean.dtype == np.float32:
            d["_a_mean_"] = self._exact_mean(mean, d["_a_count_"])
            d["_touched_all"] = True

    def _tighten_many(self, i, j, m_old, T_old, m1, T1):
        """:meth:`_tighten` for arrays of distinct pairs (head i, arm j), vectorised where no entry
        of ``_tight`` is involved."""
        lo0, hi0 = self._interval(m_old, T_old)
        conf_lo, conf_hi = self._interval(m1, T1)
        tight_rows = self._tight
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
            self._tight.setdefault(a, {})[b] = (float(hi[pos]), float(lo[pos]))
        if tight_rows:
            for pos in np.flatnonzero(~keep).tolist():
                a, b = int(i[pos]), int(j[pos])
                t = tight_rows.get(a)
                if t and b in t:
                    del t[b]
                    if not t:
                        del tight_rows[a]

    def _tighten(self, i, j, m_old, T_old, m1, T1):
        """The derived-bounds update of head i's pair (i, j) after answers took it from (m_old, T_old)
        to (m1, T1) (float64 means): U* = min(U*_old, U), L* = max(L*_old, L), today's interval when
        they cross; an entry of ``_tight`` only where that is tighter than today's interval."""
        tight = self._tight.get(i)
        t = tight.get(j) if tight else None
        if t is not None:
            hi0, lo0 = t
        elif T_old > 0:
            lo0, hi0 = self._interval_one(m_old, T_old)
        else:
            hi0, lo0 = math.inf, 0.0
        conf_lo, conf_hi = self._interval_one(m1, T1)
        hi = min(hi0, conf_hi)
        lo = max(lo0, conf_lo)
        if lo > hi:  # the confidence event failed somewhere: fall back to today's interval
            hi, lo = conf_hi, min(conf_lo, conf_hi)
            self._active_cache.pop(i, None)
            self._active_cache.pop(j, None)
        if hi < conf_hi or lo > conf_lo:
            if tight is None:
                tight = self._tight[i] = {}
            tight[j] = (hi, lo)
        elif t is not None:
            del tight[j]
            if not tight:
                del self._tight[i]

