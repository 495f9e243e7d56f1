"""Simulated similarity ratings as noisy as people's: a truth of mean ratings with near-ties, raters who
each use the scale their own way (an offset and a spread), and a large per-rating noise, all on a
1–9-like scale; the statistics that describe a table of ratings; and the same model fitted to a pilot.

The defaults reproduce what a table of real ratings showed (30 items, 253 ratings of every pair by 253
people, 1–9): one rating's spread around its pair's mean SD 2.2 points, the pair means' SD 0.7 (2.5 to
6.9), people's mean ratings SD 1.0, an item's best and second-best neighbour a median 0.12 rating-SDs
apart and under 0.05 SDs for 17% of items (:func:`rating_statistics`; a simulated table of 253 raters
gives 2.15, 0.64, 2.6 to 6.5, 0.96, 0.125 and 26%, mean of 6 seeds). Imports the engine, never Flask,
Redis, RQ, ``workers`` or ``webapp``. ``means`` ndarray of shape (n_items, n_items), symmetric: the
rating of a pair by the average rater (higher = more alike); ratings map to distances in [0, 1] as a
rating study maps its scale (:meth:`RatingScale.distance`).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import brentq
from scipy.spatial.distance import pdist, squareform
from scipy.special import ndtr

from engine.utils import RandomState, check_random_state

#: Figures of the table of real ratings the defaults are fitted to (see the module docstring).
REAL_RATINGS = {"rating_sd": 2.2, "pair_mean_sd": 0.7, "pair_mean_min": 2.5, "pair_mean_max": 6.9,
                "rater_mean_sd": 1.0, "gap_median": 0.12, "gap_under_0.05": 0.17}


@dataclass(frozen=True)
class RatingScale:
    """A rating scale from ``low`` (very different) to ``high`` (very alike) in steps of ``step``."""

    low: float = 1.0
    high: float = 9.0
    step: float = 1.0

    def __post_init__(self) -> None:
        if not self.high > self.low or self.step < 0:
            raise ValueError("a rating scale needs high > low and step >= 0")

    def snap(self, values: np.ndarray) -> np.ndarray:
        v = np.clip(values, self.low, self.high)
        if self.step:
            v = self.low + np.round((v - self.low) / self.step) * self.step
        return np.clip(v, self.low, self.high)

    def distance(self, values: ArrayLike) -> np.ndarray:
        """The distance in [0, 1] a rating study gives a rating: 0 for ``high``, 1 for ``low``."""
        v = np.asarray(values, np.float64)
        return np.clip(1.0 - (v - self.low) / (self.high - self.low), 0.0, 1.0)

    @property
    def middle(self) -> float:
        return 0.5 * (self.low + self.high)


@dataclass(frozen=True)
class RatingNoise:
    """How people turn a pair's mean rating m into one rating, in points of the scale:
    round(middle + offset + slope·(m − middle) + N(0, ``noise_sd``²)), clipped to the scale, where each
    rater draws offset ~ N(0, ``offset_sd``²) and log(slope) ~ N(0, ``slope_sd``²) once.
    ``per_rater`` ratings in a row come from one rater (a rater's session)."""

    noise_sd: float = 2.15
    offset_sd: float = 1.05
    slope_sd: float = 0.3
    per_rater: int = 100
    scale: RatingScale = RatingScale()

    def __post_init__(self) -> None:
        if min(self.noise_sd, self.offset_sd, self.slope_sd) < 0 or self.per_rater < 1:
            raise ValueError("noise, offset and slope SDs must be >= 0 and per_rater >= 1")


#: the default truth: items in a latent space of this many dimensions, plus this share of the pair
#: means' variance that no space explains (pair-specific impressions)
LATENT_DIM = 6
RESIDUAL_SHARE = 0.45
#: the pair means' mean and SD, points of a 1-9 scale
MEAN_RATING, MEAN_SD = 4.1, 0.7
#: the length scale of the fall, as a share of the median distance
TAIL = 0.7


def latent_means(n_items: int, dim: int = LATENT_DIM, residual: float = RESIDUAL_SHARE, mean: float = MEAN_RATING,
                 sd: float = MEAN_SD, random_state: RandomState = None) -> np.ndarray:
    """A truth of mean ratings: Gaussian points in ``dim`` dimensions, the rating falling with their
    distance, plus a symmetric pair-specific part carrying ``residual`` of the variance; rescaled to
    ``mean`` and ``sd`` over the pairs. Returns ``means`` (diagonal: the scale's top, never read)."""
    return latent_parts(n_items, dim, residual, mean, sd, random_state)[0]


def latent_parts(n_items: int, dim: int = LATENT_DIM, residual: float = RESIDUAL_SHARE, mean: float = MEAN_RATING,
                 sd: float = MEAN_SD, random_state: RandomState = None,
                 points: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, float]:
    """:func:`latent_means` (the same draws) and its parts: ``(means, structured, residual_sd)``,
    ``structured`` the means less their pair-specific part (what a space of the items can hold; diagonal
    as ``means``'), ``residual_sd`` the pair-specific part's SD in points (the means are ``structured``
    plus an independent N(0, residual_sd²) per pair). ``points`` (n_items, dim): the latent points, if drawn
    by the caller (they are the first draw of ``random_state``: drawn there, the means are the same)."""
    rng = check_random_state(random_state)
    X = rng.normal(size=(n_items, dim)) if points is None else np.asarray(points, np.float64)
    d = pdist(X)
    # a rating falls fast from the nearest pairs, then levels off: a few pairs stand out as alike
    structured = np.exp(-d / (TAIL * np.median(d)))
    structured = (structured - structured.mean()) / structured.std()
    noise = rng.normal(size=d.shape)
    v = np.sqrt(1.0 - residual) * structured + np.sqrt(residual) * noise
    centre, spread = v.mean(), v.std()
    parts = []
    for part in (v, np.sqrt(1.0 - residual) * structured):
        M = squareform(mean + sd * (part - centre) / spread)
        np.fill_diagonal(M, 9.0)
        parts.append(M)
    return parts[0], parts[1], float(sd * np.sqrt(residual) / spread)


class RatingSimulator:
    """Raters answering pairs ``(i, j)`` of a truth of ``means`` with :class:`RatingNoise`.

    :meth:`answer` gives ``(i, j, d, rater)`` rows (the distance a study maps the rating to, and the
    rater's id), the rows a rating learner observes; raters take turns, ``per_rater`` ratings each."""

    def __init__(self, means: ArrayLike, noise: RatingNoise = RatingNoise(), random_state: RandomState = None,
                 parts: tuple[np.ndarray, float] | None = None) -> None:
        self.means = np.asarray(means, np.float64)
        #: (structured, residual_sd) of :func:`latent_parts` where the truth came from it (what a space of
        #: the items can hold, for benchmarks that hand a learner the truth's space), else None
        self.parts = parts
        #: the latent points of the truth where :func:`realistic_simulator` made it, else None
        self.points: np.ndarray | None = None
        if self.means.ndim != 2 or self.means.shape[0] != self.means.shape[1]:
            raise ValueError("means must be a square matrix")
        self.noise = noise
        self.rng = check_random_state(random_state)
        self.n_given = 0
        self._offsets: list[float] = []
        self._slopes: list[float] = []

    @property
    def n_items(self) -> int:
        return self.means.shape[0]

    @property
    def distances(self) -> np.ndarray:
        """The truth as distances (the average rater's mean rating, mapped as a study maps it)."""
        D = self.noise.scale.distance(self.means)
        np.fill_diagonal(D, 0.0)
        return D

    def _rater_params(self, raters: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        while len(self._offsets) <= int(raters.max(initial=0)):
            self._offsets.append(float(self.rng.normal(0.0, self.noise.offset_sd)))
            self._slopes.append(float(np.exp(self.rng.normal(0.0, self.noise.slope_sd))))
        return np.asarray(self._offsets)[raters], np.asarray(self._slopes)[raters]

    def ratings(self, pairs: ArrayLike, raters: ArrayLike | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(ratings on the scale, rater ids) for ``pairs`` (T, 2); raters by turns unless given."""
        p = np.asarray(pairs, np.int64).reshape(-1, 2)
        if raters is None:
            raters = (self.n_given + np.arange(len(p))) // self.noise.per_rater
            self.n_given += len(p)
        raters = np.asarray(raters, np.int64)
        offset, slope = self._rater_params(raters)
        mid = self.noise.scale.middle
        m = self.means[p[:, 0], p[:, 1]]
        raw = mid + offset + slope * (m - mid) + self.rng.normal(0.0, self.noise.noise_sd, len(p))
        return self.noise.scale.snap(raw), raters

    def answer(self, pairs: Sequence[Sequence[int]]) -> list[tuple[int, int, float, int]]:
        """``(i, j, d, rater)`` rows: d the rating mapped to a distance in [0, 1]."""
        p = np.asarray(pairs, np.int64).reshape(-1, 2)
        values, raters = self.ratings(p)
        d = self.noise.scale.distance(values)
        return [(int(i), int(j), float(x), int(r)) for (i, j), x, r in zip(p, d, raters, strict=True)]

    def heldout_means(self, n_raters: int = 253, random_state: RandomState = None) -> np.ndarray:
        """The truth as a study of real ratings holds it out: every pair's mean rating by ``n_raters``
        other raters (with their own offsets, slopes and noise), of shape (n_items, n_items)."""
        other = RatingSimulator(self.means, self.noise, random_state=random_state)
        M = squareform(other.full_table(n_raters).mean(axis=0))
        np.fill_diagonal(M, self.noise.scale.high)
        return M

    def full_table(self, n_raters: int) -> np.ndarray:
        """Every pair rated by each of ``n_raters`` raters: ratings of shape (n_raters, n_pairs), the
        pairs in ``np.triu_indices(n_items, 1)`` order (the layout of a complete rating study)."""
        iu = np.triu_indices(self.n_items, 1)
        pairs = np.column_stack(iu)
        raters = np.repeat(np.arange(n_raters), len(pairs)) + len(self._offsets)
        values, _ = self.ratings(np.tile(pairs, (n_raters, 1)), raters)
        return values.reshape(n_raters, len(pairs))


@dataclass(frozen=True)
class TripletNoise:
    """How the same people answer a triplet "is h more like a or b?" of these items: a rater compares their own
    impressions of the two pairs, each the pair's mean rating plus N(0, ``noise_sd``²) points (an offset
    cancels, as both pairs are judged by one rater at once), and answers at random a ``lapse`` share of the
    time (the human noise model's lapse, ALGORITHMS.md section 6). The default ``noise_sd`` is one rating's
    (a triplet as noisy as two ratings compared): a stated assumption, not a measurement, since no set of
    ratings and triplets of the same items is at hand."""

    noise_sd: float = RatingNoise().noise_sd
    lapse: float = 0.1

    def __post_init__(self) -> None:
        if self.noise_sd < 0 or not 0 <= self.lapse <= 1:
            raise ValueError("noise_sd must be >= 0 and lapse in [0, 1]")


class TripletRater:
    """People answering triplets ``(h, a, b)`` of a :class:`RatingSimulator`'s truth with :class:`TripletNoise`;
    :meth:`answer` gives ``(h, a, b, winner)`` rows (winner judged more like h)."""

    def __init__(self, means: ArrayLike, noise: TripletNoise = TripletNoise(), random_state: RandomState = None
                 ) -> None:
        self.means = np.asarray(means, np.float64)
        self.noise = noise
        self.rng = check_random_state(random_state)

    def answer(self, triplets: Sequence[Sequence[int]]) -> list[tuple[int, int, int, int]]:
        t = np.asarray(triplets, np.int64).reshape(-1, 3)
        h, a, b = t[:, 0], t[:, 1], t[:, 2]
        m = len(t)
        # higher mean rating = more alike: a wins when its impression is the higher
        gap = self.means[h, a] - self.means[h, b] + self.rng.normal(0.0, self.noise.noise_sd * np.sqrt(2.0), m)
        pick_a = gap > 0
        lapse = self.rng.random(m) < self.noise.lapse
        pick_a = np.where(lapse, self.rng.random(m) < 0.5, pick_a)
        return [(int(x), int(y), int(z), int(y if w else z)) for x, y, z, w in zip(h, a, b, pick_a, strict=True)]


#: how often real people's answers to uniformly random triplets agree with a known truth: 7,444 answers to the
#: random triplets of the alien-egg set (``../shared/data/alien_eggs``, Jamieson et al., NEXT, NIPS 2015; its
#: ``origAlg.Label`` Random) agree with the eggs' generated smoothness in 86.4% (ties left out)
REAL_RANDOM_TRIPLET_AGREEMENT = 0.864


def _over_random_triplets(means: ArrayLike, noise: TripletNoise, of) -> float:
    """The mean of ``of(p)`` over every triplet ``(h, a, b)`` of these items, ``p`` the chance a person answering
    with ``noise`` (:class:`TripletRater`) picks the candidate with the higher mean rating with ``h``."""
    M = np.asarray(means, np.float64)
    n = M.shape[0]
    if n < 3:
        raise ValueError("random triplets need at least 3 items")
    sd = noise.noise_sd * np.sqrt(2.0)
    total = 0.0
    for h in range(n):
        others = np.delete(M[h], h)
        gap = np.abs(others[:, None] - others[None, :])[np.triu_indices(n - 1, 1)]
        right = np.where(gap > 0, ndtr(gap / sd) if sd > 0 else 1.0, 0.5)
        total += float(np.sum(of(0.5 * noise.lapse + (1.0 - noise.lapse) * right)))
    return total / (n * (n - 1) * (n - 2) / 2)


def random_triplet_agreement(means: ArrayLike, noise: TripletNoise = TripletNoise()) -> float:
    """The share of answers to uniformly random triplets ``(h, a, b)`` of these items that agree with the truth
    ``means`` (the candidate with the higher mean rating with ``h``), people answering with ``noise``
    (:class:`TripletRater`): over every triplet, exactly. A triplet's agreement, the figure a set of real
    triplets with a known truth gives (:data:`REAL_RANDOM_TRIPLET_AGREEMENT`), to put a triplet noise beside."""
    return _over_random_triplets(means, noise, lambda p: p)


def random_triplet_repeat_agreement(means: ArrayLike, noise: TripletNoise = TripletNoise()) -> float:
    """How often two people answering the same uniformly random triplet of these items with ``noise`` give the
    same answer (exactly, over every triplet): what a pilot that asks some triplets twice measures without a
    truth."""
    return _over_random_triplets(means, noise, lambda p: p * p + (1.0 - p) * (1.0 - p))


def triplet_noise_for(means: ArrayLike, agreement: float, lapse: float = TripletNoise().lapse) -> float:
    """The per-impression noise SD (points; :class:`TripletNoise`) at which random triplets of these items agree
    with their truth ``agreement`` of the time (:func:`random_triplet_agreement`). Raises ValueError if no noise
    gives it (above what the ``lapse`` allows, or at or below chance)."""
    def at(sd: float) -> float:
        return random_triplet_agreement(means, TripletNoise(noise_sd=sd, lapse=lapse)) - agreement

    lo, hi = 1e-3, 50.0
    if not at(hi) < 0 < at(lo):
        raise ValueError(f"no triplet noise gives an agreement of {agreement:g} with these items at a lapse of "
                         f"{lapse:g} (from {at(hi) + agreement:.3f} to {at(lo) + agreement:.3f})")
    return float(brentq(at, lo, hi, xtol=1e-4))


def realistic_simulator(n_items: int, random_state: RandomState = None, **noise: float) -> RatingSimulator:
    """A simulator of ``n_items`` items at the default figures (:data:`REAL_RATINGS`)."""
    rng = check_random_state(random_state)
    points = rng.normal(size=(n_items, LATENT_DIM))
    means, structured, residual_sd = latent_parts(n_items, random_state=rng, points=points)
    sim = RatingSimulator(means, RatingNoise(**noise), random_state=rng, parts=(structured, residual_sd))
    #: the latent points the truth was made from (what simulated item features are made of)
    sim.points = points
    return sim


def rating_statistics(table: ArrayLike, n_items: int, rating_sd: float | None = None) -> dict[str, float]:
    """The figures of :data:`REAL_RATINGS` for a complete table of ratings (raters, pairs in
    ``np.triu_indices`` order): spreads of ratings around their pair's mean, of pair means and of rater
    means, and the gaps between each item's two highest pair means in rating SDs (``rating_sd``, default
    the table's own)."""
    t = np.asarray(table, np.float64)
    pair_means = t.mean(axis=0)
    sd = float(np.sqrt(np.mean((t - pair_means) ** 2)))
    M = squareform(pair_means)
    np.fill_diagonal(M, -np.inf)
    top = -np.sort(-M, axis=1)
    gaps = (top[:, 0] - top[:, 1]) / (rating_sd or sd)
    return {"rating_sd": sd, "pair_mean_sd": float(pair_means.std()), "pair_mean_min": float(pair_means.min()),
            "pair_mean_max": float(pair_means.max()), "rater_mean_sd": float(t.mean(axis=1).std()),
            "gap_median": float(np.median(gaps)), "gap_under_0.05": float(np.mean(gaps < 0.05))}


def fit_from_pilot(pairs: ArrayLike, values: ArrayLike, raters: Sequence, n_items: int,
                   scale: RatingScale = RatingScale(), dim: int = 4, random_state: RandomState = 0
                   ) -> tuple[np.ndarray, RatingNoise]:
    """A truth and a noise model fitted to a pilot's ratings (``pairs`` (T, 2), ``values`` on ``scale``,
    ``raters`` one id per rating), by the rating model of :mod:`engine.ratings` (a ``dim``-dimensional
    space, each rater's offset and slope, per-pair residuals shrunk toward the space): the truth of mean
    ratings is its estimate of every pair (the unasked ones from the space), the per-rating noise the
    residuals' SD, the offset and log-slope SDs the spreads its empirical-Bayes step estimates. Returns
    (means, noise)."""
    from engine.ratings import PooledRatings

    p = np.asarray(pairs, np.int64).reshape(-1, 2)
    d = scale.distance(np.asarray(values, np.float64))
    learner = PooledRatings(n_items, random_state=random_state, dim=dim, warmup=0)
    learner.observe([(int(i), int(j), float(x), r) for (i, j), x, r in zip(p, d, raters, strict=True)])
    learner.refresh_if_due()
    estimate, _ = learner.estimates()
    span = scale.high - scale.low
    means = scale.high - span * estimate
    np.fill_diagonal(means, scale.high)
    spreads = learner.fit_.estimated
    noise = RatingNoise(noise_sd=float(span * spreads.noise), offset_sd=float(span * spreads.offset),
                        slope_sd=float(spreads.log_slope), scale=scale)
    return means, noise
