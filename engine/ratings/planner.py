"""Pooled ratings: a rating learner that is good at every budget. Every rating informs a fitted space
of the items (so a pair never asked still has an estimate), each rater's offset and slope are fitted
and taken out of their ratings, each pair's own mean is shrunk toward the space, and the next pairs are
those most likely to change some item's best neighbour (top-two Thompson sampling among each item's
shortlist, the items weighed by how likely their best is not among their first few), with a share of
uniformly random pairs. Triplets of the same items (``observe_triplets``) feed
the same fitted space, and ``next_triplets`` asks an item's two likeliest neighbours against each other.
Numpy only; must never import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

import numbers
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Self

import numpy as np

from ..graph import NO_NEIGHBOR, NeighborGraph
from ..kinds import KINDS
from ..utils import (
    RandomState,
    check_n_items,
    check_random_state,
    counters_state,
    generator_state,
    load_counters,
    planner_from_state,
    store_params,
)
from .estimates import PairEstimates
from .fits import FitTask, fit_arrays, fit_from_arrays, run_fit
from .log import RatingLog, TripletLog
from .model import PRIOR_NOISE, TRIPLET_LAPSE, TRIPLET_SCALE_PER_NOISE, Hyper, RatingFit
from .split import SPLIT_EXPLORE, TRIPLET_PLACES, question_values, time_share, triplet_scale

#: draws per item that weigh how likely its current best neighbour is to be beaten (:data:`HEAD_TOP`)
HEAD_DRAWS = 32
#: the least weight an item's questions get (an item whose neighbour looks settled is still checked)
HEAD_FLOOR = 0.02
#: an item's questions are weighed by how likely its current best is not among its ``HEAD_TOP`` nearest (a
#: draw of the estimates where at least this many of its shortlist beat it): a near tie between an item's
#: first two (either does) no longer draws questions that a neighbour outside its first few needs
HEAD_TOP = 3
#: Newton steps that move the pair distances by the triplets (``PooledRatings._with_triplets``)
TRIPLET_STEPS = 3
#: a refit of at most this many answers (ratings and triplets) runs inside the call even in a live pool:
#: 0.03-0.07 s on one core at 30-300 items, and handed to the fit process it lands a pass later, when a
#: small study has spent its first few hundred ratings on random pairs (30 items, 25 ratings per item,
#: batches of 200: 400 of the 750 were random, and live trailed offline by .09 hit@3 over 48 seeds)
FIT_INLINE_ANSWERS = 1000


def _kind_seconds() -> dict[str, float]:
    """A careful rater's seconds per answer of a rating and of a triplet, from the kinds table."""
    return {"rating": float(KINDS["rating"].seconds), "triplet": float(KINDS["triplet"].seconds)}


