"""The answer check's statistics (issue 26): item-blind responders are told from careful raters by their
answers, and the stated false-flag rate holds on simulated careful raters (seeded, deterministic)."""
from __future__ import annotations

import numpy as np
import pytest

from engine import rater_checks as rc

N_ITEMS = 30


@pytest.fixture(scope="module")
def world():
    rng = np.random.default_rng(0)
    points = rng.normal(size=(N_ITEMS, 2))
    distances = np.linalg.norm(points[:, None] - points[None], axis=-1)

    def questions(m, rng):
        q = np.array([rng.choice(N_ITEMS, 3, replace=False) for _ in range(m)])
        return q

    def careful(q, rng):
        # the human model: logistic in the distance gap, lapse 0.1
        h, a, b = q.T
        p = 0.05 + 0.9 / (1 + np.exp(-(distances[h, b] - distances[h, a]) / 0.1))
        return (rng.random(len(q)) < p).astype(int)

    q = questions(1500, rng)
    reference = np.column_stack([q, careful(q, rng)])
    group = rng.integers(0, rc.N_FOLDS, len(reference))
    z = rc.held_out_triplet_margins(reference, group, np.ones(len(reference), bool), N_ITEMS)
    scale = rc.calibrate_temperature(z, reference[:, 3])
    model = rc.fit_triplet_embedding(reference, N_ITEMS)
    return questions, careful, model, scale


def flag_share(world, answer, m, look, trials=150, seed=1, false_flag_rate=0.01):
    questions, _, x, scale = world
    rng = np.random.default_rng(seed)
    alpha = rc.look_alpha(look, false_flag_rate)
    flags = 0
    for t in range(trials):
        q = questions(m, rng)
        h, a, b = q.T
        z = ((x[h] - x[b]) ** 2).sum(1) - ((x[h] - x[a]) ** 2).sum(1)
        p = rc.LAPSE / 2 + (1 - rc.LAPSE) / (1 + np.exp(-scale * z))
        verdict = rc.judge_triplets(p, answer(q, rng), (a < b).astype(int), seed=t, simulations=2000)
        flags += verdict.p < alpha
    return flags / trials


def test_item_blind_responders_are_flagged_at_40_answers(world):
    blind = {"random": lambda q, rng: rng.integers(0, 2, len(q)),
             "always left": lambda q, rng: np.ones(len(q), int),
             "always right": lambda q, rng: np.zeros(len(q), int),
             "lowest index": lambda q, rng: (q[:, 1] < q[:, 2]).astype(int),
             "80/20": lambda q, rng: (rng.random(len(q)) < 0.8).astype(int)}
    for name, answer in blind.items():
        assert flag_share(world, answer, 40, look=3, trials=60) >= 0.95, name


def test_careful_raters_are_flagged_at_most_at_the_stated_rate(world):
    _, careful, _, _ = world
    # every look's share is at most false_flag_rate / 2**look, so all looks together at most false_flag_rate
    shares = [flag_share(world, careful, m, look, trials=300) for look, m in ((1, 10), (2, 20), (3, 40))]
    assert sum(shares) <= 0.01 + 0.01, shares


def test_the_verdict_names_the_likeliest_item_blind_rule():
    rng = np.random.default_rng(3)
    p = rng.uniform(0.1, 0.9, 40)
    first_lower = rng.integers(0, 2, 40)
    assert rc.judge_triplets(p, np.ones(40, int), first_lower).likeliest == "always left"
    assert rc.judge_triplets(p, first_lower, first_lower).likeliest == "lowest index"
    honest = (rng.random(40) < p).astype(int)
    assert rc.judge_triplets(p, honest, first_lower).p > 0.01


def test_rating_raters_that_ignore_the_pair_are_flagged():
    rng = np.random.default_rng(4)
    predicted = rng.uniform(0, 1, 40)
    levels = np.linspace(0, 1, 5)
    snap = lambda v: levels[np.abs(v[:, None] - levels).argmin(1)]  # noqa: E731
    honest = snap(np.clip(predicted + rng.normal(0, 0.15, 40), 0, 1))
    assert rc.judge_ratings(predicted, honest, 0.15, levels=levels).p > 0.05
    assert rc.judge_ratings(predicted, np.zeros(40), 0.15, levels=levels).p < 0.001
    assert rc.judge_ratings(predicted, snap(rng.uniform(0, 1, 40)), 0.15, levels=levels).p < 0.01


def test_the_looks_together_allow_at_most_the_false_flag_rate():
    assert sum(rc.look_alpha(k, 0.01) for k in range(1, 30)) <= 0.01
