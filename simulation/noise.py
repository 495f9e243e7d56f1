"""Fitting the human noise model to people's answers: the logistic scale and lapse rate of
:func:`simulation.oracles.human_agree_probability` against a known truth (:func:`fit_human_noise`, the
alien-egg crowds in :func:`alien_egg_noise`), and a truth with its noise fitted to a pilot study's
triplets (:func:`fit_pilot`), the scenarios ``proxima plan`` simulates from.

Imports the engine (embeddings, the plan's :class:`engine.planning.Scenario`), never Flask, Redis, RQ,
``workers`` or ``webapp``. Conventions: ``distances`` ndarray of shape (n_items, n_items), symmetric, zero
diagonal; a triplet row ``(i, j, k)`` means "a person judged i closer to j than to k".
"""
from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike
from scipy.spatial.distance import cdist

from engine.planning import Scenario, triplets_from_answers
from engine.truth import check_distance_matrix
from engine.utils import check_triplets

from .oracles import (
    HUMAN_LAPSE,
    HUMAN_SCALE,
    OddOneOutOracle,
    RankOracle,
    TripletOracle,
    _as_index_array,
    random_triplet_questions,
)

if TYPE_CHECKING:
    from engine.utils import RandomState


# ---------------------------------------------------------------------------- people's noise against a known truth
def fit_logistic_noise(distances: ArrayLike, triplets: Iterable[Sequence[int]]) -> float:
    """Maximum-likelihood logistic scale for triplet answers (``TripletOracle(model="logistic")``).

    ``triplets`` rows ``(i, j, k)`` mean "i is closer to j than to k" as answered by people;
    the model says P(j wins) = 1 / (1 + exp((d(i, j) − d(i, k)) / scale)).
    """
    from scipy.optimize import minimize_scalar

    D = check_distance_matrix(distances)
    t = _as_index_array(triplets, 3, D.shape[0])
    if len(t) == 0:
        raise ValueError("need at least one triplet to fit a noise model")
    diff = D[t[:, 0], t[:, 1]] - D[t[:, 0], t[:, 2]]

    def nll(log_scale):
        z = diff / np.exp(log_scale)
        return float(np.sum(np.logaddexp(0.0, z)))

    span = max(float(np.abs(diff).max()), 1e-12)
    res = minimize_scalar(nll, bounds=(np.log(span) - 12, np.log(span) + 4), method="bounded")
    return float(np.exp(res.x))


@dataclass(frozen=True)
class HumanNoise:
    """A human noise model fitted by :func:`fit_human_noise`.

    P(answer agrees with the truth) = λ/2 + (1 − λ)·σ(gap/s), gap = d(x, loser) − d(x, winner).
    ``scale`` s in the fitted matrix's distance units; ``lapse`` λ; ``log_likelihood`` of the
    answers under the fit and ``logistic_log_likelihood`` under the best plain logistic (λ = 0);
    ``agreement`` the share of answers agreeing with the truth (ties count one half);
    ``median_gap`` the median |d(x,a) − d(x,b)| over random triplets of the fitted matrix (the
    unit :meth:`oracle` can transfer s in); ``n_answers`` how many answers were fitted.
    """

    scale: float
    lapse: float
    log_likelihood: float
    logistic_log_likelihood: float
    agreement: float
    median_gap: float
    n_answers: int

    @property
    def lapse_gain(self) -> float:
        """Log-likelihood the lapse term buys over a plain logistic."""
        return self.log_likelihood - self.logistic_log_likelihood

    def scale_for(self, distances: ArrayLike, unit: str = "range") -> float:
        """s transferred to another distance matrix.

        ``unit="range"``: s is kept as a share of the largest distance (the fitted matrix's
        largest distance is the unit, e.g. alien eggs scaled to [0, 1]); ``"median_gap"``: s is
        kept as a multiple of the median distance gap of random triplets, so the share of close
        calls stays the same whatever the spread of the new data.
        """
        D = check_distance_matrix(distances)
        if unit == "range":
            return self.scale / self.fitted_range * float(D.max())
        if unit == "median_gap":
            return self.scale / self.median_gap * median_triplet_gap(D)
        raise ValueError(f"unit must be 'range' or 'median_gap', not {unit!r}")

    #: the largest distance of the fitted matrix (1 for matrices scaled to [0, 1])
    fitted_range: float = 1.0

    def oracle(self, distances: ArrayLike, unit: str = "range", random_state: RandomState = None) -> TripletOracle:
        """A :class:`TripletOracle` answering like these people on another data set."""
        return TripletOracle(distances, noise=self.scale_for(distances, unit), model="human",
                             lapse=self.lapse, random_state=random_state)

    def odd_one_out_oracle(self, distances: ArrayLike, unit: str = "range",
                           random_state: RandomState = None) -> OddOneOutOracle:
        """An :class:`OddOneOutOracle` answering like these people on another data set."""
        return OddOneOutOracle.from_noise(self, distances, unit=unit, random_state=random_state)

    def rank_oracle(self, distances: ArrayLike, n_select: int = 2, unit: str = "range",
                    random_state: RandomState = None) -> RankOracle:
        """A :class:`RankOracle` answering like these people on another data set."""
        return RankOracle.from_noise(self, distances, n_select=n_select, unit=unit, random_state=random_state)




