import numpy as np
import pytest
from helpers import in_lockstep

from engine.embedding import (
    _log_p,
    _objective,
    _TripletLoss,
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
@pytest.mark.parametrize(("kernel", "floor"), [("ste", 0.95), ("tste", 0.9), ("human", 0.9)])
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


@pytest.mark.parametrize("kernel", ["ste", "tste", "human"])
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


@pytest.mark.parametrize("kernel", ["ste", "tste", "human"])
@pytest.mark.parametrize("dim", [1, 2, 3, 4, 8])
def test_fast_objective_is_the_plain_one(kernel, dim):
    """The objective the fits use gives the plain one's numbers."""
    rng = np.random.default_rng(dim)
    n, m = 25, 400
    t = np.column_stack([rng.integers(n, size=m) for _ in range(3)])  # repeats and degenerate rows too
    x = rng.normal(size=n * dim) * 2
    alpha = float(max(dim - 1, 1))
    loss, grad = _TripletLoss(t, n, dim, kernel, alpha, 0.01)(x.copy())
    ref_loss, ref_grad = _objective(x, t, n, dim, kernel, alpha, 0.01)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-12)
    # the human model's gradient divides by distances, smoothed only below HUMAN_EPS: rows with a
    # repeated item carry that division's rounding
    rtol = 1e-7 if kernel == "human" else 1e-9
    np.testing.assert_allclose(grad, ref_grad, rtol=rtol, atol=1e-13 * np.abs(ref_grad).max())


def test_fast_objective_where_the_kernel_ratio_overflows():
    # t-STE in 50 dimensions: the kernel ratio to the power 25 overflows for far-apart distances
    t = np.array([[0, 1, 2], [0, 2, 1], [1, 0, 2]])
    X = np.zeros((3, 50))
    X[1, 0], X[2, 0] = 1e-3, 1e9
    loss, grad = _TripletLoss(t, 3, 50, "tste", 49.0, 0.0)(X.ravel().copy())
    ref_loss, ref_grad = _objective(X.ravel(), t, 3, 50, "tste", 49.0, 0.0)
    assert np.isfinite(loss) and np.all(np.isfinite(grad))
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-12)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-9, atol=1e-15)


@pytest.mark.parametrize(("kernel", "dim"), [("tste", 2), ("tste", 4), ("ste", 3), ("human", 2)])
def test_fit_is_the_fit_of_the_plain_objective(kernel, dim):
    from scipy.optimize import minimize

    rng = np.random.default_rng(6)
    points = rng.random((40, 2))
    t = _truth_triplets(points, 3000, rng)
    X = fit_embedding(t, 40, dim=dim, kernel=kernel, random_state=2)
    X0 = np.random.default_rng(2).normal(scale=1e-2, size=(40, dim))
    alpha = float(max(dim - 1, 1))
    ref = minimize(_objective, X0.ravel(), args=(t, 40, dim, kernel, alpha, 1e-3), jac=True, method="L-BFGS-B",
                   options={"maxiter": 300, "gtol": 1e-7, "ftol": 1e-12}).x.reshape(40, dim)
    np.testing.assert_allclose(X, ref, atol=1e-4 * np.abs(ref).max())


def _dense_neighbors(X, k):
    """The reference: every pair's squared distance, each row sorted (stable: ties by index)."""
    D = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    np.fill_diagonal(D, np.inf)
    nb = np.argsort(D, axis=1, kind="stable")[:, :k]
    return nb, np.take_along_axis(D, nb, axis=1)


@pytest.mark.parametrize("dim", [1, 2, 5])
def test_neighbors_are_those_of_all_pairs(dim):
    rng = np.random.default_rng(dim)
    X = rng.normal(size=(300, dim))
    np.testing.assert_array_equal(embedding_neighbors(X, 7), _dense_neighbors(X, 7)[0])
    # a duplicated point is its twin's nearest, whichever of the two the tree meets first
    twins = np.concatenate([X[:50], X[:50]])
    np.testing.assert_array_equal(embedding_neighbors(twins, 1)[:, 0], np.r_[np.arange(50, 100), np.arange(50)])


