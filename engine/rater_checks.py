"""Judging raters by their answers: does a rater answer like someone who looks at the items?

Each rater's answers are scored against a model learned from everyone else (the rater's own answers
are in none of the fits that predict them) and tested against responders that never look: uniformly
random, constant, position-biased and index-rule. numpy only: imports neither Redis, Flask nor the
workers.

Conventions. A triplet answer row is ``(head, first, second, chose_first)``: the candidates in the
order shown, ``chose_first`` 1 if the answer judged the first one nearer the head (the triplet the answer
implies; for the triplet kind, the first was picked). A rating answer row is ``(i, j, distance)`` with the
distance in [0, 1] its kind gives on the study's scale (``QuestionKind.sample``). ``group`` is an integer
per answer: the fold of its rater (raters are split into ``N_FOLDS`` groups; a rater's answers are predicted
by the model fitted on the other groups).
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


#: Catch comparisons judged by the crowd (``webapp.catches``: a label alone states no distance margin, so a
#: label catch trial is only as near-certain as people find it). The comparisons are a fixed set shown to
#: many raters: the other raters' answers say how often a careful rater agrees with each (``judge_claims``),
#: a rater's catch answers are tested against those agreements (``judge_catch_answers``: a miss of a
#: comparison people disagree about says little), and the comparisons people agree with least are no
#: longer shown (``claims_to_retire``); ``judge_crowd`` is one look of the server's worker at them
#: (workers/jobs/rater_checks.py), benchmarks/catch_fairness.py --crowd-wired measures it. Statuses of a
#: comparison:
CLAIM_RETIRED, CLAIM_PENDING, CLAIM_CONFIRMED = -1, 0, 1
#: A comparison is confirmed when the others' agreement is above the threshold (``claim_threshold``) at this
#: one-sided level, and retired when it is below it at the same level ...
CLAIM_ALPHA = 0.05
#: ... with at least this many answers of others either way.
CLAIM_MIN_ANSWERS = 10
#: The threshold: a careful rater misses a confirmed comparison at most this multiple of the kind's stated
#: careful miss rate (the rate the catch schedule and its misses allowed are planned on).
CLAIM_MISS_FACTOR = 2.0


def claim_threshold(careful_miss: float, chance: float) -> float:
    """The agreement a comparison must be shown to exceed: 1 - CLAIM_MISS_FACTOR x the kind's careful miss
    rate, and at least midway between the kind's chance pass rate and 1 (clearly above chance)."""
    return min(0.995, max(1 - CLAIM_MISS_FACTOR * careful_miss, (1 + chance) / 2))


def _log_pmf(n: np.ndarray, p: float) -> list[np.ndarray]:
    from math import lgamma, log

    out = []
    for m in n:
        k = np.arange(int(m) + 1)
        out.append(np.array([lgamma(m + 1) - lgamma(i + 1) - lgamma(m - i + 1) for i in k])
                   + k * log(p) + (m - k) * log(1 - p))
    return out


def claim_status(agreed: np.ndarray, answers: np.ndarray, threshold: float, alpha: float = CLAIM_ALPHA,
                 min_answers: int = CLAIM_MIN_ANSWERS) -> np.ndarray:
    """The status of comparisons ``agreed`` of whose ``answers`` agreed with the catch trial's expectation
    (arrays of one shape): CLAIM_CONFIRMED where P(at least ``agreed`` | agreement ``threshold``) < alpha
    (a one-sided binomial test), CLAIM_RETIRED where P(at most ``agreed``) < alpha, else CLAIM_PENDING."""
    agreed, answers = np.asarray(agreed, int), np.asarray(answers, int)
    status = np.full(agreed.shape, CLAIM_PENDING)
    flat_k, flat_n, flat_s = agreed.ravel(), answers.ravel(), status.ravel()
    sizes = np.unique(flat_n[flat_n >= min_answers])
    for n, pmf in zip(sizes, _log_pmf(sizes, threshold), strict=True):
        p = np.exp(pmf)
        upper = np.cumsum(p[::-1])[::-1]  # P(X >= k)
        lower = np.cumsum(p)  # P(X <= k)
        at = flat_n == n
        k = flat_k[at]
        flat_s[at] = np.where(upper[k] < alpha, CLAIM_CONFIRMED, np.where(lower[k] < alpha, CLAIM_RETIRED,
                                                                           CLAIM_PENDING))
    return flat_s.reshape(agreed.shape)