def median_triplet_gap(distances: ArrayLike, n_samples: int = 100_000) -> float:
    """Median |d(x,a) − d(x,b)| over random distinct triplets (a fixed seed: a property of D)."""
    D = check_distance_matrix(distances)
    x, a, b = random_triplet_questions(D.shape[0], n_samples, np.random.default_rng(0)).T
    return float(np.median(np.abs(D[x, a] - D[x, b])))


def robust_range(distances: ArrayLike) -> float:
    """The spread of ``distances`` a noise scale can be stated in across data sets and sizes: the
    :data:`ROBUST_RANGE_QUANTILE` quantile over items of each item's :data:`ROBUST_RANGE_RANK`-th largest
    distance.

    Like the largest distance (the unit the human model was fitted in, the alien eggs scaled to [0, 1]) it
    grows with the number of items drawn alike, as their outermost items lie farther out; unlike it, it does
    not follow the few items an embedding fitted to a pilot throws far out (a fitted world's largest
    distance is 7-9 median gaps where its truth's is 5.6-6.5, its robust range within 0-20% of the truth's).
    The median gap of random triplets (:func:`median_triplet_gap`) does neither: it stays put as items are
    added, so raters stated as a share of the range are more median gaps of 1,000 items than of 100."""
    D = check_distance_matrix(distances)
    rank = min(ROBUST_RANGE_RANK, D.shape[0] - 1)
    farthest = np.partition(D, D.shape[0] - rank, axis=1)[:, D.shape[0] - rank]
    return float(np.quantile(farthest, ROBUST_RANGE_QUANTILE))


def human_log_likelihood(gap: np.ndarray, scale: float, lapse: float) -> float:
    """Log-likelihood of answers whose truth gaps are ``gap`` (d(i, k) − d(i, j) of an answered
    triplet (i, j, k)) under :func:`human_agree_probability` with scale > 0."""
    # log(λ/2 + (1 − λ)σ(z)) computed in log space so confident wrong answers stay finite
    log_sig = -np.logaddexp(0.0, -gap / scale)
    if lapse <= 0:
        return float(log_sig.sum())
    return float(np.logaddexp(np.log(lapse / 2.0), np.log1p(-lapse) + log_sig).sum())


def fit_gap_noise(gaps: ArrayLike, starts: Sequence[float] | None = None, bounds_around: float | None = None
                  ) -> tuple[float, float, float]:
    """Maximum-likelihood (scale, lapse, log-likelihood) of :func:`human_agree_probability` for answers
    whose truth gaps are ``gaps``: L-BFGS over (log s, logit λ) from λ in (0.02, 0.1, 0.3) and each scale
    of ``starts`` (default: the median |gap| and a quarter of it). log s is kept within −12 and +6 of
    log ``bounds_around`` (default: the start's own scale)."""
    from scipy.optimize import minimize

    gap = np.asarray(gaps, dtype=np.float64)
    if starts is None:
        span = max(float(np.median(np.abs(gap))), 1e-12)
        starts, bounds_around = (span, span / 4.0), span if bounds_around is None else bounds_around

    def nll(theta):
        lapse = 1.0 / (1.0 + np.exp(-theta[1]))
        return -human_log_likelihood(gap, float(np.exp(theta[0])), lapse)

    best = None
    for lapse0 in (0.02, 0.1, 0.3):
        for s0 in starts:
            around = s0 if bounds_around is None else bounds_around
            res = minimize(nll, [np.log(s0), np.log(lapse0 / (1 - lapse0))], method="L-BFGS-B",
                           bounds=[(np.log(around) - 12, np.log(around) + 6), (-20, 10)])
            if best is None or res.fun < best.fun:
                best = res
    return float(np.exp(best.x[0])), float(1.0 / (1.0 + np.exp(-best.x[1]))), -float(best.fun)


def fit_human_noise(distances: ArrayLike, triplets: Iterable[Sequence[int]]) -> HumanNoise:
    """Maximum-likelihood scale and lapse rate of people's triplet answers against the truth.

    ``triplets`` rows ``(i, j, k)``: a person judged i closer to j than to k; ``distances`` the
    ground truth. Fits P(agree) = λ/2 + (1 − λ)·σ(gap/s), gap = d(i, k) − d(i, j), over
    (log s, logit λ) by L-BFGS from several starts, and the plain logistic (λ = 0) beside it.
    """
    D = check_distance_matrix(distances)
    t = _as_index_array(triplets, 3, D.shape[0])
    if len(t) == 0:
        raise ValueError("need at least one triplet to fit a noise model")
    gap = D[t[:, 0], t[:, 2]] - D[t[:, 0], t[:, 1]]
    scale0 = fit_logistic_noise(D, t)
    logistic_ll = human_log_likelihood(gap, scale0, 0.0)
    scale, lapse, log_lik = fit_gap_noise(gap, starts=(scale0, scale0 / 4.0))
    if log_lik < logistic_ll:  # the optimiser stopped short of the λ = 0 boundary
        scale, lapse, log_lik = scale0, 0.0, logistic_ll
    agreement = float(np.mean(np.where(gap > 0, 1.0, np.where(gap == 0, 0.5, 0.0))))
    return HumanNoise(scale, lapse, log_lik, logistic_ll, agreement, median_triplet_gap(D),
                      len(t), float(D.max()))