def test_deterministic_for_a_seed():
    rng = np.random.default_rng(4)
    t = _truth_triplets(rng.random((20, 2)), 500, rng)
    np.testing.assert_array_equal(fit_embedding(t, 20, random_state=7), fit_embedding(t, 20, random_state=7))


def test_probabilities_and_neighbors():
    X = np.array([[0.0, 0.0], [1.0, 0.0], [5.0, 0.0], [5.5, 0.0]])
    for kernel in ("ste", "tste", "human"):
        p = triplet_probabilities(X, [(0, 1, 2), (0, 2, 1)], kernel=kernel)
        assert p[0] > 0.5 and np.isclose(p[0] + p[1], 1.0)
    np.testing.assert_array_equal(embedding_neighbors(X, 2), [[1, 2], [0, 2], [3, 1], [2, 1]])


def test_select_embedding_picks_by_holdout():
    rng = np.random.default_rng(5)
    t = _truth_triplets(rng.random((30, 2)), 2000, rng)
    choice = select_embedding(t, 30, dims=(1, 2), kernels=("tste",))
    assert set(choice.scores) == {("tste", 1), ("tste", 2), ("human", 1)}
    assert choice.dim == 2 and choice.embedding.shape == (30, 2)
    assert choice.holdout_accuracy == max(choice.scores.values()) > 0.9
    plain = select_embedding(t, 30, dims=(2,), kernels=("tste",), line=False)
    assert set(plain.scores) == {("tste", 2)}


def test_select_embedding_offers_the_line_duels_fits_for_a_continuum():
    """Items on a curve people judge with lapses: the human model on a line (started from the order
    along the plane) is offered to the peer and wins where it predicts held-out answers best."""
    rng = np.random.default_rng(7)
    s = np.sort(rng.random(40))
    X = np.column_stack([np.cos(3 * s), np.sin(3 * s)]) * 5
    t = _truth_triplets(X, 3000, rng)
    lapses = rng.random(len(t)) < 0.1
    t[lapses] = t[lapses][:, [0, 2, 1]]
    choice = select_embedding(t, 40, dims=(2,), kernels=("tste",))
    assert choice.scores[("human", 1)] > choice.scores[("tste", 2)]
    assert (choice.kernel, choice.dim) == ("human", 1) and choice.embedding.shape == (40, 1)
    # the items (indexed in their order along the curve) keep that order on the line, up to a few swaps
    order = np.argsort(choice.embedding[:, 0])
    order = order if order[0] < order[-1] else order[::-1]
    assert np.mean(np.abs(np.diff(order)) == 1) > 0.6


def test_validation():
    with pytest.raises(ValueError, match="kernel"):
        fit_embedding([(0, 1, 2)], 5, kernel="gauss")
    with pytest.raises(ValueError, match="indices"):
        fit_embedding([(0, 1, 9)], 5)
    with pytest.raises(ValueError, match="init"):
        fit_embedding([(0, 1, 2)], 5, init=np.zeros((4, 2)))


# ---------------------------------------------------------------------------- planners
from engine.embedding import ActiveEmbedding, EmbeddingLearner  # noqa: E402
from engine.graph import PROGRESS_KEYS  # noqa: E402
from engine.truth import neighbor_error  # noqa: E402
from simulation.oracles import TripletOracle  # noqa: E402

PLANNERS = [EmbeddingLearner, ActiveEmbedding]


def _drive(planner, oracle, rounds, batch=20):
    for _ in range(rounds):
        qs = planner.next_questions(batch)
        planner.observe(oracle.answer(qs))


