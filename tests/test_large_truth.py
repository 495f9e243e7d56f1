"""A simulated crowd's truth for large studies: points whose distances are read when a rater answers,
never an n x n matrix, and the same answers and scores as the dense truth."""
import csv

import numpy as np
import pytest

from engine import truth
from engine.kinds import get_kind
from simulation import crowd
from simulation.oracles import random_triplet_questions


def _write_points(path, X):
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", *(f"x{d + 1}" for d in range(X.shape[1]))])
        for i, row in enumerate(X):
            w.writerow([f"p{i}", *row])


@pytest.fixture
def points_file(tmp_path):
    X = np.random.default_rng(0).normal(size=(180, 3)) * 4.0
    _write_points(tmp_path / "pts.csv", X)
    return tmp_path / "pts.csv"


def test_large_points_truth_reads_distances_on_demand_and_scores_alike(points_file, monkeypatch):
    dense = crowd.points_truth(points_file)
    monkeypatch.setattr(truth, "DENSE_ITEMS", 100)
    lazy = crowd.points_truth(points_file)
    assert isinstance(lazy.distances, truth.PointDistances) and isinstance(dense.distances, np.ndarray)
    # the same unit (largest distance 1) and the same distances where raters read them
    rng = np.random.default_rng(1)
    r, c = rng.integers(0, 180, 400), rng.integers(0, 180, 400)
    np.testing.assert_allclose(lazy.distances[r, c], dense.distances[r, c], rtol=1e-12, atol=1e-12)
    assert lazy.distances.max() == pytest.approx(1.0)
    # the simulated rater of a triplet study answers the same questions the same way
    kind = get_kind("triplet")
    qs = [tuple(q) for q in random_triplet_questions(180, 1000, rng)]
    a = kind.simulated_rater(lazy.distances, 0.05, 0.1, {}, random_state=3).answer(qs)
    b = kind.simulated_rater(dense.distances, 0.05, 0.1, {}, random_state=3).answer(qs)
    assert a == b
    # a learned graph is scored the same: a graph of some true and some wrong neighbours
    D = np.array(dense.distances)
    np.fill_diagonal(D, np.inf)
    best = np.argmin(D, axis=1)
    picks = np.where(np.arange(180) % 3 == 0, (best + 1) % 180, best)
    graph = {"items": dense.ids, "k": 1,
             "edges": [{"source": dense.ids[i], "target": dense.ids[j], "rank": 0} for i, j in enumerate(picks)]}
    got_lazy, got_dense = crowd.graph_accuracy(graph, lazy), crowd.graph_accuracy(graph, dense)
    assert got_lazy == got_dense
    assert 0.5 < got_dense["accuracy"] < 0.9


def test_large_points_truth_refuses_points_that_coincide(tmp_path, monkeypatch):
    monkeypatch.setattr(truth, "DENSE_ITEMS", 10)
    _write_points(tmp_path / "same.csv", np.ones((20, 2)))
    with pytest.raises(crowd.SimulationError, match="coincide"):
        crowd.points_truth(tmp_path / "same.csv")
