"""The rating simulator (simulation.ratings) is as noisy as people at its defaults, its raters keep their
own use of the scale, a pilot's noise is recovered by fit_from_pilot, and proxima simulate's raters rate
the same way (simulation.crowd)."""
from __future__ import annotations

import random

import numpy as np
import pytest

from simulation.crowd import NoiseModel, Rater, Truth
from simulation.ratings import (
    REAL_RANDOM_TRIPLET_AGREEMENT,
    REAL_RATINGS,
    RatingNoise,
    RatingSimulator,
    TripletNoise,
    TripletRater,
    fit_from_pilot,
    latent_means,
    latent_parts,
    random_triplet_agreement,
    random_triplet_repeat_agreement,
    rating_statistics,
    realistic_simulator,
    triplet_noise_for,
)


def test_defaults_reproduce_the_real_tables_figures():
    stats = [rating_statistics(realistic_simulator(30, random_state=s).full_table(253), 30) for s in range(3)]
    mean = {k: np.mean([s[k] for s in stats]) for k in stats[0]}
    assert mean["rating_sd"] == pytest.approx(REAL_RATINGS["rating_sd"], abs=0.15)
    assert mean["pair_mean_sd"] == pytest.approx(REAL_RATINGS["pair_mean_sd"], abs=0.1)
    assert mean["rater_mean_sd"] == pytest.approx(REAL_RATINGS["rater_mean_sd"], abs=0.15)
    assert mean["pair_mean_min"] == pytest.approx(REAL_RATINGS["pair_mean_min"], abs=0.4)
    assert mean["pair_mean_max"] == pytest.approx(REAL_RATINGS["pair_mean_max"], abs=0.6)
    assert mean["gap_median"] == pytest.approx(REAL_RATINGS["gap_median"], abs=0.05)
    assert 0.05 < mean["gap_under_0.05"] < 0.4


def test_the_truth_splits_into_what_a_space_holds_and_what_each_pair_adds():
    means, structured, residual_sd = latent_parts(40, random_state=5)
    np.testing.assert_array_equal(means, latent_means(40, random_state=5))
    iu = np.triu_indices(40, 1)
    rest = means[iu] - structured[iu]
    # the pair-specific part: 45% of the means' variance, an SD of residual_sd, independent of the space's part
    assert rest.std() == pytest.approx(residual_sd, rel=0.1)
    assert rest.var() / means[iu].var() == pytest.approx(0.45, abs=0.07)
    assert abs(np.corrcoef(rest, structured[iu])[0, 1]) < 0.15
    sim = realistic_simulator(40, random_state=5)
    np.testing.assert_array_equal(sim.parts[0], latent_parts(40, random_state=np.random.default_rng(5))[1])
    assert RatingSimulator(means).parts is None


def test_a_rater_keeps_their_offset_across_ratings():
    sim = RatingSimulator(latent_means(20, random_state=0), RatingNoise(per_rater=200), random_state=1)
    pairs = np.column_stack(np.triu_indices(20, 1))
    values, raters = sim.ratings(np.tile(pairs, (4, 1)))
    assert set(raters.tolist()) == {0, 1, 2, 3}
    by_rater = [values[raters == r].mean() for r in range(4)]
    # the same pairs: their mean ratings differ by the raters' offsets (SD 1 point), not by noise alone
    assert np.ptp(by_rater) > 0.5
    quiet = RatingSimulator(sim.means, RatingNoise(per_rater=200, offset_sd=0.0, slope_sd=0.0), random_state=1)
    v, r = quiet.ratings(np.tile(pairs, (4, 1)))
    assert np.ptp([v[r == k].mean() for k in range(4)]) < np.ptp(by_rater)


def test_answers_are_distances_with_the_rater():
    sim = realistic_simulator(10, random_state=2)
    rows = sim.answer([(0, 1), (2, 3)])
    assert all(len(r) == 4 and 0.0 <= r[2] <= 1.0 for r in rows)
    np.testing.assert_allclose(sim.noise.scale.distance([1, 5, 9]), [1.0, 0.5, 0.0])


