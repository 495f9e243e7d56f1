"""ANNTri's scalar overlay: exact SETri in Python scalars for long duels (``engine.anntri``).

When every open round has a short cached active set (at most ``SMALL_ACTIVE`` arms), no row
refresh is due, no round is decided and the window needs no refill, ``next_questions`` and
``observe`` work on plain floats and ints instead of numpy scalars: each active arm's pair lives
in a :class:`PairRecord` and each open round's question count in a :class:`RoundRecord`, keyed in
the planner's ``_hot`` (pair ``i * n + j``, i < j) and ``_hot_rounds`` (round j) dicts.

The planner's public arrays ``mean_``, ``count_``, ``pending_``, ``upper_``, ``lower_`` and
``round_issued_`` are :func:`overlaid` properties: reading or assigning one first writes the
overlay back (``_drop_hot``) and drops it, so every reader (the array paths, the platform, tests
writing into the arrays) sees the same numbers. Questions, decisions and results are those of
the array path: ``tests/engine/test_anntri.py`` checks every question against a planner with
the fast paths off and against a trace recorded before the fast path existed.

Only for symmetric planners with k = 1, sub-Gaussian bounds and float64 bound matrices
(``ScalarOverlay._start_overlay`` sets ``_fast_ok``). Numpy only; must never import Flask,
Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TypeVar

import numpy as np

from .bounds import UNIT_INTERVAL_BOUNDS

#: Batches of at most this many answers are applied with scalar updates (no numpy dispatch).
SMALL_BATCH = 16
#: With more open rounds than this (and than the questions wanted), ``next_questions`` serves
#: them in turn, reading only the rounds it asks (``ANNTri._next_spread``).
SPREAD_MIN_ROUNDS = 32


def interval_step(mean: float, count: int, value: float, radius: float, upper: float,
                  lower: float) -> tuple[float, float, float, bool]:
    """One answer ``value`` for a pair of ``count`` answers averaging ``mean``, in Python floats:
    the new mean, U* and L* (the confidence interval of ``radius`` around the new mean, clipped
    at 0 and intersected with ``[lower, upper]``) and whether that intersection was empty, in
    which case the confidence event failed somewhere and today's interval stands alone. The
    array path (``ANNTri._observe_general``) and the overlay's cold pairs share it; the overlay's
    hot loop inlines the same arithmetic."""
    m1 = (mean * count + value) / (count + 1)
    conf_lo = max(m1 - radius, 0.0)
    conf_hi = m1 + radius
    hi = min(upper, conf_hi)
    lo = max(lower, conf_lo)
    if lo > hi:
        return m1, conf_hi, min(conf_lo, conf_hi), True
    return m1, hi, lo, False


T = TypeVar("T")


def round_robin(rows: Sequence[Sequence[T]]) -> Iterator[tuple[int, T]]:
    """``(i, rows[i][depth])`` for depth 0, 1, ... and, within a depth, every row that still has an
    item, in order: the first item of each row, then the second of each, and so on. ANNTri's
    issuing order (one arm of each open round per pass, fewest-sampled first), which the array
    path (``ANNTri._next_general``) and the overlay share; the caller stops it at its budget."""
    depth = 0
    more = True
    while more:
        more = False
        for i, row in enumerate(rows):
            if depth < len(row):
                more = True
                yield i, row[depth]
        depth += 1


class PairRecord:
    """One pair's entries while it is in the overlay: answers, D̂, U*, L*, questions pending."""

    __slots__ = ("count", "mean", "upper", "lower", "pending")

    def __init__(self, count: int, mean: float, upper: float, lower: float, pending: int) -> None:
        self.count, self.mean, self.upper, self.lower, self.pending = count, mean, upper, lower, pending


