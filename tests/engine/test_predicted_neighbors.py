"""Neighbours predicted from features for items a learner does not hold (added to a study later): the features'
space read by new rows, the nearest among all items, and duels' learned map from the features to its fit."""
from __future__ import annotations

import numpy as np
import pytest

from engine.features import (
    BY_FEATURES,
    BY_LEARNED_MAP,
    FeatureSpace,
    feature_space,
    nearest_of,
    predicted_neighbors,
    study_space,
)
from engine.planners import make_planner, restore_planner
from engine.registry import feature_placement
from simulation.oracles import TripletOracle


def _clusters(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0, 10, size=(-(-n // 6), 3))
    return np.repeat(centres, 6, axis=0)[:n] + 0.3 * rng.normal(size=(n, 3))


def test_the_feature_space_reads_new_rows_as_it_read_the_items():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(40, 5))
    X[:, 2] = 7.0  # a constant column, dropped
    space = FeatureSpace.fit(X, 40)
    assert np.array_equal(space.transform(X), feature_space(X, 40))
    assert np.allclose(space.transform(X[3:4] + 0.0), feature_space(X, 40)[3:4])
    with pytest.raises(ValueError, match="5 columns"):
        space.transform(np.zeros((1, 4)))
    with pytest.raises(ValueError, match="missing or infinite"):
        space.transform(np.full((1, 5), np.nan))


def test_nearest_of_sorts_by_distance_then_index_and_skips_the_item_itself():
    points = np.array([[0.0], [1.0], [-1.0], [3.0], [1.0]])
    assert nearest_of(points, [0, 3], 2).tolist() == [[1, 2], [1, 4]]


def test_an_added_item_gets_the_nearest_in_the_features_without_a_learned_map():
    X = _clusters(60)
    added = X[[7, 40]] + 0.01  # beside items 7 and 40
    neighbors, how = predicted_neighbors(study_space(np.vstack([X, added]), 60), 60, 3)
    assert how == BY_FEATURES
    assert neighbors[0, 0] == 7 and neighbors[1, 0] == 40
    assert neighbors.shape == (2, 3) and not (neighbors == np.array([[60], [61]])).any()


def test_duels_places_added_items_through_the_map_it_learned_once_it_has_fitted_one():
    """Features where a useful column is drowned among noisy ones: the standardised features weigh every
    column alike, the map duels learns from the answers weighs the one people use."""
    rng = np.random.default_rng(2)
    n, m = 40, 12
    truth = np.sort(rng.uniform(0, 10, size=n + m))
    F = np.column_stack([truth, rng.normal(scale=2.0, size=(n + m, 2))])
    planner = make_planner("duels", n, question_kind="triplet", features=F[:n], random_state=3)
    assert feature_placement(planner)(feature_space(F[:n], n)[:1]) is None  # no fit yet
    oracle = TripletOracle.from_points(truth[:n, None], noise=0.0, random_state=4)
    total = 0
    while total < 15 * n:
        qs = planner.next_questions(n)
        planner.observe(oracle.answer(qs))
        total += len(qs)
    Y = study_space(F, n)
    mapped, how = predicted_neighbors(Y, n, 1, feature_placement(planner))
    plain, _ = predicted_neighbors(Y, n, 1)
    assert how == BY_LEARNED_MAP
    D = np.abs(truth[:, None] - truth[None])
    np.fill_diagonal(D, np.inf)
    rank = np.argsort(np.argsort(D, axis=1), axis=1)  # rank[i, j]: j's place among i's nearest
    added = np.arange(n, n + m)
    assert np.mean(rank[added, mapped[:, 0]] < 3) >= 0.9
    assert np.mean(rank[added, mapped[:, 0]]) < np.mean(rank[added, plain[:, 0]]) - 1
    # the map is part of the saved state: a restored learner places the items alike
    again = restore_planner(planner.to_state())
    assert np.array_equal(predicted_neighbors(Y, n, 1, feature_placement(again))[0], mapped)
