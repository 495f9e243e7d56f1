import io
import json
from pathlib import Path

import numpy as np
import pytest
from helpers import in_lockstep
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.sparse.csgraph import shortest_path

from engine.anntri import ANN, DERIVED_DEFAULTS, ANNTri, RandomSampling, planner_from_state
from engine.anntri.checks import SMALL_BATCH
from engine.anntri.estimates import exact_mean, outward, outward_one
from engine.anntri.rounds import past_first_layer
from engine.truth import neighbor_error
from simulation.oracles import DistanceMatrixOracle, PointsOracle, circle_clusters, run


def _true_knn(D, k=1):
    D = D.copy()
    np.fill_diagonal(D, np.inf)
    return np.argsort(D, axis=1, kind="stable")[:, :k]


def _random_metric(seed, n):
    """A random (non-Euclidean) metric: shortest paths over random positive weights."""
    rng = np.random.default_rng(seed)
    W = rng.uniform(0.1, 1.0, size=(n, n))
    W = np.triu(W, 1)
    return shortest_path(W + W.T, directed=False)


def _drive(planner, oracle, batch=None, budget=10**7):
    return run(planner, oracle, budget, batch=batch)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("k", [1, 3])
def test_noise_free_oracle_gives_the_exact_graph_all_certified(seed, k):
    D = _random_metric(seed, 25)
    planner = ANNTri(25, k=k, sigma=1e-6, random_state=seed)
    res = _drive(planner, DistanceMatrixOracle(D, random_state=seed))
    g = planner.result()
    assert res.finished and g.certified.all()
    assert neighbor_error(g.neighbors, D) == 0.0
    assert g.neighbors.shape == (25, k)
    assert np.array_equal(np.sort(g.neighbors, axis=1), np.sort(_true_knn(D, k), axis=1))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(3, 14), window=st.integers(1, 4))
def test_the_true_nearest_neighbour_is_never_eliminated(seed, n, window):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    D = PointsOracle(X).distances
    truth = _true_knn(D)[:, 0]
    planner = ANNTri(n, sigma=1e-6, window=window, random_state=seed)
    oracle = DistanceMatrixOracle(D)
    while True:
        qs = planner.next_questions(int(rng.integers(1, 2 * n)))
        if not qs:
            break
        planner.observe(oracle.answer(qs))
        U = planner.upper_.copy()
        np.fill_diagonal(U, np.inf)
        rows = np.arange(n)
        # the true NN keeps L* below every other upper bound and its bounds contain d
        assert np.all(planner.lower_[rows, truth] <= U.min(axis=1) + 1e-9)
        assert np.all(planner.lower_ <= D + 1e-9) and np.all(D <= planner.upper_ + 1e-9)
    assert neighbor_error(planner.result().neighbors, D) == 0.0


def _clusters(seed):
    X, _ = circle_clusters(n_clusters=4, cluster_size=5, gap=0.5, random_state=seed)
    return X


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_noisy_well_separated_clusters_give_the_exact_graph(seed):
    X = _clusters(seed)
    oracle = PointsOracle(X, noise=0.05, random_state=seed)
    planner = ANNTri(len(X), sigma=0.05, random_state=seed, max_samples_per_round=20000)
    res = _drive(planner, oracle)
    assert res.finished
    assert neighbor_error(planner.result().neighbors, oracle.distances) == 0.0


class _FrozenNoiseOracle(PointsOracle):
    """The t-th sample of a pair always gets the same noise, so two planners see the same data."""

    def __init__(self, points, noise, seed):
        super().__init__(points)
        self.seed, self.noise, self.seen = seed, noise, {}

    def sample(self, pairs):
        out = []
        for i, j in pairs:
            key = (min(i, j), max(i, j))
            t = self.seen.get(key, 0)
            self.seen[key] = t + 1
            z = np.random.default_rng([self.seed, key[0], key[1], t]).normal()
            out.append(self.distances[i, j] + self.noise * z)
        return np.array(out)


@pytest.mark.parametrize("seed", [0, 1])
def test_ann_and_anntri_agree_and_anntri_needs_no_more_samples(seed):
    X, _ = circle_clusters(n_clusters=5, cluster_size=4, gap=1.0, random_state=seed)
    results = {}
    for cls in (ANNTri, ANN):
        oracle = _FrozenNoiseOracle(X, 0.05, seed)
        planner = cls(len(X), sigma=0.05, random_state=seed, max_samples_per_round=20000)
        res = _drive(planner, oracle)
        results[cls.__name__] = (planner.result().neighbors, res.total_queries)
    assert np.array_equal(results["ANNTri"][0], results["ANN"][0])
    assert results["ANNTri"][1] <= results["ANN"][1]


def _roundtrip(state):
    """Through the platform's storage shapes: arrays via np.save bytes, the rest via JSON."""
    arrays = {}
    for key, value in state.items():
        if isinstance(value, np.ndarray):
            buf = io.BytesIO()
            np.save(buf, value, allow_pickle=False)
            arrays[key] = buf.getvalue()
    rest = json.loads(json.dumps({k: v for k, v in state.items() if k not in arrays}))
    rest.update({k: np.load(io.BytesIO(b), allow_pickle=False) for k, b in arrays.items()})
    return rest


@pytest.mark.parametrize("cls", [ANNTri, ANN, RandomSampling])
@pytest.mark.parametrize("window", [1, 3])
def test_state_round_trip_mid_run_gives_identical_next_questions(cls, window):
    X = _clusters(5)
    oracle = PointsOracle(X, noise=0.05, random_state=1)
    planner = cls(len(X), sigma=0.05, window=window, random_state=7)
    for _ in range(15):
        planner.observe(oracle.answer(planner.next_questions(6)))
    planner.next_questions(4)  # leave some questions pending
    restored = planner_from_state(_roundtrip(planner.to_state()))
    assert type(restored) is cls
    restored_direct = cls.from_state(planner.to_state())
    twin = PointsOracle(X, noise=0.05, random_state=99)
    twin2 = PointsOracle(X, noise=0.05, random_state=99)
    twin3 = PointsOracle(X, noise=0.05, random_state=99)
    for _ in range(20):
        a, b, c = planner.next_questions(5), restored.next_questions(5), restored_direct.next_questions(5)
        assert a == b == c
        planner.observe(twin.answer(a))
        restored.observe(twin2.answer(b))
        restored_direct.observe(twin3.answer(c))
    assert planner.progress() == restored.progress()
    assert np.array_equal(planner.result().neighbors, restored.result().neighbors)


