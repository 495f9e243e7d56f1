import numpy as np
import pytest
from helpers import EGG_ANSWERS, shared_data_file
from scipy.spatial.distance import cdist

from engine import planning, truth
from engine.graph import NO_NEIGHBOR
from engine.truth import neighbor_error, neighbor_wrong, true_kth_distances
from simulation import oracles
from simulation.datasets import load_alien_eggs, load_material
from simulation.noise import alien_egg_noise, fit_gap_noise, fit_human_noise, median_triplet_gap
from simulation.oracles import TripletOracle, human_agree_probability


def _line(n=60):
    x = np.linspace(0.0, 1.0, n)
    return np.abs(x[:, None] - x[None, :])


def _random_questions(n, m, rng):
    return np.stack([rng.choice(n, 3, replace=False) for _ in range(m)])


def test_human_model_probabilities():
    D = _line(3)  # items at 0, 0.5, 1
    q = np.array([(0, 1, 2)] * 40000)
    lapse, s = 0.2, 0.25
    wins = TripletOracle(D, noise=s, model="human", lapse=lapse, random_state=0).p1_wins(q)
    expected = lapse / 2 + (1 - lapse) / (1 + np.exp((0.5 - 1.0) / s))
    assert abs(wins.mean() - expected) < 0.01
    # noise 0: only the lapses are wrong, half of them by chance
    wins = TripletOracle(D, noise=0.0, model="human", lapse=lapse, random_state=0).p1_wins(q)
    assert abs(wins.mean() - (1 - lapse / 2)) < 0.01


def test_human_model_validation():
    with pytest.raises(ValueError, match="lapse"):
        TripletOracle(_line(4), noise=0.1, model="human", lapse=1.5)
    with pytest.raises(ValueError, match="human"):
        TripletOracle(_line(4), noise=0.1, model="logistic", lapse=0.1)


@pytest.mark.parametrize(("scale", "lapse"), [(0.05, 0.1), (0.1, 0.0)])
def test_fit_recovers_simulated_parameters(scale, lapse):
    D = _line()
    rng = np.random.default_rng(1)
    q = _random_questions(60, 20000, rng)
    answers = TripletOracle(D, noise=scale, model="human", lapse=lapse, random_state=2).answer(q)
    trip = np.array([(x, w, p2 if w == p1 else p1) for x, p1, p2, w in answers])
    fit = fit_human_noise(D, trip)
    assert abs(fit.scale - scale) < 0.25 * scale
    assert abs(fit.lapse - lapse) < 0.03
    assert fit.log_likelihood >= fit.logistic_log_likelihood - 1e-6


def test_transfer_of_the_scale():
    fit = fit_human_noise(_line(), [(0, 1, 5), (3, 4, 20), (10, 9, 8), (5, 30, 6)])
    D2 = 3.0 * _line(40)
    assert np.isclose(fit.scale_for(D2, "range"), 3.0 * fit.scale)
    assert np.isclose(fit.scale_for(D2, "median_gap"), fit.scale / fit.median_gap * median_triplet_gap(D2))
    oracle = fit.oracle(D2, unit="range", random_state=0)
    assert oracle.model == "human" and oracle.lapse == fit.lapse
    with pytest.raises(ValueError, match="unit"):
        fit.scale_for(D2, "mean")


def test_alien_egg_fit_reproduces_human_agreement():
    shared_data_file(EGG_ANSWERS)
    eggs = load_alien_eggs()
    fit = alien_egg_noise()
    assert 0 < fit.lapse < 0.2 and fit.log_likelihood > fit.logistic_log_likelihood
    assert abs(fit.agreement - 0.862) < 0.005  # the data README's figure
    # simulated people answering the very questions the crowd answered
    D, t = eggs.distances, eggs.triplets
    rates = []
    for seed in range(3):
        wins = fit.oracle(D, random_state=seed).p1_wins(t)
        d1, d2 = D[t[:, 0], t[:, 1]], D[t[:, 0], t[:, 2]]
        rates.append(np.mean(np.where(d1 == d2, 0.5, wins == (d1 < d2))))
    assert abs(np.mean(rates) - fit.agreement) < 0.02


def test_load_material():
    shared_data_file("material/material_names.txt")
    m = load_material()
    assert m.n_items == 100 and len(m.names) == 100
    assert m.train.shape == (92892, 3) and m.test.shape == (11800, 3)
    assert m.train.min() == 0 and m.train.max() == 99
    assert np.all((m.train[:, 0] != m.train[:, 1]) & (m.train[:, 1] != m.train[:, 2]))


