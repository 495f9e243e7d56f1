"""The pooled rating learner chooses how to split a study's rater time between ratings and triplets from the
study's own answers (issue 41, part 4: ``PooledRatings.split_evidence``, :mod:`engine.ratings.split`).
Ratings come from the rating simulator, triplets from the same people (``simulation.ratings.TripletRater``),
each kind as noisy as a test says."""
from __future__ import annotations

import numpy as np
import pytest

from engine.ratings import PooledRatings
from engine.ratings.split import (
    SPLIT_COMMIT,
    SPLIT_COMMIT_FLOOR,
    SPLIT_COMMIT_SHARE,
    SPLIT_EXPLORE,
    SPLIT_FLOOR,
    committed_share,
    time_share,
    triplet_information,
    triplet_scale,
)
from simulation.ratings import RatingNoise, RatingSimulator, TripletNoise, TripletRater, latent_means

N = 24
SECONDS = {"rating": 2.0, "triplet": 2.0}


def _study(seed: int, rating_sd: float, triplet_sd: float, lapse: float = 0.1):
    sim = RatingSimulator(latent_means(N, random_state=seed), RatingNoise(noise_sd=rating_sd), random_state=seed + 5)
    return sim, TripletRater(sim.means, TripletNoise(noise_sd=triplet_sd, lapse=lapse), random_state=seed + 7)


def _drive(learner: PooledRatings, sim, people, seconds_per_item: float,
           commit: list | None = None) -> dict[str, float]:
    """Ask as the learner's split says, a round of N screens' time at a time; the rater seconds spent on each kind.
    ``commit``: the split committed once the study has spent :data:`SPLIT_COMMIT` seconds per item
    (:func:`committed_share`), each round's (seconds per item before it, the evidence's share, the share asked,
    the kind committed to) appended."""
    spent = {"rating": 0.0, "triplet": 0.0}
    committed = None
    while sum(spent.values()) < seconds_per_item * N:
        r = evidence = learner.time_shares(SECONDS)["rating"]
        if commit is not None:
            r, committed = committed_share(evidence, sum(spent.values()) / N, committed)
            commit.append((sum(spent.values()) / N, evidence, r, committed))
        k_r = int(round(N * r))
        if k_r:
            learner.observe(sim.answer(learner.next_questions(k_r)))
        if N - k_r:
            learner.observe_triplets(people.answer(learner.next_triplets(N - k_r)))
        spent["rating"] += k_r * SECONDS["rating"]
        spent["triplet"] += (N - k_r) * SECONDS["triplet"]
    return spent


def test_half_the_time_each_until_both_kinds_are_measured():
    sim, people = _study(0, 2.15, 2.15)
    learner = PooledRatings(N, random_state=0)
    assert learner.time_shares(SECONDS) == {"rating": 0.5, "triplet": 0.5}
    learner.observe(sim.answer(learner.next_questions(int(SPLIT_EXPLORE * N))))
    learner.observe_triplets(people.answer(learner.next_triplets(int(SPLIT_EXPLORE * N) - 1)))
    evidence = learner.split_evidence(SECONDS)
    assert evidence["phase"] == "explore" and evidence["rating_share"] == 0.5
    learner.observe_triplets(people.answer(learner.next_triplets(1)))
    learner.next_questions(1)  # (a refit)
    evidence = learner.split_evidence(SECONDS)
    assert evidence["phase"] == "evidence"
    assert evidence["rating_value"] > 0 and evidence["triplet_value"] > 0
    shares = learner.time_shares(SECONDS)
    assert shares["rating"] + shares["triplet"] == pytest.approx(1.0)
    assert SPLIT_FLOOR <= shares["rating"] <= 1 - SPLIT_FLOOR


@pytest.mark.parametrize("seed", [0, 1])
def test_the_split_moves_to_triplets_when_they_are_the_clean_kind(seed):
    # triplets a quarter as noisy as people's, ratings as noisy as people's
    sim, people = _study(seed, 2.15, 0.5)
    learner = PooledRatings(N, random_state=seed)
    spent = _drive(learner, sim, people, 120)
    evidence = learner.split_evidence(SECONDS)
    assert evidence["rating_share"] < 0.2, evidence
    # at least 2.5 times the rater time on triplets (half and half would be 1): 2.9 and 6.8 for seeds 0 and 1
    # since the question choice by the top three (9d47fe9), above 3 before
    assert spent["triplet"] > 2.5 * spent["rating"], spent


@pytest.mark.parametrize("seed", [0, 1])
def test_the_split_moves_to_ratings_when_the_triplets_are_noise(seed):
    # the same study with triplets answered at random: the learner ends up asking mostly ratings
    sim, people = _study(seed, 2.15, 2.15, lapse=1.0)
    learner = PooledRatings(N, random_state=seed)
    _drive(learner, sim, people, 120)
    evidence = learner.split_evidence(SECONDS)
    assert evidence["rating_share"] > 0.7, evidence
    # and with triplets three times as noisy as people's and careless half the time, too
    sim, people = _study(seed, 2.15, 6.0, lapse=0.5)
    learner = PooledRatings(N, random_state=seed)
    _drive(learner, sim, people, 120)
    assert learner.split_evidence(SECONDS)["rating_share"] > 0.7