def test_state_holds_only_arrays_and_json_values():
    planner = ANNTri(10, random_state=3)
    planner.observe([(0, 1, 0.5)])
    state = planner.to_state()
    assert state["version"] == 4 and state["class"] == "ANNTri"
    plain = {k: v for k, v in state.items() if not isinstance(v, np.ndarray)}
    json.dumps(plain)
    assert planner_from_state(ANN(5).to_state()).__class__ is ANN


#: The saved layout (keys in order, dtypes) of states written before the planner was split into
#: parts: states saved then must still load, so the parts write and read exactly this.
_LAYOUT = [("version", None), ("class", None), ("params", None), ("initialized", None), ("rng", None),
           ("open_rounds", None), ("dirty", "int64"), ("next_round", None), ("n_samples", None), ("n_issued", None),
           ("rounds_since_full_pass", None), ("mean", "float64"), ("count", "int32"), ("pending", "int32"),
           ("upper", "float64"), ("lower", "float64"), ("order", "int64"), ("status", "int8"),
           ("round_issued", "int64"), ("neighbors", "int64"), ("refresh_mark", "int64")]
_HEAD_LAYOUT = [t for t in _LAYOUT if t[0] not in ("upper", "lower")] + [
    ("tight_keys", "int64"), ("tight_upper", "float64"), ("tight_lower", "float64")]


@pytest.mark.parametrize("symmetric", [True, False])
def test_the_parts_write_the_saved_layout_and_read_it_back(symmetric):
    planner = ANNTri(12, window=3, random_state=4) if symmetric else ANN(12, sigma=0.1, symmetric=False, window=3,
                                                                          random_state=4)
    oracle = _HeadOracle(_asymmetric_matrix(2, 12), 0.1, 1)
    for _ in range(40):
        planner.observe(oracle.answer(planner.next_questions(5)))
    state = planner.to_state()
    layout = _LAYOUT if symmetric else _HEAD_LAYOUT
    assert [k for k in state] == [k for k, _ in layout]
    assert {k: str(state[k].dtype) for k, d in layout if d} == {k: d for k, d in layout if d}
    assert state["dirty"].size > 0 if symmetric else state["tight_keys"].size > 0  # the queue / tight pairs saved
    # each part reads its own keys: the same arrays back, continuing the same
    back = planner_from_state(state)
    assert back._est is not planner._est and back._rounds is not planner._rounds
    assert back._est.tight == planner._est.tight and list(back._est.dirty) == list(planner._est.dirty)
    assert back._rounds.open_rounds == planner._rounds.open_rounds
    for k, _ in layout[11:]:
        assert np.array_equal(back.to_state()[k], state[k]), k
    assert back.next_questions(6) == planner.next_questions(6)


def test_the_planner_is_a_facade_over_parts_that_own_their_state():
    """No mixins sharing attributes: the planner class has no base but object, its parts are
    built by the first call (``__init__`` stores the parameters only), and no class is long."""
    import ast
    import inspect

    from engine.anntri import planner as planner_module
    from engine.anntri.planner import _NeighborGraphPlanner

    assert _NeighborGraphPlanner.__bases__ == (object,)
    fresh = ANNTri(10, window=2, random_state=1)
    assert set(vars(fresh)) == set(inspect.signature(ANNTri.__init__).parameters) - {"self"}
    assert fresh._est is None and fresh._rounds is None and not fresh.initialized
    fresh.next_questions(1)
    assert fresh.initialized and fresh._overlay.est is fresh._est and fresh._overlay.rounds is fresh._rounds
    folder = Path(planner_module.__file__).parent
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                assert node.end_lineno - node.lineno < 400, (path.name, node.name)


@pytest.mark.parametrize("version", [1, 3, 5, None])
def test_a_state_of_another_version_is_refused_by_name(version):
    planner = ANNTri(10, random_state=3)
    planner.observe([(0, 1, 0.5)])
    state = {**planner.to_state(), "version": version}
    with pytest.raises(ValueError, match=f"state is of ANNTri v{version}, not ANNTri v4"):
        planner_from_state(state)


@pytest.mark.parametrize("seed", range(3))
def test_stagger_opens_rounds_only_as_others_pass_their_first_layer(seed):
    X, _ = circle_clusters(n_clusters=4, cluster_size=6, gap=0.5, random_state=seed)
    oracle = PointsOracle(X, noise=0.02, random_state=seed)
    planner = ANNTri(len(X), sigma=0.02, window=8, stagger=True, random_state=seed,
                     max_samples_per_round=3000)
    plain = ANNTri(len(X), sigma=0.02, window=8, random_state=seed, max_samples_per_round=3000)
    assert len({j for j, _ in plain.next_questions(200)}) == 8  # the whole window at once
    first = planner.next_questions(200)
    assert len({j for j, _ in first}) == 1  # one blind round first
    planner.observe(oracle.answer(first))
    widest = 1
    while True:
        n_open = len(planner.open_rounds_)
        closed = planner.next_round_ - n_open
        blind = [j for j in planner.open_rounds_
                 if not past_first_layer(planner._est, planner._rounds, planner._params_now(), j)]
        assert n_open <= min(8, 1 + closed + n_open - len(blind))
        widest = max(widest, n_open)
        qs = planner.next_questions(50)
        if not qs:
            break
        planner.observe(oracle.answer(qs))
    assert widest == 8 and planner.done
    assert neighbor_error(planner.result().neighbors, oracle.distances) == 0.0
    with pytest.raises(ValueError, match="stagger"):
        ANNTri(5, stagger=1).next_questions(1)
    back = planner_from_state(planner.to_state())
    assert back.stagger is True