def test_recorded_triplets_answer_each_triplet_as_recorded_and_name_their_own_truth():
    from simulation.oracles import RecordedTriplets, TripletOracle

    X = np.random.default_rng(0).random((12, 2))
    noisy = TripletOracle.from_points(X, model="human", noise=0.05, lapse=0.2, random_state=1)
    table = RecordedTriplets.record(noisy)
    q = [(0, 1, 2), (0, 2, 1), (5, 3, 9)] * 3
    a = table.answer(q)
    # a repeated question gets the same answer, whichever way round its candidates come
    assert a[0] == a[3] == a[6] and a[0][3] == a[1][3]
    assert a[2] == a[5]
    # the truth is the table's: loss shares of every (i; j, .) counted from the recorded answers
    L = table.loss_share()
    n = 12
    for i, j in [(0, 1), (4, 7)]:
        lost = sum(not table.p1_wins([(i, j, k)])[0] for k in range(n) if k not in (i, j))
        assert L[i, j] == pytest.approx(lost / (n - 2))
    assert np.isinf(np.diag(L)).all()
    # noise-free, the table's truth is the metric's nearest neighbour
    exact = RecordedTriplets.record(TripletOracle.from_points(X)).loss_share()
    D = np.linalg.norm(X[:, None] - X[None], axis=2)
    np.fill_diagonal(D, np.inf)
    assert (exact.argmin(axis=1) == D.argmin(axis=1)).all()
    with pytest.raises(ValueError, match="three different items"):
        table.answer([(1, 1, 2)])


# ---------------------------------------------------------------------------- one noise model
def test_the_oracles_answer_with_the_one_human_noise_model():
    D = _line(5)
    q = np.array([(0, 1, 3), (2, 4, 0), (1, 1, 1)] * 4000)
    gap = D[q[:, 0], q[:, 2]] - D[q[:, 0], q[:, 1]]
    for model, lapse in (("human", 0.2), ("logistic", 0.0)):
        oracle = TripletOracle(D, noise=0.3, model=model, lapse=lapse, random_state=5)
        draws = np.random.default_rng(5).random(len(q))
        assert np.array_equal(oracle.p1_wins(q), draws < human_agree_probability(gap, 0.3, lapse))
    # scale 0: the truth, ties to the first candidate; lapses answer at random
    assert human_agree_probability([0.1, 0.0, -0.1], 0.0, 0.2).tolist() == [0.9, 0.9, 0.1]


def test_fitting_gaps_recovers_the_model():
    rng = np.random.default_rng(3)
    gap = rng.uniform(0.0, 0.5, 20000)  # |d(i, k) - d(i, j)| of the questions asked
    agree = rng.random(len(gap)) < human_agree_probability(gap, 0.05, 0.1)
    signed = np.where(agree, gap, -gap)  # the gap of the answer given: negative where it disagrees
    scale, lapse, _ = fit_gap_noise(signed)
    assert abs(scale - 0.05) < 0.015 and abs(lapse - 0.1) < 0.03


# ---------------------------------------------------------------------------- one nearest-neighbour error
POINTS = [(0.0,), (1.0,), (2.0,), (10.0,)]  # item 1 has two true nearest neighbours (0 and 2)


def test_neighbor_error_counts_ties_as_right_and_missing_or_self_neighbours_as_wrong():
    D = np.abs(np.subtract.outer(np.ravel(POINTS), np.ravel(POINTS)))
    assert neighbor_error([1, 2, 1, 2], D) == 0.0
    assert neighbor_error([1, 0, 1, 2], D) == 0.0
    assert neighbor_wrong([1, 0, NO_NEIGHBOR, 0], D).tolist() == [False, False, True, True]
    assert neighbor_error([0, 0, 1, 2], D) == 0.25  # item 0 is not its own neighbour
    # the truth as points gives the same answers, and so does its nearest distances computed beforehand
    for picks in ([1, 2, 1, 2], [1, 0, NO_NEIGHBOR, 0], [3, 3, 3, 0]):
        expected = neighbor_error(picks, D)
        assert neighbor_error(picks, points=POINTS) == expected
        assert neighbor_error(picks, points=POINTS, kth=true_kth_distances(points=POINTS)) == expected


def test_neighbor_error_of_k_neighbours_and_of_a_rank():
    D = np.abs(np.subtract.outer(np.ravel(POINTS), np.ravel(POINTS)))
    assert neighbor_error([[1, 2], [0, 2], [1, 0], [2, 1]], D) == 0.0
    assert neighbor_error([[1, 3], [0, 2], [1, 0], [2, 1]], D) == 0.25
    assert neighbor_error([2, 3, 0, 0], D, rank=2) == 0.5  # item 0's 2nd nearest is 2; item 3's is 1
    assert true_kth_distances(D, rank=99).tolist() == true_kth_distances(points=POINTS, rank=3).tolist()


def test_neighbor_error_from_points_computes_in_blocks_like_the_distance_matrix():
    X = np.random.default_rng(0).normal(size=(600, 3))
    D = np.sqrt(((X[:, None] - X[None]) ** 2).sum(-1))
    picks = np.random.default_rng(1).integers(-1, 600, size=600)
    assert np.array_equal(true_kth_distances(points=X), true_kth_distances(D))
    assert neighbor_error(picks, points=X) == neighbor_error(picks, D)