#: Rounds of the crowd's estimate (``judge_claims``): how alike each comparison is to careful raters and how
#: likely each rater is one of them, each from the other.
CLAIM_ROUNDS = 20


@dataclass(frozen=True)
class ClaimVerdicts:
    """``judge_claims``: per answer, the crowd's agreement with its comparison without the answer's own rater
    (``others_agreed`` of ``others_answers``, weighted by how likely each other rater is careful) and that
    comparison's status for the rater (``answer``: a rater never confirms the comparisons that judge them);
    per comparison, its status by everyone (``claim``: what the study shows and the dashboard says) and its
    weighted ``agreed`` of ``answers``; per rater (their integer), ``careful``: how likely they are careful."""

    answer: np.ndarray
    others_agreed: np.ndarray
    others_answers: np.ndarray
    claim: np.ndarray
    agreed: np.ndarray
    answers: np.ndarray
    careful: np.ndarray


def judge_claims(claim: np.ndarray, rater: np.ndarray, agreed: np.ndarray, reference: np.ndarray, n_claims: int,
                 threshold: float, chance: float) -> ClaimVerdicts:
    """Catch answers judged by the crowd: ``claim`` the comparison of each answer (0..n_claims-1), ``rater``
    an integer per rater (0..), ``agreed`` 1 where the answer passed, ``reference`` True for answers of the
    crowd (raters not flagged), ``chance`` the kind's random pass rate.

    The crowd is a mixture of careful raters, who agree with comparison c with a chance of its own, and
    item-blind ones, who pass at ``chance``; the two are estimated together (expectation-maximisation, as
    Dawid and Skene's model of annotators): random responders counted as people pull every comparison's
    agreement down until nothing is confirmed (a third of bots kept every one pending in
    benchmarks/catch_fairness.py). Each answer's comparison is then judged on the other raters' answers,
    weighted by how likely each is careful."""
    claim, rater = np.asarray(claim, int), np.asarray(rater, int)
    agreed, reference = np.asarray(agreed, float), np.asarray(reference, bool)
    n_raters = int(rater.max()) + 1 if len(rater) else 0
    weight = np.ones(n_raters)
    share = 0.5
    for _ in range(CLAIM_ROUNDS):
        w = np.where(reference, weight[rater], 0.0)
        n = np.bincount(claim, weights=w, minlength=n_claims)
        k = np.bincount(claim, weights=w * agreed, minlength=n_claims)
        q = np.clip((k + 1) / (n + 2), chance, 0.999)[claim]  # careful agreement, a flat prior
        ratio = np.where(agreed == 1, np.log(q / chance), np.log((1 - q) / (1 - chance)))
        log_odds = np.bincount(rater, weights=np.where(reference, ratio, 0.0), minlength=n_raters)
        log_odds += np.log(share / (1 - share))
        weight = 1 / (1 + np.exp(-np.clip(log_odds, -30, 30)))
        seen = np.bincount(rater[reference], minlength=n_raters) > 0
        share = float(np.clip(weight[seen].mean() if seen.any() else 0.5, 0.05, 0.95))
    w = np.where(reference, weight[rater], 0.0)
    n_total = np.bincount(claim, weights=w, minlength=n_claims)
    k_total = np.bincount(claim, weights=w * agreed, minlength=n_claims)
    # the judged rater's own answers to the same comparison, left out
    pair = rater.astype(np.int64) * n_claims + claim
    keys_, inverse = np.unique(pair, return_inverse=True)
    own_n = np.bincount(inverse, weights=w, minlength=len(keys_))[inverse]
    own_k = np.bincount(inverse, weights=w * agreed, minlength=len(keys_))[inverse]
    others_n = np.maximum(n_total[claim] - own_n, 0.0)
    others_k = np.clip(k_total[claim] - own_k, 0.0, others_n)
    per_answer = claim_status(np.round(others_k), np.round(others_n), threshold)
    return ClaimVerdicts(per_answer, others_k, others_n, claim_status(np.round(k_total), np.round(n_total), threshold),
                         k_total, n_total, weight)


def crowd_agreement(agreed: np.ndarray, answers: np.ndarray, chance: float) -> np.ndarray:
    """How often a careful rater agrees with each comparison, from ``agreed`` of the others' ``answers``: the
    mean of its posterior under a flat prior, less CLAIM_Z of its standard deviations, never below
    ``chance`` (no answers: ``chance``, so the comparison says nothing). Read low rather than high: an
    agreement read too low makes the judged rater's misses less surprising."""
    k, n = np.asarray(agreed, float), np.asarray(answers, float)
    a, b = k + 1, n - k + 1
    mean = a / (a + b)
    sd = np.sqrt(a * b / ((a + b) ** 2 * (a + b + 1)))
    return np.clip(np.where(n > 0, mean - CLAIM_Z * sd, chance), chance, 0.999)


