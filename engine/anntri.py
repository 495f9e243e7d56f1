"""ANNTri (Mason, Tripathy & Nowak, NeurIPS 2019): nearest-neighbour graphs from noisy distances.

Question planners that choose which pair (i, j) to ask next, learn from noisy distance
samples Q(i, j) and certify every item's k nearest neighbours: :class:`ANNTri` (triangle
bounds on), :class:`ANN` (off) and :class:`RandomSampling` (uniform pairs). Numpy/scipy
only; must never import Flask, Redis, RQ, ``webapp`` or ``workers``.

Shapes used throughout (n = ``n_items``):

- ``mean_``, ``upper_``, ``lower_`` : ndarray of shape (n, n), symmetric. ``mean_`` is D̂;
  ``upper_``/``lower_`` are the effective bounds U* = min(U, UΔ), L* = max(L, LΔ). Every
  confidence interval used is anytime-valid, so the stored bounds are the intersection of
  all intervals seen so far, tightened by the triangle inequality (``engine.triangle``).
- ``count_``, ``pending_`` : int ndarray of shape (n, n), symmetric: answers observed and
  questions issued but not yet answered, per pair. With ``symmetric=False`` (head-based
  estimates for triplet-derived samples) none of these matrices is symmetric: row i holds
  head i's samples only.
- Round j finds item j's k nearest neighbours; rounds open in the random order ``order_``.
- A head-based planner stores no ``upper_``/``lower_``: they are computed from ``mean_`` and
  ``count_`` (today's interval), with the pairs whose running intersection is tighter kept in
  ``_tight``; reading the attributes builds the whole matrices.
- The exact SETri fast path for long duels (the "scalar overlay", ``observe`` and
  ``next_questions`` in Python scalars) is :mod:`engine.anntri_overlay`.
"""
from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Iterable, Sequence
from typing import Self

import numpy as np
from numpy.typing import ArrayLike

from . import triangle as tri
from .anntri_overlay import SMALL_BATCH, SPREAD_MIN_ROUNDS, ScalarOverlay, interval_step, overlaid, round_robin  # noqa: F401
from .bounds import UNIT_INTERVAL_BOUNDS, check_bound, confidence_interval
from .graph import NO_NEIGHBOR, NeighborGraph
from .utils import (
    RandomState,
    check_int,
    check_n_items,
    check_random_state,
    generator_from_state,
    generator_state,
    store_params,
)

#: 2 added params['stagger'], 3 params['symmetric'], 4 head-based states without ``upper``/``lower``
#: (``tight_*`` instead) and float32 means above FLOAT64_MAX_ITEMS; older states still load.
STATE_VERSION = 4

#: ``status_`` values of a round.
ROUND_WAITING = 0
ROUND_OPEN = 1
ROUND_CERTIFIED = 2
ROUND_CAPPED = 3  # hit max_samples_per_round: empirical best, not certified

#: Above this many items the bound matrices are float32 (half the memory, ~1e-7 relative rounding).
FLOAT64_MAX_ITEMS = 2048
#: Above this many items the O(n³) full pass is never run (row refreshes only).
FULL_PASS_MAX_ITEMS = 1024

_BIG = 1e12
#: Elements of the (rows, n) temporaries :meth:`current_neighbors` builds at once.
ROW_CHUNK_ELEMENTS = 1 << 21
#: Active sets of at most this many arms are checked with scalar reads.
SMALL_ACTIVE = 16


def _check_pairs(pairs, n_items: int, width: int, what: str):
    """Rows of ``width`` numbers whose first two entries are distinct item indices in range:
    returns the two index columns as int arrays and the rows as a float array."""
    rows = list(pairs) if not isinstance(pairs, np.ndarray) else pairs
    if len(rows) == 0:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty, np.empty((0, width), dtype=np.float64)
    try:
        if isinstance(rows, list) and set(map(len, rows)) == {width}:
            # Much faster than np.asarray on a list of tuples.
            arr = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.float64,
                              count=width * len(rows)).reshape(-1, width)
        else:
            arr = np.asarray(rows, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} must be rows of {width} numbers: {exc}") from None
    if arr.ndim != 2 or arr.shape[1] != width:
        raise ValueError(f"{what} must be rows of {width} numbers, got shape {arr.shape}")
    idx = arr[:, :2]
    with np.errstate(invalid="ignore"):
        as_int = idx.astype(np.int64)
    if not np.array_equal(as_int, idx):  # also catches NaN and ±inf
        raise ValueError(f"{what}: item indices must be integers")
    if as_int.min() < 0 or as_int.max() >= n_items:
        raise ValueError(f"{what}: item indices must lie in 0..{n_items - 1}")
    a, b = as_int[:, 0], as_int[:, 1]
    if np.any(a == b):
        raise ValueError(f"{what}: a pair needs two different items (i == j)")
    return a, b, arr


def _small_rows(rows, n_items: int, width: int, what: str):
    """:func:`_check_pairs` for a short list of rows, in plain Python: validated tuples
    ``(i, j[, value])`` with int indices and a float value, or None for long inputs."""
    if not isinstance(rows, (list, tuple)) or len(rows) > SMALL_BATCH:
        return None
    out = []
    for row in rows:
        if len(row) != width:
            raise ValueError(f"{what} must be rows of {width} numbers, got a row of {len(row)}")
        a, b = row[0], row[1]
        if type(a) is not int or type(b) is not int:  # noqa: E721 -- plain ints skip the checks below
            try:
                fa, fb = float(a), float(b)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{what} must be rows of {width} numbers: {exc}") from None
            if not (math.isfinite(fa) and math.isfinite(fb) and fa == math.floor(fa) and fb == math.floor(fb)):
                raise ValueError(f"{what}: item indices must be integers")
            a, b = int(fa), int(fb)
        if not (0 <= a < n_items and 0 <= b < n_items):
            raise ValueError(f"{what}: item indices must lie in 0..{n_items - 1}")
        if a == b:
            raise ValueError(f"{what}: a pair needs two different items (i == j)")
        if width == 3:
            try:
                v = float(row[2])
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{what} must be rows of {width} numbers: {exc}") from None
            if not math.isfinite(v):
                raise ValueError(f"{what}: values must be finite numbers")
            out.append((a, b, v))
        else:
            out.append((a, b))
    return out


def _setri_active(upper_row, lower_row, j):
    """SETri's active set for 1-NN round j: {a != j : L*[j, a] < min_b U*[j, b]}, plus argmin U*."""
    U = upper_row.copy()
    U[j] = np.inf
    best = int(U.argmin())
    active = lower_row < U[best]
    active[j] = False
    return best, active


def _racing_decision(upper_row, lower_row, j, k):
    """Top-k racing for one round: (accepted, undecided) boolean masks over items.

    a is accepted once fewer than k others can still be closer (#{b: L[b] < U[a]} < k),
    rejected once at least k others are surely closer (#{b: U[b] <= L[a]} >= k). With
    k = 1 the undecided set is exactly SETri's active set.
    """
    U = upper_row.astype(np.float64, copy=True)
    L = lower_row.astype(np.float64, copy=True)
    U[j] = np.inf
    L[j] = np.inf
    sL = np.sort(L)
    sU = np.sort(U)
    below = np.searchsorted(sL, U, side="left") - (L < U)  # others with L[b] < U[a]
    surely = np.searchsorted(sU, L, side="right") - (U <= L)  # others with U[b] <= L[a]
    accepted = below < k
    rejected = (surely >= k) & ~accepted
    accepted[j] = False
    rejected[j] = True
    undecided = ~(accepted | rejected)
    return accepted, undecided


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


def _outward(hi, lo, dtype):
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


def _drop_stale_active(cache: dict, i: int, j: int) -> None:
    """After an answer for (i, j): a cached active set stays exact while only its own arms change
    (see ``ANNTri._decide_1nn``), so round i's is dropped unless j is among its arms, and j's
    unless i is."""
    if i in cache and j not in cache[i][2]:
        del cache[i]
    if j in cache and i not in cache[j][2]:
        del cache[j]