def alien_egg_noise(data_dir: str | os.PathLike | None = None) -> HumanNoise:
    """:func:`fit_human_noise` on the NEXT alien-egg crowds (distances scaled to [0, 1])."""
    from .datasets import load_alien_eggs

    eggs = load_alien_eggs(data_dir)
    return fit_human_noise(eggs.distances, eggs.triplets)


# ---------------------------------------------------------------------------- a truth from a pilot
@dataclass(frozen=True)
class PilotFit:
    """What :func:`fit_pilot` learned from a pilot's triplets: one :class:`Scenario` per bootstrap
    replicate (the first from all answers), the embedding chosen (``dim``, ``kernel``, its held-out
    triplet accuracy), and the noise of each replicate."""

    scenarios: tuple[Scenario, ...]
    dim: int
    kernel: str
    holdout_accuracy: float
    n_answers: int
    #: the correction applied to the cross-fitted noise scale (1: none)
    calibration: float = 1.0
    #: whether the pilot was too small to measure the noise scale, so the human model's scale was taken
    scale_from_prior: bool = False
    #: whether the lapse rate is the human model's (the pilot did not show its raters lapsing more)
    lapse_from_prior: bool = False
    #: how the noise was chosen: "prior" (the human model's unless the pilot shows worse raters, as a share of
    #: the fitted world's :func:`robust_range`), "calibrated" (cbcdfd1's calibration, :data:`NOISE_FROM_PRIOR`
    #: False) or "cross-fitted" (no calibration)
    noise: str = "calibrated"
    #: the check of the pilot's raters one by one (:func:`check_raters`); None: no raters given, or too few
    raters: RaterCheck | None = None

    @property
    def lapses(self) -> np.ndarray:
        return np.array([s.lapse for s in self.scenarios])

    @property
    def relative_scales(self) -> np.ndarray:
        """Noise scales as a share of each truth's median triplet gap (comparable across replicates)."""
        return np.array([s.scale / median_triplet_gap(s.distances, 20_000) for s in self.scenarios])

    @property
    def range_scales(self) -> np.ndarray:
        """Noise scales as a share of each truth's :func:`robust_range` (the model's: :data:`HUMAN_RANGE_SCALE`)."""
        return np.array([s.scale / robust_range(s.distances) for s in self.scenarios])

    def describe(self) -> str:
        return self._describe_noise() + "; " + (self.raters.describe() + "; " if self.raters is not None else
                                                "no raters checked one by one (the answers name none, or too few); ") \
            + CARELESS_ASSUMED

    def _describe_noise(self) -> str:
        lapse, rel = self.lapses, self.relative_scales
        head = (f"pilot of {self.n_answers} answers: {self.kernel.upper()} embedding in {self.dim} dimensions "
                f"(held-out triplet accuracy {self.holdout_accuracy:.2f}); ")
        if self.noise == "prior":
            return head + (f"raters' noise the human model's unless the pilot shows worse raters (a pilot this small "
                           f"cannot measure it, only show it larger): logistic scale {self.range_scales[0]:.3f} of "
                           f"the fitted world's robust range, {rel[0]:.2f} median gaps ("
                           + ("the human model's" if self.scale_from_prior else
                                               "measured: the pilot is less predictable than under the model")
                           + f"), lapse {lapse[0]:.3f} (" + ("the human model's" if self.lapse_from_prior else
                                                             "measured: its raters are not alike"
                                                             if self.raters is not None and self.raters.caught else
                                                             "measured: its surest answers disagree more")
                           + ")")
        return head + (f"human noise lapse {lapse[0]:.3f} (bootstrap {lapse.min():.3f}-{lapse.max():.3f}), logistic "
                       f"scale {rel[0]:.2f} median gaps (bootstrap {rel.min():.2f}-{rel.max():.2f}; "
                       + ("the human model's: the pilot is too small to measure it)" if self.scale_from_prior
                          else f"calibrated x{self.calibration:.2f})"))


def check_pilot_triplets(triplets: ArrayLike, n_items: int) -> np.ndarray:
    t = check_triplets(triplets, n_items, "pilot triplet")
    if len(t) == 0:
        raise ValueError("the pilot has no triplet answers")
    return t


def _distances(X: np.ndarray) -> np.ndarray:
    D = cdist(X, X)
    return np.maximum(D, D.T)


def _gaps(D: np.ndarray, t: np.ndarray) -> np.ndarray:
    return D[t[:, 0], t[:, 2]] - D[t[:, 0], t[:, 1]]


def _scenario(t: np.ndarray, n: int, dim: int, kernel: str, folds: int, rng: np.random.Generator) -> Scenario:
    """The truth = an embedding of all of ``t``; the noise = fitted to answers the embedding did not
    see (K-fold cross-fitting, each fold's gaps in units of its own embedding's median gap), so the
    embedding cannot absorb the noise it is meant to measure."""
    from engine.embedding import fit_embedding

    seed = int(rng.integers(2**31))
    X = fit_embedding(t, n, dim=dim, kernel=kernel, random_state=seed)
    D = _distances(X)
    fold = rng.permutation(len(t)) % folds
    gaps = []
    for f in range(folds):
        Xf = fit_embedding(t[fold != f], n, dim=dim, kernel=kernel, init=X, random_state=seed)
        Df = _distances(Xf)
        gaps.append(_gaps(Df, t[fold == f]) / median_triplet_gap(Df, 20_000))
    scale, lapse, _ = fit_gap_noise(np.concatenate(gaps))
    unit = median_triplet_gap(D, 20_000)
    top = float(D.max())
    return Scenario(D / top, scale * unit / top, lapse)


