"""Item features as a prior of the pooled rating learner: make_planner(..., features=X) for ratings, the
features' map fitted with the ratings, features that predict nothing falling away, the state round trip."""
from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.spatial.distance import pdist

from engine.features import feature_space
from engine.planners import make_planner, restore_planner, takes_features
from engine.ratings import fit_ratings
from engine.ratings.model import Hyper, feature_share
from simulation.features import noise_features
from simulation.ratings import realistic_simulator


def _drive(planner, sim, per_item):
    n = sim.n_items
    total = 0
    while total < per_item * n:
        q = planner.next_questions(min(n, per_item * n - total))
        planner.observe(sim.answer(q))
        total += len(q)
    return planner


def _ratings(n=40, per_item=5, seed=0):
    """Points in 2-D, each rating their distance / 4 plus noise as large as people's (SD .25 of the 0-1
    scale): (points, pairs, values)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    pairs = np.array([rng.choice(n, 2, replace=False) for _ in range(per_item * n)])
    values = np.linalg.norm(X[pairs[:, 0]] - X[pairs[:, 1]], axis=1) / 4 + rng.normal(scale=0.25, size=len(pairs))
    return X, pairs, values


def test_pooled_takes_features():
    assert takes_features("pooled")
    with pytest.raises(ValueError, match="one row per item"):
        make_planner("pooled", 10, question_kind="rating", features=np.zeros((9, 3)))


def test_features_that_predict_the_ratings_place_the_items_from_few_ratings():
    X, pairs, values = _ratings()
    n = len(X)
    Z = feature_space(X, n).astype(np.float64)
    assert feature_share(Z, pairs, values, Hyper()) > 0.3
    truth = pdist(X)
    unknown = np.full(len(values), -1)
    plain = fit_ratings(n, pairs, values, unknown, 0, dim=2, random_state=0)
    with_features = fit_ratings(n, pairs, values, unknown, 0, dim=2, random_state=0, features=Z)
    assert with_features.feature_map.shape == (Z.shape[1], 2)
    r_plain = np.corrcoef(pdist(plain.points), truth)[0, 1]
    r_features = np.corrcoef(pdist(with_features.points), truth)[0, 1]
    # 5 noisy ratings per item place 40 items poorly; the features' map, fitted to them, places them well
    assert r_features > 0.9 and r_features > r_plain + 0.2, (r_plain, r_features)


def test_features_that_predict_nothing_fall_away():
    X, pairs, values = _ratings()
    n = len(X)
    Z = feature_space(noise_features(n, 16, random_state=3), n).astype(np.float64)
    assert feature_share(Z, pairs, values, Hyper()) == 0.0
    unknown = np.full(len(values), -1)
    plain = fit_ratings(n, pairs, values, unknown, 0, dim=2, random_state=0)
    noisy = fit_ratings(n, pairs, values, unknown, 0, dim=2, random_state=0, features=Z)
    assert not noisy.feature_map.any()
    np.testing.assert_array_equal(noisy.points, plain.points)


def test_a_study_with_features_of_noise_asks_and_learns_as_one_without():
    n = 30
    sim, again = realistic_simulator(n, random_state=2), realistic_simulator(n, random_state=2)
    with_noise = make_planner("pooled", n, question_kind="rating", random_state=2,
                              features=noise_features(n, 16, random_state=2))
    plain = make_planner("pooled", n, question_kind="rating", random_state=2)
    for _ in range(40):
        q = with_noise.next_questions(n)
        assert q == plain.next_questions(n)
        with_noise.observe(sim.answer(q))
        plain.observe(again.answer(q))
    assert with_noise.n_fits_ > 5 and not with_noise.fit_.feature_map.any()
    assert (with_noise.neighbor_graph(1).neighbors == plain.neighbor_graph(1).neighbors).all()


def test_state_round_trip_keeps_the_features_and_their_map():
    n = 30
    sim = realistic_simulator(n, random_state=0)
    planner = _drive(make_planner("pooled", n, question_kind="rating", random_state=0, features=sim.points),
                     sim, 40)
    assert planner.fit_.feature_map.any()  # the truth's own points predict its ratings
    state = planner.to_state()
    assert state["features"].dtype == np.float32 and state["features"].shape[0] == n
    again = restore_planner(json.loads(json.dumps(state, default=lambda a: a.tolist())))
    np.testing.assert_array_equal(again.features_, planner.features_)
    np.testing.assert_array_equal(again.fit_.feature_map, planner.fit_.feature_map)
    assert (again.neighbor_graph(2).neighbors == planner.neighbor_graph(2).neighbors).all()
    assert again.next_questions(30) == planner.next_questions(30)
    # a state without features has no features key (states of studies without features are unchanged)
    assert "features" not in make_planner("pooled", n, question_kind="rating", random_state=0).to_state()
