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
from numpy.typing import ArrayLike

from ..features import check_features
from ..graph import NO_NEIGHBOR, NeighborGraph
from ..kinds import KINDS
from ..utils import RandomState, check_n_items, check_state, counters_state, generator_state, store_params
from . import questions, refits
from .estimates import PairEstimates
from .fits import fit_arrays
from .model import PRIOR_NOISE, TRIPLET_LAPSE, TRIPLET_SCALE_PER_NOISE
from .parts import COUNTERS, Learned, learned_of_state, start, with_learned_names
from .split import SPLIT_EXPLORE, TRIPLET_PLACES, question_values, time_share, triplet_scale

#: Newton steps that move the pair distances by the triplets (``PooledRatings._with_triplets``)
TRIPLET_STEPS = 3


def _kind_seconds() -> dict[str, float]:
    """A careful rater's seconds per answer of a rating and of a triplet, from the kinds table."""
    return {"rating": float(KINDS["rating"].seconds), "triplet": float(KINDS["triplet"].seconds)}


@with_learned_names
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
    features : array of shape (n_items, n_features), or None (default)
        The items' features (an image embedding, measured attributes): read once into their space
        (``engine.features.feature_space``), they are a prior the ratings can overrule. Every fit places the
        items by a map of the features fitted with the ratings (how people weigh them) plus each item's
        offset from where its features put it (:mod:`.model`); the first fit starts from the features'
        leading components. Features that predict nothing get a map near 0.

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
        since (each pair's mean is updated at once). A refit of at most :data:`~.refits.FIT_INLINE_ANSWERS`
        answers runs inside the call instead. Neither is saved.

    What the learner learned is a :class:`~.parts.Learned`, made on first use (:func:`~.parts.start`;
    ``__init__`` stores the parameters only); ``rng_``, ``log_``, ``triplets_``, ``fit_``, ``fit_job_`` and
    the counters read through to it (:data:`~.parts.NAMES`).
    """

    VERSION = 1
    _COUNTERS = COUNTERS
    #: ``make_planner(..., features=X)`` passes the items' features (see ``features``)
    TAKES_FEATURES = True
    #: how the caller drives the learner (see ``pool`` and ``fitter`` above): not parameters, not saved
    pool = False
    fitter: Any = None
    #: what the learner learned (:attr:`_s`), None until its first use
    _parts: Learned | None = None

    def __init__(self, n_items: int, random_state: RandomState = None, dim: int = 4, warmup: float = 3.0,
                 explore: float = 0.1, shortlist: int = 10, refit_growth: float = 0.25,
                 features: ArrayLike | None = None) -> None:
        store_params(self, locals())
        self.n_items = check_n_items(n_items)
        if self.n_items < 2:
            raise ValueError("a rating learner needs at least 2 items")
        self._check_params()
        # the raw features until the first use reads them into their space (``_s``)
        self.features = None if features is None else check_features(features, self.n_items)

    @property
    def _s(self) -> Learned:
        """What the learner learned, started on first use (:func:`~.parts.start`)."""
        if self._parts is None:
            self._parts = start(self.n_items, self.random_state, self.features)
            self.features = None
        return self._parts

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
        """With features, also ``features_used`` (the last fit used them) and ``feature_share`` (the share of the
        space's prior spread their map got in it, :func:`~.model.feature_share`; None before a fit)."""
        out = {"answers": int(self.n_answers_), "questions_issued": int(self.n_issued_), "done": False,
               "items_certified": 0, "n_items": self.n_items, "fits": int(self.n_fits_),
               "raters": self.log_.n_raters, "triplets": len(self.triplets_)}
        if self.features_ is not None:
            share = None if self.fit_ is None else round(float(self.fit_.feature_share), 4)
            out.update(features_used=bool(share), feature_share=share)
        return out

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

    # ------------------------------------------------------------------ questions (:mod:`.questions`)
    def next_questions(self, budget: int) -> list[tuple[int, int]]:
        """Up to ``budget`` pairs ``(i, j)``: uniformly random during the warmup, then an ``explore`` share
        random and the rest where an item's best neighbour is least settled (:func:`.questions.next_questions`)."""
        return questions.next_questions(self, budget)

    def next_triplets(self, budget: int) -> list[tuple[int, int, int]]:
        """Up to ``budget`` triplets ``(head, a, b)``: an item's two likeliest neighbours against each other
        (:func:`.questions.next_triplets`)."""
        return questions.next_triplets(self, budget)

    # ------------------------------------------------------------------ refits (:mod:`.refits`)
    def refresh_if_due(self) -> None:
        """Refit if the answers call for it, inside the call or beside it (:func:`.refits.refresh_if_due`)."""
        refits.refresh_if_due(self)

    def settle_fit(self) -> bool:
        """Put a refit that finished beside the calls in place (or hand over one that is due); True if
        a fit was put in place."""
        return refits.settle_fit(self)

    def fit_ready(self) -> bool | None:
        return refits.fit_ready(self)

    # ------------------------------------------------------------------ state
    def to_state(self) -> dict:
        return {"class": type(self).__name__, "version": self.VERSION, "n_items": self.n_items,
                "params": self.get_params(), "rng": generator_state(self.rng_), **self.log_.to_state(),
                **self.triplets_.to_state(),
                "fit": None if self.fit_ is None else {k: (v.copy() if isinstance(v, np.ndarray) else v)
                                                       for k, v in fit_arrays(self.fit_).items()},
                "fit_job": None if self.fit_job_ is None else dict(self.fit_job_),
                **counters_state(self, self._COUNTERS),
                # the features' space only where there are features (a state without them is as before)
                **({} if self.features_ is None else {"features": self.features_.copy()})}

    @classmethod
    def from_state(cls, state: dict) -> Self:
        check_state(state, cls.__name__, (cls.VERSION,))
        p = cls(int(state["n_items"]), **state["params"])
        p._parts = learned_of_state(state, p.n_items)
        return p