#: The posterior standard deviations an agreement is read below its mean (crowd_agreement): 0, the mean
#: (0.5 let 10% of random raters through the triplet row of benchmarks/catch_fairness.py's crowd table, the
#: mean 5%; careful raters flagged 0-0.5% either way).
CLAIM_Z = 0.0


def judge_catch_answers(q: np.ndarray, agreed: np.ndarray, chance: float, seed: int = 0,
                        simulations: int = SIMULATIONS, others: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
                        ) -> float:
    """The p-value of one rater's catch answers under careful answering: ``q`` the careful agreement of each
    answer's comparison (``crowd_agreement`` of the others'), ``agreed`` 1 where the rater passed. The
    statistic is the log-likelihood ratio of agreeing as the crowd does against passing at ``chance``;
    its p-value is the share of answer sets simulated from ``q`` (a careful rater on the same comparisons)
    at most as likely to be the crowd's (a parametric bootstrap, as ``judge_triplets``).

    ``others``, (comparison, agreed, answers) per answer: the others' weighted answers ``q`` was read from. Each
    simulated careful rater then agrees with a comparison at an agreement drawn from its posterior (flat prior,
    one draw per comparison and simulated rater, never below ``chance``) instead of at ``q``: a comparison
    known from 30 answers is known to a few points, and a test taking ``q`` as exact flagged careful raters
    nearly twice as often as its level (benchmarks/catch_fairness.py --crowd-wired, triplets of 10 labels: 0.89%
    at 0.5% over 40 studies; 0.51% with the draws over 80)."""
    q, agreed = np.asarray(q, float), np.asarray(agreed, int)
    if len(q) == 0:
        return 1.0
    up, down = np.log(q / chance), np.log((1 - q) / (1 - chance))
    observed = np.sum(np.where(agreed == 1, up, down))
    rng = np.random.default_rng(seed)
    truth = q
    if others is not None:
        comparison, k, n = (np.asarray(x) for x in others)
        first = np.unique(comparison, return_index=True, return_inverse=True)
        at, inverse = first[1], first[2]
        k, n = np.asarray(k, float)[at], np.asarray(n, float)[at]
        drawn = rng.beta(k + 1, n - k + 1, size=(simulations, len(at)))
        truth = np.clip(drawn, chance, 0.999)[:, inverse]
    simulated = np.where(rng.random((simulations, len(q))) < truth, up, down).sum(1)
    return float((1 + np.count_nonzero(simulated <= observed + 1e-12)) / (simulations + 1))


#: Comparisons shown as catch trials: of those with CLAIM_MIN_ANSWERS answers or more, the crowd's likeliest
#: agreed this share are kept (by their agreement, ``crowd_agreement``): 0.5 let 14% of random raters through
#: the odd-one-out rows of benchmarks/catch_fairness.py's crowd table, 0.3 7%, 0.2 8%.
CLAIM_KEEP_SHARE = 0.3


def claims_to_retire(verdicts: ClaimVerdicts, threshold: float) -> list[int]:
    """The comparisons no longer to show: those retired by the test (agreement clearly below ``threshold``)
    and, of those with CLAIM_MIN_ANSWERS answers or more, the ones the crowd agrees with least (outside the
    best CLAIM_KEEP_SHARE): random responders in the crowd pull every comparison's agreement down alike, so
    the ranking, not the level, says which comparisons careful raters agree with most; a catch trial of a
    comparison they all agree with is the evidence that tells them from responders at random."""
    out = set(np.flatnonzero(verdicts.claim == CLAIM_RETIRED).tolist())
    known = np.flatnonzero(verdicts.answers >= CLAIM_MIN_ANSWERS)
    if len(known) >= 2:
        low = crowd_agreement(verdicts.agreed[known], verdicts.answers[known], 0.0)
        keep = max(1, int(np.ceil(CLAIM_KEEP_SHARE * len(known))))
        out.update(known[np.argsort(-low, kind="stable")[keep:]].tolist())
    return sorted(int(i) for i in out)


#: The crowd's verdict flags a rater below this share of the study's ``false_flag_rate``: the agreements it
#: tests against are estimates, and at the full level benchmarks/catch_fairness.py --crowd-wired flagged
#: 1.06-1.76% of careful raters in 5 of its 10 rows.
CROWD_LEVEL = 0.5