class RoundRecord:
    """An open round in the overlay: questions it has issued, its row's refresh mark, the
    active-set cache entry its records belong to (``cache``), those arms' :class:`PairRecord`
    (``records``) and ``(arm, record, question)`` triples (``arms``, built on first use)."""

    __slots__ = ("issued", "refresh_mark", "cache", "records", "arms")

    def __init__(self, issued: int, refresh_mark: int) -> None:
        self.issued, self.refresh_mark = issued, refresh_mark
        self.cache = self.records = self.arms = None


def overlaid(name: str, doc: str) -> property:
    """A public array attribute whose hot entries may live in the overlay: reading or assigning
    it first writes the overlay back and drops it, so callers (and code writing into the array)
    see the truth. ``upper_``/``lower_`` of a head-based planner are computed from mean and count
    (``_materialise_bounds``; an assignment is adopted through ``_set_bounds``)."""
    private = "_a_" + name
    bound = name in ("upper_", "lower_")

    def get(self):
        if self._hot_on:
            self._drop_hot()
        if bound and self._derived_bounds:
            return self._materialise_bounds()[0 if name == "upper_" else 1]
        try:
            return self.__dict__[private]
        except KeyError:
            raise AttributeError(name) from None

    def set(self, value):
        if self._hot_on:
            self._drop_hot()
        self.__dict__["_touched_all"] = True  # a whole array replaced: every row may differ
        if bound and self._derived_bounds:
            self._set_bounds(**{name: value})
            return
        self.__dict__[private] = value

    return property(get, set, doc=doc)


