"""Judging raters by their answers: does a rater answer like someone who looks at the items?

Each rater's answers are scored against a model learned from everyone else (the rater's own answers
are in none of the fits that predict them) and tested against responders that never look: uniformly
random, constant, position-biased and index-rule. numpy only: imports neither Redis, Flask nor the
workers.

Conventions. A triplet answer row is ``(head, first, second, chose_first)``: the candidates in the
order shown, ``chose_first`` 1 if the answer judged the first one nearer the head (the triplet the answer
implies; for the triplet kind, the first was picked). A rating answer row is
``(i, j, distance)`` with the distance in [0, 1] the scale gives (``RatingScale.distance``). ``group``
is an integer per answer: the fold of its rater (raters are split into ``N_FOLDS`` groups; a rater's
answers are predicted by the model fitted on the other groups).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .kinds import CAREFUL_LAPSE

#: The name the answer check used for the careful rater's lapse (``engine.kinds.CAREFUL_LAPSE``).
LAPSE = CAREFUL_LAPSE
#: Raters are split into this many groups; each group's answers are predicted by a model fitted on
#: the others.
N_FOLDS = 4
#: Dimensions and gradient steps of the reference embedding.
DIMENSIONS = 3
STEPS = 150
#: Simulated honest answer sets per judged rater (the p-value's resolution is 1 / (SIMULATIONS + 1)).
SIMULATIONS = 4000
#: The responders a rater is tested against, as (name, answer rule, the rule's share): a rule gives
#: the probability of picking the first candidate (triplets) from (first is the lower index).
#: "random": 1/2; "left"/"right": nearly always one side; "left 80/20": the 80/20 position bias; "lowest
#: index": nearly always the item with the lower index.
CONSTANT_SHARE = 0.98
BIAS_SHARE = 0.8
#: How an item-blind rating responder is modelled: a histogram of its own values (fitted per rater)
#: with this pseudo-count per scale step.
RATING_BINS = 10


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(z, -30, 30)))


def _scatter(index: np.ndarray, rows: np.ndarray, n_items: int) -> np.ndarray:
    """Rows summed per index: shape (n_items, rows.shape[1])."""
    return np.stack([np.bincount(index, weights=rows[:, d], minlength=n_items) for d in range(rows.shape[1])], 1)


def fit_triplet_embedding(triplets: np.ndarray, n_items: int, seed: int = 0) -> np.ndarray:
    """An ordinal embedding of shape (n_items, DIMENSIONS) from triplet rows (head, first, second,
    chose_first): logistic in the gap of squared distances, fitted by Adam with a little L2."""
    rng = np.random.default_rng(seed)
    x = rng.normal(scale=0.1, size=(n_items, DIMENSIONS))
    if len(triplets) == 0:
        return x
    h, a, b = triplets[:, 0].astype(int), triplets[:, 1].astype(int), triplets[:, 2].astype(int)
    y = triplets[:, 3].astype(float)
    m, v = np.zeros_like(x), np.zeros_like(x)
    lr, l2 = 0.05, 1e-3
    for t in range(1, STEPS + 1):
        da, db = x[h] - x[a], x[h] - x[b]
        z = (db * db).sum(1) - (da * da).sum(1)  # > 0: the first candidate is closer
        g = (_sigmoid(z) - y)[:, None]  # d loss / d z
        # z = |h-b|^2 - |h-a|^2: dz/dh = 2(h-b) - 2(h-a), dz/da = 2(h-a), dz/db = -2(h-b)
        grad = (_scatter(h, g * 2 * (db - da), n_items) + _scatter(a, g * 2 * da, n_items)
                + _scatter(b, g * -2 * db, n_items))
        grad = grad / len(y) + l2 * x
        m = 0.9 * m + 0.1 * grad
        v = 0.999 * v + 0.001 * grad * grad
        x -= lr * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
    return x


def fit_rating_embedding(ratings: np.ndarray, n_items: int, seed: int = 0) -> tuple[np.ndarray, float]:
    """An embedding of shape (n_items, DIMENSIONS) and an offset whose distances fit the rating rows
    (i, j, distance) in least squares."""
    rng = np.random.default_rng(seed)
    x = rng.normal(scale=0.3, size=(n_items, DIMENSIONS))
    if len(ratings) == 0:
        return x, 0.5
    i, j, d = ratings[:, 0].astype(int), ratings[:, 1].astype(int), ratings[:, 2]
    params = np.concatenate([x.ravel(), [0.0]])
    m, v = np.zeros_like(params), np.zeros_like(params)
    lr, l2 = 0.05, 1e-3
    for t in range(1, STEPS + 1):
        x, c = params[:-1].reshape(n_items, DIMENSIONS), params[-1]
        diff = x[i] - x[j]
        dist = np.sqrt((diff * diff).sum(1) + 1e-9)
        r = (c + dist) - d
        term = (r / dist)[:, None] * diff
        gx = _scatter(i, term, n_items) - _scatter(j, term, n_items)
        grad = np.concatenate([(gx / len(d) + l2 * x).ravel(), [r.mean()]])
        m = 0.9 * m + 0.1 * grad
        v = 0.999 * v + 0.001 * grad * grad
        params = params - lr * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
    return params[:-1].reshape(n_items, DIMENSIONS), float(params[-1])


def held_out_triplet_margins(triplets: np.ndarray, group: np.ndarray, reference: np.ndarray, n_items: int,
                             seed: int = 0) -> np.ndarray:
    """For every triplet row, the margin z (> 0: the first candidate is predicted closer) of the model
    fitted on the ``reference`` rows (bool mask) of the other groups."""
    z = np.zeros(len(triplets))
    for fold in np.unique(group):
        x = fit_triplet_embedding(triplets[reference & (group != fold)], n_items, seed=seed + int(fold))
        rows = triplets[group == fold]
        h, a, b = rows[:, 0].astype(int), rows[:, 1].astype(int), rows[:, 2].astype(int)
        z[group == fold] = ((x[h] - x[b]) ** 2).sum(1) - ((x[h] - x[a]) ** 2).sum(1)
    return z


def held_out_rating_predictions(ratings: np.ndarray, group: np.ndarray, reference: np.ndarray, n_items: int,
                                seed: int = 0) -> np.ndarray:
    """For every rating row, the distance predicted by the model fitted on the other groups' reference rows."""
    pred = np.full(len(ratings), 0.5)
    for fold in np.unique(group):
        x, c = fit_rating_embedding(ratings[reference & (group != fold)], n_items, seed=seed + int(fold))
        rows = ratings[group == fold]
        i, j = rows[:, 0].astype(int), rows[:, 1].astype(int)
        pred[group == fold] = c + np.sqrt(((x[i] - x[j]) ** 2).sum(1))
    return np.clip(pred, 0.0, 1.0)