def _outward_one(hi: float, lo: float):
    """:func:`_outward` for one float32 pair of bounds, as Python floats."""
    h = float(np.float32(hi))
    if h < hi:
        h = float(np.nextafter(np.float32(h), np.float32(np.inf)))
    low = float(np.float32(lo))
    if low > lo:
        low = float(np.nextafter(np.float32(low), np.float32(-np.inf)))
    return h, low


class _NeighborGraphPlanner(ScalarOverlay):
    """Shared state, answers, results and (de)serialisation of the planners below."""

    _uses_rounds = True

    # The pair arrays and round_issued_ are properties: in long duels (few active arms) the
    # exact SETri fast path keeps the entries of its arms as Python scalars (the overlay,
    # engine.anntri_overlay) and writes them back the moment anything reads these attributes.
    mean_ = overlaid("mean_", "D̂, shape (n, n)")
    count_ = overlaid("count_", "answers per pair, shape (n, n)")
    pending_ = overlaid("pending_", "issued, unanswered questions per pair, shape (n, n)")
    upper_ = overlaid("upper_", "U*, shape (n, n)")
    lower_ = overlaid("lower_", "L*, shape (n, n)")
    round_issued_ = overlaid("round_issued_", "questions each round has issued, shape (n,)")
    #: Head-based estimates (``symmetric=False``, never triangle bounds): U*/L* are not stored as
    #: (n, n) arrays but computed from ``mean_``/``count_`` (the current anytime interval), with the
    #: few pairs whose running intersection is tighter than that interval kept in ``_tight``.
    _derived_bounds = False

    def __init__(self, n_items: int, k: int = 1, delta: float = 0.1, sigma: float = 0.5, bound: str = "lil",
                 triangle: bool = True, max_samples_per_round: int | None = None, window: int = 1,
                 random_state: RandomState = None, full_pass_every: int | None = None, lookahead: float = 0.0,
                 stagger: bool = False, symmetric: bool = True) -> None:
        store_params(self, locals())

    # ------------------------------------------------------------------ parameters
    def _check_params(self):
        n = check_n_items(self.n_items)
        check_int("k", self.k)
        if self.k > n - 1:
            raise ValueError(f"k must be at most n_items - 1 = {n - 1}, got {self.k}")
        if not (isinstance(self.delta, numbers.Real) and 0 < self.delta < 1):
            raise ValueError(f"delta must lie in (0, 1), got {self.delta!r}")
        if not (isinstance(self.sigma, numbers.Real) and self.sigma > 0 and math.isfinite(self.sigma)):
            raise ValueError(f"sigma must be a positive number, got {self.sigma!r}")
        check_bound(self.bound)
        if not isinstance(self.triangle, (bool, np.bool_)):
            raise ValueError(f"triangle must be True or False, not {self.triangle!r}")
        check_int("max_samples_per_round", self.max_samples_per_round, allow_none=True)
        check_int("window", self.window)
        check_int("full_pass_every", self.full_pass_every, allow_none=True, minimum=0)
        if not (isinstance(self.lookahead, numbers.Real) and 0 <= self.lookahead < math.inf):
            raise ValueError(f"lookahead must be a number >= 0, got {self.lookahead!r}")
        if not isinstance(self.stagger, (bool, np.bool_)):
            raise ValueError(f"stagger must be True or False, not {self.stagger!r}")
        if not isinstance(self.symmetric, (bool, np.bool_)):
            raise ValueError(f"symmetric must be True or False, not {self.symmetric!r}")
        if not self.symmetric and self.triangle:
            # Head-based (asymmetric) estimates are not distances of a metric: triangle
            # bounds built from them would be invalid and could eliminate the true neighbour.
            raise ValueError("triangle=True needs symmetric=True: triangle bounds are only valid "
                             "for a metric; pass triangle=False with symmetric=False")

    def _full_pass_period(self) -> int:
        if self.full_pass_every is not None:
            return int(self.full_pass_every)
        n = self.n_items
        if n > FULL_PASS_MAX_ITEMS:
            return 0
        # Keep the O(n³) passes a small share of the work: ~20 at n = 100, ~2 at n = 1000.
        return max(1, math.ceil(n * n / 2000))

    def _ensure_state(self):
        if self._hot is not None:
            return
        self._check_params()
        n = self.n_items
        self.rng_ = check_random_state(self.random_state)
        fdtype = np.float64 if n <= FLOAT64_MAX_ITEMS else np.float32
        self._derived_bounds = not self.symmetric
        self._tight = {}
        # A mean of 0/1 answers (triplet-derived samples) is k / T: above FLOAT64_MAX_ITEMS items the
        # head-based planner stores it in float32 and reads k back exactly (see _exact_mean).
        self.mean_ = np.zeros((n, n), dtype=np.float32 if self._derived_bounds and fdtype == np.float32
                              else np.float64)
        self.count_ = np.zeros((n, n), dtype=np.int32)
        self.pending_ = np.zeros((n, n), dtype=np.int32)
        if not self._derived_bounds:
            self.upper_ = np.full((n, n), np.inf, dtype=fdtype)
            self.lower_ = np.zeros((n, n), dtype=fdtype)
            np.fill_diagonal(self.upper_, 0.0)
        self.order_ = self.rng_.permutation(n).astype(np.int64)
        self.status_ = np.zeros(n, dtype=np.int8)
        self.round_issued_ = np.zeros(n, dtype=np.int64)
        self.neighbors_ = np.full((n, self.k), NO_NEIGHBOR, dtype=np.int64)
        self.refresh_mark_ = np.zeros(n, dtype=np.int64)
        self.next_round_ = 0
        self.open_rounds_ = []
        self.n_samples_ = 0
        self.n_issued_ = 0
        self.rounds_since_full_pass_ = 0
        self.dirty_ = {}  # pairs i * n + j (i < j) sampled since the last triangle step
        self._active_cache = {}
        self._start_overlay()
        self._start_tracking()

    # ------------------------------------------------------------------ changed rows
    def _start_tracking(self):
        """Rows of the (n, n) arrays written since the last ``to_state(copy=False)``: every writer in
        this module adds its rows to ``_touched`` (or sets ``_touched_all``), ``to_state`` folds them
        into ``_row_epoch`` (the state in which each row last changed), so a caller diffing two states
        of this planner reads only the rows changed in between (:class:`RowChanges`)."""
        self._touched = set()
        self._touched_all = True  # nothing known about the states handed out before
        self._row_epoch = np.zeros(self.n_items, dtype=np.int64)
        self._epoch = 0
        self._token = next(_TOKENS)
        self._best_cache = None  # (tick, rows' best) of current_neighbors
        self._sums_cache = None  # (tick, count and pending row sums) of progress

    @property
    def initialized(self) -> bool:
        """The state (pair arrays, rounds) exists: created by the first call that needs it."""
        return self._hot is not None

    def mark_rows(self, rows: ArrayLike) -> None:
        """Tell the planner that rows of its (n, n) arrays were written from outside (e.g. a caller
        adding to ``pending_``), so the next ``to_state(copy=False)`` reports them as changed and
        :meth:`current_neighbors` recomputes them. Writers from outside must call it: an unreported
        write is missing from a row-limited diff and from the cached neighbours."""
        if self._hot is not None:
            self._touched.update(int(r) for r in np.atleast_1d(rows).tolist())

    def _fold(self) -> int:
        """Stamp the rows written since the last fold with a new tick in ``_row_epoch``; the tick."""
        d = self.__dict__
        self._epoch += 1
        if d.get("_touched_all"):
            self._row_epoch[:] = self._epoch
        elif self._touched:
            self._row_epoch[np.fromiter(self._touched, dtype=np.int64, count=len(self._touched))] = self._epoch
        self._touched.clear()
        d["_touched_all"] = False
        return self._epoch

    def _changes(self) -> RowChanges:
        """The label of the state handed out now (rows written later get a later tick)."""
        return RowChanges(self._token, self._fold(), self._row_epoch)

    # ------------------------------------------------------------------ derived bounds
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
            U[rows], L[rows] = _outward(hi, lo, fdtype)
        return U, L

    def _set_bounds(self, upper_=None, lower_=None):
        """Adopt given U*/L* matrices (an older state's, or an assignment): keep, as ``_tight``
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

    def _interval_one(self, m: float, T: int):
        """:meth:`_interval` of one entry with T > 0, as Python floats (same arithmetic)."""
        if self.bound in UNIT_INTERVAL_BOUNDS:
            lo, hi = self._interval(np.array([m]), np.array([T]))
            return float(lo[0]), float(hi[0])
        radius = self._radius_lookup(T)
        r = radius[T]
        lo = m - r
        return (lo if lo > 0.0 else 0.0), m + r

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

    # ------------------------------------------------------------------ answers
    def _observe_general(self, answers) -> None:
        """:meth:`observe` off the scalar overlay: validates the batch, applies it or raises."""
        self._ensure_state()
        scalar = self.bound not in UNIT_INTERVAL_BOUNDS
        rows = _small_rows(answers, self.n_items, 3, "answers") if scalar else None
        if rows is None:
            self._observe_arrays(answers)
            return
        if not rows:
            return
        n = self.n_items
        if self._derived_bounds:
            self._observe_derived(rows)
            return
        mean, count, pending = self.mean_, self.count_, self.pending_
        upper, lower = self.upper_, self.lower_
        f32 = upper.dtype == np.float32
        radius = self._radius_lookup(0)
        cache = self._active_cache
        dirty = self.dirty_
        triangle = self.triangle
        sym = self.symmetric
        touched = self._touched
        for p, q, v in rows:
            i, j = (p, q) if (p < q or not sym) else (q, p)
            T = int(count[i, j])
            T1 = T + 1
            if T1 >= len(radius):
                radius = self._radius_lookup(T1)
            m1, hi, lo, failed = interval_step(float(mean[i, j]), T, v, radius[T1],
                                               float(upper[i, j]), float(lower[i, j]))
            if failed:
                cache.pop(i, None)
                cache.pop(j, None)
            pend = max(int(pending[i, j]) - 1, 0)
            if f32:
                hi, lo = _outward_one(hi, lo)
            mean[i, j] = m1
            count[i, j] = T1
            upper[i, j] = hi
            lower[i, j] = lo
            pending[i, j] = pend
            touched.add(i)
            if sym:
                touched.add(j)
                mean[j, i] = m1
                count[j, i] = T1
                upper[j, i] = hi
                lower[j, i] = lo
                pending[j, i] = pend
            _drop_stale_active(cache, i, j)
            if triangle:
                dirty[i * n + j] = None
        self.n_samples_ += len(rows)

    def _observe_derived(self, rows):
        """The scalar :meth:`observe` of a head-based planner (bounds derived from mean and count)."""
        d = self.__dict__
        if d["_a_mean_"].dtype == np.float32 and any(v != 0.0 and v != 1.0 for _, _, v in rows):
            self._upgrade_mean()
        mean, count, pending = d["_a_mean_"], d["_a_count_"], d["_a_pending_"]
        exact = mean.dtype == np.float32
        cache = self._active_cache
        touched = self._touched
        for i, j, v in rows:
            T = int(count[i, j])
            T1 = T + 1
            m = float(mean[i, j])
            if exact:  # k / T read back exactly (see _exact_mean)
                k = round(m * T)
                m_old = k / T if T else 0.0
                m1 = (k + v) / T1
            else:
                m_old = m
                m1 = (m * T + v) / T1
            self._tighten(i, j, m_old, T, m1, T1)
            mean[i, j] = m1
            count[i, j] = T1
            pending[i, j] = max(int(pending[i, j]) - 1, 0)
            touched.add(i)
            _drop_stale_active(cache, i, j)
        self.n_samples_ += len(rows)

    def _observe_arrays(self, answers) -> None:
        """The vectorised :meth:`observe` for long batches (and the bounded bounds)."""
        a, b, arr = _check_pairs(answers, self.n_items, 3, "answers")
        if len(arr) == 0:
            return
        values = arr[:, 2]
        if not np.all(np.isfinite(values)):
            raise ValueError("answers: values must be finite numbers")
        if self.bound in UNIT_INTERVAL_BOUNDS and (values.min() < 0 or values.max() > 1):
            raise ValueError(f"answers: bound={self.bound!r} needs values in [0, 1]")
        n = self.n_items
        sym = self.symmetric
        # Symmetric: one entry per unordered pair, mirrored; head-based: row i only.
        i, j = (np.minimum(a, b), np.maximum(a, b)) if sym else (a, b)
        keys = i * n + j
        if len(keys) > 1 and len(set(keys.tolist())) < len(keys):
            keys, inverse, adds = np.unique(keys, return_inverse=True, return_counts=True)
            sums = np.bincount(inverse, weights=values)
            i, j = keys // n, keys % n
        else:
            sums = values
            adds = np.ones(len(keys), dtype=np.int64)
        if self._derived_bounds:
            self._observe_arrays_derived(i, j, sums, adds, values)
            return
        flat = np.concatenate([i * n + j, j * n + i])  # both mirrored entries at once
        m = len(i)
        mean_f, count_f = self.mean_.reshape(-1), self.count_.reshape(-1)
        upper_f, lower_f = self.upper_.reshape(-1), self.lower_.reshape(-1)
        pending_f = self.pending_.reshape(-1)
        T_old = count_f[flat[:m]].astype(np.int64)
        T_new = T_old + adds
        mean = (mean_f[flat[:m]] * T_old + sums) / T_new
        conf_lo, conf_hi = self._confidence(mean, T_new)
        conf_lo = np.maximum(conf_lo, 0.0)
        hi = np.minimum(upper_f[flat[:m]], conf_hi)
        lo = np.maximum(lower_f[flat[:m]], conf_lo)
        crossed = lo > hi  # the confidence event failed somewhere: fall back to today's interval
        if crossed.any():
            hi = np.where(crossed, conf_hi, hi)
            lo = np.where(crossed, np.minimum(conf_lo, conf_hi), lo)
        pend = np.maximum(pending_f[flat[:m]] - adds, 0)
        hi, lo = _outward(hi, lo, upper_f.dtype)
        self._touched.update(i.tolist())
        if sym:
            self._touched.update(j.tolist())
        for half in (flat[:m], flat[m:]) if sym else (flat[:m],):
            mean_f[half] = mean
            count_f[half] = T_new
            upper_f[half] = hi
            lower_f[half] = lo
            pending_f[half] = pend
        self.n_samples_ += int(adds.sum())
        if self._active_cache:
            for r in set(i.tolist()) | set(j.tolist()):
                self._active_cache.pop(r, None)
        if self.triangle:
            self.dirty_.update(dict.fromkeys((i * n + j).tolist()))

    def _observe_arrays_derived(self, i, j, sums, adds, values) -> None:
        """The vectorised :meth:`observe` of a head-based planner (distinct pairs (head i, arm j))."""
        d = self.__dict__
        if d["_a_mean_"].dtype == np.float32 and not np.all((values == 0.0) | (values == 1.0)):
            self._upgrade_mean()
        n = self.n_items
        flat = i * n + j
        mean_f, count_f = d["_a_mean_"].reshape(-1), d["_a_count_"].reshape(-1)
        pending_f = d["_a_pending_"].reshape(-1)
        T_old = count_f[flat].astype(np.int64)
        T_new = T_old + adds
        if mean_f.dtype == np.float32:
            k = np.round(mean_f[flat].astype(np.float64) * T_old)
            m_old = np.where(T_old > 0, k / np.maximum(T_old, 1), 0.0)
            mean = (k + sums) / T_new
        else:
            m_old = mean_f[flat]
            mean = (m_old * T_old + sums) / T_new
        self._tighten_many(i, j, m_old, T_old, mean, T_new)
        mean_f[flat] = mean
        count_f[flat] = T_new
        pending_f[flat] = np.maximum(pending_f[flat] - adds, 0)
        self._touched.update(i.tolist())
        self.n_samples_ += int(adds.sum())
        if self._active_cache:
            for r in set(i.tolist()) | set(j.tolist()):
                self._active_cache.pop(r, None)

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

    def _flush_triangle(self):
        """Propagate the queued sampled pairs into the triangle bounds (one vectorised step)."""
        if not self.dirty_:
            return
        n = self.n_items
        keys = np.fromiter(self.dirty_, dtype=np.int64, count=len(self.dirty_))
        tri.update_pairs(self.upper_, self.lower_, keys // n, keys % n)
        self._touched_all = True  # mirrored entries: any row may change
        self.dirty_.clear()
        self._active_cache.clear()

    def _refresh(self, j):
        self._flush_triangle()
        tri.refresh_row(self.upper_, self.lower_, j)
        self._touched_all = True
        self.refresh_mark_[j] = self.round_issued_[j]
        self._active_cache.clear()

    def forget(self, pairs: Iterable[Sequence[int]] | np.ndarray) -> None:
        """Release pending entries of questions that expired unanswered, one per ``(i, j)`` row.

        The platform calls this when an issued question times out (or is taken back unasked, or
        skipped), so the pair can be asked again; an answer that still arrives later is used as
        usual. A released question no longer counts towards its round's sample cap: ``(i, j)``
        was issued by round ``i``, whose ``round_issued_`` goes down by one.
        """
        self._ensure_state()
        a, b, arr = _check_pairs(pairs, self.n_items, 2, "pairs")
        if len(arr) == 0:
            return
        pending, issued = self.pending_, self.round_issued_
        for p, q in zip(a.tolist(), b.tolist(), strict=False):
            v = int(pending[p, q])
            if v <= 0:
                continue
            pending[p, q] = v - 1
            self._touched.add(p)
            if self.symmetric:
                pending[q, p] = v - 1
                self._touched.add(q)
            if issued[p] > 0:
                issued[p] -= 1

    def _settle(self):
        """Close the open rounds the answers so far have decided (read methods call this)."""
        for j in list(self.open_rounds_):
            self._decide_round(j)

    def settle(self) -> None:
        """Close the open rounds the answers so far have decided: what :meth:`progress` does
        first, without its O(n²) counts (the update pass calls this before retiring questions).
        Before the planner's first call there are no rounds to close."""
        if self._hot is None:
            return
        self._settle()

    # ------------------------------------------------------------------ rounds
    def _decide_round(self, j):
        """Close round j if its neighbours are decided (returns None); else its undecided
        arms, sorted (a list of ints, or an int array when there are many)."""
        if self.k == 1:
            return self._decide_1nn(j)
        accepted, undecided = _racing_decision(*self._row_bounds(j), j, self.k)
        n_acc = int(accepted.sum())
        n_und = int(undecided.sum())
        if n_acc < self.k and n_acc + n_und > self.k:
            return np.flatnonzero(undecided)
        cand = np.flatnonzero(accepted) if n_acc >= self.k else np.flatnonzero(accepted | undecided)
        self._certify(j, cand)
        return None

    def _decide_1nn(self, j):
        """SETri's test for round j (k = 1), exact, with a cached active set for open rounds.

        The cache holds the active arms and (min U*, argmin) over the other arms of row j.
        Eliminated arms never come back (U* only falls, L* only rises), and the other
        arms' bounds only change through events that drop the cache (an answer for a pair
        of row j outside the active set, a triangle step, a failed confidence event), so
        the cached decision equals the full O(n) one; a short active set is checked with
        scalar reads.
        """
        cached = self._active_cache.get(j)
        if self._derived_bounds and cached is not None:
            act = cached[0]
            U, L = np.full(self.n_items, np.inf), np.zeros(self.n_items)
            U[act], L[act] = self._bounds_at(j, act)  # the cached branch reads the active arms only
        else:
            U, L = self._row_bounds(j)
        if cached is None:
            Uc = U.astype(np.float64)
            Uc[j] = np.inf
            best = int(Uc.argmin())
            active = L < Uc[best]
            active[j] = False
            act = np.flatnonzero(active)
            if len(act) > 1:
                if self.status_[j] == ROUND_OPEN:
                    Uc[act] = np.inf
                    r = int(Uc.argmin())
                    rest = (float(Uc[r]), r) if np.isfinite(Uc[r]) else (np.inf, self.n_items)
                    self._store_active(j, act, rest)
                return act.tolist() if len(act) <= SMALL_ACTIVE else act
            cand = act.tolist()
        else:
            act, rest, _ = cached
            rmin, ridx = rest
            if isinstance(act, list):
                bu, bi = rmin, ridx
                us = [float(U[a]) for a in act]
                for a, ua in zip(act, us, strict=True):
                    if ua < bu or (ua == bu and a < bi):
                        bu, bi = ua, a
                keep = []
                for a, ua in zip(act, us, strict=True):
                    if L[a] < bu:
                        keep.append(a)
                    elif ua < rmin or (ua == rmin and a < ridx):
                        rmin, ridx = ua, a
            else:
                Ua = U[act].astype(np.float64)
                t = int(Ua.argmin())
                if Ua[t] < rmin or (Ua[t] == rmin and act[t] < ridx):
                    bu, bi = float(Ua[t]), int(act[t])
                else:
                    bu, bi = rmin, ridx
                keepmask = L[act] < bu
                gone = np.flatnonzero(~keepmask)
                if len(gone):
                    g = gone[int(Ua[gone].argmin())]
                    if Ua[g] < rmin or (Ua[g] == rmin and act[g] < ridx):
                        rmin, ridx = float(Ua[g]), int(act[g])
                keep = act[keepmask]
            if len(keep) > 1:
                self._store_active(j, keep, (rmin, ridx))
                return keep if isinstance(keep, list) or len(keep) > SMALL_ACTIVE else keep.tolist()
            cand = list(keep) if isinstance(keep, list) else keep.tolist()
            best = bi
        if best not in cand:
            cand.append(best)
        self._certify(j, np.array(sorted(cand), dtype=np.int64))
        return None

    def _store_active(self, j, act, rest):
        if not isinstance(act, list) and len(act) <= SMALL_ACTIVE:
            act = act.tolist()
        members = set(act) if isinstance(act, list) else frozenset(act.tolist())
        self._active_cache[j] = (act, rest, members)

    def _certify(self, j, cand):
        self.neighbors_[j] = self._rank_row(j, cand)
        self.status_[j] = ROUND_CERTIFIED
        self._active_cache.pop(j, None)
        if j in self.open_rounds_:
            self.open_rounds_.remove(j)

    def _rank_row(self, j, cand):
        """The k best of ``cand`` for row j by estimate, filled from the rest if too few."""
        key = self._score_row(j)
        if len(cand) < self.k:
            rest = np.setdiff1d(np.flatnonzero(np.arange(self.n_items) != j), cand)
            rest = rest[np.argsort(key[rest], kind="stable")][: self.k - len(cand)]
            cand = np.concatenate([cand, rest])
        return cand[np.argsort(key[cand], kind="stable")][: self.k]

    def _score_row(self, j):
        sampled = self.count_[j] > 0
        U, L = self._row_bounds(j)
        mid = np.where(np.isfinite(U), 0.5 * (U.astype(np.float64) + L), np.inf)
        key = np.where(sampled, self._exact_mean(self.mean_[j], self.count_[j]), mid)
        return np.where(np.isfinite(key), key, _BIG + L)

    def _open_round(self, j):
        self.status_[j] = ROUND_OPEN
        self.open_rounds_.append(j)
        if self.triangle:
            period = self._full_pass_period()
            self.rounds_since_full_pass_ += 1
            if period and self.rounds_since_full_pass_ >= period and self.n_samples_ > 0:
                self._flush_triangle()
                tri.full_pass(self.upper_, self.lower_)
                self._touched_all = True
                self.rounds_since_full_pass_ = 0
            self._refresh(j)

    def _room(self) -> bool:
        """May another round open now? Below the window and, with ``stagger``, below
        1 + the number of rounds that are closed or past their first layer."""
        if self.next_round_ >= self.n_items:
            return False
        n_open = len(self.open_rounds_)
        if n_open >= self.window:
            return False
        if not self.stagger:
            return True
        ready = self.next_round_ - n_open  # closed rounds
        if n_open + 1 > ready:
            ready += sum(1 for j in self.open_rounds_ if self._past_first_layer(j))
        return n_open < 1 + ready

    def _past_first_layer(self, j: int) -> bool:
        """Has open round j an answer for every arm it has not eliminated? (Monotone: arms
        only leave the undecided set and counts only grow, so it is never stored.)"""
        layered = self.__dict__.setdefault("_layered", set())
        if j in layered:
            return True
        cached = self._active_cache.get(j)
        if cached is not None:
            arms = np.asarray(cached[0], dtype=np.int64)
        elif self.k == 1:
            _, active = _setri_active(*self._row_bounds(j), j)
            arms = np.flatnonzero(active)
        else:
            _, undecided = _racing_decision(*self._row_bounds(j), j, self.k)
            arms = np.flatnonzero(undecided)
        if len(arms) and int(self.count_[j, arms].min()) == 0:
            return False
        layered.add(j)
        return True

    def _fill_window(self):
        while self._room():
            j = int(self.order_[self.next_round_])
            self.next_round_ += 1
            self._open_round(j)
            self._decide_round(j)

    def _eligible(self, j):
        """SETri's arms for round j: undecided, fewest samples, not already pending (a list)."""
        # Refresh row j after n questions of its own, and geometrically less often as the
        # round grows (a long duel is decided by its own samples): O(n) amortised per
        # question, whatever the window.
        if self.triangle:
            issued = int(self.round_issued_[j])
            if issued - int(self.refresh_mark_[j]) >= max(self.n_items, issued >> 3):
                self._refresh(j)
        undecided = self._decide_round(j)
        if undecided is None:
            return None
        if isinstance(undecided, list):
            crow = self.count_[j]
            prow = self.pending_[j]
            T = [int(crow[a]) for a in undecided]
            tmin = min(T)
            return [a for a, t in zip(undecided, T, strict=True) if t == tmin and not prow[a]]
        T = self.count_[j, undecided]
        return undecided[(T == T.min()) & (self.pending_[j, undecided] == 0)].tolist()

    def _next_general(self, budget) -> list[tuple[int, int]]:
        self._ensure_state()
        budget = check_int("budget", budget, minimum=0)
        # ``window`` may be changed on a live planner (the platform adapts it to its raters).
        self.window = check_int("window", self.window)
        out: list[tuple[int, int]] = []
        cap = self.max_samples_per_round
        lookahead = float(self.lookahead)
        pending, issued, status = self.pending_, self.round_issued_, self.status_
        self._fill_window()
        if not lookahead and len(self.open_rounds_) > max(budget, SPREAD_MIN_ROUNDS):
            out = self._next_spread(budget)
        while len(out) < budget:
            self._fill_window()
            if not self.open_rounds_:
                break
            lists = []
            for j in list(self.open_rounds_):
                arms = self._eligible(j)
                if arms:
                    reps = 1 + int(lookahead * int(self.count_[j, arms[0]])) if lookahead else 1
                    lists.append((j, arms, reps))
            if self._room():
                continue  # a round closed: refill the window first
            issued_before = len(out)
            for i, a in round_robin([arms for _, arms, _ in lists]):
                if len(out) >= budget:
                    break
                j, _, reps = lists[i]
                if status[j] != ROUND_OPEN or pending[j, a]:
                    continue  # capped in this call, or already issued by the round of a in this call
                if reps > 1:
                    reps = min(reps, budget - len(out))
                    if cap is not None:
                        reps = min(reps, cap - int(issued[j]))
                out.extend([(j, a)] * reps)
                self._count_issued(j, a, reps, pending, issued)
                if cap is not None and issued[j] >= cap:
                    self._close_capped(j)
            if len(out) == issued_before or not self._room():
                break
        self.n_issued_ += len(out)
        return out

    def _next_spread(self, budget: int) -> list[tuple[int, int]]:
        """More open rounds than questions wanted (e.g. every round open in a busy study): one
        fewest-sampled arm from each of the next rounds in turn, reading only the rounds it
        visits; the visited rounds move to the back of ``open_rounds_``, so successive calls
        go round all the open rounds instead of serving the first ``budget`` ones forever.
        (Only reached with more open rounds than ``budget``; otherwise every round is read.)"""
        out: list[tuple[int, int]] = []
        cap = self.max_samples_per_round
        pending, issued, status = self.pending_, self.round_issued_, self.status_
        rounds = list(self.open_rounds_)
        visited = 0
        for j in rounds:
            if len(out) >= budget:
                break
            visited += 1
            if status[j] != ROUND_OPEN:
                continue
            arms = self._eligible(j)
            if not arms:
                continue
            a = arms[0]
            out.append((j, a))
            self._count_issued(j, a, 1, pending, issued)
            if cap is not None and issued[j] >= cap:
                self._close_capped(j)
        seen = set(rounds[:visited])
        still = self.open_rounds_
        self.open_rounds_ = [j for j in still if j not in seen] + [j for j in still if j in seen]
        self._fill_window()
        return out

    def repeat_questions(self, budget: int) -> list[tuple[int, int]]:
        """Up to ``budget`` repeats for when every useful question is already pending: SETri
        with questions in flight counted as samples.

        For each open round in turn (round-robin), the undecided arm with the fewest answers
        + pending questions (ties: the lowest index); the pair is issued (pending, counted
        towards the round's cap) even if it is already pending, so raters get a useful repeat
        rather than a uniformly random fallback. Rounds at ``max_samples_per_round`` are
        skipped; returns ``[]`` when no round is open.
        """
        self._ensure_state()
        budget = check_int("budget", budget, minimum=0)
        cap = self.max_samples_per_round
        rounds = []
        for j in np.flatnonzero(self.status_ == ROUND_OPEN).tolist():
            undecided = self._decide_round(j)  # None once the round is closed
            if undecided is not None:
                arms = np.asarray(undecided, dtype=np.int64)
                arms = arms[arms != j]
                if len(arms):
                    rounds.append((j, arms))
        count, pending, issued = self.count_, self.pending_, self.round_issued_
        out: list[tuple[int, int]] = []
        while len(out) < budget and rounds:
            for entry in list(rounds):
                j, arms = entry
                if len(out) >= budget:
                    break
                if cap is not None and issued[j] >= cap:
                    rounds.remove(entry)
                    continue
                a = int(arms[np.argmin(count[j, arms] + pending[j, arms])])
                out.append((j, a))
                self._count_issued(j, a, 1, pending, issued)
        self.n_issued_ += len(out)
        return out

    def _count_issued(self, j: int, a: int, reps: int, pending: np.ndarray, issued: np.ndarray) -> None:
        """Count ``reps`` questions (j, a) as issued: pending (both entries when symmetric) and
        towards round j's cap. ``pending``/``issued`` are the planner's ``pending_`` and
        ``round_issued_``, read once by the caller."""
        pending[j, a] += reps
        self._touched.add(j)
        if self.symmetric:
            pending[a, j] += reps
            self._touched.add(a)
        issued[j] += reps

    def _close_capped(self, j):
        self.status_[j] = ROUND_CAPPED
        self._active_cache.pop(j, None)
        if j in self.open_rounds_:
            self.open_rounds_.remove(j)

    # ------------------------------------------------------------------ results
    def current_neighbors(self) -> np.ndarray:
        """Current best k neighbours of every item, shape (n_items, k): the certified answer
        where a round is certified, else the best estimates among the not-eliminated.

        A row's best depends on that row alone: rows not written since the previous call are
        taken from then (the dashboard asks every second; O(changed rows x n), not O(n²))."""
        self._ensure_state()
        self._settle()
        n = self.n_items
        if self._hot_on:
            self._drop_hot()
        tick = self._fold()
        cached = self.__dict__.get("_best_cache")
        if cached is not None and cached[1].shape == (n, self.k):
            rows = np.flatnonzero(self._row_epoch > cached[0])
            best = cached[1]
        else:
            rows = np.arange(n)
            best = np.empty((n, self.k), dtype=np.int64)
        step = max(1, ROW_CHUNK_ELEMENTS // n)  # a few (step, n) temporaries, not (n, n)
        for start in range(0, len(rows), step):
            chunk = rows[start:start + step]
            best[chunk] = self._best_rows(chunk)
        self._best_cache = (tick, best)
        best = best.copy()
        done = self.status_ == ROUND_CERTIFIED
        best[done] = self.neighbors_[done]
        return best.astype(np.int64)

    def _best_rows(self, rows: np.ndarray) -> np.ndarray:
        """Current best k neighbours of the given rows (certified or not), shape (len(rows), k)."""
        k = self.k
        r = np.arange(len(rows))
        U, L = self._rows_bounds(rows)
        U[r, rows] = np.inf
        L[r, rows] = np.inf
        kth_upper = np.partition(U, k - 1, axis=1)[:, k - 1] if k > 1 else U.min(axis=1)
        sampled = self.count_[rows] > 0
        with np.errstate(invalid="ignore"):
            mid = np.where(np.isfinite(U), 0.5 * (U + L), np.inf)
        key = np.where(sampled, self._exact_mean(self.mean_[rows], self.count_[rows]), mid)
        key = np.where(np.isfinite(key), key, _BIG + np.minimum(L, _BIG / 4))
        key[L >= kth_upper[:, None]] += 4 * _BIG
        key[r, rows] = np.inf
        if k == 1:
            return key.argmin(axis=1)[:, None]
        part = np.argpartition(key, k - 1, axis=1)[:, :k]
        order = np.argsort(np.take_along_axis(key, part, axis=1), axis=1, kind="stable")
        return np.take_along_axis(part, order, axis=1)

    def _row_sums(self):
        """Row sums of ``count_`` and ``pending_`` (int64), recomputed for the rows written since the
        previous call only (:meth:`progress` runs with every dashboard summary)."""
        if self._hot_on:
            self._drop_hot()
        tick = self._fold()
        cached = self.__dict__.get("_sums_cache")
        d = self.__dict__
        if cached is not None and cached[1].shape == (self.n_items,):
            rows = np.flatnonzero(self._row_epoch > cached[0])
            counts, pendings = cached[1], cached[2]
            counts[rows] = d["_a_count_"][rows].sum(axis=1)
            pendings[rows] = d["_a_pending_"][rows].sum(axis=1)
        else:
            counts = d["_a_count_"].sum(axis=1, dtype=np.int64)
            pendings = d["_a_pending_"].sum(axis=1, dtype=np.int64)
        self._sums_cache = (tick, counts, pendings)
        return counts, pendings

    def round_best(self, j: int) -> tuple[np.ndarray, int]:
        """Round j's current best k neighbours (as in :meth:`current_neighbors`, row j only,
        shape (k,)) and the number of questions round j itself has issued so far.

        Lets a caller score each round against the samples spent inside it (the paper's
        Fig. 2b x-axis); earlier rounds' samples of pairs (j, a) count for the estimates but
        not for the round's own question count.
        """
        self._ensure_state()
        j = int(j)
        if not 0 <= j < self.n_items:
            raise ValueError(f"round index must lie in 0..{self.n_items - 1}, got {j}")
        self._settle()
        if self.status_[j] == ROUND_CERTIFIED:
            return self.neighbors_[j].astype(np.int64), int(self.round_issued_[j])
        # Row j of current_neighbors, in O(n) instead of O(n²).
        best = self._best_rows(np.array([j]))[0]
        return best.astype(np.int64), int(self.round_issued_[j])

    def _certified(self):
        return self.status_ == ROUND_CERTIFIED

    def result(self) -> NeighborGraph:
        """The k-NN graph now: certified rows are final, the others are best estimates."""
        nb = self.current_neighbors()
        rows = np.arange(self.n_items)[:, None]
        if self._derived_bounds:
            d = self.__dict__
            T = d["_a_count_"][rows, nb]
            lower, upper = self._interval(self._exact_mean(d["_a_mean_"][rows, nb], T), T)
            for j, tight in self._tight.items():
                for pos, a in enumerate(nb[j].tolist()):
                    if a in tight:
                        upper[j, pos], lower[j, pos] = tight[a]
        else:
            lower = self.lower_[rows, nb].astype(np.float64)
            upper = self.upper_[rows, nb].astype(np.float64)
        return NeighborGraph(
            neighbors=nb,
            certified=self._certified().copy(),
            estimates=self._exact_mean(self.mean_[rows, nb], self.count_[rows, nb]),
            lower=lower,
            upper=upper,
            samples=self.count_[rows, nb].astype(np.int64),
        )

    def progress(self) -> dict:
        """Numbers for the dashboard (all plain Python scalars)."""
        self._ensure_state()
        self._settle()
        st = self.status_
        n = self.n_items
        per_item, pending_rows = self._row_sums()
        pending = int(pending_rows.sum()) // (2 if self.symmetric else 1)
        return {
            "n_items": n,
            "k": int(self.k),
            "rounds_certified": int(np.sum(st == ROUND_CERTIFIED)),
            "rounds_uncertified": int(np.sum(st == ROUND_CAPPED)),
            "rounds_open": int(np.sum(st == ROUND_OPEN)),
            "rounds_waiting": int(np.sum(st == ROUND_WAITING)),
            "pending_questions": pending,
            "samples": int(self.n_samples_),
            "answers": int(self.n_samples_),
            "items_certified": int(np.sum(st == ROUND_CERTIFIED)),
            "questions_issued": int(self.n_issued_),
            "samples_per_item": float(self.n_samples_) / n,
            "samples_per_item_max": int(per_item.max()),
            "done": self.done,
        }

    def neighbor_graph(self, k: int = 1) -> NeighborGraph:
        """:meth:`result` with ``k`` columns: fewer are cut, more are filled with :data:`NO_NEIGHBOR`
        (the planner has no estimate beyond its own ``k``); an item no answer has touched has no
        neighbour yet (not the argmin of zeros)."""
        k = int(k)
        if k < 1:
            raise ValueError(f"k must be a positive integer, got {k}")
        g = self.result()
        blind = np.asarray(self.count_).sum(axis=1) == 0
        if blind.any():
            b = blind[:, None]
            g = NeighborGraph(np.where(b, NO_NEIGHBOR, g.neighbors).astype(np.int64), g.certified,
                              np.where(b, np.nan, g.estimates), np.where(b, np.nan, g.lower),
                              np.where(b, np.nan, g.upper), np.where(b, 0, g.samples).astype(np.int64))
        have = g.neighbors.shape[1]
        if k <= have:
            return NeighborGraph(g.neighbors[:, :k], g.certified, g.estimates[:, :k], g.lower[:, :k],
                                 g.upper[:, :k], g.samples[:, :k])
        extra = k - have

        def pad(a, value, dtype):
            return np.concatenate([np.asarray(a, dtype), np.full((len(a), extra), value, dtype)], axis=1)

        return NeighborGraph(pad(g.neighbors, NO_NEIGHBOR, np.int64), g.certified, pad(g.estimates, np.nan, float),
                             pad(g.lower, np.nan, float), pad(g.upper, np.nan, float), pad(g.samples, 0, np.int64))

    # ------------------------------------------------------------------ rounds (engine.graph.RoundPlanner)
    def stale(self, heads: ArrayLike) -> np.ndarray:
        """Per head: its questions are no longer worth asking (round certified, or not open: a rebuilt
        planner). A round closed by its sample cap keeps its questions (the cap counts issued
        questions, so their answers still sharpen its empirical best). Reads the rounds as they
        are: call :meth:`settle` first to close the ones the latest answers decided."""
        heads = np.asarray(heads, dtype=np.int64).reshape(-1)
        if self._hot is None:  # no rounds before the first call
            return np.zeros(len(heads), bool)
        status = self.status_[heads]
        return (status != ROUND_OPEN) & (status != ROUND_CAPPED)

    def closed(self, heads: ArrayLike) -> np.ndarray:
        """Per head: its round is not open (waiting, certified or capped)."""
        heads = np.asarray(heads, dtype=np.int64).reshape(-1)
        if self._hot is None:
            return np.zeros(len(heads), bool)
        return self.status_[heads] != ROUND_OPEN

    @property
    def done(self) -> bool:
        """True once every round is closed (certified or capped)."""
        self._ensure_state()
        return bool(np.all((self.status_ == ROUND_CERTIFIED) | (self.status_ == ROUND_CAPPED)))

    # ------------------------------------------------------------------ state
    def _params(self) -> dict:
        rs = self.random_state
        return {
            "n_items": int(self.n_items),
            "k": int(self.k),
            "delta": float(self.delta),
            "sigma": float(self.sigma),
            "bound": str(self.bound),
            "triangle": bool(self.triangle),
            "max_samples_per_round": None if self.max_samples_per_round is None else int(self.max_samples_per_round),
            "window": int(self.window),
            "random_state": int(rs) if isinstance(rs, (numbers.Integral, np.integer)) else None,
            "full_pass_every": None if self.full_pass_every is None else int(self.full_pass_every),
            "lookahead": float(self.lookahead),
            "stagger": bool(self.stagger),
            "symmetric": bool(self.symmetric),
        }

    _ARRAYS = ("mean_", "count_", "pending_", "upper_", "lower_", "order_", "status_",
               "round_issued_", "neighbors_", "refresh_mark_")
    _SCALARS = ("next_round_", "n_samples_", "n_issued_", "rounds_since_full_pass_")

    _SQUARE = ("mean_", "count_", "pending_", "upper_", "lower_")

    def _state_names(self):
        if self._derived_bounds:
            return tuple(a for a in self._ARRAYS if a not in ("upper_", "lower_"))
        return self._ARRAYS

    def to_state(self, copy: bool = True) -> dict:
        """Plain numpy arrays + JSON-safe values (never pickle); see :func:`planner_from_state`.

        Layout: ``{"version", "class", "params": {...constructor arguments},
        "initialized": bool}`` and, once initialized, ``"rng"`` (JSON generator state),
        ``"open_rounds"`` (list of ints), the int scalars ``next_round``, ``n_samples``,
        ``n_issued``, ``rounds_since_full_pass`` and the arrays ``mean``, ``count``,
        ``pending``, ``upper``, ``lower`` (n, n), ``order``, ``status``, ``round_issued``,
        ``refresh_mark`` (n,: questions round j had issued at its row's last refresh),
        ``neighbors`` (n, k) and ``dirty`` (m,): the pairs
        ``i * n + j`` (i < j) sampled since the last triangle step, oldest first (optional
        when loading). ``params["window"]`` is the live window, changed or not since
        construction. A head-based planner (``symmetric=False``) has no ``upper``/``lower``:
        its bounds follow from ``mean`` and ``count`` except at the pairs ``tight_keys``
        (``i * n + j``, sorted) whose running intersection is tighter, given by ``tight_upper``
        and ``tight_lower``; its ``mean`` is float32 above ``FLOAT64_MAX_ITEMS`` items while every
        answer is 0 or 1 (read back exactly as k / count).

        ``copy=False`` hands out the planner's own arrays (no copy: they change with the planner,
        so use them before the next call), the (n, n) ones as :class:`RowTracked` views whose
        ``row_changes`` tell which rows changed since an earlier such state of this planner.
        """
        state = {
            "version": STATE_VERSION,
            "class": type(self).__name__,
            "params": self._params(),
            "initialized": self._hot is not None,
        }
        if state["initialized"]:
            state["rng"] = generator_state(self.rng_)
            state["open_rounds"] = [int(j) for j in self.open_rounds_]
            state["dirty"] = np.fromiter(self.dirty_, dtype=np.int64, count=len(self.dirty_))
            for name in self._SCALARS:
                state[name.rstrip("_")] = int(getattr(self, name))
            arrays = {name: getattr(self, name) for name in self._state_names()}  # writes the overlay back
            changes = None if copy else self._changes()
            for name, arr in arrays.items():
                if copy:
                    arr = np.array(arr, copy=True)
                elif name in self._SQUARE:
                    arr = arr.view(RowTracked)
                    arr.row_changes = changes
                state[name.rstrip("_")] = arr
            if self._derived_bounds:
                n = self.n_items
                items = sorted((i * n + j, hi, lo) for i, row in self._tight.items() for j, (hi, lo) in row.items())
                state["tight_keys"] = np.array([t[0] for t in items], dtype=np.int64)
                state["tight_upper"] = np.array([t[1] for t in items], dtype=np.float64)
                state["tight_lower"] = np.array([t[2] for t in items], dtype=np.float64)
        return state

    @classmethod
    def from_state(cls, state: dict) -> Self:
        """Rebuild a planner saved by :meth:`to_state` (it continues exactly where it was)."""
        if state.get("version") not in (1, 2, 3, STATE_VERSION):
            raise ValueError(f"unsupported state version {state.get('version')!r}")
        if state.get("class") != cls.__name__:
            raise ValueError(f"state of a {state.get('class')!r}, not of a {cls.__name__}")
        params = dict(state["params"])
        if cls is not ANNTri:
            params.pop("triangle", None)
        planner = cls(**params)
        planner._check_params()
        if state.get("initialized"):
            n, k = planner.n_items, planner.k
            fdtype = np.float64 if n <= FLOAT64_MAX_ITEMS else np.float32
            derived = not planner.symmetric
            planner._derived_bounds = derived
            planner._tight = {}
            mdtype = np.float64
            if derived and fdtype == np.float32:
                stored = np.asarray(state["mean"])
                count = np.asarray(state["count"])
                if stored.dtype == np.float32 or _binary_means(stored, count):
                    mdtype = np.float32
            dtypes = {"mean_": mdtype, "count_": np.int32, "pending_": np.int32,
                      "upper_": fdtype, "lower_": fdtype, "order_": np.int64, "status_": np.int8,
                      "round_issued_": np.int64, "neighbors_": np.int64, "refresh_mark_": np.int64}
            shapes = {"neighbors_": (n, k), "mean_": (n, n), "count_": (n, n), "pending_": (n, n),
                      "upper_": (n, n), "lower_": (n, n)}
            d = planner.__dict__
            for name in cls._ARRAYS:
                if derived and name in ("upper_", "lower_"):
                    continue
                src = state[name.rstrip("_")]
                if name == "mean_" and mdtype == np.float32 and np.asarray(src).dtype != np.float32:
                    src = _binary_to_float32(src, state["count"])
                arr = np.array(src, dtype=dtypes[name], copy=True)
                if arr.shape != shapes.get(name, (n,)):
                    raise ValueError(f"state array {name.rstrip('_')!r} has shape {arr.shape}")
                d["_a_" + name if name in _OVERLAID else name] = arr
            for name in cls._SCALARS:
                setattr(planner, name, int(state[name.rstrip("_")]))
            planner.open_rounds_ = [int(j) for j in state["open_rounds"]]
            planner.dirty_ = dict.fromkeys(np.asarray(state.get("dirty", []), dtype=np.int64).tolist())
            planner._active_cache = {}
            planner.rng_ = generator_from_state(state["rng"])
            if derived and "upper" in state:  # an older head-based state: keep only what is tighter
                planner._set_bounds(np.asarray(state["upper"]), np.asarray(state["lower"]))
            elif derived:
                keys = np.asarray(state.get("tight_keys", []), dtype=np.int64).tolist()
                his = np.asarray(state.get("tight_upper", []), dtype=np.float64).tolist()
                los = np.asarray(state.get("tight_lower", []), dtype=np.float64).tolist()
                for key, hi, lo in zip(keys, his, los, strict=True):
                    i, j = divmod(key, n)
                    planner._tight.setdefault(i, {})[j] = (hi, lo)
            planner._start_overlay()
            planner._start_tracking()
        return planner


def _binary_means(mean, count) -> bool:
    """Are these float64 means all of 0/1 answers (k / count, up to rounding)? Then float32 keeps them."""
    mean = np.asarray(mean, dtype=np.float64)
    count = np.asarray(count)
    step = max(1, ROW_CHUNK_ELEMENTS // max(mean.shape[1], 1))
    for start in range(0, mean.shape[0], step):
        m, T = mean[start:start + step], count[start:start + step].astype(np.float64)
        k = np.round(m * T)
        if not np.all(np.abs(m * T - k) <= 1e-6) or np.any((T == 0) & (m != 0)):
            return False
    return True


def _binary_to_float32(mean, count) -> np.ndarray:
    """Float64 means of 0/1 answers as float32 values of exactly k / count."""
    mean = np.asarray(mean, dtype=np.float64)
    T = np.asarray(count).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(T > 0, np.round(mean * T) / np.maximum(T, 1.0), 0.0).astype(np.float32)


_OVERLAID = ("mean_", "count_", "pending_", "upper_", "lower_", "round_issued_")


class ANNTri(_NeighborGraphPlanner):
    """ANNTri: SETri rounds with triangle-inequality elimination (Mason et al. 2019, Alg. 1–2).

    Parameters
    ----------
    n_items : int, at least 3.
    k : int, neighbours per item (k > 1 uses top-k racing).
    delta : float in (0, 1), overall failure probability.
    sigma : float, sub-Gaussian scale of the answers (0.5 for answers in [0, 1]).
    bound : ``"lil"`` (default, ε = 0.7), ``"hoeffding"``, ``"bernstein"`` or ``"kl"``
        (the last two for answers in [0, 1]); see ``engine.bounds``.
    triangle : bool, use triangle-inequality bounds.
    max_samples_per_round : int or None, questions one round may issue before it returns
        its empirical best, flagged not certified.
    window : int, rounds kept open at once (serve many raters distinct questions).
    random_state : None, int or numpy Generator; fixes the order of the rounds.
    full_pass_every : int or None, rounds between O(n³) triangle passes (0 = never,
        None = automatic: ~20 passes at n = 100, fewer as n grows, none above 1024 items).
    lookahead : float >= 0, default 0 (exact SETri: one layer per decision). With
        ``lookahead > 0`` a round whose fewest-sampled arms have T samples issues up to
        ``1 + floor(lookahead * T)`` layers of them at once (repeated pairs, all pending),
        as budget allows: at most about a ``lookahead`` share of extra samples per round
        (the decision may come up to that many layers late), for up to ~1/lookahead
        times fewer calls in long duels — for harnesses whose per-call cost matters and
        large rater pools, not the paper's algorithm. (It takes the general array path:
        the engine's own time is about that of exact SETri, whose long duels run on
        the scalar fast path.)
    stagger : bool, default False (the window fills at once, as before). With ``True`` at
        most 1 + (rounds closed or past their first layer) rounds are open: a round is past
        its first layer once every arm it has not eliminated has an answer. A round opened
        while the others are still blind has no triangle bounds to prune with and samples
        its whole row, so a full window opened at once costs ~window × n questions before
        anything is known; staggered, each new round starts from the rows already sampled
        and the window still grows to its size as rounds get going (benchmark 2). Not the
        paper's algorithm (the paper has window 1, where it changes nothing).
    symmetric : bool, default True (a distance: Q(i, j) and Q(j, i) estimate the same
        number and are pooled, as in the paper). ``False`` keeps head-based estimates for
        samples that are not symmetric, such as triplet-derived ones ("is i more like j or a
        random k?" depends on which item is the head): an answer ``(i, j, v)`` updates row
        i only (head i's estimate of j), round i reads row i only and nothing is shared by
        symmetry. Needs ``triangle=False`` (such quantities are not a metric, so triangle
        bounds would be invalid); runs on the array paths (no scalar fast path). See
        :data:`DERIVED_DEFAULTS`.
    """


class _WithoutTriangle:
    """A planner with ``triangle=False`` fixed (ANN, RandomSampling); otherwise the parameters of
    :class:`ANNTri`."""

    def __init__(self, n_items: int, k: int = 1, delta: float = 0.1, sigma: float = 0.5, bound: str = "lil",
                 max_samples_per_round: int | None = None, window: int = 1, random_state: RandomState = None,
                 full_pass_every: int | None = None, lookahead: float = 0.0, stagger: bool = False,
                 symmetric: bool = True) -> None:
        super().__init__(n_items, k=k, delta=delta, sigma=sigma, bound=bound, triangle=False,
                         max_samples_per_round=max_samples_per_round, window=window,
                         random_state=random_state, full_pass_every=full_pass_every,
                         lookahead=lookahead, stagger=stagger, symmetric=symmetric)


class ANN(_WithoutTriangle, ANNTri):
    """ANNTri without triangle bounds (the paper's ANN baseline), same code path."""


class RandomSampling(_WithoutTriangle, _NeighborGraphPlanner):
    """Uniformly random pairs, same estimates and bounds (no triangle); the paper's Random.

    ``next_questions(budget)`` returns ``budget`` uniform pairs i != j until every item's
    neighbours are certified by the confidence bounds; pending questions are tracked (for
    ``progress``) but do not steer the choice. ``window``, ``max_samples_per_round`` and
    ``lookahead`` and ``stagger`` are accepted for a uniform interface and not used.
    """

    _overlay_capable = False

    def _settle(self):
        pass

    def _check_certified(self):
        # An O(n² log n) sweep, run after geometrically growing numbers of new samples
        # (``refresh_mark_[0]`` remembers the last sweep; rows are never refreshed here).
        mark = int(self.refresh_mark_[0])
        if self.n_samples_ > 0 and self.n_samples_ - mark < max(self.n_items, mark // 10):
            return
        self.refresh_mark_[0] = self.n_samples_
        for j in np.flatnonzero(self.status_ != ROUND_CERTIFIED):
            self._decide_round(int(j))

    def next_questions(self, budget: int) -> list[tuple[int, int]]:
        self._ensure_state()
        budget = check_int("budget", budget, minimum=0)
        self._check_certified()
        if self.done or budget == 0:
            return []
        n = self.n_items
        i = self.rng_.integers(n, size=budget)
        j = self.rng_.integers(n - 1, size=budget)
        j = j + (j >= i)
        np.add.at(self.pending_, (i, j), 1)
        self._touched.update(i.tolist())
        if self.symmetric:
            np.add.at(self.pending_, (j, i), 1)
            self._touched.update(j.tolist())
        self.n_issued_ += budget
        return [(int(a), int(b)) for a, b in zip(i.tolist(), j.tolist(), strict=False)]


#: Parameters recommended for triplet-derived distance samples Q(i, j) ("is i more like j or a
#: random k?", 1 if k wins), chosen with ``benchmarks/anntri_derived.py`` (alien eggs, simulated
#: people): head-based estimates (the derived quantity is not symmetric), no triangle bounds
#: (it is not a metric), the KL bound (the tightest for Bernoulli samples; LIL eliminates
#: nothing before ~400 samples per arm) and every round open at once (not staggered: measured
#: best from 500 answers per item on), so the questions spread over all items from the start
#: instead of one round's long duel. ``window`` above ``n_items`` means "all".
DERIVED_DEFAULTS: dict = {"symmetric": False, "triangle": False, "bound": "kl",
                          "window": 100_000, "stagger": False}

_PLANNERS = {cls.__name__: cls for cls in (ANNTri, ANN, RandomSampling)}


def planner_from_state(state: dict) -> ANNTri | RandomSampling:
    """Restore whichever planner (``ANNTri``, ``ANN``, ``RandomSampling``) saved ``state``."""
    name = state.get("class")
    if name not in _PLANNERS:
        raise ValueError(f"unknown planner class {name!r}; expected one of {sorted(_PLANNERS)}")
    return _PLANNERS[name].from_state(state)