class PooledRatings:
    """Anytime nearest-neighbour learner from similarity ratings.

    Parameters
    ----------
    n_items : int
    random_state : None, int or numpy Generator
    dim : int, default 4
        Dimensions of the fitted space.
    warmup : float, default 3
        Uniformly random ratings per item before the first fit.
    explore : float, default 0.1
        Share of later questions asked as uniformly random pairs (keeps the space right everywhere,
        and keeps the learner near random pairs where its model misleads it).
    shortlist : int, default 10
        Candidates per item (nearest by the current estimates) its questions are chosen among.
    refit_growth : float, default 0.25
        Refit when the ratings have grown by this share since the last fit.

    ``observe`` takes ``(i, j, d)`` or ``(i, j, d, rater)`` rows: d the rating mapped to a distance in
    [0, 1] (0 = very alike), rater any hashable id of who answered (its offset and slope are fitted).
    ``observe_triplets`` takes ``(head, a, b, winner)`` rows (winner, one of a and b, judged more like
    head): their likelihood joins the ratings' in the fitted space (:mod:`.model`), so a study asking
    both kinds of the same items learns one model. ``next_triplets`` proposes ``(head, a, b)`` triplets.

    Attributes
    ----------
    pool, fitter :
        As :class:`engine.graph.RefitsBeside`: with ``pool`` set and a ``fitter`` (the worker's fit
        process) each refit is handed over as a :class:`~engine.ratings.fits.FitTask` and put in place
        by the first call after it is ready; calls in between use the previous fit and every rating
        since (each pair's mean is updated at once). A refit of at most :data:`FIT_INLINE_ANSWERS`
        answers runs inside the call instead. Neither is saved.
    """

    VERSION = 1
    _COUNTERS = ("n_answers", "n_issued", "n_fits", "fitted_on", "fitted_triplets")

    def __init__(self, n_items: int, random_state: RandomState = None, dim: int = 4, warmup: float = 3.0,
                 explore: float = 0.1, shortlist: int = 10, refit_growth: float = 0.25) -> None:
        store_params(self, locals())
        self.n_items = check_n_items(n_items)
        if self.n_items < 2:
            raise ValueError("a rating learner needs at least 2 items")
        self._check_params()
        self.pool = False
        self.fitter = None
        self._fit_running: tuple | None = None
        self.rng_ = check_random_state(random_state)
        self.log_ = RatingLog()
        self.triplets_ = TripletLog()
        self.fit_: RatingFit | None = None
        self._tau_key: tuple | None = None  # what the fitted triplet scale was made of
        self._tau_value: float | None = None
        self.fit_job_: dict | None = None  # the refit under way: {"answers", "seed", "triplets"}
        load_counters(self, self._COUNTERS)
        self._pairs = PairEstimates(self.n_items)  # derived from the log and the fit, never saved
        self._with_triplets_key: tuple | None = None  # what the triplet-moved estimates were made of
        self._with_triplets_value: tuple[np.ndarray, np.ndarray] | None = None

    def _check_params(self) -> None:
        def integer(name: str, lo: int) -> None:
            v = getattr(self, name)
            if not isinstance(v, (numbers.Integral, np.integer)) or isinstance(v, bool) or v < lo:
                raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")

        def real(name: str, lo: float, hi: float) -> None:
            v = getattr(self, name)
            if not isinstance(v, numbers.Real) or isinstance(v, bool) or not lo <= v <= hi:
                raise ValueError(f"{name} must be a number in [{lo}, {hi}], got {v!r}")

        integer("dim", 1)
        integer("shortlist", 2)
        real("warmup", 0, 1e6)
        real("explore", 0, 1)
        real("refit_growth", 1e-9, 1e6)

    def get_params(self) -> dict:
        return {"dim": self.dim, "warmup": self.warmup, "explore": self.explore, "shortlist": self.shortlist,
                "refit_growth": self.refit_growth}

    # ------------------------------------------------------------------ answers
    @property
    def done(self) -> bool:
        """An anytime learner: never done (the study's budget ends it)."""
        return False

    def observe(self, answers: Sequence[Sequence[Any]]) -> None:
        """Apply ``(i, j, d)`` or ``(i, j, d, rater)`` rows (d a rating mapped to [0, 1], 0 = alike; the
        priors are in those units, but any distances are taken)."""
        if not len(answers):
            return
        n = self.n_items
        pairs = np.empty((len(answers), 2), np.int64)
        values = np.empty(len(answers))
        raters: list[Hashable] = []
        for t, row in enumerate(answers):
            if len(row) not in (3, 4):
                raise ValueError(f"a rating answer is (i, j, d) or (i, j, d, rater), got {row!r}")
            i, j, d = int(row[0]), int(row[1]), float(row[2])
            if not (0 <= i < n and 0 <= j < n) or i == j:
                raise ValueError(f"a rating answer needs two distinct items in [0, {n}), got {row!r}")
            if not np.isfinite(d):
                raise ValueError(f"a rating answer's distance must be a number, got {row!r}")
            pairs[t] = (i, j)
            values[t] = d
            raters.append(row[3] if len(row) == 4 else None)
        start, stop = self.log_.add(pairs, values, raters)
        self._pairs.add(self.log_, start, stop)
        self.n_answers_ += len(values)

    def observe_triplets(self, answers: Sequence[Sequence[Any]]) -> None:
        """Apply ``(head, a, b, winner)`` rows: winner (a or b) judged more like head than the other."""
        if not len(answers):
            return
        n = self.n_items
        rows = np.empty((len(answers), 3), np.int64)
        for t, row in enumerate(answers):
            if len(row) != 4:
                raise ValueError(f"a triplet answer is (head, a, b, winner), got {row!r}")
            h, a, b, w = (int(x) for x in row)
            if not all(0 <= x < n for x in (h, a, b)) or len({h, a, b}) != 3 or w not in (a, b):
                raise ValueError(f"a triplet answer needs three distinct items in [0, {n}) and a winner among "
                                 f"the candidates, got {row!r}")
            rows[t] = (h, w, b if w == a else a)
        self.triplets_.add(rows)
        self.n_answers_ += len(rows)

    def forget(self, questions: Sequence[Sequence[Any]]) -> int:
        """Nothing is held for questions never answered (each is chosen afresh): releases none."""
        return 0

    # ------------------------------------------------------------------ estimates
    def _pair_estimates(self) -> PairEstimates:
        """The pair estimates, built from the whole log if a fit (or nothing yet) since made them stale."""
        if not self._pairs.built:
            self._pairs.build(self.log_, self.fit_, int(self.fitted_on_), int(self.dim))
        return self._pairs

    def estimates(self) -> tuple[np.ndarray, np.ndarray]:
        """(distances, their variances), both (n_items, n_items): each pair's mean rating (the raters'
        offsets and slopes taken out) shrunk toward the space's distance (before a fit: the mean of
        all ratings), by how many ratings it has against how far pairs stray from the space; then moved by
        the triplets (:meth:`_with_triplets`). Diagonal: inf. Read-only arrays of the learner's own, valid
        until the next answer (copy to keep them)."""
        pairs = self._pair_estimates()
        if not len(self.triplets_):
            return pairs.current(self.log_)
        key = (len(self.log_), len(self.triplets_), int(self.n_fits_))
        if self._with_triplets_key != key:
            mean, precision = pairs.base(self.log_)
            tau = TRIPLET_SCALE_PER_NOISE * PRIOR_NOISE if self.fit_ is None else self.fit_.triplet_scale
            mean, precision = self._with_triplets(mean, precision, tau)
            np.fill_diagonal(mean, np.inf)
            mean.flags.writeable = False
            var = 1.0 / precision
            var.flags.writeable = False
            self._with_triplets_key, self._with_triplets_value = key, (mean, var)
        return self._with_triplets_value

    def _measured(self) -> bool:
        """Enough of both kinds to measure them: a fit, and :data:`~.split.SPLIT_EXPLORE` ratings and
        triplets per item."""
        least = SPLIT_EXPLORE * self.n_items
        return self.fit_ is not None and self.n_items >= 3 and min(len(self.log_), len(self.triplets_)) >= least

    def triplet_scale(self) -> float:
        """A triplet's logistic scale (distance units) as this study's triplets show it, what
        :meth:`split_evidence` weighs a triplet by: fitted from the triplets (:func:`~.split.triplet_scale`)
        once there are enough ratings and triplets to measure it (:meth:`_measured`), the model's fixed
        multiple of the rating noise before. Cached per fit. The fit and the estimates keep the fixed
        scale (moving the pairs by the fitted one cost a test's seed two items of 24 with 60 ratings and
        60 triplets per item, where it came out .15-.17 against the fixed .20).

        Each triplet is judged by the estimates before the triplets move them: each pair's ratings and the
        space's distance, the space's variance by how many ratings and triplets (half a rating each,
        :data:`~.split.TRIPLET_PLACES`) place its items. The space is fitted to the triplets too, which pulls
        the scale down while answers are few (30 items, 5 of each per item: .10-.15 against a true .21, and
        by the ratings alone as the space's certainty .07); the ways tried that do not judge a triplet by a
        space fitted to it came out far above the truth (30 items, up to 1,500 of each kind): by the
        estimates that chose each triplet, twice it (the leader is the least of several estimates, so it
        lost more often than the noise says); by a fit of the other half of the triplets, or of the ratings
        alone, two to five times (those estimates are off by more than their variances say)."""
        if not self._measured():
            return TRIPLET_SCALE_PER_NOISE * PRIOR_NOISE if self.fit_ is None else self.fit_.triplet_scale
        key = (int(self.fitted_on_), int(self.fitted_triplets_), int(self.n_fits_))
        if self._tau_key != key:
            pairs = self._pair_estimates()
            mean, _ = pairs.base(self.log_)
            rows = self.triplets_.rows[: key[1]]
            h, w, lo = rows.T
            fit, n = self.fit_, self.n_items
            noise = float(fit.estimated.noise)
            # how surely the space places each item: by its ratings and, half a rating each, its triplets
            # (by its ratings alone, a space the triplets placed looked unsure, and the scale came out small)
            per_item = np.bincount(self.log_.pairs[: key[0]].ravel(), minlength=n) \
                + TRIPLET_PLACES * np.bincount(rows.ravel(), minlength=n) + 1.0
            item_var = noise**2 * (int(self.dim) + 1) / per_item
            spread2 = fit.estimated.residual**2 + 0.5 * (item_var[:, None] + item_var[None, :])
            var = 1.0 / (1.0 / spread2 + pairs.counts / noise**2)
            self._tau_key = key
            self._tau_value = triplet_scale(mean[h, lo] - mean[h, w], var[h, w] + var[h, lo],
                                            TRIPLET_SCALE_PER_NOISE * noise, TRIPLET_LAPSE)
        return float(self._tau_value)

    def _with_triplets(self, mean: np.ndarray, precision: np.ndarray, tau: float) -> tuple[np.ndarray, np.ndarray]:
        """The pair distances moved by every triplet: the most likely distances under the Gaussian ``mean`` and
        ``precision`` of each pair (space and ratings) times the triplets' likelihood (the model's, at scale
        ``tau``), each pair taken on its own (a diagonal Newton's method, ``TRIPLET_STEPS`` steps); their
        precision grows by the triplets' information. A triplet speaks of the two pairs it compares, the
        space of them all, so a pair's own triplets count beside its own ratings."""
        n = self.n_items
        rows = self.triplets_.rows
        hw = rows[:, 0] * n + rows[:, 1]
        hl = rows[:, 0] * n + rows[:, 2]
        wh = rows[:, 1] * n + rows[:, 0]
        lh = rows[:, 2] * n + rows[:, 0]
        m0, p0 = mean.ravel(), precision.ravel()
        m = m0.copy()
        lapse = TRIPLET_LAPSE
        for _ in range(TRIPLET_STEPS):
            u = (m[hl] - m[hw]) / tau
            s = 0.5 * (1.0 + np.tanh(0.5 * u))
            p = 0.5 * lapse + (1.0 - lapse) * s
            slope = (1.0 - lapse) * s * (1.0 - s) / (p * tau)  # d log p / d d(h, l) = - d log p / d d(h, w)
            info = slope**2  # each answer's information on either pair's distance (its Fisher information)
            grad = np.zeros(n * n)
            curv = np.zeros(n * n)
            for codes, sign in ((hl, 1.0), (lh, 1.0), (hw, -1.0), (wh, -1.0)):
                grad += np.bincount(codes, weights=sign * slope, minlength=n * n)
                curv += np.bincount(codes, weights=info, minlength=n * n)
            m = m + (grad - p0 * (m - m0)) / (p0 + curv)
        return m.reshape(n, n), (p0 + curv).reshape(n, n)

    def neighbor_graph(self, k: int = 1) -> NeighborGraph:
        """Each item's ``k`` nearest by :meth:`estimates` (uncertified: the learner gives no certificate;
        ``lower``/``upper`` two standard deviations either side)."""
        k = int(k)
        n = self.n_items
        mean, var = self.estimates()
        kk = min(k, n - 1)
        if kk == 1:  # the first of the smallest, as a stable sort puts it (without sorting n x n)
            order = np.argmin(mean, axis=1)[:, None]
        else:
            order = np.argsort(mean, axis=1, kind="stable")[:, :kk]
        est = np.take_along_axis(mean, order, axis=1)
        sd = np.sqrt(np.take_along_axis(var, order, axis=1))
        counts = np.take_along_axis(self._pairs.counts, order, axis=1).astype(np.int64)
        if len(self.log_) == 0 and (self.fit_ is None or len(self.triplets_) == 0):
            order = np.full((n, kk), NO_NEIGHBOR, np.int64)
        nb = np.full((n, k), NO_NEIGHBOR, np.int64)
        nb[:, :kk] = order
        pad = np.full((n, k), np.nan)
        e, lo, hi, c = pad.copy(), pad.copy(), pad.copy(), np.zeros((n, k), np.int64)
        e[:, :kk], lo[:, :kk], hi[:, :kk], c[:, :kk] = est, est - 2 * sd, est + 2 * sd, counts
        has = nb != NO_NEIGHBOR
        e[~has] = lo[~has] = hi[~has] = np.nan
        return NeighborGraph(nb, np.zeros(n, bool), e, lo, hi, c)

    def current_neighbors(self) -> np.ndarray:
        return self.neighbor_graph(1).neighbors[:, 0]

    def result(self) -> NeighborGraph:
        return self.neighbor_graph(1)

    def embedding(self) -> np.ndarray | None:
        """The fitted space (n_items, dim), None before the first fit."""
        return None if self.fit_ is None else self.fit_.points.copy()

    def progress(self) -> dict:
        return {"answers": int(self.n_answers_), "questions_issued": int(self.n_issued_), "done": False,
                "items_certified": 0, "n_items": self.n_items, "fits": int(self.n_fits_),
                "raters": self.log_.n_raters, "triplets": len(self.triplets_)}

    # ------------------------------------------------------------------ the split between kinds
    def split_evidence(self, seconds: Mapping[str, float] | None = None) -> dict:
        """What each kind of question buys, measured from this study's answers (:mod:`.split`), and the share
        of rater time ratings should get by it (``rating_share``; triplets the rest). ``seconds`` a rater's
        seconds per answer of each kind (``{"rating": s, "triplet": s}``; default the kinds table's).

        Until there is a fit and :data:`~.split.SPLIT_EXPLORE` answers of each kind per item, half the time
        each (``phase`` "explore"); then ``phase`` "evidence": each kind's noise (``rating_noise`` a rating's
        SD from the fit, ``triplet_scale`` a triplet's logistic scale, :meth:`triplet_scale`), each kind's
        value per answer (``rating_value``, ``triplet_value``: the variance one answer takes off the distances
        the items' best neighbours are chosen by, :func:`~.split.question_values`) and the share that follows
        the ratio of the values per second (:func:`~.split.time_share`)."""
        seconds = dict(_kind_seconds() if seconds is None else seconds)
        n = self.n_items
        noise = PRIOR_NOISE if self.fit_ is None else float(self.fit_.estimated.noise)
        prior_tau = TRIPLET_SCALE_PER_NOISE * noise
        out = {"phase": "explore", "rating_share": 0.5, "seconds": seconds, "rating_noise": noise,
               "triplet_scale": prior_tau, "ratings": len(self.log_), "triplets": len(self.triplets_),
               "rating_value": None, "triplet_value": None}
        if not self._measured():
            return out
        tau = self.triplet_scale()
        mean, var = self.estimates()
        cand = np.argpartition(mean, min(self.shortlist, n - 1) - 1, axis=1)[:, : min(self.shortlist, n - 1)]
        rating, triplet = question_values(mean, var, cand, noise, tau, TRIPLET_LAPSE)
        out.update(phase="evidence", triplet_scale=tau, rating_value=rating, triplet_value=triplet,
                   rating_share=time_share(rating, triplet, seconds))
        return out

    def time_shares(self, seconds: Mapping[str, float] | None = None) -> dict[str, float]:
        """The share of rater time each kind of question should get next, ``{"rating": r, "triplet": 1 - r}``
        (:meth:`split_evidence`): what a study asking both kinds of the same items sets its kinds' shares
        of questions by (each share over its kind's seconds per answer, normalised)."""
        share = self.split_evidence(seconds)["rating_share"]
        return {"rating": share, "triplet": 1.0 - share}

    # ------------------------------------------------------------------ questions
    def _random_pairs(self, m: int) -> np.ndarray:
        n = self.n_items
        i = self.rng_.integers(n, size=m)
        j = (i + 1 + self.rng_.integers(n - 1, size=m)) % n
        return np.column_stack([i, j])

    def next_questions(self, budget: int) -> list[tuple[int, int]]:
        """Up to ``budget`` pairs ``(i, j)``: during the warmup uniformly random; then an ``explore``
        share uniformly random and the rest where an item's best neighbour is least settled: the item
        drawn by how likely its best is not among its first few, and (top-two Thompson sampling) the best
        of its shortlist under one draw of the estimates or, half the time, the best of another draw but
        that."""
        budget = int(budget)
        if budget <= 0:
            return []
        self.refresh_if_due()
        if self.n_answers_ < self.warmup * self.n_items or self.fit_ is None:
            pairs = self._random_pairs(budget)
        else:
            n_random = int(self.rng_.binomial(budget, self.explore))
            pairs = np.concatenate([self._random_pairs(n_random), self._adaptive_pairs(budget - n_random)])
            pairs = pairs[self.rng_.permutation(len(pairs))]
        self.n_issued_ += len(pairs)
        return [(int(i), int(j)) for i, j in pairs]

    def next_triplets(self, budget: int) -> list[tuple[int, int, int]]:
        """Up to ``budget`` triplets ``(head, a, b)``: during the warmup uniformly random; then an ``explore``
        share uniformly random and the rest an item drawn as :meth:`next_questions` draws it, with the best
        of its shortlist under one draw of the estimates against the best of another draw but that one (a
        triplet asks the two directly), in random order."""
        budget = int(budget)
        if budget <= 0 or self.n_items < 3:
            return []
        self.refresh_if_due()
        n, rng = self.n_items, self.rng_
        if self.n_answers_ < self.warmup * self.n_items or self.fit_ is None:
            n_random = budget
        else:
            n_random = int(rng.binomial(budget, self.explore))
        out = np.empty((budget, 3), np.int64)
        heads = rng.integers(n, size=n_random)
        first = (heads + 1 + rng.integers(n - 1, size=n_random)) % n
        # the second candidate uniformly among the n - 2 items that are neither the head nor the first
        k = rng.integers(n - 2, size=n_random)
        lo, hi = np.minimum(heads, first), np.maximum(heads, first)
        second = k + (k >= lo) + ((k + (k >= lo)) >= hi)
        out[:n_random] = np.column_stack([heads, first, second])
        if budget > n_random:
            h, a, b = self._adaptive_heads(budget - n_random)
            out[n_random:] = np.column_stack([h, a, b])
        out = out[rng.permutation(budget)]
        swap = rng.random(budget) < 0.5
        out[swap, 1], out[swap, 2] = out[swap, 2], out[swap, 1].copy()
        self.n_issued_ += len(out)
        return [(int(h), int(a), int(b)) for h, a, b in out]

    def _adaptive_pairs(self, m: int) -> np.ndarray:
        if m <= 0:
            return np.empty((0, 2), np.int64)
        heads, a, b = self._adaptive_heads(m)
        pick = np.where(self.rng_.random(m) < 0.5, a, b)
        return np.column_stack([heads, pick])

    def _adaptive_heads(self, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``m`` items drawn by how likely their best is not among their :data:`HEAD_TOP` nearest
        (:meth:`_unsettled`), each with the best of its shortlist under one draw of the estimates and the
        best of another draw but that one.

        In rounds of at most one question per item: a batch larger than that (a live pool's pass at few
        items) counts each round's pairs as half-answered before the next round is drawn (their variance
        shrunk by half a rating each; the means stay), so one batch leans less on the same few unsettled
        pairs (30 items, live batches of 200, 48 seeds: hit@3 at 400 ratings per item .92 against .90,
        level at the other budgets)."""
        n = self.n_items
        mean, var = self.estimates()
        s = min(self.shortlist, n - 1)
        if len(self.triplets_):
            cand = np.argpartition(mean, s - 1, axis=1)[:, :s]
        else:  # kept up to date row by row as ratings come
            cand = self._pairs.shortlist(self.log_, s)
        mu = np.take_along_axis(mean, cand, axis=1)
        v = np.take_along_axis(var, cand, axis=1)
        rng = self.rng_
        lead = np.argmin(mu, axis=1)
        out = []
        for start in range(0, m, n):
            k = min(n, m - start)
            if start:
                v = self._half_answered(v, cand, *out[-1])
            sd = np.sqrt(v)
            weight = self._unsettled(mu, sd, lead) + HEAD_FLOOR
            heads = rng.choice(n, size=k, p=weight / weight.sum())
            first = mu[heads] + sd[heads] * rng.standard_normal((k, s))
            second = mu[heads] + sd[heads] * rng.standard_normal((k, s))
            a = np.argmin(first, axis=1)
            second[np.arange(k), a] = np.inf
            out.append((heads, a, np.argmin(second, axis=1)))
        heads, a, b = (np.concatenate(parts) for parts in zip(*out, strict=True))
        return heads, cand[heads, a], cand[heads, b]

    def _unsettled(self, mu: np.ndarray, sd: np.ndarray, lead: np.ndarray) -> np.ndarray:
        """(n_items,): the share of :data:`HEAD_DRAWS` draws of each item's shortlist (means ``mu``, SDs ``sd``,
        both (n_items, s)) in which at least :data:`HEAD_TOP` candidates come out nearer than its current best
        (column ``lead``): how likely the best is not among the item's first few."""
        draws = mu[None] + sd[None] * self.rng_.standard_normal((HEAD_DRAWS, *mu.shape))
        best = np.take_along_axis(draws, np.broadcast_to(lead[None, :, None], (HEAD_DRAWS, len(lead), 1)), axis=2)
        return np.mean(np.sum(draws < best, axis=2) >= min(HEAD_TOP, mu.shape[1] - 1), axis=0)

    def _half_answered(self, v: np.ndarray, cand: np.ndarray, heads: np.ndarray, a: np.ndarray,
                       b: np.ndarray) -> np.ndarray:
        """The shortlists' variances ``v`` (n_items, s) once the pairs of ``heads`` with their candidates at
        ``a`` and ``b`` have half a rating each (either may be asked), in both items' shortlists."""
        noise = PRIOR_NOISE if self.fit_ is None else self.fit_.estimated.noise
        got = np.zeros_like(v)
        for col in (a, b):
            np.add.at(got, (heads, col), 0.5)
            # the same pair in the candidate's own shortlist
            other = cand[heads, col]
            hit = cand[other] == heads[:, None]
            rows, cols = np.nonzero(hit)
            np.add.at(got, (other[rows], cols), 0.5)
        return 1.0 / (1.0 / v + got / noise**2)

    # ------------------------------------------------------------------ refits
    def _needs_refit(self) -> bool:
        if self.fit_job_ is not None:
            return True
        taken = len(self.log_) + len(self.triplets_)
        if self.n_fits_ == 0:
            return taken >= max(self.warmup * self.n_items, 2)
        return taken >= (self.fitted_on_ + self.fitted_triplets_) * (1.0 + self.refit_growth) + 1

    def refresh_if_due(self) -> None:
        """Refit if the ratings call for it: to the end here, or handed to the ``fitter`` of a live pool
        (put in place by a later call once ready) unless it is small (:data:`FIT_INLINE_ANSWERS`)."""
        if not self._needs_refit():
            return
        if self.fit_job_ is None:
            self.fit_job_ = {"answers": int(len(self.log_)), "seed": int(self.rng_.integers(2**31 - 1)),
                             "triplets": int(len(self.triplets_))}
        task = self._fit_task()
        if self.fitter is None or not self.pool or task.answers <= FIT_INLINE_ANSWERS:
            self._take_fit(run_fit(task))
            return
        running = self._fit_running
        if running is None or running[0] != task.key:
            running = self._fit_running = (task.key, self.fitter.fit(task))
        if running[1].done():
            self._fit_running = None
            self._take_fit(running[1].result())  # a failed fit raises here: the pass fails and says why

    def _fit_task(self) -> FitTask:
        job = self.fit_job_
        t = int(job["answers"])
        log = self.log_
        # the spreads the last fit suggests (empirical Bayes), but the priors' once triplets shape the space:
        # its spread is then no longer the ratings', and the estimates ran away (raters' log-slope SD 1.9-2.3
        # against a true 0.3), so that ratings with triplets did worse than ratings alone
        # (benchmarks/rating_learners.py --mixed)
        estimated = self.fit_ is not None and not len(self.triplets_)
        hyper = self.fit_.estimated.to_list() if estimated else Hyper().to_list()
        return FitTask(self.n_items, int(self.dim), log.pairs[:t].copy(), log.values[:t].copy(),
                       log.raters[:t].copy(), log.n_raters,
                       None if self.fit_ is None else fit_arrays(self.fit_),
                       tuple(hyper), int(job["seed"]), self.triplets_.rows[: int(job.get("triplets", 0))].copy())

    def _take_fit(self, arrays: dict) -> None:
        self.fit_ = fit_from_arrays(arrays)
        self.fitted_on_ = int(self.fit_job_["answers"])
        self.fitted_triplets_ = int(self.fit_job_.get("triplets", 0))
        self.fit_job_ = None
        self.n_fits_ += 1
        self._pairs.clear()  # every rating re-read with the raters' new offsets and slopes

    def settle_fit(self) -> bool:
        """Put a refit that finished beside the calls in place (or hand over one that is due); True if
        a fit was put in place."""
        before = self.n_fits_
        if self.fitter is not None and self.pool and self._needs_refit():
            self.refresh_if_due()
        return self.n_fits_ != before

    def fit_ready(self) -> bool | None:
        running = self._fit_running
        if running is None or self.fit_job_ is None or self.fitter is None or not self.pool:
            return None
        return bool(running[1].done())

    # ------------------------------------------------------------------ state
    def to_state(self) -> dict:
        return {"class": type(self).__name__, "version": self.VERSION, "n_items": self.n_items,
                "params": self.get_params(), "rng": generator_state(self.rng_), **self.log_.to_state(),
                **self.triplets_.to_state(),
                "fit": None if self.fit_ is None else {k: (v.copy() if isinstance(v, np.ndarray) else v)
                                                       for k, v in fit_arrays(self.fit_).items()},
                "fit_job": None if self.fit_job_ is None else dict(self.fit_job_),
                **counters_state(self, self._COUNTERS)}

    @classmethod
    def from_state(cls, state: dict) -> Self:
        p = planner_from_state(cls, state)
        p.log_ = RatingLog.from_state(state)
        p.triplets_ = TripletLog.from_state(state)
        p.fit_ = None if state["fit"] is None else fit_from_arrays(state["fit"])
        job = state["fit_job"]
        p.fit_job_ = None if job is None else {k: int(v) for k, v in job.items()}
        load_counters(p, cls._COUNTERS, {"fitted_triplets": 0, **state})  # (states saved before triplets)
        return p