def _heldout_accuracy(t: np.ndarray, n: int, dim: int, kernel: str, folds: int = 2) -> float:
    """Mean held-out triplet accuracy of embeddings fitted without each of ``folds`` fifths of ``t``
    (a fixed split: the same for the pilot and for pilots simulated on the same questions)."""
    return _heldout_stats(t, n, dim, kernel, folds)[0]


#: Share of held-out triplets, those the embedding is surest of (largest gap), whose accuracy measures
#: the lapse rate (:func:`_calibrate_lapse`): a rater answers them against the truth only by lapsing.
CONFIDENT_SHARE = 1 / 3


def _heldout_stats(t: np.ndarray, n: int, dim: int, kernel: str, folds: int = 2) -> tuple[float, float]:
    """(held-out triplet accuracy, the same on the CONFIDENT_SHARE of held-out triplets with the largest
    gap in the embedding that did not see them), over ``folds`` fifths of ``t`` (a fixed split)."""
    from engine.embedding import fit_embedding

    order = np.random.default_rng(0).permutation(len(t))
    size = len(t) // 5
    accs, confident = [], []
    for f in range(folds):
        test = t[order[f * size:(f + 1) * size]]
        X = fit_embedding(np.delete(t, order[f * size:(f + 1) * size], axis=0), n, dim=dim, kernel=kernel,
                          random_state=0)
        gap = np.sum((X[test[:, 0]] - X[test[:, 2]]) ** 2, axis=1) - np.sum((X[test[:, 0]] - X[test[:, 1]]) ** 2,
                                                                             axis=1)
        accs.append(float(np.mean(gap > 0)))
        sure = np.argsort(-np.abs(gap), kind="stable")[: max(1, int(len(gap) * CONFIDENT_SHARE))]
        confident.append(float(np.mean(gap[sure] > 0)))
    return float(np.mean(accs)), float(np.mean(confident))


#: Rounds of (scale, lapse) calibration before the last scale calibration (:func:`fit_pilot`).
CALIBRATION_ROUNDS = 1
#: Whether a pilot too small to measure the noise scale (its calibration at the grid's floor) takes the
#: human model's scale (False: the floor, as before; ``benchmarks/pilot_plan.py --before`` compares).
SCALE_PRIOR = True
#: The lapse rate the first scale calibration assumes (None: the cross-fitted one).
CALIBRATION_START_LAPSE: float | None = None
#: Lapse rates tried by :func:`_calibrate_lapse` (ascending).
LAPSE_GRID = (0.0, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.45)


def _calibrate_lapse(t: np.ndarray, scenario: Scenario, dim: int, kernel: str,
                     questions: np.ndarray | None = None) -> float:
    """The lapse rate under which a pilot simulated on the same questions disagrees as often with the
    embedding where it is surest as the real pilot does (indirect inference, as :func:`_calibrate`).

    The maximum-likelihood lapse of cross-fitted gaps mixes the raters' lapses with the embedding's
    own errors and trades them against the scale: with careless raters in a pilot it came out at .29
    or at .02 where the truth was .13. Disagreement on the surest held-out triplets barely depends on
    the scale, so it measures the lapse. Interpolated linearly on :data:`LAPSE_GRID`. The simulated pilots
    answer ``questions`` (default: the pilot's own)."""
    # every fifth held out once: the surest third of them is a small sample, and its noise is the lapse's
    observed = _heldout_stats(t, scenario.n_items, dim, kernel, folds=5)[1]
    sure = []
    asked = (t if questions is None else questions).tolist()
    for lapse in LAPSE_GRID:
        world = Scenario(scenario.distances, scenario.scale, lapse)
        simulated = triplets_from_answers(world.oracle(np.random.default_rng(2)).answer(asked))
        sure.append(_heldout_stats(simulated, scenario.n_items, dim, kernel, folds=5)[1])
    # the surest answers agree less as the lapse grows: the first lapse no more agreeing than the pilot
    for i, acc in enumerate(sure):
        if acc <= observed:
            if i == 0:
                return LAPSE_GRID[0]
            share = (sure[i - 1] - observed) / max(sure[i - 1] - acc, 1e-12)
            return float(LAPSE_GRID[i - 1] + share * (LAPSE_GRID[i] - LAPSE_GRID[i - 1]))
    return LAPSE_GRID[-1]


#: Multipliers of the cross-fitted noise scale tried by :func:`_calibrate` (ascending).
CALIBRATION_GRID = (0.03, 0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 1.0, 1.4)


