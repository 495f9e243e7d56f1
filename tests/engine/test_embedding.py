import numpy as np
import pytest

from engine.embedding import (
    _objective,
    embedding_neighbors,
    fit_embedding,
    select_embedding,
    triplet_accuracy,
    triplet_probabilities,
)


def _truth_triplets(points, m, rng):
    n = len(points)
    t = np.stack([rng.choice(n, 3, replace=False) for _ in range(m)])
    d1 = np.linalg.norm(points[t[:, 0]] - points[t[:, 1]], axis=1)
    d2 = np.linalg.norm(points[t[:, 0]] - points[t[:, 2]], axis=1)
    swap = d1 > d2
    t[swap, 1], t[swap, 2] = t[swap, 2], t[swap, 1].copy()
    return t


# t-STE's heavy tails trade some fine order of uniformly spread points for cluster separation
@pytest.mark.parametrize(("kernel", "floor"), [("ste", 0.95), ("tste", 0.9)])
def test_noise_free_fit_generalises(kernel, floor):
    rng = np.random.default_rng(0)
    points = rng.random((40, 2))
    train = _truth_triplets(points, 4000, rng)
    X = fit_embedding(train, 40, dim=2, kernel=kernel, random_state=1)
    assert X.shape == (40, 2)
    assert triplet_accuracy(X, _truth_triplets(points, 2000, rng)) > floor


def test_warm_start_needs_fewer_iterations():
    rng = np.random.default_rng(2)
    points = rng.random((50, 2))
    t = _truth_triplets(points, 5000, rng)
    X, cold = fit_embedding(t[:4500], 50, random_state=0, return_n_iter=True)
    _, warm_iter = fit_embedding(t, 50, init=X, return_n_iter=True)
    _, cold_iter = fit_embedding(t, 50, random_state=0, return_n_iter=True)
    assert warm_iter < cold_iter


@pytest.mark.parametrize("kernel", ["ste", "tste"])
def test_gradient_matches_finite_differences(kernel):
    rng = np.random.default_rng(3)
    n, dim = 8, 3
    t = np.stack([rng.choice(n, 3, replace=False) for _ in range(30)])
    x = rng.normal(size=n * dim)
    _, grad = _objective(x, t, n, dim, kernel, 2.0, 0.01)
    eps = 1e-6
    num = np.array([
        (_objective(x + eps * e, t, n, dim, kernel, 2.0, 0.01)[0]
         - _objective(x - eps * e, t, n, dim, kernel, 2.0, 0.01)[0]) / (2 * eps)
        for e in np.eye(n * dim)
    ])
    np.testing.assert_allclose(grad, num, rtol=1e-5, atol=1e-8)


def test_deterministic_for_a_seed():
    rng = np.random.default_rng(4)
    t = _truth_triplets(rng.random((20, 2)), 500, rng)
    np.testing.assert_array_equal(fit_embedding(t, 20, random_state=7), fit_embedding(t, 20, random_state=7))


def test_probabilities_and_neighbors():
    X = np.array([[0.0, 0.0], [1.0, 0.0], [5.0, 0.0], [5.5, 0.0]])
    for kernel in ("ste", "tste"):
        p = triplet_probabilities(X, [(0, 1, 2), (0, 2, 1)], kernel=kernel)
        assert p[0] > 0.5 and np.isclose(p[0] + p[1], 1.0)
    np.testing.assert_array_equal(embedding_neighbors(X, 2), [[1, 2], [0, 2], [3, 1], [2, 1]])


def test_select_embedding_picks_by_holdout():
    rng = np.random.default_rng(5)
    t = _truth_triplets(rng.random((30, 2)), 2000, rng)
    choice = select_embedding(t, 30, dims=(1, 2), kernels=("tste",))
    assert set(choice.scores) == {("tste", 1), ("tste", 2)}
    assert choice.dim == 2 and choice.embedding.shape == (30, 2)
    assert choice.holdout_accuracy == max(choice.scores.values()) > 0.9


def test_validation():
    with pytest.raises(ValueError, match="kernel"):
        fit_embedding([(0, 1, 2)], 5, kernel="gauss")
    with pytest.raises(ValueError, match="indices"):
        fit_embedding([(0, 1, 9)], 5)
    with pytest.raises(ValueError, match="init"):
        fit_embedding([(0, 1, 2)], 5, init=np.zeros((4, 2)))
