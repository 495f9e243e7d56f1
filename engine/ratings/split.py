"""How a study asking ratings and triplets of the same items should split its raters' time between them,
measured from the study's own answers. Pure functions on arrays; numpy and scipy only, never Flask, Redis,
RQ, ``webapp`` or ``workers``.

Each kind's noise is fitted from its answers: a rating's by the fit (``Hyper.noise``, the residuals' SD),
a triplet's logistic scale ``tau`` here (:func:`triplet_scale`), from how each triplet came out against the
learner's estimates of its two pairs, widened by those estimates' own variance
(``PooledRatings.triplet_scale``). What each kind buys is then the knowledge gradient of one question
(:func:`question_values`): how much one answer shrinks the variance of the distances an item's choice of
best neighbour rests on, for the questions the learner asks. The shares of rater time follow the ratio of
the two per second (:func:`time_share`): a bandit's rule, half the time each until both kinds have
:data:`SPLIT_EXPLORE` answers per item, then the evidence, neither kind below :data:`SPLIT_FLOOR`; once the
study has spent :data:`SPLIT_COMMIT` rater seconds per item it commits to the kind the evidence favours
then (:func:`committed_share`).
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from scipy.special import ndtr

#: the prior on a triplet's logistic scale: log-normal around the model's fixed assumption (a triplet as
#: noisy as two of the rater's ratings compared, ``TRIPLET_SCALE_PER_NOISE`` x the rating noise), this SD
TAU_PRIOR_LOG_SD = 0.5
#: the grid the scale's posterior is read on: this factor either side of the prior, in this many steps
TAU_GRID_RANGE, TAU_GRID_STEPS = 20.0, 161
#: a logistic of scale s has SD ``LOGISTIC_SD`` x s: an estimate's own variance v widens a triplet's
#: logistic to ``sqrt(tau**2 + v / LOGISTIC_SD**2)`` (the probit approximation)
LOGISTIC_SD = np.pi / np.sqrt(3.0)
#: a triplet's appearance counts as this many ratings of an item toward how surely the space places it
#: (when the triplets are judged by the space: ``PooledRatings.triplet_scale``)
TRIPLET_PLACES = 0.5
#: the rows of the distance matrix one rating's variance counts in (its two items' choices of neighbour)
RATING_ROWS = 2.0
#: answers of each kind per item the learner takes at half the time each before it follows the evidence
SPLIT_EXPLORE = 5.0
#: then the least share of rater time either kind gets (its evidence keeps coming)
SPLIT_FLOOR = 0.05
#: how sharply the share follows the log of the ratio of the two kinds' values per second
SPLIT_SHARPNESS = 4.0
#: rater seconds per item (both kinds together) after which the split commits to one kind for good (explore,
#: then commit): a study that keeps following the evidence pays for the mix where the kinds are level
#: (triplets at 1.5 points, benchmarks/rating_learners.py --mixed, 30 items: half and half .67 at 200 s per
#: item, either kind alone .72-.73) and drifts back to ratings where triplets are the better kind (.22 of the
#: time on ratings at 100 s, .36 by 800 s)
SPLIT_COMMIT = 100.0
#: the evidence's share of time on ratings at or above which the split commits to ratings (to triplets below):
#: less than a half, since a triplet's scale reads low while answers are few and the evidence leans to triplets
#: (at 100 s per item, 12 seeds: the evidence's share .24-.95 with people's triplets, 4 of them below a half;
#: .05-.21 with triplets half as noisy)
SPLIT_COMMIT_SHARE = 0.3
#: the share of rater time the other kind keeps after the commitment
SPLIT_COMMIT_FLOOR = 0.0


def effective_scale(tau: float | np.ndarray, gap_var: np.ndarray) -> np.ndarray:
    """A triplet's logistic scale once the gap's own uncertainty (variance ``gap_var``) is added."""
    return np.sqrt(np.asarray(tau, np.float64) ** 2 + np.asarray(gap_var, np.float64) / LOGISTIC_SD**2)


def triplet_log_likelihood(tau: np.ndarray, gaps: np.ndarray, gap_vars: np.ndarray, lapse: float) -> np.ndarray:
    """The log-likelihood of triplet answers at each scale of ``tau`` (G,): ``gaps`` (S,) the estimated
    distance of the loser less the winner's when each was observed, ``gap_vars`` (S,) that gap's variance."""
    scale = effective_scale(np.asarray(tau, np.float64)[:, None], gap_vars[None, :])
    s = 0.5 * (1.0 + np.tanh(0.5 * gaps[None, :] / scale))
    return np.log(0.5 * lapse + (1.0 - lapse) * s).sum(axis=1)


def triplet_scale(gaps: np.ndarray, gap_vars: np.ndarray, prior_tau: float, lapse: float) -> float:
    """The posterior mode of a triplet's logistic scale (distance units) from prequential records (see
    :func:`triplet_log_likelihood`), under a log-normal prior around ``prior_tau`` (:data:`TAU_PRIOR_LOG_SD`);
    ``prior_tau`` itself without records."""
    gaps = np.asarray(gaps, np.float64)
    gap_vars = np.asarray(gap_vars, np.float64)
    keep = np.isfinite(gaps) & np.isfinite(gap_vars)
    if not keep.any() or not prior_tau > 0:
        return float(prior_tau)
    logs = np.log(prior_tau) + np.linspace(-np.log(TAU_GRID_RANGE), np.log(TAU_GRID_RANGE), TAU_GRID_STEPS)
    post = triplet_log_likelihood(np.exp(logs), gaps[keep], gap_vars[keep], lapse) \
        - 0.5 * ((logs - np.log(prior_tau)) / TAU_PRIOR_LOG_SD) ** 2
    return float(np.exp(logs[int(np.argmax(post))]))


def triplet_information(gap: np.ndarray, tau: float, lapse: float) -> np.ndarray:
    """The Fisher information one triplet answer carries on its gap (distance units⁻²) at the estimated
    ``gap``: ``p'(gap)² / (p (1 - p))`` of the answer's probability ``p``."""
    s = 0.5 * (1.0 + np.tanh(0.5 * np.asarray(gap, np.float64) / tau))
    p = 0.5 * lapse + (1.0 - lapse) * s
    slope = (1.0 - lapse) * s * (1.0 - s) / tau
    return slope**2 / (p * (1.0 - p))


def question_values(mean: np.ndarray, var: np.ndarray, cand: np.ndarray, noise: float, tau: float,
                    lapse: float) -> tuple[float, float]:
    """(a rating's, a triplet's) expected value: the variance one answer takes off the distances each item's
    best neighbour is chosen by, averaged over the items as the learner draws them (by how likely their best
    is to change). ``mean`` and ``var`` (n, n) the pair estimates (diagonal inf), ``cand`` (n, s) each item's
    shortlist, ``noise`` one rating's SD, ``tau`` a triplet's logistic scale.

    Item h's leader a and runner-up b among its shortlist: a triplet (h, a, b) adds its Fisher information to
    the gap ``d(h, b) - d(h, a)``; a rating of (h, a) or (h, b) (either, as the learner asks) shrinks that
    pair's variance, which is the gap's share it carries, and counts in both items' rows
    (:data:`RATING_ROWS`)."""
    n = mean.shape[0]
    rows = np.arange(n)
    mu = np.take_along_axis(mean, cand, axis=1)
    order = np.argsort(mu, axis=1, kind="stable")[:, :2]
    a, b = cand[rows, order[:, 0]], cand[rows, order[:, 1]]
    va, vb = var[rows, a], var[rows, b]
    gap = mean[rows, b] - mean[rows, a]
    total = va + vb
    weight = ndtr(-gap / np.sqrt(total)) + 1e-3
    # a rating of (h, x) settles a distance both h's row and x's choose by; a triplet one difference in h's
    # row (counting the rating once where h is not among x's two likeliest came out within .05 of this at
    # every budget and triplet noise of rating_learners.py --mixed, 12 seeds, but below the better kind alone
    # by more in all: -.56 against -.41 summed over the 15 budgets and noises)
    rating = np.zeros(n)
    for vx in (va, vb):
        rating += 0.5 * RATING_ROWS * vx**2 / (vx + noise**2)
    info = triplet_information(gap, tau, lapse)
    triplet = total - 1.0 / (1.0 / total + info)
    w = weight / weight.sum()
    return float(w @ rating), float(w @ triplet)


def time_share(value_rating: float, value_triplet: float, seconds: Mapping[str, float]) -> float:
    """The share of rater time ratings get, given each kind's value per answer and ``seconds`` per answer:
    a logistic in the log of the ratio of the values per second (:data:`SPLIT_SHARPNESS`), kept within
    :data:`SPLIT_FLOOR` of either end."""
    per_r = value_rating / float(seconds["rating"])
    per_t = value_triplet / float(seconds["triplet"])
    if not (per_r > 0 and per_t > 0):
        return 0.5 if per_r == per_t else (1.0 - SPLIT_FLOOR if per_r > per_t else SPLIT_FLOOR)
    x = SPLIT_SHARPNESS * np.log(per_r / per_t)
    share = 0.5 * (1.0 + np.tanh(0.5 * x))
    return float(np.clip(share, SPLIT_FLOOR, 1.0 - SPLIT_FLOOR))


def committed_share(share: float, seconds_per_item: float,
                    to_ratings: bool | None = None) -> tuple[float, bool | None]:
    """(the share of rater time ratings get, whether the study committed to ratings: True, to triplets: False, or
    not yet: None) once a study has spent ``seconds_per_item`` rater seconds per item on both kinds together:
    ``share`` (the evidence's, :func:`time_share`) and None until :data:`SPLIT_COMMIT`; then the kind ``share``
    favours at that call (ratings if it is at least :data:`SPLIT_COMMIT_SHARE`), kept by the caller and handed
    back as ``to_ratings`` from then on, gets all but :data:`SPLIT_COMMIT_FLOOR` of the time. Not used by
    ``PooledRatings.time_shares``: at 30 items it is above the evidence alone after the commitment in most
    studies, but at 300 items (one seed, people's triplets) the evidence still leans to triplets at the
    commitment, and it commits to them (benchmarks/README.md)."""
    if to_ratings is None:
        if seconds_per_item < SPLIT_COMMIT:
            return float(share), None
        to_ratings = bool(share >= SPLIT_COMMIT_SHARE)
    if not isinstance(to_ratings, bool):
        raise ValueError(f"to_ratings is True, False or None, got {to_ratings!r}")
    return (1.0 - SPLIT_COMMIT_FLOOR if to_ratings else SPLIT_COMMIT_FLOOR), to_ratings