def _calibrate(t: np.ndarray, scenario: Scenario, dim: int, kernel: str) -> float:
    """The multiplier of ``scenario.scale`` under which a pilot simulated on the same questions is
    as predictable (held-out triplet accuracy of its embedding) as the real one.

    Cross-fitted noise counts the embedding's own error as noise, so it overstates the raters'
    noise; matching the held-out accuracy of a simulated pilot (fitted exactly like the real one)
    takes that error out (indirect inference). Interpolated in log scale on
    :data:`CALIBRATION_GRID`, kept within it."""
    observed = _heldout_accuracy(t, scenario.n_items, dim, kernel)
    accs = []
    for c in CALIBRATION_GRID:
        world = Scenario(scenario.distances, scenario.scale * c, scenario.lapse)
        simulated = triplets_from_answers(world.oracle(np.random.default_rng(1)).answer(t.tolist()))
        accs.append(_heldout_accuracy(simulated, scenario.n_items, dim, kernel))
    # accuracy falls as the noise grows: the first multiplier whose simulated pilot is no more
    # predictable than the real one, interpolated with the one before
    for i, acc in enumerate(accs):
        if acc <= observed:
            if i == 0:
                return CALIBRATION_GRID[0]
            lo, hi = np.log(CALIBRATION_GRID[i - 1]), np.log(CALIBRATION_GRID[i])
            share = (accs[i - 1] - observed) / max(accs[i - 1] - acc, 1e-12)
            return float(np.exp(lo + share * (hi - lo)))
    return CALIBRATION_GRID[-1]


#: Folds of the cross-validation choosing the pilot's embedding (:func:`fit_pilot`).
SELECTION_FOLDS = 5
#: Standard errors (binomial, of the best held-out accuracy) within which a smaller dimension is preferred to
#: the best-scoring one for a pilot's world (:func:`_parsimonious`); the rule duels chooses its own dimension by
#: (``engine.duels.dims.AUTO_MARGIN``). The uniform 3-D truth of ``benchmarks/pilot_plan.py`` at 1,000 items,
#: pilot seed 5: t-STE 3-D held out .6159, 5-D .6180 (0.4 SE): the 5-D world was chosen, and in it duels' own
#: 4-D and 8-D fits predict its fresh duels alike (.60-.61) while 1-NN in them hits a true 3 nearest .52 and
#: .72 of the time, so which of the two won its dimension recheck near 200 answers per item decided the curve
#: (a run falling from .72 to .48 hit@3 between 160 and 300, another rising to .85): the plan's curve fell.
SELECTION_MARGIN = 1.0


def _parsimonious(scores: dict, best: tuple[str, int], n_answers: int) -> tuple[str, int]:
    """(kernel, dim) for a pilot's world: the smallest dimension whose held-out accuracy (``scores``:
    (kernel, dim) -> accuracy, :func:`engine.embedding.select_embedding`) lies within :data:`SELECTION_MARGIN`
    standard errors of the best's (``best``), its best kernel; the line (("human", 1)) only where it is the best."""
    top = scores[best]
    se = math.sqrt(max(top * (1.0 - top), 0.0) / max(n_answers, 1))
    near = [(dim, -acc, kernel) for (kernel, dim), acc in scores.items()
            if kernel != "human" and acc >= top - SELECTION_MARGIN * se]
    if best[0] == "human" or not near:
        return best
    dim, _, kernel = min(near)
    return kernel, dim

#: The alien eggs' median triplet gap as a share of their largest distance (:func:`alien_egg_noise`'s
#: ``median_gap``; a test refits it). The human model's scale is 0.36 of it, but not in a fitted world's median
#: gaps: the same raters (0.075 of the largest distance) are 0.42-0.48 median gaps of the 100-item truths of
#: ``benchmarks/pilot_plan.py`` and 0.53-0.54 of its 1,000-item ones (the largest distance lies farther out
#: among more items drawn alike, the median gap does not move), and a plan in median gaps asked 0.74-0.91x the
#: answers the truth needed at 100 items and 0.49-0.63x at 1,000 (commit cc735c8).
HUMAN_MEDIAN_GAP = 0.2074
#: Each item's ROBUST_RANGE_RANK-th farthest item, its ROBUST_RANGE_QUANTILE quantile over items: the
#: :func:`robust_range` the human model's scale transfers to a pilot's world in.
ROBUST_RANGE_RANK = 5
ROBUST_RANGE_QUANTILE = 0.9
#: The alien eggs' :func:`robust_range` as a share of their largest distance (a test recomputes it).
HUMAN_ROBUST_RANGE = 0.9368
#: The human model's logistic scale as a share of a world's :func:`robust_range` (0.080): the unit the human
#: model is stated in (0.075 of the eggs' largest distance) measured so a pilot's fitted world can be measured
#: in it. In the worlds fitted to pilots of ``benchmarks/pilot_plan.py`` (10 answers per item) it gave 0.38-0.43
#: median gaps where the clustered 100-item truth's raters are 0.42, 0.41-0.50 where the uniform one's are 0.48,
#: 0.52-0.54 where the clustered 1,000-item truth's are 0.53 and 0.52-0.60 where the uniform one's are 0.54;
#: the plans asked 0.94-1.30x the answers the truth needed at 100 items, 0.73-1.01x at 1,000 (with the world's
#: dimension as :data:`SELECTION_MARGIN` chooses it; ``benchmarks/README.md``).
HUMAN_RANGE_SCALE = HUMAN_SCALE / HUMAN_ROBUST_RANGE
#: Whether :func:`fit_pilot` takes the human model's noise unless the pilot shows raters worse than it
#: (:func:`_prior_noise`); False: the calibration of cbcdfd1 (``benchmarks/pilot_plan.py --before``).
NOISE_FROM_PRIOR = True
#: Standard errors (binomial, of the difference) by which a pilot must be less predictable than its
#: simulation under the human model before its raters are taken to be noisier or to lapse more
#: (:func:`_prior_noise`). Simulated on fresh random questions in the fitted world, pilots of the model's own
#: raters (``benchmarks/pilot_plan.py``'s truths, 10 answers per item, seeds 5-8 at 100 items, 5-6 at 1,000)
#: were -3.2 to +2.6 standard errors off the real ones in held-out accuracy at 100 items and -7.4 to +5.0 at
#: 1,000 (how predictable a fitted world is differs from its truth's by more than the standard errors, which
#: shrink with the pilot); on the pilot's own questions, which the world was fitted to, they were up to 5.2
#: (100 items) and 7-11 (1,000) more predictable, and at 1,000 items every pilot was taken to lapse on
#: .10-.16. Raters lapsing on .3 at 10 answers per item (60 items) fall 5.2 short: only a pilot far worse
#: than the model's raters overrules it (``pilot_lapse.py``).
EVIDENCE_Z = 6.0
#: Multipliers of the human model's scale tried where a pilot shows noisier raters (ascending).
WORSE_SCALES = (1.0, 1.4, 2.0, 2.8, 4.0, 5.6, 8.0)