@dataclass(frozen=True)
class CrowdJudgement:
    """``judge_crowd``: the crowd's ``verdicts`` (``judge_claims``), the comparisons no longer to show
    (``retire``, ``claims_to_retire``), the p-value of each rater judged now (``p``: rater -> p) and the raters
    it flags (``flagged``: p below CROWD_LEVEL x ``alpha``)."""

    verdicts: ClaimVerdicts
    retire: list[int]
    p: dict[int, float]
    flagged: frozenset[int] = frozenset()


def crowd_due(claim_status_of_answers: np.ndarray, rater: np.ndarray, order: np.ndarray, n_raters: int,
              flagged: np.ndarray, judged: np.ndarray, finished: np.ndarray, delay: int, final: bool,
              agreed: np.ndarray | None = None) -> np.ndarray:
    """The raters (bool per rater) whose catch answers are to be judged now, once: not flagged, not judged
    before, with catch answers; and the study has ended (``final``), or ``delay`` other raters gave their last
    catch answer after this rater's last one (``order``: each answer's place in the log), or the rater answered
    every planned question (``finished``) and every comparison they answered (with ``agreed``, 1 per answer that
    passed: every comparison they missed) is confirmed or retired by the others' answers
    (``claim_status_of_answers``: ``ClaimVerdicts.answer``), so nothing the later raters add would decide it."""
    rater, order = np.asarray(rater, int), np.asarray(order, float)
    has = np.bincount(rater, minlength=n_raters) > 0
    last = np.full(n_raters, -np.inf)
    np.maximum.at(last, rater, order)
    # the raters whose last catch answer came after each rater's last one
    later = n_raters - np.searchsorted(np.sort(last[has]), last, side="right") if has.any() else np.zeros(n_raters)
    open_ = np.asarray(claim_status_of_answers) == CLAIM_PENDING
    if agreed is not None:
        open_ &= np.asarray(agreed) == 0
    undecided = np.bincount(rater, weights=open_.astype(float), minlength=n_raters) > 0
    ready = final | (later >= delay) | (np.asarray(finished, bool) & ~undecided)
    return has & ~np.asarray(flagged, bool) & ~np.asarray(judged, bool) & ready


def judge_crowd(claim: np.ndarray, rater: np.ndarray, agreed: np.ndarray, n_claims: int, flagged: np.ndarray,
                judged: np.ndarray, finished: np.ndarray, threshold: float, chance: float, alpha: float,
                delay: int, final: bool, seeds: np.ndarray) -> CrowdJudgement:
    """One look of the crowd at a study's catch answers judged by it (in log order: ``claim``, ``rater``,
    ``agreed`` per answer; ``flagged``, ``judged``, ``finished``, ``seeds`` per rater, see ``crowd_due``).

    The raters flagged by any check are left out of the crowd; the crowd's estimate (``judge_claims``) says
    which comparisons to retire, and each rater due (``crowd_due``: a finished rater as soon as every comparison
    they missed is decided) is tested once on their catch answers against the others' agreement per comparison
    (``judge_catch_answers``, a parametric bootstrap of 20 / its level careful answer sets, each comparison's
    agreement drawn from what the others' answers say of it) and flagged below CROWD_LEVEL x ``alpha`` (the
    study's false_flag_rate): benchmarks/catch_fairness.py --crowd-wired measures it."""
    claim, rater, agreed = np.asarray(claim, int), np.asarray(rater, int), np.asarray(agreed, int)
    n_raters = len(flagged)
    flagged = np.asarray(flagged, bool)
    verdicts = judge_claims(claim, rater, agreed, ~flagged[rater], n_claims, threshold, chance)
    retire = claims_to_retire(verdicts, threshold)
    due = crowd_due(verdicts.answer, rater, np.arange(len(rater)), n_raters, flagged, judged, finished, delay, final,
                    agreed)
    q = crowd_agreement(verdicts.others_agreed, verdicts.others_answers, chance)
    level = CROWD_LEVEL * alpha
    p = {}
    for x in np.flatnonzero(due):
        mine = rater == x
        p[int(x)] = judge_catch_answers(q[mine], agreed[mine], chance, seed=int(seeds[x]),
                                        simulations=int(20 / level),
                                        others=(claim[mine], verdicts.others_agreed[mine],
                                                verdicts.others_answers[mine]))
    return CrowdJudgement(verdicts, retire, p, frozenset(x for x, v in p.items() if v < level))