@pytest.mark.parametrize("cls", PLANNERS)
def test_planner_learns_neighbours(cls):
    rng = np.random.default_rng(0)
    points = rng.random((30, 2))
    oracle = TripletOracle.from_points(points, random_state=1)
    planner = cls(30, random_state=0, warmup=300) if cls is ActiveEmbedding else cls(30, random_state=0)
    g = planner.neighbor_graph(1)
    assert np.all(g.neighbors == -1)
    _drive(planner, oracle, 60, batch=50)
    g = planner.neighbor_graph(2)
    assert g.neighbors.shape == (30, 2)
    assert neighbor_error(g.neighbors[:, :1], oracle.distances) < 0.4  # random guessing: ~0.97
    assert planner.result().shape == (30, 2)
    prog = planner.progress()
    assert set(PROGRESS_KEYS) <= set(prog) and prog["answers"] == 3000 and not planner.done
    assert prog["fits"] >= 1 and prog["train_accuracy"] > 0.9


def test_refits_are_lazy():
    rng = np.random.default_rng(1)
    oracle = TripletOracle.from_points(rng.random((20, 2)), random_state=0)
    planner = EmbeddingLearner(20, random_state=0, refit_share=0.5, refit_min=40)
    planner.observe(oracle.answer(planner.next_questions(100)))
    planner.neighbor_graph()
    assert planner.progress()["fits"] == 1
    planner.observe(oracle.answer(planner.next_questions(45)))  # < 50% of 100
    planner.neighbor_graph()
    assert planner.progress()["fits"] == 1
    planner.observe(oracle.answer(planner.next_questions(5)))
    planner.neighbor_graph()
    assert planner.progress()["fits"] == 2


@pytest.mark.parametrize("cls", PLANNERS)
def test_replay_and_state_round_trip(cls):
    rng = np.random.default_rng(2)
    oracle = TripletOracle.from_points(rng.random((15, 2)), random_state=0)
    kw = {"warmup": 60} if cls is ActiveEmbedding else {}
    p1, p2 = cls(15, random_state=5, **kw), cls(15, random_state=5, **kw)
    in_lockstep(p1, p2, oracle, rounds=6, batch=20, graphs=True)
    restored = cls.from_state(p1.to_state())
    assert restored.next_questions(25) == p1.next_questions(25)
    np.testing.assert_array_equal(restored.neighbor_graph(2).neighbors, p1.neighbor_graph(2).neighbors)


def test_active_questions_distinct_and_forget_releases():
    rng = np.random.default_rng(3)
    oracle = TripletOracle.from_points(rng.random((12, 2)), random_state=0)
    planner = ActiveEmbedding(12, random_state=0, warmup=100)
    planner.observe(oracle.answer(planner.next_questions(100)))
    assert planner.progress()["pending"] == 0
    qs = planner.next_questions(60)
    canon = {(h, min(a, b), max(a, b)) for h, a, b in qs}
    assert len(canon) == 60
    assert planner.progress()["pending"] == 60
    # least-asked heads: 60 questions over 12 heads spread within one of each other
    heads = np.bincount([h for h, _, _ in qs], minlength=12) + np.bincount(planner.answers_[:, 0], minlength=12)
    assert heads.max() - heads.min() <= 1
    planner.forget(qs[:10])
    assert planner.progress()["pending"] == 50


@pytest.mark.parametrize("cls", PLANNERS)
def test_accepts_answers_never_asked(cls):
    planner = cls(6, random_state=0)
    planner.observe([(0, 1, 2, 1), (3, 4, 5, 5)] * 10)
    assert planner.progress()["answers"] == 20
    with pytest.raises(ValueError, match="winner"):
        planner.observe([(0, 1, 2, 3)])