@pytest.mark.parametrize("rank", [1, 2, 5])
def test_true_neighbours_from_a_k_d_tree_are_those_of_reading_every_row(rank, monkeypatch):
    """Large truths find each item's true neighbours with a k-d tree; the distances (and so every score)
    are those of reading all rows, bit for bit, also where items coincide."""
    rng = np.random.default_rng(rank)
    X = rng.normal(size=(700, 4))
    X[10] = X[11] = X[12]  # three copies of one point
    picks = rng.integers(-1, 700, size=(700, rank))
    picks[:, 0] = np.argsort(cdist(X, X) + np.eye(700) * 9, axis=1)[:, rank - 1]  # some right ones
    tree = true_kth_distances(points=X, rank=rank)
    monkeypatch.setattr(truth, "KD_TREE_DIMS", 0)
    rows = true_kth_distances(points=X, rank=rank)
    assert np.array_equal(tree, rows)
    assert np.array_equal(neighbor_wrong(picks, points=X, kth=tree), neighbor_wrong(picks, points=X, kth=rows))


def test_planning_scores_picks_with_the_one_error():
    D = np.abs(np.subtract.outer(np.ravel(POINTS), np.ravel(POINTS)))
    picks = np.array([2, 0, NO_NEIGHBOR, 0])
    exact, hit3 = planning.nn_accuracy(picks, D)
    assert exact == 1 - neighbor_error(picks, D) == 0.25
    assert hit3 == 1 - neighbor_error(picks, D, rank=3) == 0.75


# ---------------------------------------------------------------- distances read on demand
def _cloud(n=300, d=4, seed=3):
    return np.random.default_rng(seed).normal(size=(n, d))


def test_point_distances_read_as_the_dense_matrix():
    X = _cloud()
    D = cdist(X, X) / 2.5
    P = truth.PointDistances(X, scale=2.5)
    rng = np.random.default_rng(0)
    r, c = rng.integers(0, 300, 50), rng.integers(0, 300, 50)
    assert P.shape == D.shape and len(P) == 300
    np.testing.assert_allclose(P[r, c], D[r, c], rtol=1e-12, atol=1e-12)
    block = P[r[:, None], np.tile(c[:8], (50, 1))]
    np.testing.assert_allclose(block, D[r[:, None], np.tile(c[:8], (50, 1))], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(P[7], D[7], rtol=1e-12, atol=1e-12)
    assert P[3, 9] == pytest.approx(D[3, 9], rel=1e-12)
    assert P.max() == pytest.approx(D.max(), rel=1e-12)
    np.testing.assert_allclose(np.asarray(P), D, rtol=1e-12, atol=1e-12)


def test_diameter_is_the_largest_distance_in_every_dimension():
    for d in (1, 2, 3, 5, 9):
        X = _cloud(400, d, seed=d)
        assert truth.diameter(X) == pytest.approx(cdist(X, X).max(), rel=1e-12)
    line = np.zeros((50, 3))
    line[:, 0] = np.arange(50)  # degenerate hull: every point on one line
    assert truth.diameter(line) == pytest.approx(49.0)


def test_oracles_from_many_points_keep_no_dense_matrix_and_answer_alike(monkeypatch):
    X = _cloud(200)
    questions = [tuple(q) for q in oracles.random_triplet_questions(200, 2000, np.random.default_rng(1))]
    dense = oracles.TripletOracle.from_points(X, noise=0.3, model="human", lapse=0.1, random_state=5)
    monkeypatch.setattr(truth, "DENSE_ITEMS", 100)
    lazy = oracles.TripletOracle.from_points(X, noise=0.3, model="human", lapse=0.1, random_state=5)
    assert isinstance(lazy.distances, truth.PointDistances) and isinstance(dense.distances, np.ndarray)
    same = np.mean(np.array(lazy.answer(questions)) == np.array(dense.answer(questions)))
    assert same == 1.0
    screens = [tuple(q) for q in oracles.random_triplet_questions(200, 500, np.random.default_rng(2))]
    odd_lazy = oracles.OddOneOutOracle.from_points(X, scale=0.3, lapse=0.1, random_state=4).odd_ones(screens)
    odd_dense = oracles.OddOneOutOracle(cdist(X, X), scale=0.3, lapse=0.1, random_state=4).odd_ones(screens)
    np.testing.assert_array_equal(odd_lazy, odd_dense)
    heads, refs = np.arange(40), np.random.default_rng(3).integers(0, 200, (40, 6))
    rank_lazy = oracles.RankOracle.from_points(X, scale=0.3, lapse=0.1, random_state=6).picks(heads, refs)
    rank_dense = oracles.RankOracle(cdist(X, X), scale=0.3, lapse=0.1, random_state=6).picks(heads, refs)
    np.testing.assert_array_equal(rank_lazy, rank_dense)
    with pytest.raises(ValueError, match="GiB"):
        np.asarray(lazy.distances)