def test_fit_from_pilot_recovers_the_noise():
    truth = RatingNoise(noise_sd=1.5, offset_sd=0.8, slope_sd=0.2, per_rater=190)
    sim = RatingSimulator(latent_means(20, random_state=3), truth, random_state=4)
    pairs = np.tile(np.column_stack(np.triu_indices(20, 1)), (40, 1))
    values, raters = sim.ratings(pairs)
    means, fitted = fit_from_pilot(pairs, values, raters.tolist(), 20, random_state=0)
    assert fitted.noise_sd == pytest.approx(1.5, rel=0.15)
    assert fitted.offset_sd == pytest.approx(0.8, rel=0.35)
    iu = np.triu_indices(20, 1)
    assert np.corrcoef(means[iu], sim.means[iu])[0, 1] > 0.8


def test_simulated_crowd_raters_rate_as_people():
    n = 8
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 2))
    D = np.linalg.norm(X[:, None] - X[None], axis=2)
    truth = Truth([f"i{k}" for k in range(n)], D / D.max(), "points")
    scale = {"min": 1, "max": 9, "step": 1}
    # a pair halfway along the scale (a pair at its end has ratings clipped there)
    a, b = np.unravel_index(np.argmin(np.abs(truth.distances - 0.5)), truth.distances.shape)
    question = {"kind": "rating", "scale": scale, "items": [{"id": f"i{a}", "index": int(a)},
                                                            {"id": f"i{b}", "index": int(b)}]}
    people = [Rater(truth, NoiseModel(realistic_ratings=RatingNoise()), False, random.Random(s)) for s in range(30)]
    ratings = np.array([[p.answer(question)["value"] for _ in range(40)] for p in people], float)
    assert ratings.min() >= 1 and ratings.max() <= 9
    assert 1.6 < ratings.std(axis=1).mean() < 2.6  # one rating's spread for a rater
    assert ratings.mean(axis=1).std() > 0.5  # raters differ in their use of the scale
    exact = Rater(truth, NoiseModel(), False, random.Random(0))
    assert len({exact.answer(question)["value"] for _ in range(10)}) == 1


def test_random_triplets_agree_with_the_truth_as_the_triplet_rater_answers_them():
    means = latent_means(12, random_state=4)
    noise = TripletNoise(noise_sd=1.0)
    rng = np.random.default_rng(0)
    heads = rng.integers(12, size=60_000)
    a = (heads + 1 + rng.integers(11, size=60_000)) % 12
    b = (heads + 1 + rng.integers(11, size=60_000)) % 12
    keep = a != b
    triplets = np.column_stack([heads, a, b])[keep]
    answers = TripletRater(means, noise, random_state=1).answer(triplets)
    right = np.mean([w == (x if means[h, x] > means[h, y] else y) for h, x, y, w in answers])
    assert random_triplet_agreement(means, noise) == pytest.approx(right, abs=0.01)
    again = TripletRater(means, noise, random_state=2).answer(triplets)  # other people, the same triplets
    same = np.mean([first[3] == second[3] for first, second in zip(answers, again, strict=True)])
    assert random_triplet_repeat_agreement(means, noise) == pytest.approx(same, abs=0.01)


def test_the_triplet_noise_for_an_agreement_gives_that_agreement():
    means = realistic_simulator(30, random_state=0).means
    people = random_triplet_agreement(means, TripletNoise())  # a triplet as noisy as two ratings compared
    assert 0.55 < people < 0.62 < REAL_RANDOM_TRIPLET_AGREEMENT  # far noisier than real random triplets
    noise = triplet_noise_for(means, REAL_RANDOM_TRIPLET_AGREEMENT)
    assert 0.1 < noise < 0.5
    assert random_triplet_agreement(means, TripletNoise(noise_sd=noise)) == pytest.approx(
        REAL_RANDOM_TRIPLET_AGREEMENT, abs=1e-3)
    with pytest.raises(ValueError, match="no triplet noise gives an agreement of 0.97"):
        triplet_noise_for(means, 0.97)  # above what a 10% lapse allows