def test_neighbor_graph_is_that_of_all_pairs():
    rng = np.random.default_rng(8)
    oracle = TripletOracle.from_points(rng.random((60, 3)), random_state=0)
    planner = EmbeddingLearner(60, random_state=0, dim=3)
    _drive(planner, oracle, 10, batch=200)
    X = planner.embedding()
    nb, d2 = _dense_neighbors(X, 4)
    g = planner.neighbor_graph(4)
    np.testing.assert_array_equal(g.neighbors, nb)
    np.testing.assert_allclose(g.estimates, np.sqrt(d2), rtol=1e-12)


class _DenseActiveEmbedding(ActiveEmbedding):
    """The reference: candidate pairs scored from the (n, n) grids of squared distances and of ranks."""

    def _candidate_scores(self, X, heads, first, second):
        n = self.n_items
        D2 = np.zeros((n, n))
        for d in range(X.shape[1]):
            D2 += (X[:, d][:, None] - X[None, :, d]) ** 2
        np.fill_diagonal(D2, np.inf)
        rank = np.empty((n, n), np.int64)
        rank[np.arange(n)[:, None], np.argsort(D2, axis=1, kind="stable")] = np.arange(n)
        near = 1.0 / (1.0 + rank / max(1.0, n / 20.0))
        rows = heads[:, None]
        p = np.exp(_log_p(D2[rows, first], D2[rows, second], self.kernel, self.alpha_))
        return p * (1.0 - p) * np.maximum(near[rows, first], near[rows, second])


@pytest.mark.parametrize("cells", [1 << 18, 100])
def test_active_questions_are_those_of_the_all_pairs_grids(cells, monkeypatch):
    """Scored from a row of distances per head asked (one chunk, or a few heads at a time), the active
    questions are those the all-pairs grids give."""
    import engine.embedding as emb

    monkeypatch.setattr(emb, "SCORING_CELLS", cells)
    rng = np.random.default_rng(9)
    oracle = TripletOracle.from_points(rng.random((40, 2)), random_state=0)
    fast, dense = ActiveEmbedding(40, random_state=3, warmup=200), _DenseActiveEmbedding(40, random_state=3, warmup=200)
    X = None
    for _ in range(8):
        qs = fast.next_questions(60)
        assert qs == dense.next_questions(60)
        answers = oracle.answer(qs)
        fast.observe(answers)
        dense.observe(answers)
        X = fast.embedding()
        np.testing.assert_array_equal(X, dense.embedding())
    heads = rng.integers(40, size=30)
    first, second = rng.integers(40, size=(2, 30, 5))
    second = np.where(second == first, (first + 1) % 40, second)
    first, second = np.where(first == heads[:, None], (first + 2) % 40, first), second
    second = np.where(second == heads[:, None], (second + 3) % 40, second)
    np.testing.assert_allclose(fast._candidate_scores(X, heads, first, second),
                               dense._candidate_scores(X, heads, first, second), rtol=1e-9, atol=1e-15)


@pytest.mark.parametrize("cls", PLANNERS)
def test_learners_hold_no_array_of_all_pairs(cls):
    """At 8,000 items an (n, n) array of floats is 512 MB: fitting, asking and the graph stay far below."""
    import tracemalloc

    n = 8_000
    points = np.random.default_rng(10).random((n, 2))

    def answer(questions):  # noise-free, from the points (an oracle's distance matrix would be n x n)
        q = np.asarray(questions)
        first = ((points[q[:, 0]] - points[q[:, 1]]) ** 2).sum(1) <= ((points[q[:, 0]] - points[q[:, 2]]) ** 2).sum(1)
        return np.column_stack([q, np.where(first, q[:, 1], q[:, 2])])

    planner = cls(n, random_state=0, warmup=0) if cls is ActiveEmbedding else cls(n, random_state=0)
    tracemalloc.start()
    try:
        planner.observe(answer(planner.next_questions(1000)))
        planner.observe(answer(planner.next_questions(100)))
        g = planner.neighbor_graph(3)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert g.neighbors.shape == (n, 3) and planner.progress()["fits"] >= 1
    assert peak < 150e6, f"peak {peak / 1e6:.0f} MB"
