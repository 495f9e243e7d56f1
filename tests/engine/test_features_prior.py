"""Item features as a prior: make_planner(..., features=X) for duels, its screens and the embeddings;
the features' space; the state round trip; noise falling away."""
from __future__ import annotations

import numpy as np
import pytest

from engine.embedding import fit_embedding, triplet_accuracy
from engine.features import check_features, feature_neighbors, feature_space
from engine.planners import make_planner, restore_planner
from simulation.features import features_of_agreement, noise_features, triplet_agreement
from simulation.oracles import OddOneOutOracle, RankOracle, TripletOracle


def _points(n=60, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0, 10, size=(-(-n // 6), 3))
    return np.repeat(centres, 6, axis=0)[:n] + 0.3 * rng.normal(size=(n, 3))


def _hit3(picks, X):
    D = np.linalg.norm(X[:, None] - X[None], axis=2)
    np.fill_diagonal(D, np.inf)
    top = np.argsort(D, axis=1)[:, :3]
    return float(np.mean([p in row for p, row in zip(picks, top, strict=True)]))


def _drive(planner, oracle, answers):
    n = planner.n_items if hasattr(planner, "n_items") else None
    total = 0
    while total < answers:
        qs = planner.next_questions(min(n or 60, answers - total))
        planner.observe(oracle.answer(qs))
        total += len(qs)
    return planner


def test_check_features_refuses_in_words():
    with pytest.raises(ValueError, match="one row per item"):
        check_features(np.zeros((3, 2)), 4)
    with pytest.raises(ValueError, match="missing or infinite"):
        check_features([[1.0], [np.nan], [2.0]], 3)
    with pytest.raises(ValueError, match="one value for all items"):
        check_features(np.ones((3, 2)), 3)


def test_feature_space_keeps_distances_of_standardised_columns():
    rng = np.random.default_rng(1)
    F = rng.normal(size=(40, 5)) * [1, 10, 100, 0.1, 1]
    F = np.hstack([F, np.full((40, 1), 3.0)])  # a constant column is dropped
    Y = feature_space(F, 40).astype(np.float64)
    Z = F[:, :5]
    Z = (Z - Z.mean(0)) / Z.std(0)
    DY = np.linalg.norm(Y[:, None] - Y[None], axis=2)
    DZ = np.linalg.norm(Z[:, None] - Z[None], axis=2)
    ratio = DY[DZ > 0] / DZ[DZ > 0]
    assert np.allclose(ratio, ratio[0], rtol=1e-4)  # all components kept: one scale
    near = feature_neighbors(Y, 3)
    np.fill_diagonal(DZ, np.inf)
    assert (near[:, 0] == DZ.argmin(axis=1)).all()


def test_a_large_study_finds_its_feature_neighbours_by_a_tree_as_brute_force_does(monkeypatch):
    """From KD_TREE_ITEMS items in at most KD_TREE_DIMS dimensions the neighbours come from a k-d tree (seconds,
    not half a minute, at 50,000 items): the same neighbours, nearest first, as the brute force gives."""
    from engine import features

    rng = np.random.default_rng(3)
    Y = (rng.normal(size=(150, 6)) * 4)[rng.integers(150, size=1500)] + rng.normal(size=(1500, 6))
    brute = feature_neighbors(Y, 12)
    monkeypatch.setattr(features, "KD_TREE_ITEMS", 1000)
    tree = feature_neighbors(Y, 12)
    assert tree.shape == brute.shape == (1500, 12)
    assert (tree != np.arange(1500)[:, None]).all()
    assert np.mean((tree == brute).all(axis=1)) > 0.99
    assert all(set(a) == set(b) for a, b in zip(tree, brute, strict=True))
    monkeypatch.setattr(features, "KD_TREE_DIMS", 5)  # more dimensions than the tree is used for: brute force
    assert (feature_neighbors(Y, 12) == brute).all()


def test_features_are_tested_before_duels_start_from_them():
    X = _points()
    planner = make_planner("duels", len(X), features=X, random_state=0)
    picks = planner.neighbor_graph(1).neighbors[:, 0]
    Z = (X - X.mean(0)) / X.std(0)  # the features are read standardised
    D = np.linalg.norm(Z[:, None] - Z[None], axis=2)
    np.fill_diagonal(D, np.inf)
    assert (picks == D.argmin(axis=1)).all()
    # the first questions test the features: one of the head's nearest in them against an item outside
    n = len(X)
    near = planner.prior_.neighbors(planner.prior_.test_near)
    qs = planner.next_questions(n)
    assert all((a in near[h]) != (b in near[h]) for h, a, b in qs)
    oracle = TripletOracle.from_points(X, noise=0.1, model="human", lapse=0.05, random_state=1)
    while planner.prior_.testing:
        planner.observe(oracle.answer(qs))
        qs = planner.next_questions(n)
    # passed after one test per item (no random warm-up after them): duels among each head's nearest in the
    # features, a first fit once they had one per item
    assert planner.prior_.trusted and planner.n_fits_ == 0 and planner.answered_.max() == 1
    inside = [a in planner.cands_[h] and b in planner.cands_[h] for h, a, b in qs]
    assert np.mean(inside) > 0.8


def test_good_features_beat_none_at_a_small_budget():
    X = _points()
    n = len(X)
    F = features_of_agreement(X, 0.8, random_state=0)
    with_f = _drive(make_planner("duels", n, features=F, random_state=0),
                    TripletOracle.from_points(X, noise=0.1, model="human", lapse=0.05, random_state=1), 5 * n)
    without = _drive(make_planner("duels", n, random_state=0),
                     TripletOracle.from_points(X, noise=0.1, model="human", lapse=0.05, random_state=1), 5 * n)
    a = _hit3(with_f.neighbor_graph(1).neighbors[:, 0], X)
    b = _hit3(without.neighbor_graph(1).neighbors[:, 0], X)
    assert a > b + 0.2


def test_noise_features_are_dropped_within_the_warm_up_and_cost_nothing():
    X = _points()
    n = len(X)
    oracle = TripletOracle.from_points(X, noise=0.1, model="human", lapse=0.05, random_state=1)
    planner = make_planner("duels", n, features=noise_features(n, 8, 3), random_state=0)
    first = None
    while planner.n_answers_ < 6 * n:
        qs = planner.next_questions(n)
        if first is None and planner.prior_.dropped_:
            first = planner.n_answers_
        planner.observe(oracle.answer(qs))
    assert first is not None and first <= 3 * n  # dropped within the warm-up a study without them spends
    assert planner.n_fits_ >= 1
    assert not planner.prior_.trusted
    assert planner.warmup_ == 3.0  # the random warm-up of a study without features
    progress = planner.progress()
    assert progress["features_used"] is False and 0.3 < progress["feature_agreement"] < 0.65


def test_failed_tests_leave_a_study_without_features(monkeypatch):
    # the tests of features that fail are the random warm-up of a study without them: with test questions
    # drawn as random triplets, the study asks exactly what one without features asks
    from engine.duels import priors

    def random_test(self, h, rng, taken):
        a, b = (int(x) for x in rng.choice(self.n_items - 1, size=2, replace=False))
        return (h, a + (a >= h), b + (b >= h))

    monkeypatch.setattr(priors.FeaturePrior, "test_question", random_test)
    X = _points()
    n = len(X)
    runs = []
    for features in (noise_features(n, 8, 3), None):
        planner = make_planner("duels", n, features=features, random_state=0)
        oracle = TripletOracle.from_points(X, noise=0.1, model="human", lapse=0.05, random_state=1)
        asked = []
        for _ in range(8):
            qs = planner.next_questions(n)
            asked.append(qs)
            planner.observe(oracle.answer(qs))
        runs.append((asked, planner.neighbor_graph(1).neighbors))
    assert runs[0][0] == runs[1][0]
    assert (runs[0][1] == runs[1][1]).all()


def test_state_round_trip_keeps_the_features_space():
    X = _points()
    n = len(X)
    planner = _drive(make_planner("duels", n, features=X, random_state=0),
                     TripletOracle.from_points(X, noise=0.1, model="human", lapse=0.05, random_state=1), 2 * n)
    state = planner.to_state()
    assert state["prior"]["space"].dtype == np.float32
    again = restore_planner(state)
    assert np.array_equal(again.prior_.space_, planner.prior_.space_)
    assert (again.neighbor_graph(2).neighbors == planner.neighbor_graph(2).neighbors).all()
    assert again.next_questions(30) == planner.next_questions(30)
    # a state without features has no prior key (states of studies without features are unchanged)
    assert "prior" not in make_planner("duels", n, random_state=0).to_state()


@pytest.mark.parametrize("kind", ["rank", "odd_one_out"])
def test_screens_of_duels_take_the_features(kind):
    X = _points()
    planner = make_planner("duels", len(X), question_kind=kind, features=X, random_state=0)
    assert planner.planner.prior_ is not None
    first = planner.planner.prior_.neighbors(1)[:, 0]
    screens = planner.next_questions(len(X))
    # (a head's first screen is random)
    D = np.linalg.norm(X[:, None] - X[None], axis=2)
    oracle = RankOracle(D, n_select=2, random_state=0) if kind == "rank" else OddOneOutOracle(D, random_state=0)
    planner.observe(oracle.answer(screens))
    screens = planner.next_questions(len(X))
    if kind == "rank":  # (head, references): the head's feature neighbour is shown
        shown = [first[h] in refs for h, refs in screens]
    else:  # (a, b, c): a head with its feature neighbour
        shown = [any(first[x] in q for x in q) for q in screens]
    assert np.mean(shown) > 0.8


def test_embeddings_take_features_and_place_unasked_items():
    X = _points()
    n = len(X)
    planner = make_planner("embedding", n, features=X, random_state=0)
    picks = planner.neighbor_graph(1).neighbors[:, 0]
    assert (picks >= 0).all()
    assert _hit3(picks, X) > 0.7  # (a 2-D start from 3-D features)
    assert "features" in planner.to_state()
    assert restore_planner(planner.to_state()).features_ is not None


def test_features_refused_by_learners_that_do_not_use_them():
    with pytest.raises(ValueError, match="does not use item features"):
        make_planner("random_triplets", 10, features=np.eye(10))
    with pytest.raises(ValueError, match="one row per item"):
        make_planner("duels", 10, features=np.eye(9))


def test_fit_with_features_learns_their_weights():
    # the truth is the first feature column alone; the other two are noise with 10x its spread
    rng = np.random.default_rng(0)
    n = 80
    truth = rng.normal(size=(n, 1))
    F = np.hstack([truth, 10 * rng.normal(size=(n, 2))])
    oracle = TripletOracle.from_points(truth, random_state=0)
    q = rng.integers(n, size=(3 * n, 3))
    q = q[(q[:, 0] != q[:, 1]) & (q[:, 0] != q[:, 2]) & (q[:, 1] != q[:, 2])]
    a = np.asarray(oracle.answer(q.tolist()))
    t = np.column_stack([a[:, 0], a[:, 3], np.where(a[:, 3] == a[:, 1], a[:, 2], a[:, 1])])
    # raw features: not standardised, so the noise columns dominate the start
    X = fit_embedding(t, n, dim=2, features=F, stiffness=2.0, random_state=0)
    assert triplet_agreement(F, np.abs(truth - truth.T)) < 0.6
    assert triplet_accuracy(X, t) > 0.85
    D = np.abs(truth - truth.T)
    assert triplet_agreement(X, D) > 0.8


def test_features_that_order_the_items_as_people_do_are_kept_where_near_answers_are_coin_flips():
    # items on a line, the feature their position; people cannot tell near items apart (a wide logistic):
    # the map of the features alone predicts fresh answers best and the graph keeps their order
    n = 40
    x = np.linspace(0.0, 1.0, n)[:, None]
    def run(features):
        oracle = TripletOracle.from_points(x, noise=0.05, model="human", lapse=0.1, random_state=1)
        return _drive(make_planner("duels", n, features=features, random_state=0), oracle, 8 * n)

    planner = run(x)
    assert planner.progress()["embedding_dim"] == 0  # the features' map (engine.duels.dims.FEATURE_MAP)
    adjacent = np.mean(np.abs(planner.neighbor_graph(1).neighbors[:, 0] - np.arange(n)) == 1)
    without = np.mean(np.abs(run(None).neighbor_graph(1).neighbors[:, 0] - np.arange(n)) == 1)
    assert adjacent > 0.8 and without < 0.5


def test_a_large_study_keeps_the_features_map_until_enough_answers_per_item(monkeypatch):
    from engine.duels import priors
    from engine.duels.dims import FEATURE_MAP, MAP_UNTIL

    X = _points()
    n = len(X)
    p = make_planner("duels", n, features=features_of_agreement(X, 0.8, random_state=0), random_state=0)
    dims = p._dims()
    p.prior_.decided_ = True  # trusted
    p.prior_.map_earned_ = True
    # a fit (2 dimensions) predicted 10,000 fresh answers far better than the map
    p.dim_compare_[:] = 0.0
    p.dim_compare_[1] = 10_000
    p.dim_compare_[0] = 6_000
    p.dim_compare_[0, dims.index(2)] = 7_000
    p.n_answers_ = 5 * n
    share = p.prior_.share
    assert not p.prior_.large and p.chosen_dim_ == 2  # a small study: the scores choose
    monkeypatch.setattr(priors, "LARGE_ITEMS", n - 1)  # this study of n items counts as large
    assert p.prior_.large and p.prior_.share > share
    assert p.chosen_dim_ == FEATURE_MAP  # a large one: the map, up to MAP_UNTIL answers per item
    assert p._dims_to_refit() == [dims.index(FEATURE_MAP)]  # ... the only dimension refitted
    p.n_answers_ = int(MAP_UNTIL * n)
    assert p.chosen_dim_ == 2  # then a fit that beats it by the margin
    p.dim_compare_[0, dims.index(2)] = 6_050  # ... and no fit that does not
    assert p.chosen_dim_ == FEATURE_MAP


def _large_study_driven(monkeypatch, n: int = 200):
    """A duels study of n items with features of agreement .8 that counts as large, driven 4 answers per item."""
    from engine.duels import priors

    X = _points(n)
    monkeypatch.setattr(priors, "LARGE_ITEMS", n - 1)  # this study counts as large
    p = make_planner("duels", n, features=features_of_agreement(X, 0.8, random_state=0), random_state=0)
    _drive(p, TripletOracle.from_points(X, noise=0.1, model="human", lapse=0.05, random_state=1), 4 * n)
    return p


def test_a_large_study_takes_its_shortlists_from_the_features(monkeypatch):
    from engine.duels import priors

    p = _large_study_driven(monkeypatch)
    n = p.n_items
    assert p.prior_.trusted and p.n_fits_ >= 2 and p._map_only()
    near = p.prior_.neighbors(p.prior_.widest)
    assert near.shape[1] == priors.LARGE_NEAR
    # every candidate is one of its head's nearest in the features (a fit's nearest would not be)
    assert all(set(row[row >= 0].tolist()) <= set(near[h].tolist()) for h, row in enumerate(p.cands_))
    monkeypatch.setattr(priors, "LARGE_ITEMS", n)  # the same study counted small: the fit's nearest come in
    p._shortlists_from_fit(p.n_answers_)
    assert not all(set(row[row >= 0].tolist()) <= set(near[h].tolist()) for h, row in enumerate(p.cands_))


def test_a_large_study_rebuilds_only_the_shortlists_that_lost_candidates(monkeypatch):
    import copy

    p = _large_study_driven(monkeypatch)
    assert p._map_only() and p._filled is not None
    for h in (3, 50, 51):  # candidates beaten for good since the last rebuild
        row = p.cands_[h]
        p._drop(h, np.concatenate([row[row != row[1]], [-1]]), row[1:2])
    full = copy.deepcopy(p)
    full._filled = None  # (as after a restore: every head rebuilt)
    assert p._heads_to_refill(p._target_size(), len(p._elimination_log())).tolist() == [3, 50, 51]
    p._shortlists_from_fit(p.n_answers_)
    full._shortlists_from_fit(full.n_answers_)
    assert np.array_equal(p.cands_, full.cands_)
    assert (p.cands_[[3, 50, 51]] >= 0).all()  # refilled from the features


def _noise_looks(prior, rng, share: float, looks: int = 30) -> bool | None:
    """Tests a feature neighbour wins with probability ``share``, looked at each time they grew by a quarter
    (the most looks ``judge`` allows): the first verdict (None: none in ``looks`` looks)."""
    from engine.duels import priors

    seen = 0
    for _ in range(looks):
        step = max(priors.TEST_MIN, int(np.ceil(seen * priors.TEST_GROWTH)))
        prior.tests_ += (rng.binomial(step, share), step)
        seen += step
        verdict = prior.judge(final=False)
        if verdict is not None:
            return verdict
    return None


def test_noise_is_trusted_at_most_alpha_of_the_time_over_all_looks():
    # z >= 2.0 at every look trusted noise in 6.7% of these runs (2 of 40 planner seeds at 10,000 items)
    from engine.duels import priors

    rng = np.random.default_rng(0)
    noise = [_noise_looks(priors.FeaturePrior(np.zeros((1000, 1), np.float32)), rng, 0.5) for _ in range(3000)]
    assert np.mean([v is True for v in noise]) <= 0.025  # (the looks' levels sum to TRUST_ALPHA)
    # features whose neighbour wins .73 of the tests (agreement .7 at 100 items) pass at the first look
    good = []
    for _ in range(200):
        prior = priors.FeaturePrior(np.zeros((1000, 1), np.float32))
        good.append(_noise_looks(prior, rng, 0.73, looks=1) is True)
    assert np.mean(good) > 0.95


def _contradicted(planner, X, Y, n_items: int, until: float) -> int | None:
    """Drive ``planner`` with answers from the points X until its features are trusted, then from the
    unrelated points Y up to ``until`` answers per item: the answers at which the features were dropped."""
    truth = TripletOracle.from_points(X, noise=0.1, model="human", lapse=0.05, random_state=1)
    other = TripletOracle.from_points(Y, noise=0.1, model="human", lapse=0.05, random_state=2)
    dropped = None
    while planner.n_answers_ < until * n_items and dropped is None:
        trusted = planner.prior_.trusted and planner.n_fits_ > 0
        planner.observe((other if trusted else truth).answer(planner.next_questions(n_items)))
        if planner.prior_.dropped_:
            dropped = planner.n_answers_
    return dropped


def test_trusted_features_the_answers_then_contradict_are_dropped():
    # once trusted the features are tested on (the random share of the questions): features that the answers
    # no longer bear out fall away, and the study goes on as one without them
    n = 60
    X = _points(n, 0)
    Y = X[np.random.default_rng(5).permutation(n)]  # the same points, the items shuffled among them
    planner = make_planner("duels", n, features=X, random_state=0)
    dropped = _contradicted(planner, X, Y, n, 60)
    assert dropped is not None
    assert not planner.prior_.trusted and planner.progress()["features_used"] is False
    # every fit made with the features went, with the dimensions' scores of those fits: at most the first fit
    # without them has been made since (the answers are past the warm-up), and nothing scored it yet
    fit = planner._s.fit
    assert fit.n_fits <= 1 and not fit.dim_scores.any() and not fit.dim_compare.any()
    oracle = TripletOracle.from_points(Y, noise=0.1, model="human", lapse=0.05, random_state=3)
    _drive(planner, oracle, 10 * n)
    assert planner.n_fits_ >= 1 and planner.chosen_dim_ != 0  # a fit, not the features' map


def test_a_large_study_whose_trusted_features_are_contradicted_leaves_their_map(monkeypatch):
    from engine.duels import priors
    from engine.duels.dims import FEATURE_MAP

    n = 200
    X = _points(n, 0)
    Y = X[np.random.default_rng(5).permutation(n)]  # the same points, the items shuffled among them
    monkeypatch.setattr(priors, "LARGE_ITEMS", n - 1)  # this study counts as large
    planner = make_planner("duels", n, features=features_of_agreement(X, 0.8, random_state=0), random_state=0)
    assert _contradicted(planner, X, Y, n, 40) is not None
    assert not planner._map_only()
    _drive(planner, TripletOracle.from_points(Y, noise=0.1, model="human", lapse=0.05, random_state=3), 10 * n)
    assert planner.n_fits_ >= 1 and planner.chosen_dim_ != FEATURE_MAP
    near = planner.prior_.neighbors(planner.prior_.widest)
    # the shortlists come from the fit, no longer from the features' nearest
    inside = np.mean([set(row[row >= 0].tolist()) <= set(near[h].tolist()) for h, row in enumerate(planner.cands_)])
    assert inside < 0.5


def _dist(X):
    return np.linalg.norm(X[:, None] - X[None], axis=2)


def test_trusted_features_the_answers_then_contradict_are_dropped_in_rank_screens():
    # a rank study asks no duels of its own: once trusted, the features are tested again on screens that lead
    # with a test question's two items, and fall away when the screens' answers no longer bear them out
    n = 60
    X = _points(n, 0)
    Y = X[np.random.default_rng(5).permutation(n)]
    planner = make_planner("duels", n, question_kind="rank", features=X, random_state=0)
    duels = planner.planner
    truth = RankOracle(_dist(X), scale=0.3, lapse=0.05, n_select=2, random_state=1)
    other = RankOracle(_dist(Y), scale=0.3, lapse=0.05, n_select=2, random_state=2)
    trusted_at = dropped = None
    for _ in range(120):  # up to 120 screens per item
        if trusted_at is None and duels.prior_.trusted and duels.n_fits_ > 0:
            trusted_at = duels.prior_.tests_.copy()
        planner.observe((other if trusted_at is not None else truth).answer(planner.next_questions(n)))
        if duels.prior_.dropped_:
            dropped = duels.n_answers_
            break
    assert trusted_at is not None and dropped is not None
    assert duels.prior_.tests_[1] > trusted_at[1]  # judged on test answers the screens gave after the trust
    assert planner.progress()["features_used"] is False



def test_weak_features_hold_the_fits_less_than_strong_ones():
    # Food-100's ingredients (the neighbour wins ~.57 of the tests) held at full stiffness cost hit@3 where they
    # were trusted; features as predictive as agreement .7 keep the full prior
    from engine.duels import fits, priors, refits

    prior = priors.FeaturePrior(np.zeros((100, 1), np.float32))
    assert prior.stiffness == priors.STIFFNESS  # (nothing tested yet)
    stiff = {}
    for share in (0.52, 0.57, 0.63, 0.73, 0.9):
        prior.tests_[:] = (share * 1000, 1000)
        stiff[share] = prior.stiffness
    assert stiff[0.73] == stiff[0.9] == priors.STIFFNESS
    assert priors.STIFFNESS * priors.STIFF_FLOOR == stiff[0.52] < stiff[0.57] < stiff[0.63] < priors.STIFFNESS
    # a refit of a trusted study takes the stiffness its features had when it started
    X = _points(60, 0)
    F = features_of_agreement(X, 0.6, random_state=0)
    planner = make_planner("duels", 60, features=F, random_state=0)
    _drive(planner, TripletOracle.from_points(X, noise=0.1, model="human", lapse=0.05, random_state=1), 6 * 60)
    assert planner.prior_.trusted and planner.n_fits_ >= 1
    s = planner._s
    s.fit.fit_job = {"dims": [], "triplets": int(len(s.duels.triplets)), "answers": 0, "seed": 1, "iterations": 0,
                     "stiffness": 0.5}
    task = refits.fit_task(s, planner._params_now(), [0])
    assert isinstance(task, fits.FitTask) and task.stiffness == 0.5
    del s.fit.fit_job["stiffness"]  # (a refit saved before the stiffness was kept: the full prior)
    assert refits.fit_task(s, planner._params_now(), [0]).stiffness == priors.STIFFNESS


def test_trusted_features_the_answers_then_contradict_are_dropped_where_duels_are_coin_flips(monkeypatch):
    # where near duels are coin flips most questions are exploring pairs; COIN_TESTS of the share that tests
    # trusted features elsewhere are still test questions there, and features the answers contradict fall away
    from engine.duels import questions

    assert questions.COIN_TESTS > 0
    n = 60
    X = _points(n, 0)
    Y = X[np.random.default_rng(5).permutation(n)]
    monkeypatch.setattr(questions, "coin_flips", lambda s: s.fit.embedding is not None)
    planner = make_planner("duels", n, features=X, random_state=0)
    assert _contradicted(planner, X, Y, n, 400) is not None
    assert not planner.prior_.trusted and planner.progress()["features_used"] is False