def test_window_and_shuffled_late_answers_give_a_correct_graph():
    X = _clusters(4)
    n = len(X)
    oracle = PointsOracle(X, noise=0.05, random_state=3)
    planner = ANNTri(n, sigma=0.05, window=5, random_state=2, max_samples_per_round=20000)
    rng = np.random.default_rng(0)
    backlog = []
    for _ in range(100000):
        qs = planner.next_questions(12)
        assert len(set(qs)) == len(qs)
        assert all(isinstance(i, int) and isinstance(j, int) and i != j for i, j in qs)
        backlog.extend(oracle.answer(qs))
        if not qs and not backlog:
            break
        rng.shuffle(backlog)
        cut = int(rng.integers(0, len(backlog) + 1))  # some answers arrive late
        if not qs:
            cut = len(backlog)
        planner.observe(backlog[:cut])
        backlog = backlog[cut:]
    assert planner.progress()["done"] and planner.progress()["pending_questions"] == 0
    assert neighbor_error(planner.result().neighbors, oracle.distances) == 0.0


def test_window_serves_distinct_questions_from_several_rounds():
    planner = ANNTri(30, window=6, random_state=0)
    qs = planner.next_questions(200)
    assert len(qs) == len(set(frozenset(q) for q in qs))
    assert planner.progress()["rounds_open"] == 6
    assert planner.next_questions(10) == []  # every useful question is pending
    assert planner.progress()["pending_questions"] == len(qs)


def test_forget_releases_expired_questions_for_asking_again():
    planner = ANNTri(10, random_state=0)
    qs = planner.next_questions(50)
    assert planner.next_questions(5) == []
    planner.forget(qs[:3])
    again = planner.next_questions(5)
    assert sorted(again) == sorted(qs[:3])
    assert planner.progress()["pending_questions"] == len(qs)


def test_released_questions_do_not_count_towards_the_round_cap():
    D = np.ones((6, 6)) - np.eye(6)  # all tied: every round runs to its cap
    planner = ANN(6, sigma=0.5, max_samples_per_round=12, random_state=0)
    first = planner.next_questions(100)
    j = first[0][0]
    issued = int(planner.round_issued_[j])
    mine = [q for q in first if q[0] == j]
    planner.forget(mine)
    assert planner.round_issued_[j] == issued - len(mine) and planner.pending_[j].sum() == 0
    planner.forget(mine)  # nothing outstanding any more: no change
    assert planner.round_issued_[j] == issued - len(mine)
    oracle = DistanceMatrixOracle(D, noise=0.1, random_state=0)
    run(planner, oracle, 10**4)
    # the cap counts answers, not questions that expired unanswered: round j got all 12
    assert planner.count_[j].sum() >= 12 and np.all(planner.round_issued_ <= 12)


def test_answers_for_closed_rounds_are_still_used():
    D = _random_metric(1, 8)
    planner = ANNTri(8, sigma=1e-6, random_state=0)
    run(planner, DistanceMatrixOracle(D), 10**5)
    before = planner.progress()["samples"]
    planner.observe([(0, 1, D[0, 1]), (1, 0, D[0, 1])])
    assert planner.progress()["samples"] == before + 2
    assert planner.count_[0, 1] == planner.count_[1, 0]


def test_round_cap_returns_an_uncertified_empirical_best():
    D = np.ones((6, 6)) - np.eye(6)  # every neighbour tied: no round can be certified
    planner = ANN(6, sigma=0.5, max_samples_per_round=30, random_state=0)
    res = run(planner, DistanceMatrixOracle(D, noise=0.1, random_state=0), 10**5)
    g = planner.result()
    assert res.finished and not g.certified.any()
    assert planner.progress()["rounds_uncertified"] == 6
    assert np.all(planner.round_issued_ <= 30)


@pytest.mark.parametrize("bad, message", [
    ([(0, 0, 0.5)], "i == j"),
    ([(0, 10, 0.5)], "0..9"),
    ([(-1, 2, 0.5)], "0..9"),
    ([(0, 1, float("nan"))], "finite"),
    ([(0, 1, np.inf)], "finite"),
    ([(0.5, 1, 0.2)], "integers"),
    ([(0, 1)], "rows of 3"),
    ([(0, 1, 0.5), (3, 3, 0.1)], "i == j"),
])
def test_bad_answers_raise_and_leave_state_unchanged(bad, message):
    planner = ANNTri(10, random_state=0)
    planner.observe([(0, 1, 0.3)])
    planner.next_questions(3)
    before = planner.to_state()
    with pytest.raises(ValueError, match=message):
        planner.observe(bad)
    after = planner.to_state()
    for key, value in before.items():
        if isinstance(value, np.ndarray):
            assert np.array_equal(value, after[key])
        else:
            assert value == after[key]


def test_bounded_bounds_reject_values_outside_the_unit_interval():
    planner = ANNTri(5, bound="kl")
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        planner.observe([(0, 1, 1.5)])


@pytest.mark.parametrize("kwargs", [
    {"n_items": 2}, {"n_items": 5, "k": 5}, {"n_items": 5, "k": 0}, {"n_items": 5, "delta": 1.5},
    {"n_items": 5, "sigma": 0}, {"n_items": 5, "bound": "x"}, {"n_items": 5, "window": 0},
    {"n_items": 5, "max_samples_per_round": 0},
])
def test_bad_parameters_are_rejected(kwargs):
    with pytest.raises(ValueError):
        ANNTri(**kwargs).next_questions(1)


def test_bad_budget_and_forget_pairs_are_rejected():
    planner = ANNTri(5)
    with pytest.raises(ValueError):
        planner.next_questions(-1)
    with pytest.raises(ValueError):
        planner.forget([(1, 1)])


class _BernoulliOracle(DistanceMatrixOracle):
    """0/1 answers with mean d(i, j) (distances in [0, 1]), like triplet-derived samples."""

    def sample(self, pairs):
        idx = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        return (self.rng.random(len(idx)) < self.distances[idx[:, 0], idx[:, 1]]).astype(float)