class ScalarOverlay:
    """Mixin of :class:`engine.anntri._NeighborGraphPlanner`: the overlay and its fast paths."""

    _hot = None  # None until the state exists
    _hot_rounds = None
    _hot_on = False
    _fast_ok = False
    #: planners that never take the fast paths (RandomSampling) set this False
    _overlay_capable = True

    def _start_overlay(self) -> None:
        self._hot = {}
        self._hot_rounds = {}
        self._hot_on = False
        # The scalar fast paths: exact SETri (k = 1, one layer per decision), sub-Gaussian
        # bounds (their radius depends on the count only) and float64 bounds.
        # Head-based (symmetric=False) estimates take the array paths.
        self._fast_ok = (self._overlay_capable and self.k == 1 and self.symmetric
                         and self.bound not in UNIT_INTERVAL_BOUNDS and not self._derived_bounds
                         and self.__dict__["_a_upper_"].dtype == np.float64)
        if self._fast_ok:
            self._radius_lookup(0)

    def _drop_hot(self) -> None:
        """Write the overlay's scalars back into the arrays and forget them."""
        n = self.n_items
        d = self.__dict__
        mean, count, pending = d["_a_mean_"], d["_a_count_"], d["_a_pending_"]
        upper, lower, issued = d["_a_upper_"], d["_a_lower_"], d["_a_round_issued_"]
        touched = self._touched
        for key, r in self._hot.items():
            i, j = divmod(key, n)
            touched.add(i)
            touched.add(j)
            count[i, j] = count[j, i] = r.count
            mean[i, j] = mean[j, i] = r.mean
            upper[i, j] = upper[j, i] = r.upper
            lower[i, j] = lower[j, i] = r.lower
            pending[i, j] = pending[j, i] = r.pending
        for j, hr in self._hot_rounds.items():
            issued[j] = hr.issued
        self._hot = {}
        self._hot_rounds = {}
        self._hot_on = False

    # ------------------------------------------------------------------ answers
    def observe(self, answers: Iterable[Sequence[float]] | np.ndarray) -> None:
        """Apply noisy distance samples ``(i, j, value)``: any order, any batch size.

        Answers for rounds already closed still tighten the estimates; each answer clears
        one pending entry of its pair. Raises ``ValueError`` (state unchanged) on bad
        indices, i == j or non-finite values (or values outside [0, 1] for the bounded
        ``bound="bernstein"``/``"kl"``).

        Triangle bounds are not propagated here: the sampled pairs are queued (``dirty_``)
        and propagated in one vectorised step before a round reads its row again (a round
        opening, or every n new samples), so a short batch costs a few scalar updates.
        """
        # Short lists of plain (int, int, float) rows, in Python scalars: pairs in the overlay are
        # updated there, the others in the arrays, with the same arithmetic as the array paths. Any
        # other batch goes to the general path (which validates it and applies it or raises)
        # before anything changes.
        if not self._fast_ok or type(answers) is not list or len(answers) > SMALL_BATCH:  # noqa: E721
            return self._observe_general(answers)
        n = self.n_items
        for row in answers:
            tr = type(row)
            if tr is not tuple and tr is not list:
                return self._observe_general(answers)
            try:
                p, q, v = row
            except ValueError:
                return self._observe_general(answers)
            if (type(p) is not int or type(q) is not int or type(v) is not float  # noqa: E721
                    or not (0 <= p < n and 0 <= q < n) or p == q or v - v != 0.0):
                return self._observe_general(answers)
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
                T = r.count
                T1 = T + 1
                if T1 >= top:
                    radius = self._radius_lookup(T1)
                    top = len(radius)
                m1 = (r.mean * T + v) / T1
                rad = radius[T1]
                conf_lo = m1 - rad
                if conf_lo < 0.0:
                    conf_lo = 0.0
                conf_hi = m1 + rad
                hi0, lo0 = r.upper, r.lower
                hi = conf_hi if conf_hi < hi0 else hi0
                lo = conf_lo if conf_lo > lo0 else lo0
                if lo > hi:  # the confidence event failed: fall back to today's interval
                    hi, lo = conf_hi, (conf_hi if conf_hi < conf_lo else conf_lo)
                    cache.pop(i, None)
                    cache.pop(j, None)
                pend = r.pending
                r.count = T1
                r.mean = m1
                r.upper = hi
                r.lower = lo
                r.pending = pend - 1 if pend > 0 else 0
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
        return None

    def _observe_cold(self, i: int, j: int, v: float) -> None:
        """One answer for a pair outside the overlay, straight into the (float64) arrays (i < j)."""
        d = self.__dict__
        mean, count, pending = d["_a_mean_"], d["_a_count_"], d["_a_pending_"]
        upper, lower = d["_a_upper_"], d["_a_lower_"]
        T = int(count[i, j])
        T1 = T + 1
        m1, hi, lo, failed = interval_step(float(mean[i, j]), T, v, self._radius_lookup(T1)[T1],
                                           float(upper[i, j]), float(lower[i, j]))
        if failed:
            self._active_cache.pop(i, None)
            self._active_cache.pop(j, None)
        pend = max(int(pending[i, j]) - 1, 0)
        mean[i, j] = mean[j, i] = m1
        count[i, j] = count[j, i] = T1
        upper[i, j] = upper[j, i] = hi
        lower[i, j] = lower[j, i] = lo
        pending[i, j] = pending[j, i] = pend
        self._touched.add(i)
        self._touched.add(j)

    # ------------------------------------------------------------------ questions
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
        # The scalar overlay for the common case of a long duel: every open round has a short cached
        # active set, none is due for a row refresh or decided now, and the window needs no refill.
        # Computes exactly what the general path would (same decisions, same order, same caches) on
        # the overlay's scalars, and hands over to it, having changed nothing observable, otherwise.
        if not self._fast_ok or type(budget) is not int or budget <= 0 or self.lookahead:  # noqa: E721
            return self._next_general(budget)
        open_rounds = self.open_rounds_
        if len(open_rounds) > budget and len(open_rounds) > SPREAD_MIN_ROUNDS:
            return self._next_general(budget)  # many open rounds: taken in turn (_next_spread)
        window = self.window
        if not open_rounds or type(window) is not int or window < 1:  # noqa: E721
            return self._next_general(budget)
        n = self.n_items
        if len(open_rounds) < window and self.next_round_ < n and (not self.stagger or self._room()):
            return self._next_general(budget)  # the window needs a refill (_room() without its call in long duels)
        cache = self._active_cache
        hrounds = self._hot_rounds
        triangle = self.triangle
        plan = []
        for j in open_rounds:
            c = cache.get(j)
            if c is None:
                return self._next_general(budget)
            act = c[0]
            if type(act) is not list:  # noqa: E721
                return self._next_general(budget)
            hr = hrounds.get(j)
            if hr is None:
                hr = hrounds[j] = RoundRecord(int(self.__dict__["_a_round_issued_"][j]), int(self.refresh_mark_[j]))
                self._hot_on = True
            if hr.cache is not c:
                hr.records = self._hot_records(j, act)
                hr.cache = c
                hr.arms = None
            arms = hr.arms
            if arms is None:
                arms = hr.arms = [(a, r, (j, a)) for a, r in zip(act, hr.records, strict=True)]
            iss = hr.issued
            if triangle:
                due = iss >> 3
                if iss - hr.refresh_mark >= (due if due > n else n):
                    return self._next_general(budget)  # a row refresh is due (see _eligible)
            # _decide_1nn's cached branch on the overlay's scalars.
            bu, bi = c[1]
            tmin = arms[0][1].count
            for a, r, _ in arms:
                ua = r.upper
                if ua < bu or (ua == bu and a < bi):
                    bu, bi = ua, a
                if r.count < tmin:
                    tmin = r.count
            for r in hr.records:
                if r.lower >= bu:
                    break
            else:
                r = None
            if r is not None:  # some arms are eliminated now
                rmin, ridx = c[1]
                keep = []
                for t in arms:
                    r = t[1]
                    if r.lower < bu:
                        keep.append(t)
                    else:
                        ua = r.upper
                        if ua < rmin or (ua == rmin and t[0] < ridx):
                            rmin, ridx = ua, t[0]
                if len(keep) < 2:
                    return self._next_general(budget)  # the round is decided: the general path certifies it
                act = [t[0] for t in keep]
                c = cache[j] = (act, (rmin, ridx), set(act))
                hr.cache = c
                hr.records = [t[1] for t in keep]
                arms = hr.arms = keep
                tmin = min([t[1].count for t in keep])
            plan.append((j, arms, hr, tmin))
        # The general path's issuing loop: round-robin over the rounds, one arm each per pass, of
        # _eligible's arms: the fewest-sampled undecided arms that are not pending.
        out: list[tuple[int, int]] = []
        cap = self.max_samples_per_round
        closed = None
        if len(plan) == 1:  # one open round (window 1, a long duel): its eligible arms in order
            j, arms, hr, tmin = plan[0]
            for _, r, question in arms:
                if r.count == tmin and not r.pending:
                    if len(out) >= budget:
                        break
                    out.append(question)
                    r.pending = 1
                    hr.issued += 1
                    if cap is not None and hr.issued >= cap:
                        self._close_capped(j)
                        closed = True
                        break
        else:
            eligible = [[t for t in arms if t[1].count == tmin and not t[1].pending] for _, arms, _, tmin in plan]
            for i, (_, r, question) in round_robin(eligible):
                if len(out) >= budget:
                    break
                j, _, hr, _ = plan[i]
                if r.pending or (closed is not None and j in closed):
                    continue  # already issued by the round of a in this call, or the round is capped
                out.append(question)
                r.pending += 1
                hr.issued += 1
                if cap is not None and hr.issued >= cap:
                    self._close_capped(j)
                    closed = closed or set()
                    closed.add(j)
        self.n_issued_ += len(out)
        if closed is not None and out and len(out) < budget and self._room():
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

    def _make_hot(self, key: int, d: dict) -> PairRecord:
        """Move pair ``key`` (i * n + j, i < j) into the overlay."""
        i, j = divmod(key, self.n_items)
        r = PairRecord(int(d["_a_count_"][i, j]), float(d["_a_mean_"][i, j]), float(d["_a_upper_"][i, j]),
                       float(d["_a_lower_"][i, j]), int(d["_a_pending_"][i, j]))
        self._hot[key] = r
        self._hot_on = True
        return r
