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
"""
from __future__ import annotations

import itertools
import math
import numbers

import numpy as np

from . import triangle as tri
from .bounds import UNIT_INTERVAL_BOUNDS, check_bound, confidence_interval
from .graph import NO_NEIGHBOR, NeighborGraph  # noqa: F401  (re-exported: older imports)
from .utils import check_int, check_n_items, check_random_state, generator_from_state, generator_state

#: With more open rounds than this (and than the questions wanted), ``next_questions`` serves
#: them in turn, reading only the rounds it asks (``ANNTri._next_spread``).
SPREAD_MIN_ROUNDS = 32
STATE_VERSION = 3  # 2 added params['stagger'], 3 params['symmetric']; older states still load

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
#: Batches of at most this many answers are applied with scalar updates (no numpy dispatch).
SMALL_BATCH = 16
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


def _overlaid(name: str, doc: str) -> property:
    """A public array attribute whose hot entries may live in the planner's scalar overlay
    (see :meth:`_NeighborGraphPlanner._drop_hot`): reading or assigning it first writes the
    overlay back and drops it, so callers (and code writing into the array) see the truth."""
    private = "_a_" + name

    def get(self):
        if self._hot_on:
            self._drop_hot()
        try:
            return self.__dict__[private]
        except KeyError:
            raise AttributeError(name) from None

    def set(self, value):
        if self._hot_on:
            self._drop_hot()
        self.__dict__[private] = value

    return property(get, set, doc=doc)


class _NeighborGraphPlanner:
    """Shared state, answers, results and (de)serialisation of the planners below."""

    _uses_rounds = True

    # The pair arrays and round_issued_ are properties: in long duels (few active arms) the
    # exact SETri fast path keeps the entries of its arms as Python scalars (the "overlay":
    # ``_hot`` pair records [count, mean, upper, lower, pending] by key i * n + j, i < j,
    # and ``_hot_rounds`` [questions issued, refresh mark] by round) and writes them back
    # the moment anything reads these attributes. Same numbers, no numpy scalar traffic.
    mean_ = _overlaid("mean_", "D̂, shape (n, n)")
    count_ = _overlaid("count_", "answers per pair, shape (n, n)")
    pending_ = _overlaid("pending_", "issued, unanswered questions per pair, shape (n, n)")
    upper_ = _overlaid("upper_", "U*, shape (n, n)")
    lower_ = _overlaid("lower_", "L*, shape (n, n)")
    round_issued_ = _overlaid("round_issued_", "questions each round has issued, shape (n,)")
    _hot = None  # None until the state exists
    _hot_rounds = None
    _hot_on = False
    _fast_ok = False

    def __init__(self, n_items, k=1, delta=0.1, sigma=0.5, bound="lil", triangle=True,
                 max_samples_per_round=None, window=1, random_state=None, full_pass_every=None,
                 lookahead=0.0, stagger=False, symmetric=True):
        self.n_items = n_items
        self.k = k
        self.delta = delta
        self.sigma = sigma
        self.bound = bound
        self.triangle = triangle
        self.max_samples_per_round = max_samples_per_round
        self.window = window
        self.random_state = random_state
        self.full_pass_every = full_pass_every
        self.lookahead = lookahead
        self.stagger = stagger
        self.symmetric = symmetric

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
        self.mean_ = np.zeros((n, n), dtype=np.float64)
        self.count_ = np.zeros((n, n), dtype=np.int32)
        self.pending_ = np.zeros((n, n), dtype=np.int32)
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

    def _start_overlay(self):
        self._hot = {}
        self._hot_rounds = {}
        self._hot_on = False
        # The scalar fast paths: exact SETri (k = 1, one layer per decision), sub-Gaussian
        # bounds (their radius depends on the count only) and float64 bounds.
        # Head-based (symmetric=False) estimates take the array paths.
        self._fast_ok = (not isinstance(self, RandomSampling) and self.k == 1 and self.symmetric
                         and self.bound not in UNIT_INTERVAL_BOUNDS
                         and self.__dict__["_a_upper_"].dtype == np.float64)
        if self._fast_ok:
            self._radius_lookup(0)

    def _drop_hot(self):
        """Write the overlay's scalars back into the arrays and forget them."""
        n = self.n_items
        d = self.__dict__
        mean, count, pending = d["_a_mean_"], d["_a_count_"], d["_a_pending_"]
        upper, lower, issued = d["_a_upper_"], d["_a_lower_"], d["_a_round_issued_"]
        for key, (T, m, hi, lo, pend) in self._hot.items():
            i, j = divmod(key, n)
            count[i, j] = count[j, i] = T
            mean[i, j] = mean[j, i] = m
            upper[i, j] = upper[j, i] = hi
            lower[i, j] = lower[j, i] = lo
            pending[i, j] = pending[j, i] = pend
        for j, hr in self._hot_rounds.items():
            issued[j] = hr[0]
        self._hot = {}
        self._hot_rounds = {}
        self._hot_on = False

    # ------------------------------------------------------------------ answers
    def observe(self, answers) -> None:
        """Apply noisy distance samples ``(i, j, value)``: any order, any batch size.

        Answers for rounds already closed still tighten the estimates; each answer clears
        one pending entry of its pair. Raises ``ValueError`` (state unchanged) on bad
        indices, i == j or non-finite values (or values outside [0, 1] for the bounded
        ``bound="bernstein"``/``"kl"``).

        Triangle bounds are not propagated here: the sampled pairs are queued (``dirty_``)
        and propagated in one vectorised step before a round reads its row again (a round
        opening, or every n new samples), so a short batch costs a few scalar updates.
        """
        if self._fast_ok and type(answers) is list and len(answers) <= SMALL_BATCH:  # noqa: E721
            # Short lists of plain (int, int, float) rows, in Python scalars: pairs in the
            # overlay are updated there, the others in the arrays, with the same arithmetic
            # as the array paths. Any other row goes to the general path (which validates
            # it and applies the batch or raises) before anything changes.
            n = self.n_items
            for row in answers:
                tr = type(row)
                if tr is not tuple and tr is not list:
                    break
                try:
                    p, q, v = row
                except ValueError:
                    break
                if (type(p) is not int or type(q) is not int or type(v) is not float  # noqa: E721
                        or not (0 <= p < n and 0 <= q < n) or p == q or v - v != 0.0):
                    break
            else:
                hot = self._hot
                radius = self._radius_list
                top = len(radius)
                cache = self._active_cache
                dirty = self.dirty_ if self.triangle else None
                for p, q, v in answers:
                    i, j = (p, q) if p < q else (q, p)
                    key = i * n + j
                    r = hot.get(key)
                    if r is None:
                        self._observe_cold(i, j, v)
                    else:
                        T, m, hi0, lo0, pend = r
                        T1 = T + 1
                        if T1 >= top:
                            radius = self._radius_lookup(T1)
                            top = len(radius)
                        m1 = (m * T + v) / T1
                        rad = radius[T1]
                        conf_lo = m1 - rad
                        if conf_lo < 0.0:
                            conf_lo = 0.0
                        conf_hi = m1 + rad
                        hi = conf_hi if conf_hi < hi0 else hi0
                        lo = conf_lo if conf_lo > lo0 else lo0
                        if lo > hi:  # the confidence event failed: fall back to today's interval
                            hi, lo = conf_hi, (conf_hi if conf_hi < conf_lo else conf_lo)
                            cache.pop(i, None)
                            cache.pop(j, None)
                        r[0] = T1
                        r[1] = m1
                        r[2] = hi
                        r[3] = lo
                        r[4] = pend - 1 if pend > 0 else 0
                    # A cached active set stays exact while only its own arms change (see _decide_1nn).
                    if cache:
                        c = cache.get(i)
                        if c is not None and j not in c[2]:
                            del cache[i]
                        c = cache.get(j)
                        if c is not None and i not in c[2]:
                            del cache[j]
                    if dirty is not None:
                        dirty[key] = None
                self.n_samples_ += len(answers)
                return
        self._ensure_state()
        scalar = self.bound not in UNIT_INTERVAL_BOUNDS
        rows = _small_rows(answers, self.n_items, 3, "answers") if scalar else None
        if rows is None:
            self._observe_arrays(answers)
            return
        if not rows:
            return
        n = self.n_items
        mean, count, pending = self.mean_, self.count_, self.pending_
        upper, lower = self.upper_, self.lower_
        radius = self._radius_lookup(0)
        cache = self._active_cache
        dirty = self.dirty_
        triangle = self.triangle
        sym = self.symmetric
        for p, q, v in rows:
            i, j = (p, q) if (p < q or not sym) else (q, p)
            T = int(count[i, j])
            T1 = T + 1
            if T1 >= len(radius):
                radius = self._radius_lookup(T1)
            m1 = (float(mean[i, j]) * T + v) / T1
            r = radius[T1]
            conf_lo = max(m1 - r, 0.0)
            conf_hi = m1 + r
            hi = min(float(upper[i, j]), conf_hi)
            lo = max(float(lower[i, j]), conf_lo)
            if lo > hi:  # the confidence event failed somewhere: fall back to today's interval
                hi, lo = conf_hi, min(conf_lo, conf_hi)
                cache.pop(i, None)
                cache.pop(j, None)
            pend = max(int(pending[i, j]) - 1, 0)
            mean[i, j] = m1
            count[i, j] = T1
            upper[i, j] = hi
            lower[i, j] = lo
            pending[i, j] = pend
            if sym:
                mean[j, i] = m1
                count[j, i] = T1
                upper[j, i] = hi
                lower[j, i] = lo
                pending[j, i] = pend
            # A cached active set stays exact while only its own arms change (see _decide_1nn).
            if i in cache and j not in cache[i][2]:
                del cache[i]
            if j in cache and i not in cache[j][2]:
                del cache[j]
            if triangle:
                dirty[i * n + j] = None
        self.n_samples_ += len(rows)

    def _observe_cold(self, i, j, v):
        """One answer for a pair outside the overlay, straight into the arrays (i < j)."""
        d = self.__dict__
        mean, count, pending = d["_a_mean_"], d["_a_count_"], d["_a_pending_"]
        upper, lower = d["_a_upper_"], d["_a_lower_"]
        T = int(count[i, j])
        T1 = T + 1
        radius = self._radius_lookup(T1)
        m1 = (float(mean[i, j]) * T + v) / T1
        r = radius[T1]
        conf_lo = max(m1 - r, 0.0)
        conf_hi = m1 + r
        hi = min(float(upper[i, j]), conf_hi)
        lo = max(float(lower[i, j]), conf_lo)
        if lo > hi:
            hi, lo = conf_hi, min(conf_lo, conf_hi)
            self._active_cache.pop(i, None)
            self._active_cache.pop(j, None)
        pend = max(int(pending[i, j]) - 1, 0)
        mean[i, j] = mean[j, i] = m1
        count[i, j] = count[j, i] = T1
        upper[i, j] = upper[j, i] = hi
        lower[i, j] = lower[j, i] = lo
        pending[i, j] = pending[j, i] = pend

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
        self.dirty_.clear()
        self._active_cache.clear()

    def _refresh(self, j):
        self._flush_triangle()
        tri.refresh_row(self.upper_, self.lower_, j)
        self.refresh_mark_[j] = self.round_issued_[j]
        self._active_cache.clear()

    def forget(self, pairs) -> None:
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
            if self.symmetric:
                pending[q, p] = v - 1
            if issued[p] > 0:
                issued[p] -= 1

    def _settle(self):
        """Close the open rounds the answers so far have decided (read methods call this)."""
        for j in list(self.open_rounds_):
            self._decide_round(j)

    # ------------------------------------------------------------------ rounds
    def _decide_round(self, j):
        """Close round j if its neighbours are decided (returns None); else its undecided
        arms, sorted (a list of ints, or an int array when there are many)."""
        if self.k == 1:
            return self._decide_1nn(j)
        accepted, undecided = _racing_decision(self.upper_[j], self.lower_[j], j, self.k)
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
        U = self.upper_[j]
        L = self.lower_[j]
        cached = self._active_cache.get(j)
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
        mid = np.where(np.isfinite(self.upper_[j]),
                       0.5 * (self.upper_[j].astype(np.float64) + self.lower_[j]), np.inf)
        key = np.where(sampled, self.mean_[j], mid)
        return np.where(np.isfinite(key), key, _BIG + self.lower_[j])

    def _open_round(self, j):
        self.status_[j] = ROUND_OPEN
        self.open_rounds_.append(j)
        if self.triangle:
            period = self._full_pass_period()
            self.rounds_since_full_pass_ += 1
            if period and self.rounds_since_full_pass_ >= period and self.n_samples_ > 0:
                self._flush_triangle()
                tri.full_pass(self.upper_, self.lower_)
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
            _, active = _setri_active(self.upper_[j], self.lower_[j], j)
            arms = np.flatnonzero(active)
        else:
            _, undecided = _racing_decision(self.upper_[j], self.lower_[j], j, self.k)
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

    def next_questions(self, budget: int) -> list[tuple[int, int]]:
        """Up to ``budget`` pairs ``(i, j)`` worth asking now, as plain int tuples; i is the round.

        Draws SETri's fewest-sampled undecided arms from every open round (at most
        ``window`` rounds, round-robin), never re-issuing a pair that is still pending.
        Returns fewer than ``budget`` when every useful question is pending or all rounds
        are done (``[]`` then). Issued pairs count as pending until answered or forgotten.
        With the default ``lookahead=0`` the pairs are distinct; with ``lookahead > 0`` an
        arm whose round has sampled it T times is issued up to ``1 + floor(lookahead * T)``
        times at once (a batch of SETri layers, see :class:`ANNTri`).
        """
        if self._fast_ok and type(budget) is int and budget > 0 and not self.lookahead:  # noqa: E721
            open_rounds = self.open_rounds_
            if len(open_rounds) > max(budget, SPREAD_MIN_ROUNDS):
                return self._next_general(budget)  # many open rounds: taken in turn (_next_spread)
            if len(open_rounds) != 1:
                out = self._next_fast(budget)
                if out is not None:
                    return out
                return self._next_general(budget)
            # One open round (window 1, or the last round): _next_fast inlined, same steps.
            j = open_rounds[0]
            window = self.window
            n = self.n_items
            c = self._active_cache.get(j)
            hr = self._hot_rounds.get(j)
            if (c is not None and type(c[0]) is list and type(window) is int and window >= 1  # noqa: E721
                    and (window == 1 or self.next_round_ >= n or (self.stagger and not self._room()))):
                if hr is None:
                    d = self.__dict__
                    hr = self._hot_rounds[j] = [int(d["_a_round_issued_"][j]),
                                                int(self.refresh_mark_[j]), None, None, None]
                    self._hot_on = True
                if hr[2] is not c:
                    hr[3] = self._hot_records(j, c[0])
                    hr[2] = c
                    hr[4] = None
                arms = hr[4]
                if arms is None:
                    arms = hr[4] = [(a, r, (j, a)) for a, r in zip(c[0], hr[3], strict=True)]
                iss = hr[0]
                due = iss >> 3
                if not self.triangle or iss - hr[1] < (due if due > n else n):
                    bu, bi = c[1]
                    tmin = arms[0][1][0]
                    for a, r, _ in arms:
                        ua = r[2]
                        if ua < bu or (ua == bu and a < bi):
                            bu, bi = ua, a
                        if r[0] < tmin:
                            tmin = r[0]
                    for r in hr[3]:
                        if r[3] >= bu:
                            break
                    else:
                        r = None
                    if r is not None:  # some arms are eliminated: the general fast path
                        out = self._next_fast(budget)
                        if out is not None:
                            return out
                        return self._next_general(budget)
                    out = []
                    cap = self.max_samples_per_round
                    for _a, r, question in arms:
                        if r[0] == tmin and not r[4]:
                            if len(out) >= budget:
                                break
                            out.append(question)
                            r[4] = 1
                            hr[0] += 1
                            if cap is not None and hr[0] >= cap:
                                self._close_capped(j)
                                self.n_issued_ += len(out)
                                if len(out) < budget and self.next_round_ < n:
                                    out.extend(self._next_general(budget - len(out)))
                                return out
                    self.n_issued_ += len(out)
                    return out
        return self._next_general(budget)

    def _next_fast(self, budget: int):
        """:meth:`next_questions` in Python scalars for the common case of a long duel: every
        open round has a short cached active set, none is due for a row refresh or decided
        now, and the window needs no refill. Computes exactly what the general path would
        (same decisions, same order, same caches) on the overlay's scalars; returns None,
        having changed nothing observable, whenever the general path has to run instead."""
        open_rounds = self.open_rounds_
        window = self.window
        if not open_rounds or type(window) is not int or window < 1:  # noqa: E721
            return None
        n = self.n_items
        if self._room():
            return None
        cache = self._active_cache
        hrounds = self._hot_rounds
        triangle = self.triangle
        plan = []
        for j in open_rounds:
            c = cache.get(j)
            if c is None:
                return None
            act = c[0]
            if type(act) is not list:  # noqa: E721
                return None
            # hr = [questions issued, refresh mark, the cache entry the rest belongs to, the
            # arms' overlay records, (arm, record, question) triples]
            hr = hrounds.get(j)
            if hr is None:
                d = self.__dict__
                hr = hrounds[j] = [int(d["_a_round_issued_"][j]), int(self.refresh_mark_[j]), None, None, None]
                self._hot_on = True
            if hr[2] is not c:
                hr[3] = self._hot_records(j, act)
                hr[2] = c
                hr[4] = None
            arms = hr[4]
            if arms is None:
                arms = hr[4] = [(a, r, (j, a)) for a, r in zip(act, hr[3], strict=True)]
            iss = hr[0]
            if triangle:
                due = iss >> 3
                if iss - hr[1] >= (due if due > n else n):
                    return None  # a row refresh is due (see _eligible)
            # _decide_1nn's cached branch on the overlay's scalars.
            bu, bi = c[1]
            tmin = arms[0][1][0]
            for a, r, _ in arms:
                ua = r[2]
                if ua < bu or (ua == bu and a < bi):
                    bu, bi = ua, a
                if r[0] < tmin:
                    tmin = r[0]
            for r in hr[3]:
                if r[3] >= bu:
                    break
            else:
                r = None
            if r is not None:  # some arms are eliminated now
                rmin, ridx = c[1]
                keep = []
                for t in arms:
                    r = t[1]
                    if r[3] < bu:
                        keep.append(t)
                    else:
                        ua = r[2]
                        if ua < rmin or (ua == rmin and t[0] < ridx):
                            rmin, ridx = ua, t[0]
                if len(keep) < 2:
                    return None  # the round is decided: the general path certifies it
                act = [t[0] for t in keep]
                c = cache[j] = (act, (rmin, ridx), set(act))
                hr[2] = c
                hr[3] = [t[1] for t in keep]
                arms = hr[4] = keep
                tmin = min([t[1][0] for t in keep])
            # _eligible: the fewest-sampled undecided arms that are not pending.
            plan.append((j, [t for t in arms if t[1][0] == tmin and not t[1][4]], hr))
        # The general path's issuing loop: round-robin over the rounds, one arm each per pass.
        out: list[tuple[int, int]] = []
        cap = self.max_samples_per_round
        closed = None
        if len(plan) == 1:
            j, arms, hr = plan[0]
            for _, r, question in arms:
                if len(out) >= budget:
                    break
                if r[4]:
                    continue
                out.append(question)
                r[4] += 1
                hr[0] += 1
                if cap is not None and hr[0] >= cap:
                    self._close_capped(j)
                    closed = True
                    break
        else:
            depth = 0
            while len(out) < budget:
                progressed = False
                for j, arms, hr in plan:
                    if len(out) >= budget:
                        break
                    if depth >= len(arms) or (closed is not None and j in closed):
                        continue
                    _, r, question = arms[depth]
                    progressed = True
                    if r[4]:
                        continue  # already issued by the round of a in this call
                    out.append(question)
                    r[4] += 1
                    hr[0] += 1
                    if cap is not None and hr[0] >= cap:
                        self._close_capped(j)
                        closed = closed or set()
                        closed.add(j)
                if not progressed:
                    break
                depth += 1
        self.n_issued_ += len(out)
        if (closed is not None and out and len(out) < budget
                and self._room()):
            out.extend(self._next_general(budget - len(out)))  # refill the window, go on
        return out

    def _hot_records(self, j: int, act: list) -> list:
        """The overlay records of pairs (j, a) for a in ``act``, moved in where missing."""
        n = self.n_items
        hot = self._hot
        d = self.__dict__
        recs = []
        for a in act:
            key = j * n + a if j < a else a * n + j
            r = hot.get(key)
            if r is None:
                r = self._make_hot(key, d)
            recs.append(r)
        return recs

    def _make_hot(self, key: int, d: dict) -> list:
        """Move pair ``key`` (i * n + j, i < j) into the overlay: [count, mean, U*, L*, pending]."""
        i, j = divmod(key, self.n_items)
        r = [int(d["_a_count_"][i, j]), float(d["_a_mean_"][i, j]), float(d["_a_upper_"][i, j]),
             float(d["_a_lower_"][i, j]), int(d["_a_pending_"][i, j])]
        self._hot[key] = r
        self._hot_on = True
        return r

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
            depth = 0
            while len(out) < budget:
                progressed = False
                for j, arms, reps in lists:
                    if len(out) >= budget:
                        break
                    if depth >= len(arms) or status[j] != ROUND_OPEN:
                        continue
                    a = arms[depth]
                    progressed = True
                    if pending[j, a]:
                        continue  # already issued by the round of a in this call
                    if reps > 1:
                        reps = min(reps, budget - len(out))
                        if cap is not None:
                            reps = min(reps, cap - int(issued[j]))
                    out.extend([(j, a)] * reps)
                    pending[j, a] += reps
                    if self.symmetric:
                        pending[a, j] += reps
                    issued[j] += reps
                    if cap is not None and issued[j] >= cap:
                        self._close_capped(j)
                if not progressed:
                    break
                depth += 1
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
            pending[j, a] += 1
            if self.symmetric:
                pending[a, j] += 1
            issued[j] += 1
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
                pending[j, a] += 1
                if self.symmetric:
                    pending[a, j] += 1
                issued[j] += 1
        self.n_issued_ += len(out)
        return out

    def _close_capped(self, j):
        self.status_[j] = ROUND_CAPPED
        self._active_cache.pop(j, None)
        if j in self.open_rounds_:
            self.open_rounds_.remove(j)

    # ------------------------------------------------------------------ results
    def current_neighbors(self) -> np.ndarray:
        """Current best k neighbours of every item, shape (n_items, k): the certified answer
        where a round is certified, else the best estimates among the not-eliminated."""
        self._ensure_state()
        self._settle()
        n = self.n_items
        best = np.empty((n, self.k), dtype=np.int64)
        step = max(1, ROW_CHUNK_ELEMENTS // n)  # a few (step, n) temporaries, not (n, n)
        for start in range(0, n, step):
            best[start:start + step] = self._best_rows(np.arange(start, min(start + step, n)))
        done = self.status_ == ROUND_CERTIFIED
        best[done] = self.neighbors_[done]
        return best.astype(np.int64)

    def _best_rows(self, rows: np.ndarray) -> np.ndarray:
        """Current best k neighbours of the given rows (certified or not), shape (len(rows), k)."""
        k = self.k
        r = np.arange(len(rows))
        U = self.upper_[rows].astype(np.float64)
        L = self.lower_[rows].astype(np.float64)
        U[r, rows] = np.inf
        L[r, rows] = np.inf
        kth_upper = np.partition(U, k - 1, axis=1)[:, k - 1] if k > 1 else U.min(axis=1)
        sampled = self.count_[rows] > 0
        with np.errstate(invalid="ignore"):
            mid = np.where(np.isfinite(U), 0.5 * (U + L), np.inf)
        key = np.where(sampled, self.mean_[rows], mid)
        key = np.where(np.isfinite(key), key, _BIG + np.minimum(L, _BIG / 4))
        key[L >= kth_upper[:, None]] += 4 * _BIG
        key[r, rows] = np.inf
        if k == 1:
            return key.argmin(axis=1)[:, None]
        part = np.argpartition(key, k - 1, axis=1)[:, :k]
        order = np.argsort(np.take_along_axis(key, part, axis=1), axis=1, kind="stable")
        return np.take_along_axis(part, order, axis=1)

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
        return NeighborGraph(
            neighbors=nb,
            certified=self._certified().copy(),
            estimates=self.mean_[rows, nb].copy(),
            lower=self.lower_[rows, nb].astype(np.float64),
            upper=self.upper_[rows, nb].astype(np.float64),
            samples=self.count_[rows, nb].astype(np.int64),
        )

    def progress(self) -> dict:
        """Numbers for the dashboard (all plain Python scalars)."""
        self._ensure_state()
        self._settle()
        st = self.status_
        n = self.n_items
        per_item = self.count_.sum(axis=1)
        pending = int(self.pending_.sum()) // (2 if self.symmetric else 1)
        return {
            "n_items": n,
            "k": int(self.k),
            "rounds_certified": int(np.sum(st == ROUND_CERTIFIED)),
            "rounds_uncertified": int(np.sum(st == ROUND_CAPPED)),
            "rounds_open": int(np.sum(st == ROUND_OPEN)),
            "rounds_waiting": int(np.sum(st == ROUND_WAITING)),
            "pending_questions": pending,
            "samples": int(self.n_samples_),
            "questions_issued": int(self.n_issued_),
            "samples_per_item": float(self.n_samples_) / n,
            "samples_per_item_max": int(per_item.max()),
            "done": self.done,
        }

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

    def to_state(self) -> dict:
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
        construction.
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
            for name in self._ARRAYS:
                state[name.rstrip("_")] = np.array(getattr(self, name), copy=True)
        return state

    @classmethod
    def from_state(cls, state: dict):
        """Rebuild a planner saved by :meth:`to_state` (it continues exactly where it was)."""
        if state.get("version") not in (1, 2, STATE_VERSION):
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
            dtypes = {"mean_": np.float64, "count_": np.int32, "pending_": np.int32,
                      "upper_": fdtype, "lower_": fdtype, "order_": np.int64, "status_": np.int8,
                      "round_issued_": np.int64, "neighbors_": np.int64, "refresh_mark_": np.int64}
            shapes = {"neighbors_": (n, k), "mean_": (n, n), "count_": (n, n), "pending_": (n, n),
                      "upper_": (n, n), "lower_": (n, n)}
            for name in cls._ARRAYS:
                arr = np.array(state[name.rstrip("_")], dtype=dtypes[name], copy=True)
                if arr.shape != shapes.get(name, (n,)):
                    raise ValueError(f"state array {name.rstrip('_')!r} has shape {arr.shape}")
                setattr(planner, name, arr)
            for name in cls._SCALARS:
                setattr(planner, name, int(state[name.rstrip("_")]))
            planner.open_rounds_ = [int(j) for j in state["open_rounds"]]
            planner.dirty_ = dict.fromkeys(np.asarray(state.get("dirty", []), dtype=np.int64).tolist())
            planner._active_cache = {}
            planner.rng_ = generator_from_state(state["rng"])
            planner._start_overlay()
        return planner


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


class ANN(ANNTri):
    """ANNTri without triangle bounds (the paper's ANN baseline), same code path."""

    def __init__(self, n_items, k=1, delta=0.1, sigma=0.5, bound="lil",
                 max_samples_per_round=None, window=1, random_state=None, full_pass_every=None,
                 lookahead=0.0, stagger=False, symmetric=True):
        super().__init__(n_items, k=k, delta=delta, sigma=sigma, bound=bound, triangle=False,
                         max_samples_per_round=max_samples_per_round, window=window,
                         random_state=random_state, full_pass_every=full_pass_every,
                         lookahead=lookahead, stagger=stagger, symmetric=symmetric)


class RandomSampling(_NeighborGraphPlanner):
    """Uniformly random pairs, same estimates and bounds (no triangle); the paper's Random.

    ``next_questions(budget)`` returns ``budget`` uniform pairs i != j until every item's
    neighbours are certified by the confidence bounds; pending questions are tracked (for
    ``progress``) but do not steer the choice. ``window``, ``max_samples_per_round`` and
    ``lookahead`` and ``stagger`` are accepted for a uniform interface and not used.
    """

    def __init__(self, n_items, k=1, delta=0.1, sigma=0.5, bound="lil",
                 max_samples_per_round=None, window=1, random_state=None, full_pass_every=None,
                 lookahead=0.0, stagger=False, symmetric=True):
        super().__init__(n_items, k=k, delta=delta, sigma=sigma, bound=bound, triangle=False,
                         max_samples_per_round=max_samples_per_round, window=window,
                         random_state=random_state, full_pass_every=full_pass_every,
                         lookahead=lookahead, stagger=stagger, symmetric=symmetric)

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
        if self.symmetric:
            np.add.at(self.pending_, (j, i), 1)
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


def planner_from_state(state: dict):
    """Restore whichever planner (``ANNTri``, ``ANN``, ``RandomSampling``) saved ``state``."""
    name = state.get("class")
    if name not in _PLANNERS:
        raise ValueError(f"unknown planner class {name!r}; expected one of {sorted(_PLANNERS)}")
    return _PLANNERS[name].from_state(state)