@pytest.mark.parametrize("bound", ["hoeffding", "bernstein", "kl"])
def test_other_bounds_also_find_the_graph(bound):
    x = np.array([0.0, 0.1, 0.75, 0.95])
    D = np.abs(x[:, None] - x[None, :])
    oracle = _BernoulliOracle(D, random_state=0)
    planner = ANNTri(len(x), sigma=0.5, bound=bound, random_state=0, max_samples_per_round=50000)
    res = run(planner, oracle, 10**6)
    assert res.finished and planner.result().certified.all()
    assert neighbor_error(planner.result().neighbors, D) == 0.0


def test_random_sampling_certifies_a_noise_free_graph():
    D = _random_metric(2, 12)
    planner = RandomSampling(12, sigma=1e-6, random_state=0)
    res = run(planner, DistanceMatrixOracle(D), 10**6, batch=20)
    assert res.finished and planner.result().certified.all()
    assert neighbor_error(planner.result().neighbors, D) == 0.0


def test_result_and_progress_shapes():
    planner = ANNTri(12, k=2, random_state=0)
    g = planner.result()
    assert g.neighbors.shape == g.estimates.shape == g.lower.shape == g.upper.shape == (12, 2)
    assert g.certified.shape == (12,) and not g.certified.any()
    p = planner.progress()
    assert p["rounds_waiting"] == 12 and p["samples"] == 0 and not p["done"]
    json.dumps(p)


@pytest.mark.parametrize("k", [1, 3])
def test_round_best_matches_current_neighbors_and_counts_round_questions(k):
    X, _ = circle_clusters(n_clusters=4, cluster_size=5, gap=0.5, random_state=3)
    oracle = PointsOracle(X, noise=0.05, random_state=3)
    planner = ANNTri(len(X), k=k, sigma=0.05, window=3, random_state=3)
    for step in range(60):
        planner.observe(oracle.answer(planner.next_questions(7)))
        if step % 10 == 9:
            nb = planner.current_neighbors()
            for j in range(len(X)):
                best, t = planner.round_best(j)
                assert best.shape == (k,) and np.array_equal(best, nb[j])
                assert t == int(planner.round_issued_[j])
    assert sum(planner.round_best(j)[1] for j in range(len(X))) == planner.progress()["questions_issued"]
    with pytest.raises(ValueError):
        planner.round_best(len(X))


def test_circle_clusters_diameter_and_radial_options():
    X1, _ = circle_clusters(random_state=0)
    X2, _ = circle_clusters(random_state=0, diameter=2.0)
    np.testing.assert_allclose(X2, 2.0 * X1)
    X3, lab = circle_clusters(random_state=0, diameter=2.0, radial="linear")
    for c in range(10):
        pts = X3[lab == c]
        centre_dist = np.linalg.norm(pts - pts.mean(axis=0), axis=1)
        assert centre_dist.max() < 2.0
    with pytest.raises(ValueError):
        circle_clusters(radial="gaussian")


@pytest.mark.parametrize("bad, message", [
    ([(0, 0, 0.5)], "i == j"), ([(0, 10, 0.5)], "0..9"), ([(0, 1, float("nan"))], "finite"),
    ([(0.5, 1, 0.2)], "integers"), ([(0, 1)], "rows of 3"), ([(0, 1, "x")], "rows of 3"),
])
def test_bad_answers_in_a_long_batch_raise_and_leave_state_unchanged(bad, message):
    planner = ANNTri(10, random_state=0)
    planner.observe([(0, 1, 0.3)])
    good = [(i, (i + 1) % 10, 0.5) for i in range(10)] * 2  # long: the vectorised path
    before = planner.to_state()
    with pytest.raises(ValueError, match=message):
        planner.observe(good + bad)
    for key, value in planner.to_state().items():
        if isinstance(value, np.ndarray):
            assert np.array_equal(value, before[key])


def test_short_and_long_batches_update_the_estimates_identically():
    rng = np.random.default_rng(4)
    pairs = [(int(i), int(j)) for i, j in rng.choice(12, size=(40, 2)) if i != j]
    answers = [(i, j, float(rng.random())) for i, j in dict.fromkeys(pairs)]  # distinct pairs
    short, long = ANNTri(12, random_state=0), ANNTri(12, random_state=0)
    for t in range(0, len(answers), 2):
        short.observe(answers[t:t + 2])
    long.observe(answers)
    for name in ("mean_", "count_", "upper_", "lower_", "pending_"):
        assert np.array_equal(getattr(short, name), getattr(long, name)), name
    assert short.progress() == long.progress()


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10**6), window=st.integers(1, 3))
def test_every_decision_matches_a_planner_restored_without_caches(seed, window):
    # A restored planner starts with no cached active sets: its questions must not differ.
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(12, 2))
    oracle = PointsOracle(X, noise=0.1, random_state=seed)
    planner = ANNTri(12, sigma=0.1, window=window, random_state=seed, max_samples_per_round=400)
    backlog = []
    for _ in range(300):
        twin = planner_from_state(planner.to_state())
        budget = int(rng.integers(1, 6))
        qs = planner.next_questions(budget)
        assert twin.next_questions(budget) == qs
        backlog.extend(oracle.answer(qs))
        if not backlog:
            break
        rng.shuffle(backlog)
        cut = int(rng.integers(1, len(backlog) + 1))
        planner.observe(backlog[:cut])
        backlog = backlog[cut:]


def test_window_changed_on_a_live_planner_is_used_and_saved():
    planner = ANNTri(30, random_state=0)
    planner.next_questions(5)
    planner.window = 4
    planner.next_questions(200)
    assert planner.progress()["rounds_open"] == 4
    state = planner.to_state()
    assert state["params"]["window"] == 4
    restored = planner_from_state(state)
    assert restored.window == 4
    restored.window = 7
    restored.next_questions(500)
    assert restored.progress()["rounds_open"] == 7
    assert planner_from_state(restored.to_state()).window == 7
    restored.window = 0
    with pytest.raises(ValueError, match="window"):
        restored.next_questions(1)