def test_the_fitted_triplet_noise_follows_the_triplets():
    scales = {}
    for sd in (0.5, 4.3):
        sim, people = _study(3, 2.15, sd)
        learner = PooledRatings(N, random_state=3)
        for _ in range(20):  # the same ratings either way; only the triplets differ
            learner.observe(sim.answer(learner.next_questions(N)))
        for _ in range(20):
            learner.observe_triplets(people.answer(learner.next_triplets(N)))
        learner.next_questions(1)  # (a refit)
        scales[sd] = learner.split_evidence(SECONDS)["triplet_scale"]
    # (the truth is .06 and .42: the space is fitted to the triplets too, which narrows the range)
    assert scales[0.5] < 0.7 * scales[4.3], scales


def test_triplet_scale_recovers_a_known_scale():
    rng = np.random.default_rng(0)
    gaps = rng.normal(0.0, 0.3, 4000)
    for tau in (0.05, 0.2):
        p = 0.05 + 0.9 / (1.0 + np.exp(-gaps / tau))
        won = rng.random(len(gaps)) < p
        signed = np.where(won, gaps, -gaps)  # the loser's distance less the winner's
        got = triplet_scale(signed, np.zeros(len(gaps)), 0.1, 0.1)
        assert got == pytest.approx(tau, rel=0.25)
        # an estimate's own variance is not counted as the triplets' noise
        assert triplet_scale(signed, np.full(len(gaps), 0.01), 0.1, 0.1) < got


def test_time_share_follows_value_per_second():
    assert time_share(1.0, 1.0, SECONDS) == pytest.approx(0.5)
    assert time_share(2.0, 1.0, SECONDS) > 0.9
    assert time_share(1.0, 2.0, SECONDS) < 0.1
    # a triplet worth twice a rating but taking twice as long: level
    assert time_share(1.0, 2.0, {"rating": 2.0, "triplet": 4.0}) == pytest.approx(0.5)
    assert time_share(1.0, 0.0, SECONDS) == 1 - SPLIT_FLOOR
    # the information a triplet carries on its gap is largest where the gap is even, and shrinks with noise
    assert triplet_information(0.0, 0.1, 0.1) > triplet_information(0.3, 0.1, 0.1)
    assert triplet_information(0.0, 0.1, 0.1) > triplet_information(0.0, 0.2, 0.1)


def test_the_split_is_the_same_after_a_state_round_trip():
    sim, people = _study(2, 2.15, 1.0)
    learner = PooledRatings(N, random_state=2)
    _drive(learner, sim, people, 40)
    again = PooledRatings.from_state(learner.to_state())
    assert again.split_evidence(SECONDS) == learner.split_evidence(SECONDS)


def test_committed_share_follows_the_evidence_then_keeps_its_kind():
    low, high = SPLIT_COMMIT_SHARE - 0.01, SPLIT_COMMIT_SHARE
    # before the commitment the evidence's share as it is
    assert committed_share(low, SPLIT_COMMIT - 1) == (low, None)
    # then the kind it favours at that call, for good: a later share the other way does not move it
    share, to_ratings = committed_share(low, SPLIT_COMMIT)
    assert (share, to_ratings) == (SPLIT_COMMIT_FLOOR, False)
    assert committed_share(0.9, 2 * SPLIT_COMMIT, to_ratings) == (SPLIT_COMMIT_FLOOR, False)
    assert committed_share(high, SPLIT_COMMIT) == (1 - SPLIT_COMMIT_FLOOR, True)
    assert committed_share(0.1, SPLIT_COMMIT - 1, True) == (1 - SPLIT_COMMIT_FLOOR, True)
    with pytest.raises(ValueError):
        committed_share(0.5, SPLIT_COMMIT, "duel")  # not a commitment


@pytest.mark.parametrize("seed", [0, 1])
def test_a_committed_split_keeps_to_the_kind_its_evidence_chose(seed):
    # clean triplets: the study commits to triplets at SPLIT_COMMIT seconds per item and keeps to them
    for triplet_sd, lapse, to_ratings in ((0.5, 0.1, False), (2.15, 1.0, True)):
        sim, people = _study(seed, 2.15, triplet_sd, lapse)
        learner = PooledRatings(N, random_state=seed)
        rounds: list = []
        _drive(learner, sim, people, SPLIT_COMMIT + 40, rounds)
        before = [(at, e, r) for at, e, r, k in rounds if k is None]
        after = [(at, e, r, k) for at, e, r, k in rounds if k is not None]
        # the evidence's share as it is until SPLIT_COMMIT seconds per item, then the committed kind's
        assert before and all(at < SPLIT_COMMIT and r == e for at, e, r in before)
        assert len(after) >= 10 and after[0][0] >= SPLIT_COMMIT
        assert {k for *_, k in after} == {to_ratings}
        assert {r for _, _, r, _ in after} == {1 - SPLIT_COMMIT_FLOOR if to_ratings else SPLIT_COMMIT_FLOOR}
        # chosen by the evidence's share at the commitment
        assert (after[0][1] >= SPLIT_COMMIT_SHARE) == to_ratings