#: Folds of raters held out by :func:`check_raters` (every rater's answers predicted by a world fitted without them).
RATER_FOLDS = 5
#: Pilots drawn under the null (every rater alike) that :func:`check_raters` compares a pilot's raters with.
RATER_NULL_DRAWS = 200
#: The p-value under which :func:`check_raters` takes a pilot's raters not to be alike.
CARELESS_P = 0.01
#: What a pilot's plan assumes of careless raters, said under every pilot plan (:meth:`PilotFit.describe`).
CARELESS_ASSUMED = ("careless raters assumed only as the pilot shows them: a study whose raters include more of "
                    "them than its pilot showed needs more answers than planned, and a pilot of 10 answers per item "
                    "from raters of 20 showed them in 3 of 9 pilots with 10-40% answering at random, of 30 from "
                    "raters of 50 in 9 of 9 (benchmarks/pilot_lapse.py): screen raters with catch trials")


@dataclass(frozen=True)
class RaterCheck:
    """What :func:`check_raters` found: ``p_value`` of the pilot's raters being alike (careless raters make it
    small), ``z`` how far their agreement with the world spreads beyond it (standard errors), ``n_raters``."""

    p_value: float
    z: float
    n_raters: int

    @property
    def caught(self) -> bool:
        """Whether the raters differ beyond chance (p under :data:`CARELESS_P`): some answer carelessly."""
        return self.p_value < CARELESS_P

    def describe(self) -> str:
        head = f"its {self.n_raters} raters checked one by one against a world fitted without each"
        if self.caught:
            return head + f": not alike (p = {self.p_value:.3f}), some answer carelessly: the lapse is measured"
        return head + f": alike (p = {self.p_value:.2f})"


def _spread(agree: np.ndarray, q: np.ndarray, rater: np.ndarray, n_raters: int) -> float:
    """How far the raters' counts of answers agreeing with the world spread beyond what answers agreeing with
    chances ``q``, every rater alike, spread: sum_r (S_r² − V_r) / sqrt(2 sum_r V_r²), S_r = rater r's agreements
    minus their chances, V_r their variance (a score test of a random rater effect)."""
    resid = np.bincount(rater, agree - q, minlength=n_raters)
    var = np.bincount(rater, q * (1 - q), minlength=n_raters)
    return float(np.sum(resid**2 - var) / math.sqrt(2 * np.sum(var**2)))


def check_raters(triplets: ArrayLike, raters: ArrayLike, n_items: int, dim: int, kernel: str,
                 random_state: RandomState = 0) -> RaterCheck:
    """Whether a pilot's raters are alike, from their answers alone: careless ones make them differ.

    Every rater's answers are predicted by an embedding fitted without that rater (:data:`RATER_FOLDS` folds of
    raters), each answer's chance of agreeing with it by the human model fitted to all the held-out gaps at once
    (:func:`fit_gap_noise`: every rater alike). Raters answering at random agree less than the others, so the
    raters' agreements spread more than :data:`RATER_NULL_DRAWS` pilots drawn with those chances (:func:`_spread`).
    No simulated world is involved: the test of the pilot's predictability against pilots simulated in its fitted
    world caught careless raters in 1 pilot of 9 (at 10 answers per item from raters of 20), as a pilot of careless
    raters fits a world as blurred as its answers. This one is limited by how well a pilot's world predicts a
    careful rater: .53-.62 of held-out answers against .47-.53 for a careless one at 10 answers per item (100 and
    1,000 items), within a standard error of a rater's 20 answers: it caught 1 pilot of 9 there (not alike at
    p < .01; careful raters 0 of 3), and 9 of 9 at 30 answers per item from raters of 50 (``benchmarks/pilot_lapse.py``
    ``--per-item 30 --per-rater 50``; careful 0 of 3)."""
    from engine.embedding import fit_embedding

    n = int(n_items)
    t = check_pilot_triplets(triplets, n)
    who = np.asarray(raters)
    if who.shape != (len(t),):
        raise ValueError(f"need one rater per pilot answer: {who.shape[0] if who.ndim else 0} for {len(t)}")
    _, rater = np.unique(who, return_inverse=True)
    n_raters = int(rater.max()) + 1
    if n_raters < 2 * RATER_FOLDS:
        raise ValueError(f"{n_raters} raters are too few to check one by one (need {2 * RATER_FOLDS})")
    rng = np.random.default_rng(random_state)
    fold = rng.permutation(n_raters)[rater] % RATER_FOLDS
    gap = np.empty(len(t))
    seed = int(rng.integers(2**31))
    for f in range(RATER_FOLDS):
        X = fit_embedding(t[fold != f], n, dim=dim, kernel=kernel, random_state=seed)
        D = _distances(X)
        gap[fold == f] = _gaps(D, t[fold == f]) / median_triplet_gap(D, 20_000)
    scale, lapse, _ = fit_gap_noise(gap)
    # each answer agrees with the world fitted without its rater (gap > 0) with chance q, every rater alike
    q = lapse / 2 + (1 - lapse) / (1 + np.exp(-np.abs(gap) / scale))
    z = _spread((gap > 0).astype(np.float64), q, rater, n_raters)
    null = np.array([_spread((rng.random(len(t)) < q).astype(np.float64), q, rater, n_raters)
                     for _ in range(RATER_NULL_DRAWS)])
    return RaterCheck(float((1 + np.sum(null >= z)) / (1 + RATER_NULL_DRAWS)), z, n_raters)