def test_lookahead_issues_several_layers_and_still_finds_the_graph():
    X = _clusters(2)
    oracle = PointsOracle(X, noise=0.05, random_state=2)
    exact = ANNTri(len(X), sigma=0.05, random_state=2, max_samples_per_round=20000)
    fast = ANNTri(len(X), sigma=0.05, random_state=2, max_samples_per_round=20000, lookahead=0.1)
    res_exact = run(exact, PointsOracle(X, noise=0.05, random_state=2), 10**7, batch=200)
    seen_repeats = False
    total = 0
    while True:
        qs = fast.next_questions(200)
        if not qs:
            break
        seen_repeats |= len(set(qs)) < len(qs)
        counts = {}
        for q in qs:
            counts[q] = counts.get(q, 0) + 1
        for (i, j), c in counts.items():  # at most 1 + lookahead * T layers of an arm
            assert c <= 1 + 0.1 * (fast.count_[i, j])
            assert fast.pending_[i, j] == c
        fast.observe(oracle.answer(qs))
        total += len(qs)
    assert seen_repeats and fast.done and fast.progress()["pending_questions"] == 0
    assert neighbor_error(fast.result().neighbors, oracle.distances) == 0.0
    assert np.all(fast.round_issued_ <= 20000)
    assert total < 1.5 * res_exact.total_queries
    with pytest.raises(ValueError, match="lookahead"):
        ANNTri(5, lookahead=-1).next_questions(1)


@pytest.mark.parametrize("k", [1, 2])
def test_current_neighbors_in_row_chunks_match_one_block(monkeypatch, k):
    from engine.anntri import estimates

    X, _ = circle_clusters(n_clusters=5, cluster_size=5, gap=0.5, random_state=1)
    oracle = PointsOracle(X, noise=0.05, random_state=1)
    planner = ANNTri(len(X), k=k, sigma=0.05, window=4, random_state=1)
    for _ in range(30):
        planner.observe(oracle.answer(planner.next_questions(9)))
    whole = planner.current_neighbors()
    monkeypatch.setattr(estimates, "ROW_CHUNK_ELEMENTS", 2 * len(X))  # two rows at a time
    planner._best_cache = None  # every row recomputed, in chunks
    assert np.array_equal(planner.current_neighbors(), whole)


@pytest.mark.parametrize(("window", "batch", "cap", "seed", "calls", "issued", "digest"), [
    (1, 20, 3000, 0, 13012, 28184, "9abba671260d5d74"),
    (3, 7, 2000, 1, 8026, 38536, "302ed60d8035b8dc"),
])
def test_questions_and_result_match_a_frozen_trace(window, batch, cap, seed, calls, issued, digest):
    # Recorded before the scalar fast paths existed: every question, in order, and the integer
    # parts of the result. Pins this numpy's arithmetic (the bounds decide near-ties).
    import hashlib

    X, _ = circle_clusters(n_clusters=4, cluster_size=8, random_state=seed, diameter=2.0, radial="linear")
    oracle = PointsOracle(X, noise=0.1, random_state=seed)
    planner = ANNTri(len(X), sigma=0.1, delta=0.1, window=window, max_samples_per_round=cap,
                     random_state=seed)
    h = hashlib.sha256()
    n_calls = 0
    while True:
        qs = planner.next_questions(batch)
        h.update(repr(qs).encode())
        n_calls += 1
        if not qs:
            break
        planner.observe(oracle.answer(qs))
    g = planner.result()
    for arr in (g.neighbors, g.certified, g.samples):
        h.update(arr.tobytes())
    assert (n_calls, planner.n_issued_, h.hexdigest()[:16]) == (calls, issued, digest)


def _without_fast_paths(planner):
    planner._ensure_state()
    planner._fast_ok = False  # every call takes the general (array) paths
    return planner


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), window=st.integers(1, 4), meddle=st.booleans())
def test_scalar_fast_paths_ask_and_learn_exactly_what_the_array_paths_do(seed, window, meddle):
    # Long near-tie duels (two close neighbours per item) keep the fast paths busy; answers
    # arrive late and shuffled, questions expire, the window changes, and (meddle) the arrays
    # are read and written directly between calls, as the platform does.
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(8, 2))
    X = np.concatenate([X, X + rng.normal(0, 0.02, size=X.shape)])
    oracle = PointsOracle(X, noise=0.1, random_state=seed)
    kwargs = dict(sigma=0.1, window=window, random_state=seed, max_samples_per_round=300)
    fast = ANNTri(len(X), **kwargs)
    slow = _without_fast_paths(ANNTri(len(X), **kwargs))
    backlog = []
    for step in range(400):
        budget = int(rng.integers(1, 6))
        qs = fast.next_questions(budget)
        assert slow.next_questions(budget) == qs
        backlog.extend(oracle.answer(qs))
        if not backlog and fast.done:
            break
        rng.shuffle(backlog)
        cut = int(rng.integers(0, len(backlog) + 1))
        batch, backlog = backlog[:cut], backlog[cut:]
        fast.observe(batch)
        slow.observe(batch)
        if backlog and rng.random() < 0.05:
            expired = [backlog.pop()[:2]]
            fast.forget(expired)
            slow.forget(expired)
        if step == 150:
            fast.window = slow.window = window + 1
        if meddle and fast.open_rounds_:
            j = fast.open_rounds_[0]
            assert np.array_equal(fast.count_, slow.count_) and np.array_equal(fast.upper_, slow.upper_)
            if rng.random() < 0.2:
                a = (j + 1) % len(X)
                for p in (fast, slow):  # an extra question, issued by hand
                    p.pending_[j, a] += 1
                    p.pending_[a, j] += 1
                    p.round_issued_[j] += 1
                backlog.extend(oracle.answer([(j, a)]))
        if step % 97 == 0:
            fast = planner_from_state(fast.to_state())
    for name in ("mean_", "count_", "pending_", "upper_", "lower_", "round_issued_", "status_", "neighbors_"):
        assert np.array_equal(getattr(fast, name), getattr(slow, name)), name
    assert fast.progress() == slow.progress()
    assert list(fast.dirty_) == list(slow.dirty_)


