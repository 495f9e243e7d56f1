"""ANNTri's scalar overlay: exact SETri in Python scalars for long duels.

When every open round has a short cached active set (at most ``SMALL_ACTIVE`` arms), no row
refresh is due, no round is decided and the window needs no refill, ``next_questions`` and
``observe`` work on plain floats and ints instead of numpy scalars: each active arm's pair lives
in a :class:`PairRecord` and each open round's question count in a :class:`RoundRecord`, keyed in
the :class:`ScalarOverlay`'s ``hot`` (pair ``i * n + j``, i < j) and ``hot_rounds`` (round j) dicts.

The planner's public arrays ``mean_``, ``count_``, ``pending_``, ``upper_``, ``lower_`` and
``round_issued_`` are :func:`overlaid` properties: reading or assigning one first writes the
overlay back (``ScalarOverlay.drop``) and drops it, so every reader (the array paths, the platform, tests
writing into the arrays) sees the same numbers; while it holds entries it is the estimates'
``writeback``, so the round and question functions, which call ``Estimates.sync()`` before reading
the arrays, see them too. Questions, decisions and results are those of
the array path: ``tests/engine/test_anntri.py`` checks every question against a planner with
the fast paths off and against a trace recorded before the fast path existed.

Only for symmetric planners with k = 1, sub-Gaussian bounds and float64 bound matrices
(``ScalarOverlay.fast_ok``); the planner's ``observe`` and ``next_questions`` take its paths
(:meth:`ScalarOverlay.observe`, :meth:`ScalarOverlay.next_questions`) when they apply.
Numpy only; must never import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..bounds import UNIT_INTERVAL_BOUNDS
from .checks import SMALL_BATCH
from .estimates import Estimates
from .observe import observe_pair
from .questions import SPREAD_MIN_ROUNDS, round_robin
from .rounds import ROUND_CAPPED, Params, Rounds, close, drop_stale_active, room

#: The public arrays whose hot entries may live in the overlay (see :func:`overlaid`).
OVERLAID = ("mean_", "count_", "pending_", "upper_", "lower_", "round_issued_")


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
    see the truth. The pair arrays are the planner's :class:`engine.anntri.estimates.Estimates`'
    (``upper_``/``lower_`` of a head-based planner are computed from mean and count,
    ``materialise_bounds``; an assignment is adopted through ``set_bounds``); ``round_issued_``
    is its :class:`engine.anntri.rounds.Rounds`' ``issued``."""
    field = name.rstrip("_")
    bound = name in ("upper_", "lower_")
    on_estimates = name != "round_issued_"

    def get(self):
        est = self.__dict__.get("_est")
        if est is None:
            raise AttributeError(name)
        est.sync()
        if on_estimates:
            if bound and est.derived:
                return est.materialise_bounds()[0 if name == "upper_" else 1]
            return getattr(est, field)
        return self._rounds.issued

    def set(self, value):
        est = self.__dict__.get("_est")
        if est is None:
            raise AttributeError(f"{name} is set once the planner's state exists")
        est.sync()
        est.touched_all = True  # a whole array replaced: every row may differ
        if on_estimates:
            if bound and est.derived:
                est.set_bounds(**{field: value})
                return
            setattr(est, field, value)
            return
        self._rounds.issued = value

    return property(get, set, doc=doc)