def _worse(observed: float, simulated: float, count: int) -> bool:
    """Whether a share of ``count`` held-out answers agreeing (``observed``) falls below the same share of a
    simulated pilot (``simulated``) by more than :data:`EVIDENCE_Z` standard errors of the difference."""
    p = min(max((observed + simulated) / 2, 1e-3), 1 - 1e-3)
    return simulated - observed > EVIDENCE_Z * math.sqrt(2 * p * (1 - p) / max(count, 1))


def _prior_noise(t: np.ndarray, world: Scenario, dim: int, kernel: str, careless: bool = False
                 ) -> tuple[float, float, bool, bool]:
    """(scale, lapse, whether the scale is the human model's, whether the lapse is) for a pilot's ``world``.

    A pilot of ~10 random answers per item cannot measure its raters' noise: the scale calibration
    (:func:`_calibrate`) ran to its floor or stopped anywhere from 0.05 to 0.5 of the cross-fitted scale, and
    the lapse calibration (:func:`_calibrate_lapse`) gave .00-.23 for raters lapsing on .03, plans 0.6-2.2x
    the answers the truth needs (``benchmarks/pilot_plan.py``). So the human model's noise (its scale as a
    share of the world's :func:`robust_range`, :data:`HUMAN_RANGE_SCALE`; its lapse) is assumed, and a pilot
    overrules it only upwards:
    where the pilot's surest held-out answers disagree with its embedding more than a pilot simulated in
    ``world`` under the model's noise (by :data:`EVIDENCE_Z` standard errors) the lapse is calibrated (at
    least the model's), and where its held-out answers are then less predictable the scale is (the first
    of :data:`WORSE_SCALES` no more predictable, interpolated). Raters better than the model are never
    assumed: the fitted world is blurred (its nearest neighbours 2-3x the truth's distance apart for items
    in tight clusters), and how that and the raters' noise trade off is what a pilot this small cannot tell.
    ``careless``: the pilot's raters checked one by one are not alike (:func:`check_raters`): the lapse is
    calibrated as where the surest answers disagree more."""
    n = world.n_items
    scale = HUMAN_RANGE_SCALE * robust_range(world.distances)
    size = len(t) // 5
    count, sure_count = 5 * size, 5 * max(1, int(size * CONFIDENT_SHARE))
    observed = _heldout_stats(t, n, dim, kernel, folds=5)
    # the simulated pilots answer fresh random questions: the world was fitted to the pilot's own questions, so
    # their gaps in it are wider than a truth's, and pilots simulated on them were more predictable than the
    # real one by 7-11 standard errors at 1,000 items (up to 3.8 at 100) under the model's own raters; on
    # fresh questions by -7.4 to +5.0 (benchmarks/README.md, pilot_plan.py)
    questions = random_triplet_questions(n, len(t), np.random.default_rng(1))

    def simulated(s: float, lapse: float) -> tuple[float, float]:
        answers = Scenario(world.distances, s, lapse).oracle(np.random.default_rng(1)).answer(questions.tolist())
        return _heldout_stats(triplets_from_answers(answers), n, dim, kernel, folds=5)

    lapse, model_lapse = HUMAN_LAPSE, True
    sim = simulated(scale, lapse)
    if careless or _worse(observed[1], sim[1], sure_count):
        measured = _calibrate_lapse(t, Scenario(world.distances, scale, HUMAN_LAPSE), dim, kernel, questions)
        if measured > HUMAN_LAPSE:
            lapse, model_lapse = measured, False
            sim = simulated(scale, lapse)
    if not _worse(observed[0], sim[0], count):
        return scale, lapse, True, model_lapse
    accs = [sim[0]]
    for i, c in enumerate(WORSE_SCALES[1:], start=1):
        accs.append(simulated(scale * c, lapse)[0])
        if accs[i] <= observed[0]:  # accuracy falls as the noise grows: interpolate with the one before
            lo, hi = np.log(WORSE_SCALES[i - 1]), np.log(c)
            share = (accs[i - 1] - observed[0]) / max(accs[i - 1] - accs[i], 1e-12)
            return scale * float(np.exp(lo + share * (hi - lo))), lapse, False, model_lapse
    return scale * WORSE_SCALES[-1], lapse, False, model_lapse