# ---------------------------------------------------------------- head-based (asymmetric) mode
def _asymmetric_matrix(seed, n):
    """A non-symmetric 'distance' whose pooled (M + M.T) / 2 has other nearest neighbours."""
    rng = np.random.default_rng(seed)
    M = rng.uniform(0.3, 1.0, size=(n, n))
    for i in range(n):
        j = (i + 1) % n
        M[i, j] = 0.05  # head i is closest to i + 1 ...
        M[j, i] = 1.0  # ... but i + 1 finds i far: pooled, (i, i + 1) is no longer special
    np.fill_diagonal(M, 0.0)
    return M


class _HeadOracle:
    """Noisy samples of a non-symmetric matrix: (i, j) -> M[i, j] + N(0, noise²)."""

    def __init__(self, M, noise, random_state):
        self.distances = M
        self.noise = noise
        self.rng = np.random.default_rng(random_state)

    def answer(self, pairs):
        v = self.rng.normal(0.0, self.noise, size=len(pairs))
        return [(i, j, float(self.distances[i, j] + e)) for (i, j), e in zip(pairs, v, strict=True)]


def test_symmetric_false_updates_the_head_row_only():
    planner = ANN(5, symmetric=False, random_state=0)
    planner.observe([(0, 1, 0.25), (0, 1, 0.75), (2, 0, 1.0)])
    assert planner.count_[0, 1] == 2 and planner.count_[1, 0] == 0
    assert planner.mean_[0, 1] == 0.5 and planner.count_[2, 0] == 1 and planner.count_[0, 2] == 0
    assert np.isinf(planner.upper_[1, 0]) and np.isfinite(planner.upper_[0, 1])
    planner.observe([(3, 4, 0.5)] * 20)  # the long-batch (array) path
    assert planner.count_[3, 4] == 20 and planner.count_[4, 3] == 0
    qs = planner.next_questions(3)
    assert all(planner.pending_[i, j] == 1 and planner.pending_[j, i] == 0 for i, j in qs)
    assert planner.progress()["pending_questions"] == len(qs)
    planner.forget(qs[:1])
    assert planner.pending_[qs[0]] == 0


@pytest.mark.parametrize("seed", range(3))
def test_symmetric_false_finds_each_heads_own_nearest_neighbour(seed):
    n = 8
    M = _asymmetric_matrix(seed, n)
    pooled = _true_knn((M + M.T) / 2)[:, 0]
    head = _true_knn(M)[:, 0]
    assert np.mean(pooled != head) > 0.3  # the case the option exists for
    for cls in (ANN, RandomSampling):
        planner = cls(n, sigma=0.05, symmetric=False, window=3, random_state=seed)
        oracle = _HeadOracle(M, 0.05, seed)
        res = _drive(planner, oracle, budget=200_000)
        nb = planner.current_neighbors()[:, 0]
        assert np.array_equal(nb, head), cls.__name__
        if cls is ANN:
            assert res.finished and planner.result().certified.all()


def test_symmetric_false_learns_the_same_from_short_and_long_batches():
    M = _asymmetric_matrix(1, 10)
    rng = np.random.default_rng(0)
    pairs = [(int(i), int(j)) for i, j in rng.integers(10, size=(300, 2)) if i != j]
    answers = _HeadOracle(M, 0.1, 4).answer(pairs)
    short = ANN(10, sigma=0.1, symmetric=False, random_state=4)
    long = ANN(10, sigma=0.1, symmetric=False, random_state=4)
    for start in range(0, len(answers), 5):
        short.observe(answers[start:start + 5])  # the scalar small-batch path
    long.observe(answers)  # the vectorised path
    assert np.array_equal(short.count_, long.count_)
    assert not np.array_equal(long.count_, long.count_.T)
    assert np.allclose(short.mean_, long.mean_)
    # Intersecting the anytime intervals after every short batch can only tighten them.
    assert np.all(short.upper_ <= long.upper_ + 1e-12) and np.all(short.lower_ >= long.lower_ - 1e-12)
    assert np.isinf(short.upper_[(short.count_ == 0)
                    & ~np.eye(10, dtype=bool)]).all()


def test_symmetric_false_refuses_triangle_bounds_and_round_trips():
    with pytest.raises(ValueError, match="triangle"):
        ANNTri(6, symmetric=False).next_questions(1)
    with pytest.raises(ValueError, match="symmetric"):
        ANN(6, symmetric="no").next_questions(1)
    M = _asymmetric_matrix(2, 9)
    oracle = _HeadOracle(M, 0.1, 1)
    planner = ANNTri(9, sigma=0.1, triangle=False, symmetric=False, window=2, random_state=1)
    for _ in range(10):
        planner.observe(oracle.answer(planner.next_questions(4)))
    planner.next_questions(2)
    restored = planner_from_state(json.loads(json.dumps(
        {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in planner.to_state().items()})))
    assert restored.symmetric is False
    in_lockstep(planner, restored, oracle, rounds=10, batch=4)
    assert np.array_equal(planner.current_neighbors(), restored.current_neighbors())


# ---------------------------------------------------------------- repeat_questions
@pytest.mark.parametrize("symmetric", [True, False])
def test_repeat_questions_asks_the_least_asked_undecided_arms(symmetric):
    n = 12
    X, _ = circle_clusters(n_clusters=3, cluster_size=4, random_state=0)
    oracle = PointsOracle(X, noise=0.2, random_state=0)
    planner = ANN(n, sigma=0.2, window=2, symmetric=symmetric, random_state=0)
    for _ in range(3):
        planner.observe(oracle.answer(planner.next_questions(50)))
    issued = planner.next_questions(10**4)  # every useful question is now pending
    assert issued and planner.next_questions(5) == []
    open_rounds = [int(j) for j in np.flatnonzero(planner.status_ == 1)]
    before_count, before_pending = planner.count_.copy(), planner.pending_.copy()
    before_issued = planner.round_issued_.copy()
    reps = planner.repeat_questions(7)
    assert len(reps) == 7
    # Round-robin over the open rounds, each time the arm least asked so far (answers + pending).
    load = before_count + before_pending
    for q, (j, a) in enumerate(reps):
        assert j == open_rounds[q % len(open_rounds)]
        undecided = planner._decide_round(j)
        assert a in list(undecided) and a != j
        assert load[j, a] == min(load[j, b] for b in undecided)
        load[j, a] += 1
        if symmetric:
            load[a, j] += 1
    assert np.array_equal(planner.pending_, load - before_count)
    assert int((planner.round_issued_ - before_issued).sum()) == 7
    # The round cap is respected; nothing to repeat once no round is open.
    cap = int(planner.round_issued_[open_rounds].max()) + 1
    room = int(sum(cap - planner.round_issued_[j] for j in open_rounds))
    planner.max_samples_per_round = cap
    more = planner.repeat_questions(50)
    assert len(more) == room and planner.round_issued_[open_rounds].max() == cap
    assert planner.repeat_questions(0) == []
    done = ANN(4, sigma=1e-6, random_state=0)
    D = np.array([[0, 1, 3, 6], [1, 0, 2, 5], [3, 2, 0, 4], [6, 5, 4, 0]], dtype=float)
    _drive(done, DistanceMatrixOracle(D, random_state=0))
    assert done.done and done.repeat_questions(5) == []


