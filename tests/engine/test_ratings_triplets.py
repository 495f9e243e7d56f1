"""The pooled rating learner also takes triplets of the same items: one model from both kinds (issue 41, part 4).
Ratings come from the realistic rating simulator, triplets from the same people
(``simulation.ratings.TripletRater``)."""
from __future__ import annotations

import numpy as np
import pytest

from engine.ratings import PooledRatings
from simulation.ratings import RatingNoise, RatingSimulator, TripletNoise, TripletRater, latent_means

N = 24


def _truth(seed: int) -> tuple[RatingSimulator, np.ndarray]:
    sim = RatingSimulator(latent_means(N, random_state=seed), RatingNoise(), random_state=seed + 5)
    M = sim.means.copy()
    np.fill_diagonal(M, -np.inf)
    return sim, np.argsort(-M, axis=1)[:, :3]


def _hit(planner: PooledRatings, top3: np.ndarray) -> float:
    picks = planner.neighbor_graph(1).neighbors[:, 0]
    return float(np.mean([picks[i] in top3[i] for i in range(N)]))


def test_triplets_added_to_a_rating_study_find_more_neighbours():
    alone, both = [], []
    for seed in range(3):
        sim, top3 = _truth(seed)
        rated = PooledRatings(N, random_state=seed)
        rows = []
        for _ in range(60):
            answers = sim.answer(rated.next_questions(N))
            rows += answers
            rated.observe(answers)
        mixed = PooledRatings(N, random_state=seed)
        mixed.observe(rows)  # the same ratings, then triplets of the same people on top
        people = TripletRater(sim.means, TripletNoise(), random_state=seed)
        for _ in range(60):
            mixed.observe_triplets(people.answer(mixed.next_triplets(N)))
        alone.append(_hit(rated, top3))
        both.append(_hit(mixed, top3))
        # never worse (one item of slack for one seed's luck), counted in items
        assert round(both[-1] * N) >= round(alone[-1] * N) - 1, (alone, both)
    # three items more of 72 (ratings alone .72 since the raters' spreads are shrunk toward their priors;
    # .53 before, when triplets added .25)
    assert np.mean(both) > np.mean(alone) + 0.04, (alone, both)


def test_triplets_alone_teach_the_pooled_learner():
    hits = []
    for seed in range(3):
        sim, top3 = _truth(seed)
        learner = PooledRatings(N, random_state=seed)
        people = TripletRater(sim.means, TripletNoise(noise_sd=1.0), random_state=seed)
        for _ in range(60):
            learner.observe_triplets(people.answer(learner.next_triplets(N)))
        hits.append(_hit(learner, top3))
        assert learner.progress()["triplets"] == 60 * N and learner.n_fits_ > 0
    assert np.mean(hits) > 0.45, hits  # a random pick: 3 of 23


def test_next_triplets_are_three_distinct_items_and_adaptive_ones_ask_near_candidates():
    sim, _ = _truth(0)
    learner = PooledRatings(N, random_state=0, explore=0.0)
    learner.observe(sim.answer(learner.next_questions(20 * N)))
    triplets = np.array(learner.next_triplets(1000))
    assert triplets.shape == (1000, 3) and all(len(set(t)) == 3 for t in triplets.tolist())
    mean, _ = learner.estimates()
    rank = np.argsort(np.argsort(mean, axis=1), axis=1)
    # both candidates among the head's closest few by the estimates (uniformly random: 5 of 23 each)
    assert np.mean((rank[triplets[:, 0], triplets[:, 1]] < 5) & (rank[triplets[:, 0], triplets[:, 2]] < 5)) > 0.5


@pytest.mark.parametrize("row", [(0, 1, 2), (0, 1, 2, 3), (0, 0, 2, 0), (0, 1, N, 1)])
def test_a_triplet_row_that_is_no_answer_is_refused(row):
    learner = PooledRatings(N, random_state=0)
    with pytest.raises(ValueError, match="triplet answer"):
        learner.observe_triplets([row])


def test_state_round_trips_with_its_triplets_and_a_state_without_them_loads():
    sim, _ = _truth(1)
    learner = PooledRatings(N, random_state=3)
    people = TripletRater(sim.means, TripletNoise(), random_state=3)
    learner.observe(sim.answer(learner.next_questions(5 * N)))
    learner.observe_triplets(people.answer(learner.next_triplets(5 * N)))
    state = learner.to_state()
    again = PooledRatings.from_state(state)
    assert np.array_equal(again.triplets_.rows, learner.triplets_.rows)
    assert again.next_triplets(50) == learner.next_triplets(50)
    np.testing.assert_array_equal(again.estimates()[0], learner.estimates()[0])
    older = {k: v for k, v in PooledRatings(N, random_state=3).to_state().items() if k not in ("triplets",
                                                                                              "fitted_triplets")}
    assert len(PooledRatings.from_state(older).triplets_) == 0