class ScalarOverlay:
    """The overlay of one planner's :class:`.estimates.Estimates` and :class:`.rounds.Rounds`:
    the pairs and rounds of a long duel in Python scalars (``hot``, ``hot_rounds``), and the fast
    paths working on them. ``fast_ok`` says whether the fast paths apply to this planner at all.
    While it holds entries it is the estimates' ``writeback`` (:meth:`drop`)."""

    def __init__(self, est: Estimates, rounds: Rounds, p: Params, capable: bool = True) -> None:
        self.est, self.rounds = est, rounds
        self.hot: dict = {}
        self.hot_rounds: dict = {}
        # The scalar fast paths: exact SETri (k = 1, one layer per decision), sub-Gaussian
        # bounds (their radius depends on the count only) and float64 bounds.
        # Head-based (symmetric=False) estimates take the array paths.
        self.fast_ok = bool(capable and p.k == 1 and p.symmetric and est.bound not in UNIT_INTERVAL_BOUNDS
                            and not est.derived and est.upper.dtype == np.float64)
        if self.fast_ok:
            est.radius_lookup(0)

    def _hold(self) -> None:
        """Entries now live here: the estimates write them back before anything reads them."""
        self.est.writeback = self.drop

    def drop(self) -> None:
        """Write the overlay's scalars back into the arrays and forget them."""
        est = self.est
        n = est.n_items
        mean, count, pending = est.mean, est.count, est.pending
        upper, lower, issued = est.upper, est.lower, self.rounds.issued
        touched = est.touched
        for key, r in self.hot.items():
            i, j = divmod(key, n)
            touched.add(i)
            touched.add(j)
            count[i, j] = count[j, i] = r.count
            mean[i, j] = mean[j, i] = r.mean
            upper[i, j] = upper[j, i] = r.upper
            lower[i, j] = lower[j, i] = r.lower
            pending[i, j] = pending[j, i] = r.pending
        for j, hr in self.hot_rounds.items():
            issued[j] = hr.issued
        self.hot = {}
        self.hot_rounds = {}
        est.writeback = None

    # ------------------------------------------------------------------ answers
    def observe(self, answers: object, params: Params) -> bool:
        """A planner's ``observe`` of a short list of plain rows on the overlay; False (nothing
        changed) for any other batch, which the general path validates and applies or refuses."""
        # Short lists of plain (int, int, float) rows, in Python scalars: pairs in the overlay are
        # updated there, the others in the arrays, with the same arithmetic as the array paths. Any
        # other batch goes to the general path (which validates it and applies it or raises)
        # before anything changes.
        if type(answers) is not list or len(answers) > SMALL_BATCH:  # noqa: E721
            return False
        est = self.est
        n = est.n_items
        for row in answers:
            tr = type(row)
            if tr is not tuple and tr is not list:
                return False
            try:
                p, q, v = row
            except ValueError:
                return False
            if (type(p) is not int or type(q) is not int or type(v) is not float  # noqa: E721
                    or not (0 <= p < n and 0 <= q < n) or p == q or v - v != 0.0):
                return False
        hot = self.hot
        radius = est.radius_list
        top = len(radius)
        cache = self.rounds.active
        dirty = est.dirty if params.triangle else None
        for p, q, v in answers:
            i, j = (p, q) if p < q else (q, p)
            key = i * n + j
            r = hot.get(key)
            if r is None:
                observe_pair(est, self.rounds, i, j, v)
            else:
                T = r.count
                T1 = T + 1
                if T1 >= top:
                    radius = est.radius_lookup(T1)
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
            if cache:
                drop_stale_active(cache, i, j)
            if dirty is not None:
                dirty[key] = None
        self.rounds.n_samples += len(answers)
        return True

    # ------------------------------------------------------------------ questions
    def next_questions(self, budget: int, p: Params,
                       general: Callable[[int], list[tuple[int, int]]]) -> list[tuple[int, int]] | None:
        """A planner's ``next_questions`` on the overlay, or None (nothing changed) where it does not
        apply; ``general(budget)`` is the planner's array path (to refill the window and go on)."""
        # The scalar overlay for the common case of a long duel: every open round has a short cached
        # active set, none is due for a row refresh or decided now, and the window needs no refill.
        # Computes exactly what the general path would (same decisions, same order, same caches) on
        # the overlay's scalars, and returns None, having changed nothing observable, otherwise.
        if type(budget) is not int or budget <= 0 or p.lookahead:  # noqa: E721
            return None
        rounds = self.rounds
        open_rounds = rounds.open_rounds
        if len(open_rounds) > budget and len(open_rounds) > SPREAD_MIN_ROUNDS:
            return None  # many open rounds: taken in turn (_next_spread)
        window = p.window
        if not open_rounds or type(window) is not int or window < 1:  # noqa: E721
            return None
        n = p.n_items
        if len(open_rounds) < window and rounds.next_round < n and (not p.stagger or room(self.est, rounds, p)):
            return None  # the window needs a refill (_room() without its call in long duels)
        cache = rounds.active
        hrounds = self.hot_rounds
        triangle = p.triangle
        plan = []
        for j in open_rounds:
            c = cache.get(j)
            if c is None:
                return None
            act = c[0]
            if type(act) is not list:  # noqa: E721
                return None
            hr = hrounds.get(j)
            if hr is None:
                hr = hrounds[j] = RoundRecord(int(rounds.issued[j]), int(rounds.refresh_mark[j]))
                self._hold()
            if hr.cache is not c:
                hr.records = self._records(j, act)
                hr.cache = c
                hr.arms = None
            arms = hr.arms
            if arms is None:
                arms = hr.arms = [(a, r, (j, a)) for a, r in zip(act, hr.records, strict=True)]
            iss = hr.issued
            if triangle:
                due = iss >> 3
                if iss - hr.refresh_mark >= (due if due > n else n):
                    return None  # a row refresh is due (see _eligible)
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
                    return None  # the round is decided: the general path certifies it
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
        cap = p.max_samples_per_round
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
                        close(rounds, j, ROUND_CAPPED)
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
                    close(rounds, j, ROUND_CAPPED)
                    closed = closed or set()
                    closed.add(j)
        rounds.n_issued += len(out)
        if closed is not None and out and len(out) < budget and room(self.est, rounds, p):
            out.extend(general(budget - len(out)))  # refill the window, go on
        return out

    def _records(self, j: int, act: list) -> list:
        """The overlay records of pairs (j, a) for a in ``act``, moved in where missing."""
        n = self.est.n_items
        hot = self.hot
        recs = []
        for a in act:
            key = j * n + a if j < a else a * n + j
            r = hot.get(key)
            if r is None:
                r = self._move_in(key)
            recs.append(r)
        return recs

    def _move_in(self, key: int) -> PairRecord:
        """Move pair ``key`` (i * n + j, i < j) into the overlay."""
        est = self.est
        i, j = divmod(key, est.n_items)
        r = PairRecord(int(est.count[i, j]), float(est.mean[i, j]), float(est.upper[i, j]),
                       float(est.lower[i, j]), int(est.pending[i, j]))
        self.hot[key] = r
        self._hold()
        return r