def test_derived_defaults_build_a_head_based_planner_without_triangle_bounds():
    planner = ANNTri(12, random_state=0, **DERIVED_DEFAULTS)
    assert planner.symmetric is False and planner.triangle is False
    rng = np.random.default_rng(0)
    qs = planner.next_questions(30)
    assert len(set(qs)) == 30 and len({i for i, _ in qs}) > 1  # several rounds asked at once
    planner.observe([(i, j, float(rng.integers(2))) for i, j in qs])  # Bernoulli samples
    assert planner.count_.sum() == 30 and not np.array_equal(planner.count_, planner.count_.T)


@pytest.mark.parametrize("params", [{}, DERIVED_DEFAULTS])
def test_bounds_of_some_rows_are_those_rows_of_the_whole_bound_matrices(params):
    # the dashboard's layout reads the drawn rows only: a head-based planner stores no bound matrices
    planner = ANNTri(15, random_state=1, **params)
    rng = np.random.default_rng(1)
    for _ in range(5):
        qs = planner.next_questions(40)
        planner.observe([(i, j, float(rng.integers(2))) for i, j in qs])
    rows = np.array([3, 0, 14, 7])
    upper, lower = planner.bounds_of(rows)
    np.testing.assert_array_equal(upper, np.asarray(planner.upper_, dtype=np.float64)[rows])
    np.testing.assert_array_equal(lower, np.asarray(planner.lower_, dtype=np.float64)[rows])


# ---------------------------------------------------------------- many open rounds, triplet studies
def test_many_open_rounds_are_served_in_turn_and_replay_exactly():
    # With every round open and small batches, each call asks the rounds after the last ones
    # asked (not the first `budget` rounds again and again), and a restored state continues
    # with exactly the same questions.
    n = 60
    X, _ = circle_clusters(n_clusters=6, cluster_size=10, random_state=3)
    oracle = PointsOracle(X, noise=0.1, random_state=3)
    planner = ANN(n, sigma=0.1, window=n, symmetric=False, random_state=3)
    asked_rounds = []
    for _ in range(6):
        qs = planner.next_questions(20)
        assert len(qs) == 20 and len({q[0] for q in qs}) == 20  # one question per round
        asked_rounds.extend(q[0] for q in qs)
        planner.observe(oracle.answer(qs))
    counts = np.bincount(asked_rounds, minlength=n)
    assert counts.min() == counts.max() == 2  # 120 questions went round all 60 rounds twice
    twin = planner_from_state(planner.to_state())
    in_lockstep(planner, twin, oracle, rounds=5, batch=17)
    assert np.array_equal(planner.current_neighbors(), twin.current_neighbors())


def test_a_triplet_study_runs_pair_planners_with_the_derived_defaults():
    from engine.planners import make_planner
    from engine.registry import defaults_for

    for name in ("anntri", "ann", "random"):
        adapted = make_planner(name, 30, question_kind="triplet", random_state=0).planner
        assert (adapted.symmetric, adapted.triangle, adapted.bound) == (False, False, "kl")
        rated = make_planner(name, 30, question_kind="rating", random_state=0)
        assert (rated.symmetric, rated.bound) == (True, "lil")  # ratings of a metric: the paper's
        assert defaults_for(name, "rating")["bound"] == "lil"
    assert make_planner("anntri", 30, question_kind="rating").triangle is True
    given = make_planner("anntri", 30, question_kind="triplet", window=2, bound="lil").planner
    assert (given.window, given.bound, given.symmetric) == (2, "lil", False)  # given values win
    assert DERIVED_DEFAULTS.items() <= defaults_for("anntri", "triplet").items()


def _intersected_bounds(batches, n, bound="lil", delta=0.1, sigma=0.5):
    """Head-based U*/L* by hand: every pair's running intersection of its anytime intervals (one
    interval per batch of answers for the pair, as observe applies a batch at once)."""
    from engine.bounds import confidence_interval

    total, count = {}, {}
    U, L = np.full((n, n), np.inf), np.zeros((n, n))
    np.fill_diagonal(U, 0.0)
    # short batches (<= SMALL_BATCH answers) are applied one answer at a time (LIL, Hoeffding)
    short = SMALL_BATCH if bound not in ("kl", "bernstein") else 0
    batches = [part for b in batches for part in ([[a] for a in b] if len(b) <= short else [b])]
    for batch in batches:
        i, j = batch[0][:2]
        T = count.get((i, j), 0)
        total[i, j] = (total.get((i, j), 0.0) * T + sum(v for _, _, v in batch)) / (T + len(batch))
        count[i, j] = T + len(batch)
        lo, hi = confidence_interval(np.array([total[i, j]]), np.array([count[i, j]]), n, delta, sigma, bound)
        lo, hi = max(float(lo[0]), 0.0), float(hi[0])
        u, low = min(U[i, j], hi), max(L[i, j], lo)
        U[i, j], L[i, j] = (hi, min(lo, hi)) if low > u else (u, low)
    return U, L