def calibrate_temperature(z: np.ndarray, chose_first: np.ndarray) -> float:
    """The scale s maximising the held-out likelihood of P(first) = lapse/2 + (1 - lapse) sigmoid(s z)
    (a grid search: the fitted embeddings are over- or under-confident on answers they never saw)."""
    if len(z) == 0:
        return 0.0
    best, best_ll = 0.0, -np.inf
    for s in np.concatenate([[0.0], np.geomspace(0.01, 100, 60)]):
        p = CAREFUL_LAPSE / 2 + (1 - CAREFUL_LAPSE) * _sigmoid(s * z)
        ll = np.sum(np.where(chose_first == 1, np.log(p), np.log1p(-p)))
        if ll > best_ll:
            best, best_ll = float(s), ll
    return best


@dataclass(frozen=True)
class Verdict:
    """The test of one rater's answers: ``p`` the share of simulated honest raters (answering the same
    questions from the model) who look at least as item-blind; ``likeliest`` the item-blind responder
    that explains the answers best; ``agreement`` the share of answers agreeing with the model's
    prediction (None without one); ``n`` the answers tested."""

    p: float
    likeliest: str
    agreement: float | None
    n: int


def _triplet_blind_logliks(chose_first: np.ndarray, first_lower: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Log-likelihoods of item-blind responders, shape (S, n_responders), for answer sets of shape (S, n)."""
    names, columns = [], []
    k = chose_first.shape[1]
    n_first = chose_first.sum(1)
    lower = (chose_first == first_lower).sum(1)  # answers picking the lower-index item
    for share, name in ((0.5, "random"), (CONSTANT_SHARE, "always left"), (1 - CONSTANT_SHARE, "always right"),
                        (BIAS_SHARE, "left 80/20"), (1 - BIAS_SHARE, "right 80/20")):
        names.append(name)
        columns.append(n_first * np.log(share) + (k - n_first) * np.log1p(-share))
    for share, name in ((CONSTANT_SHARE, "lowest index"), (1 - CONSTANT_SHARE, "highest index"),
                        (BIAS_SHARE, "lower index 80/20")):
        names.append(name)
        columns.append(lower * np.log(share) + (k - lower) * np.log1p(-share))
    return np.stack(columns, axis=1), names


def judge_triplets(p_first: np.ndarray, chose_first: np.ndarray, first_lower: np.ndarray,
                   seed: int = 0, simulations: int = SIMULATIONS) -> Verdict:
    """Test one rater's triplet answers: ``p_first`` the honest model's probability of picking the first
    candidate (lapse included), ``chose_first`` 0/1 answers, ``first_lower`` 1 where the first
    candidate has the lower item index. The statistic is the log-likelihood ratio of the honest model
    against the likeliest item-blind responder; its p-value is read from answer sets simulated from
    the honest model on the same questions (a parametric bootstrap)."""
    p_first = np.clip(np.asarray(p_first, float), 1e-6, 1 - 1e-6)
    chose_first = np.asarray(chose_first, int)
    first_lower = np.asarray(first_lower, int)
    n = len(chose_first)
    if n == 0:
        return Verdict(1.0, "", None, 0)
    log_p, log_q = np.log(p_first), np.log1p(-p_first)

    def statistic(answers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        honest = np.where(answers == 1, log_p, log_q).sum(1)
        blind, _ = _triplet_blind_logliks(answers, first_lower)
        return honest - blind.max(1), blind.argmax(1)

    observed, which = statistic(chose_first[None, :])
    rng = np.random.default_rng(seed)
    simulated, _ = statistic((rng.random((simulations, n)) < p_first).astype(int))
    p = (1 + np.count_nonzero(simulated <= observed[0])) / (simulations + 1)
    _, names = _triplet_blind_logliks(chose_first[None, :], first_lower)
    informative = np.abs(p_first - 0.5) > 1e-3
    agreement = (float(np.mean((p_first[informative] > 0.5) == (chose_first[informative] == 1)))
                 if informative.any() else None)
    return Verdict(float(p), names[int(which[0])], agreement, n)


def judge_ratings(predicted: np.ndarray, distance: np.ndarray, sigma: float, levels: np.ndarray | None = None,
                  seed: int = 0, simulations: int = SIMULATIONS) -> Verdict:
    """Test one rater's rating answers (as distances in [0, 1]) against ``predicted`` distances of the
    model: honest answers are normal around the prediction (spread ``sigma``) with CAREFUL_LAPSE uniform
    lapses; item-blind responders draw from a histogram of their own values (which covers constant,
    random and biased raters: whatever they do, it does not depend on the pair). The p-value comes from
    answer sets simulated from the honest model on the same pairs, snapped to the scale's ``levels``
    (distances of its steps; None for a continuous scale) as a rater's answers are."""
    predicted = np.asarray(predicted, float)
    distance = np.asarray(distance, float)
    n = len(distance)
    if n == 0:
        return Verdict(1.0, "", None, 0)
    sigma = max(float(sigma), 0.05)
    edges = np.linspace(0.0, 1.0, RATING_BINS + 1)

    def statistic(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        dens = np.exp(-0.5 * ((values - predicted) / sigma) ** 2) / (sigma * np.sqrt(2 * np.pi))
        honest = np.log((1 - CAREFUL_LAPSE) * dens + CAREFUL_LAPSE).sum(1)
        bins = np.clip(np.searchsorted(edges, values, side="right") - 1, 0, RATING_BINS - 1)
        counts = np.stack([np.count_nonzero(bins == k, axis=1) for k in range(RATING_BINS)], axis=1)
        # the histogram responder, fitted to the answers (its density per unit: bins are 1/RATING_BINS wide)
        share = (counts + 0.5) / (n + 0.5 * RATING_BINS)
        blind = (counts * np.log(share * RATING_BINS)).sum(1)
        top = counts.max(1) / n
        return honest - blind, top

    observed, top = statistic(distance[None, :])
    rng = np.random.default_rng(seed)
    noise = rng.normal(scale=sigma, size=(simulations, n))
    lapse = rng.random((simulations, n)) < CAREFUL_LAPSE
    simulated_values = np.where(lapse, rng.random((simulations, n)), np.clip(predicted + noise, 0.0, 1.0))
    if levels is not None and len(levels):
        levels = np.sort(np.asarray(levels, float))
        nearest = np.abs(simulated_values[..., None] - levels).argmin(-1)
        simulated_values = levels[nearest]
    simulated, _ = statistic(simulated_values)
    p = (1 + np.count_nonzero(simulated <= observed[0])) / (simulations + 1)
    likeliest = "constant" if top[0] >= 0.9 else "random"
    agreement = float(np.mean(np.abs(distance - predicted) <= 0.25))
    return Verdict(float(p), likeliest, agreement, n)


def look_alpha(look: int, false_flag_rate: float) -> float:
    """The share of honest raters a look may flag: ``false_flag_rate / 2 ** look`` at the look-th look
    (1, 2, ...), so all looks together flag at most ``false_flag_rate`` of them (Bonferroni)."""
    return false_flag_rate / 2 ** look