def fit_pilot(triplets: ArrayLike, n_items: int, replicates: int = 3, folds: int = 5, random_state: RandomState = 0,
              calibrate: bool = True, raters: ArrayLike | None = None) -> PilotFit:
    """Fit a truth and a human noise model to a pilot's triplet answers.

    The embedding's dimension and kernel are chosen on held-out answers
    (:func:`engine.embedding.select_embedding`); replicate 0 uses every answer, replicates 1.. a
    bootstrap resample of them, so the plans made from them spread as the fit is uncertain. With
    ``calibrate`` (and :data:`NOISE_FROM_PRIOR`) the raters' noise is the human model's, its scale as a
    share of each replicate's world's :func:`robust_range`, unless the pilot shows raters noisier or lapsing
    more than the model (:func:`_prior_noise`; ``noise`` "prior"); without :data:`NOISE_FROM_PRIOR` the cross-fitted
    scale and lapse are calibrated on replicate 0 as in cbcdfd1 (``noise`` "calibrated"). Without
    ``calibrate`` the cross-fitted noise is kept. ``raters``: who gave each answer (one per row of ``triplets``):
    the raters are checked one by one (:func:`check_raters`, with :data:`RATER_FOLDS` x 2 raters or more), and
    where they are not alike the lapse is calibrated (:func:`_prior_noise`); the plan's header says what was
    found and what it assumed (:data:`CARELESS_ASSUMED`).
    """
    from engine.embedding import select_embedding

    n = int(n_items)
    t = check_pilot_triplets(triplets, n)
    if len(t) < 5 * folds:
        raise ValueError(f"a pilot of {len(t)} answers is too small to fit (need at least {5 * folds})")
    rng = np.random.default_rng(random_state)
    # the world a plan simulates: chosen by K-fold cross-validation (a single held-out fifth of a pilot
    # picked a line for items in 3-D clusters, and the plan then asked 5x the answers a live study needed)
    choice = select_embedding(t, n, random_state=int(rng.integers(2**31)), folds=SELECTION_FOLDS)
    # the smallest dimension that predicts held-out answers as well, within a standard error (_parsimonious)
    kernel, dim = _parsimonious(choice.scores, (choice.kernel, choice.dim), len(t))
    holdout = float(choice.scores[(kernel, dim)])
    scenarios = []
    for r in range(max(1, int(replicates))):
        sample = t if r == 0 else t[rng.integers(len(t), size=len(t))]
        scenarios.append(_scenario(sample, n, dim, kernel, folds, rng))
    checked = None
    if raters is not None and len(np.unique(np.asarray(raters))) >= 2 * RATER_FOLDS:
        checked = check_raters(t, raters, n, dim, kernel)
    if calibrate and NOISE_FROM_PRIOR:
        # the human model's noise unless the pilot shows worse raters; every replicate the same noise in its
        # own robust range (a bootstrap resample's cross-fitted scale is biased low: its repeated answers fall
        # on both sides of a fold), so replicates differ in the world alone
        first = scenarios[0]
        scale, lapse, model_scale, model_lapse = _prior_noise(t, first, dim, kernel,
                                                              checked is not None and checked.caught)
        relative = scale / robust_range(first.distances)
        scenarios = [Scenario(s.distances, relative * robust_range(s.distances), lapse)
                     for s in scenarios]
        return PilotFit(tuple(scenarios), dim, kernel, holdout, len(t),
                        scale / max(first.scale, 1e-12), model_scale, model_lapse, "prior", checked)
    factor = 1.0
    if calibrate:
        # the scale (under the cross-fitted lapse), then the lapse under that scale, then the scale again
        # under that lapse: each statistic depends mostly, not only, on its own parameter. A bootstrap
        # replicate's lapse moves by what replicate 0's did.
        first = scenarios[0]
        rough, lapse = 1.0, first.lapse if CALIBRATION_START_LAPSE is None else CALIBRATION_START_LAPSE
        prior = False
        for _ in range(CALIBRATION_ROUNDS):
            rough = _calibrate(t, Scenario(first.distances, first.scale, lapse), dim, kernel)
            if SCALE_PRIOR and rough <= CALIBRATION_GRID[0]:
                # a simulated pilot is no more predictable without noise than the real one: the pilot is too
                # small to measure the scale (its embedding's own error swamps it), and the floor of the grid
                # would claim raters who never err but lapse (a plan 1.5-2.5x too optimistic). Take the human
                # model's scale, fitted to real crowds, and measure the lapse under it.
                prior, rough = True, HUMAN_SCALE / max(first.scale, 1e-12)
            lapse = _calibrate_lapse(t, Scenario(first.distances, first.scale * rough, lapse), dim, kernel)
            if prior:
                break
        shift = lapse - first.lapse
        scenarios = [Scenario(s.distances, s.scale, float(np.clip(s.lapse + shift, 0.0, 0.9))) for s in scenarios]
        factor = rough if prior else _calibrate(t, scenarios[0], dim, kernel)
        if SCALE_PRIOR and not prior and factor <= CALIBRATION_GRID[0]:
            prior, factor = True, HUMAN_SCALE / max(first.scale, 1e-12)
    scenarios = [Scenario(s.distances, s.scale * factor, s.lapse) for s in scenarios]
    return PilotFit(tuple(scenarios), dim, kernel, holdout, len(t), factor,
                    calibrate and prior, noise="calibrated" if calibrate else "cross-fitted", raters=checked)