@pytest.mark.parametrize("bound", ["lil", "kl"])
def test_head_based_bounds_follow_from_mean_and_count_and_the_tighter_pairs(bound):
    """No (n, n) bound arrays in head-based mode: U*/L* are today's interval of mean and count,
    except the pairs whose running intersection is tighter (``tight``); same numbers as keeping them."""
    n = 15
    rng = np.random.default_rng(3)
    planner = ANN(n, symmetric=False, bound=bound, random_state=0)
    answers = []
    for _ in range(60):
        i, j = rng.choice(n, 2, replace=False)
        batch = [(int(i), int(j), float(rng.random() < 0.3 + 0.4 * (t % 2))) for t in range(int(rng.integers(1, 25)))]
        planner.observe(batch)
        answers.append(batch)
    assert planner._est.upper is None and (planner._est.tight or bound != "lil")  # some bind (LIL)
    U, L = _intersected_bounds(answers, n, bound)
    assert np.allclose(planner.upper_, U, rtol=0, atol=1e-9) and np.allclose(planner.lower_, L, rtol=0, atol=1e-9)
    state = planner.to_state()
    assert "upper" not in state and len(state["tight_keys"]) == sum(map(len, planner._est.tight.values()))
    back = planner_from_state(state)
    assert np.array_equal(back.upper_, planner.upper_) and np.array_equal(back.lower_, planner.lower_)


def test_bound_matrices_assigned_to_a_head_based_planner_keep_only_the_tighter_pairs():
    M = _asymmetric_matrix(2, 12)
    planner = ANN(12, sigma=0.1, symmetric=False, window=3, random_state=1)
    oracle = _HeadOracle(M, 0.1, 1)
    for _ in range(40):
        planner.observe(oracle.answer(planner.next_questions(5)))
    assert planner._est.tight  # some pairs' running intersections are tighter than today's interval
    empty = np.empty(0)
    restored = planner_from_state({**planner.to_state(), "tight_keys": empty.astype(np.int64),
                                   "tight_upper": empty, "tight_lower": empty})
    assert restored._est.tight == {}
    restored.upper_ = planner.upper_.copy()
    restored.lower_ = planner.lower_.copy()
    assert restored._est.tight == planner._est.tight
    in_lockstep(planner, restored, oracle, rounds=40, batch=5)
    assert np.array_equal(restored.current_neighbors(), planner.current_neighbors())


def test_large_head_based_planners_keep_means_of_0_1_answers_exactly_in_float32():
    n = 2100  # above FLOAT64_MAX_ITEMS
    planner = ANN(n, symmetric=False, random_state=0)
    answers = [(0, 1, float(t % 3 == 0)) for t in range(31)] + [(5, 7, 1.0)] * 3
    planner.observe(answers[:10])
    planner.observe(answers[10:])  # long batch: the array path
    for i, j, v in answers[:5]:
        planner.observe([(i, j, v)])  # short: the scalar path
    assert planner.mean_.dtype == np.float32 and planner.count_[0, 1] == 36
    g = planner.result()
    assert exact_mean(planner.mean_[0, 1], 36) == 13 / 36
    assert exact_mean(planner.mean_[5, 7], 3) == 1.0
    state = planner.to_state()
    assert state["mean"].dtype == np.float32
    back = planner_from_state(state)
    assert back.mean_.dtype == np.float32 and np.array_equal(back.mean_, planner.mean_)
    planner.observe([(0, 1, 0.5)])  # not a 0/1 answer: float64 from now on, k / T kept exactly
    assert planner.mean_.dtype == np.float64 and planner.mean_[0, 1] == (13 + 0.5) / 37
    assert planner.mean_[5, 7] == 1.0 and g.estimates.dtype == np.float64


def test_float32_bounds_are_rounded_outward():
    from engine.bounds import confidence_interval

    n = 2100  # float32 bound matrices (a symmetric planner)
    planner = ANN(n, random_state=0)
    rng = np.random.default_rng(0)
    pairs = {(int(min(i, j)), int(max(i, j))) for i, j in rng.integers(0, 60, (200, 2)) if i != j}
    answers = [(i, j, float(rng.random())) for i, j in sorted(pairs)]
    planner.observe(answers[:10])  # short batch: the scalar path
    planner.observe(answers[10:])  # the array path
    assert planner.upper_.dtype == np.float32
    for i, j, v in answers:  # one answer each: U* and L* are that answer's interval, in float64
        lo, hi = confidence_interval(np.array([v]), np.array([1]), n, 0.1, 0.5)
        assert float(planner.upper_[i, j]) >= hi[0] and float(planner.upper_[i, j]) - hi[0] < 1e-6 * hi[0]
        assert float(planner.lower_[i, j]) <= max(lo[0], 0.0)
    hi = np.array([0.1, 1 / 3, 2.0 / 7])
    lo = np.array([0.05, 1 / 7, 0.0])
    h, low = outward(hi, lo, np.float32)
    assert np.all(h.astype(np.float64) >= hi) and np.all(low.astype(np.float64) <= lo)
    assert outward_one(1 / 3, 1 / 7)[0] >= 1 / 3 and outward_one(1 / 3, 1 / 7)[1] <= 1 / 7


@pytest.mark.parametrize("symmetric", [True, False])
def test_current_neighbors_recomputes_only_changed_rows_and_matches_a_fresh_planner(symmetric):
    rng = np.random.default_rng(5)
    planner = ANN(30, symmetric=symmetric, window=4, random_state=2) if not symmetric else ANNTri(30, window=4,
                                                                                                  random_state=2)
    M = _asymmetric_matrix(3, 30)
    pending = []
    for step in range(120):
        pending += planner.next_questions(int(rng.integers(1, 8)))
        rng.shuffle(pending)
        take, pending = pending[:5], pending[5:]
        planner.observe([(i, j, float(M[i, j] + rng.normal(0, 0.05))) for i, j in take])
        if step % 3 == 0:
            fresh = planner_from_state(planner.to_state())
            assert np.array_equal(planner.current_neighbors(), fresh.current_neighbors())
    planner.mean_[7, 3] = -1.0  # written from outside: reported with mark_rows
    planner.count_[7, 3] = max(int(planner.count_[7, 3]), 1)
    planner.mark_rows([7])
    assert np.array_equal(planner.current_neighbors(), planner_from_state(planner.to_state()).current_neighbors())
