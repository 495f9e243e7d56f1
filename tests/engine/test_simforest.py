"""Behaviour of SimForest: fitting on (partly missing) similarities, prediction, export, and the
active planner that asks only the similarities its splits need."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from helpers import save_load
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.simforest import (
    KIND,
    LEAF,
    SCHEMA_VERSION,
    SPLIT,
    ActiveSimilarityForest,
    SimilarityForest,
    best_thresholds,
)


# -- data -------------------------------------------------------------------------------------
def blobs(n_per_class, n_classes=3, gap=8.0, seed=0):
    """Well separated Gaussian blobs in 2-D, labels 0..n_classes-1."""
    rng = np.random.default_rng(seed)
    centers = gap * np.c_[np.cos(2 * np.pi * np.arange(n_classes) / n_classes),
                          np.sin(2 * np.pi * np.arange(n_classes) / n_classes)]
    X = np.concatenate([rng.normal(c, 1.0, size=(n_per_class, 2)) for c in centers])
    y = np.repeat(np.arange(n_classes), n_per_class)
    order = rng.permutation(len(y))
    return X[order], y[order]


def rbf(A, B, gamma=0.1):
    return np.exp(-gamma * ((A[:, None, :] - B[None, :, :]) ** 2).sum(axis=-1))


def euclidean(A, B):
    return np.sqrt(((A[:, None, :] - B[None, :, :]) ** 2).sum(axis=-1))


def hide(S, share, seed, symmetric=True):
    """A copy of S with about ``share`` of its off-diagonal entries set to NaN."""
    rng = np.random.default_rng(seed)
    mask = rng.random(S.shape) < share
    if symmetric:
        mask = np.triu(mask, 1)
        mask |= mask.T
    out = S.copy()
    out[mask] = np.nan
    return out


def line_study(n, seed):
    """Items on a line, similarity 1 - |x_i - x_j|, classes of 8 neighbouring items: a tree
    needs about log2(n / 8) levels, so a build costs about n log n ratings."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, n)
    labels = np.argsort(np.argsort(x)) // 8
    return 1 - np.abs(x[:, None] - x[None, :]), labels


def rate(S, noise=0.0, rng=None):
    """A simulated rater: the similarity of the pair, plus Gaussian noise clipped to [0, 1]."""
    def answer(questions):
        out = []
        for i, j in questions:
            s = S[i, j] + (rng.normal(0, noise) if noise else 0.0)
            out.append((i, j, float(min(1.0, max(0.0, s)))))
        return out
    return answer


def build(planner, answer, batch=10_000, max_rounds=1000):
    for _ in range(max_rounds):
        if planner.done:
            return planner
        questions = planner.next_questions(batch)
        assert questions, "planner not done but has nothing to ask"
        planner.observe(answer(questions))
    raise AssertionError("planner did not finish")


# -- the split kernel -------------------------------------------------------------------------
def test_best_threshold_separates_two_classes_and_ignores_missing_projections():
    proj = np.array([0.1, 0.2, np.nan, 0.8, 0.9, 0.85])
    label = np.array([0, 0, 1, 1, 1, 1])
    gini, thr = best_thresholds(np.zeros(6, np.int64), proj, label, 1, 2)
    assert gini[0] == 0.0
    assert 0.2 < thr[0] <= 0.8


def test_best_threshold_needs_two_distinct_projections():
    gini, thr = best_thresholds(np.array([0, 0, 1]), np.array([0.5, 0.5, 0.3]), np.array([0, 1, 0]), 3, 2)
    assert np.isinf(gini).all() and np.isnan(thr).all()


def test_best_threshold_matches_brute_force():
    rng = np.random.default_rng(3)
    proj = np.round(rng.normal(size=40), 1)
    label = rng.integers(0, 3, 40)
    gini, thr = best_thresholds(np.zeros(40, np.int64), proj, label, 1, 3)

    def g(mask):
        counts = np.bincount(label[mask], minlength=3)
        return 1 - ((counts / counts.sum()) ** 2).sum()

    best = min((mask.sum() * g(mask) + (~mask).sum() * g(~mask)) / 40
               for a in np.unique(proj)[1:] for mask in [proj < a])
    assert gini[0] == pytest.approx(best)
    left = proj < thr[0]
    assert (left.sum() * g(left) + (~left).sum() * g(~left)) / 40 == pytest.approx(best)


# -- fitting and predicting -------------------------------------------------------------------
def test_separable_classes_fully_observed_are_classified_perfectly():
    X, y = blobs(40, seed=1)
    X_test, y_test = blobs(20, seed=2)
    forest = SimilarityForest(n_trees=20, random_state=0).fit(rbf(X, X), y)
    assert np.array_equal(forest.predict(rbf(X_test, X)), y_test)
    assert np.array_equal(forest.predict(rbf(X, X)), y)
    assert forest.classes_ == [0, 1, 2] and forest.n_trees_ == 20
    assert forest.done_


def test_distance_metric_classifies_separable_classes_perfectly():
    X, y = blobs(40, seed=3)
    X_test, y_test = blobs(20, seed=4)
    forest = SimilarityForest(n_trees=20, metric="distance", random_state=0).fit(euclidean(X, X), y)
    assert np.array_equal(forest.predict(euclidean(X_test, X)), y_test)


def test_leaves_are_pure_when_fully_observed_and_every_split_follows_its_threshold():
    X, y = blobs(30, seed=5)
    S = rbf(X, X)
    forest = SimilarityForest(n_trees=5, random_state=1).fit(S, y)
    leaves = np.flatnonzero(forest.node_status_ == LEAF)
    assert (np.count_nonzero(forest.node_counts_[leaves], axis=1) == 1).all()
    # fully observed: every object ends in a leaf
    assert (forest.node_status_[forest.item_node_] == LEAF).all()
    for t in range(5):
        for k in range(len(y)):
            v = forest.item_node_[t, k]
            while forest.node_parent_[v] != -1:
                parent = forest.node_parent_[v]
                i, j = forest.node_pair_[parent]
                side = int(S[k, j] - S[k, i] >= forest.node_threshold_[parent])
                assert forest.node_children_[parent, side] == v
                v = parent


def test_split_pairs_have_different_labels():
    X, y = blobs(30, seed=6)
    forest = SimilarityForest(n_trees=5, n_pairs=2, random_state=2).fit(rbf(X, X), y)
    split = np.flatnonzero(forest.node_status_ == SPLIT)
    pairs = forest.node_pair_[split]
    assert (y[pairs[:, 0]] != y[pairs[:, 1]]).all()


def test_fifteen_percent_missing_still_builds_and_predicts_well():
    X, y = blobs(60, seed=7)
    X_test, y_test = blobs(30, seed=8)
    S = hide(rbf(X, X), 0.15, seed=9)
    S_test = hide(rbf(X_test, X), 0.15, seed=10, symmetric=False)
    forest = SimilarityForest(n_trees=30, random_state=3).fit(S, y)
    assert forest.done_
    # some objects stayed at internal nodes for good, as the paper describes
    assert (forest.node_status_[forest.item_node_] == SPLIT).any()
    pred = forest.predict(S_test)
    assert pred.shape == y_test.shape
    assert np.mean(pred == y_test) >= 0.9
    proba = forest.predict_proba(S_test)
    assert proba.shape == (len(y_test), 3) and np.allclose(proba.sum(axis=1), 1)


def test_missing_similarity_stops_prediction_at_the_node_with_its_majority_label():
    X, y = blobs(30, n_classes=2, seed=11)
    y = np.where(np.arange(len(y)) < 5, 1 - y, y)  # a little label noise keeps the root impure
    forest = SimilarityForest(n_trees=3, random_state=4).fit(rbf(X, X), y)
    row = np.full((1, len(y)), np.nan)
    assert np.array_equal(forest.apply(row), [[0, 1, 2]])  # every tree stops at its root
    majority = np.bincount(y).argmax()
    assert forest.predict(row)[0] == majority
    assert forest.node_labels()[0] == majority


def test_objects_with_a_missing_similarity_stay_at_the_node():
    X, y = blobs(20, n_classes=2, seed=12)
    S = rbf(X, X)
    forest = SimilarityForest(n_trees=1, random_state=5).fit(S, y)
    i, j = forest.node_pair_[0]
    k = next(k for k in range(len(y)) if k not in (i, j))
    S[k, i] = S[i, k] = np.nan
    again = SimilarityForest(n_trees=1, random_state=5).fit(S, y)
    assert tuple(again.node_pair_[0]) == (i, j)
    assert again.item_node_[0, k] == 0


def test_string_labels_max_depth_and_min_samples_split():
    X, y = blobs(20, seed=13)
    names = np.array(["cat", "dog", "eel"])[y]
    forest = SimilarityForest(n_trees=4, max_depth=1, random_state=6).fit(rbf(X, X), list(names))
    assert forest.classes_ == ["cat", "dog", "eel"]
    assert forest.depth() <= 1
    assert set(forest.predict(rbf(X, X)).tolist()) <= {"cat", "dog", "eel"}
    stump = SimilarityForest(n_trees=2, min_samples_split=len(y) + 1, random_state=6).fit(rbf(X, X), names)
    assert stump.n_nodes_ == 2 and (stump.node_status_ == LEAF).all()


def test_same_seed_same_forest_and_trees_differ():
    X, y = blobs(20, seed=14)
    S = rbf(X, X)
    a = SimilarityForest(n_trees=3, random_state=7).fit(S, y)
    b = SimilarityForest(n_trees=3, random_state=7).fit(S, y)
    assert a.to_json() == b.to_json()
    assert len({tuple(a.node_pair_[t]) for t in range(3)}) > 1


def test_fit_and_predict_reject_bad_input():
    X, y = blobs(10, seed=15)
    S = rbf(X, X)
    with pytest.raises(ValueError, match="square"):
        SimilarityForest().fit(S[:, :-1], y)
    with pytest.raises(ValueError, match="labels"):
        SimilarityForest().fit(S, y[:-1])
    with pytest.raises(ValueError, match="infinite"):
        SimilarityForest().fit(np.where(S > 0.5, np.inf, S), y)
    with pytest.raises(ValueError, match="non-negative"):
        SimilarityForest(metric="distance").fit(-S, y)
    with pytest.raises(ValueError, match="metric"):
        SimilarityForest(metric="cosine").fit(S, y)
    with pytest.raises(ValueError, match="n_pairs"):
        SimilarityForest(n_pairs=0).fit(S, y)
    with pytest.raises(ValueError, match="not fitted"):
        SimilarityForest().predict(S)
    forest = SimilarityForest(n_trees=2, random_state=0).fit(S, y)
    with pytest.raises(ValueError, match="column per training object"):
        forest.predict(S[:, :-1])


# -- state and export -------------------------------------------------------------------------
def test_forest_state_round_trip_predicts_the_same():
    X, y = blobs(20, seed=16)
    S = hide(rbf(X, X), 0.15, seed=17)
    forest = SimilarityForest(n_trees=4, n_pairs=2, random_state=8).fit(S, y)
    state = forest.to_state()
    assert state["class"] == "SimilarityForest" and state["version"] == 1
    copy = SimilarityForest.from_state(save_load(state))
    assert np.array_equal(copy.predict_proba(S), forest.predict_proba(S))
    assert copy.to_json() == forest.to_json()
    with pytest.raises(ValueError):
        SimilarityForest.from_state({**state, "version": 99})
    with pytest.raises(ValueError):
        SimilarityForest.from_state({**state, "class": "ComparisonForest"})


def test_json_export_has_schema_version_and_round_trips():
    X, y = blobs(20, seed=18)
    S = hide(rbf(X, X), 0.15, seed=19)
    forest = SimilarityForest(n_trees=3, random_state=9).fit(S, np.array(["a", "b", "c"])[y])
    doc = json.loads(json.dumps(forest.to_json()))
    assert doc["schema_version"] == SCHEMA_VERSION and doc["kind"] == KIND
    assert doc["params"]["n_trees"] == 3 and doc["classes"] == ["a", "b", "c"]
    for tree in doc["trees"]:
        assert sorted(i for node in tree["nodes"] for i in node["members"]) == list(range(len(y)))
        root = tree["nodes"][0]
        assert root["size"] == len(y) and root["label"] in ("a", "b", "c")
        for node in tree["nodes"]:
            assert (node["pair"] is None) == (node["status"] == "leaf")
    again = SimilarityForest.from_json(doc)
    assert again.to_json() == doc
    assert np.array_equal(again.predict_proba(S), forest.predict_proba(S))
    with pytest.raises(ValueError):
        SimilarityForest.from_json({**doc, "schema_version": SCHEMA_VERSION + 1})


# -- active mode ------------------------------------------------------------------------------
def test_active_build_asks_order_n_log_n_distinct_pairs():
    shares, ratios = [], []
    for n in (64, 128, 256):
        S, labels = line_study(n, seed=n)
        planner = build(ActiveSimilarityForest(n, labels, n_trees=2, random_state=n), rate(S))
        asked = planner.progress()["pairs_rated"]
        assert planner.progress()["questions_asked"] == asked  # noiseless, no pair asked twice
        ratios.append(asked / (n * math.log2(n)))
        shares.append(asked / (n * (n - 1) / 2))
    assert max(ratios) <= 3.0, ratios  # two trees: about 2 n log2 n distinct pairs, bounded
    assert shares[0] > shares[1] > shares[2], shares  # n^2 growth would keep the share flat
    assert shares[2] < 0.2, shares


def test_active_forest_classifies_separable_classes_perfectly():
    X, y = blobs(30, seed=20)
    X_test, y_test = blobs(15, seed=21)
    S = rbf(X, X)
    planner = build(ActiveSimilarityForest(len(y), y, n_trees=10, random_state=0), rate(S))
    assert planner.done
    assert np.array_equal(planner.predict(rbf(X_test, X)), y_test)
    forest = planner.result()
    assert isinstance(forest, SimilarityForest) and forest.done_
    # a test item needs only the similarities to the pivots on its paths
    pivots = np.unique(forest.node_pair_[forest.node_status_ == SPLIT])
    sparse = np.full((len(y_test), len(y)), np.nan)
    sparse[:, pivots] = rbf(X_test, X)[:, pivots]
    assert np.array_equal(forest.predict(sparse), y_test)


def test_active_splits_match_an_offline_fit_on_the_gathered_similarities():
    S, y = line_study(60, seed=22)
    planner = build(ActiveSimilarityForest(len(y), y, n_trees=3, random_state=1), rate(S))
    forest = planner.result()
    gathered = planner.similarities()
    rated = np.isfinite(gathered)
    assert rated.sum() < rated.size
    assert np.allclose(gathered[rated], S[rated])
    # every split's projections were computed from rated pairs (and self-similarity 1) only:
    # training objects routed through the gathered matrix, or the true one, land where the
    # planner put them
    assert np.array_equal(forest.apply(gathered), forest.item_node_.T)
    assert np.array_equal(forest.apply(S), forest.item_node_.T)


def test_noiseless_active_build_equals_the_offline_fit_on_the_full_matrix():
    S, y = line_study(50, seed=23)
    planner = build(ActiveSimilarityForest(50, y, n_trees=4, n_pairs=2, random_state=11), rate(S))
    offline = SimilarityForest(n_trees=4, n_pairs=2, random_state=11).fit(S, y)
    assert planner.result().to_json() == offline.to_json()


def test_next_questions_never_repeat_an_outstanding_pair_and_forget_releases_them():
    S, labels = line_study(40, seed=1)
    planner = ActiveSimilarityForest(40, labels, n_trees=3, random_state=2)
    first = planner.next_questions(30)
    assert len(first) == 30
    second = planner.next_questions(10_000)
    keys = [frozenset(q) for q in first + second]
    assert len(keys) == len(set(keys))
    assert planner.next_questions(10) == []  # everything wanted is outstanding
    assert planner.progress()["pending_questions"] == len(keys)
    assert planner.forget(first[:5] + [(0, 1) if frozenset((0, 1)) not in keys else (38, 39)]) == 5
    again = planner.next_questions(100)
    assert {frozenset(q) for q in again} == {frozenset(q) for q in first[:5]}


def test_repeats_average_several_ratings_per_pair():
    S, labels = line_study(30, seed=3)
    planner = ActiveSimilarityForest(30, labels, n_trees=1, repeats=2, random_state=3)
    questions = planner.next_questions(1000)
    planner.observe([(i, j, 0.2) for i, j in questions])
    assert planner.progress()["nodes_split"] == 0  # one rating each is not enough
    again = planner.next_questions(1000)
    assert {frozenset(q) for q in again} == {frozenset(q) for q in questions}
    planner.observe([(j, i, 0.6) for i, j in again])  # either order is the same pair
    i, j = questions[0]
    assert planner.similarities()[i, j] == pytest.approx(0.4)
    assert planner.progress()["nodes_split"] + planner.progress()["leaves"] >= 1


def test_a_rating_serves_every_tree_that_needs_it():
    S, labels = line_study(60, seed=4)
    planner = build(ActiveSimilarityForest(60, labels, n_trees=8, random_state=4), rate(S))
    p = planner.progress()
    needed = 0  # ratings the trees would need if each asked its own
    forest = planner.result()
    for v in np.flatnonzero(forest.node_status_ == SPLIT):
        needed += 2 * forest.node_size_[v] - 2
    assert p["pairs_rated"] < needed
    assert p["questions_asked"] == p["pairs_rated"]


def test_build_does_not_depend_on_batch_size_or_answer_order():
    S, labels = line_study(50, seed=5)
    docs = []
    for batch, reverse in ((10_000, False), (7, True), (50, False)):
        planner = ActiveSimilarityForest(50, labels, n_trees=3, random_state=6)
        answer = rate(S)
        while not planner.done:
            answers = answer(planner.next_questions(batch))
            planner.observe(answers[::-1] if reverse else answers)
        doc = planner.result().to_json()
        docs.append(doc["trees"])
    assert docs[0] == docs[1] == docs[2]


def test_unrequested_ratings_are_kept_and_counted():
    S, labels = line_study(30, seed=6)
    planner = ActiveSimilarityForest(30, labels, n_trees=2, random_state=7)
    asked = {frozenset(q) for q in planner.next_questions(1000)}
    extra = next((i, j) for i in range(30) for j in range(i + 1, 30) if frozenset((i, j)) not in asked)
    planner.observe([(*extra, 0.5)])
    assert planner.progress()["unrequested_answers"] == 1
    assert planner.similarities()[extra] == 0.5


def test_active_mode_rejects_bad_input_and_changes_nothing():
    S, labels = line_study(20, seed=7)
    with pytest.raises(ValueError, match="labels"):
        ActiveSimilarityForest(20, labels[:-1])
    with pytest.raises(ValueError, match="n_items"):
        ActiveSimilarityForest(1, [0])
    with pytest.raises(ValueError, match="repeats"):
        ActiveSimilarityForest(20, labels, repeats=0)
    planner = ActiveSimilarityForest(20, labels, n_trees=2, random_state=8)
    (i, j), *_ = planner.next_questions(5)
    before = planner.to_state()
    for bad in ([(i, j, 1.5)], [(i, j, -0.1)], [(i, j, float("nan"))], [(i, 20, 0.5)], [(-1, j, 0.5)],
                [(i, i, 0.5)], [(i, j)], [(i, j, "0.5")], [(0.5, j, 0.5)]):
        with pytest.raises(ValueError):
            planner.observe([(i, j, 0.5), *bad])
    with pytest.raises(ValueError, match="outside"):
        planner.forget([(0, 99)])
    with pytest.raises(ValueError, match="budget"):
        planner.next_questions(-1)
    after = planner.to_state()
    assert json.dumps({k: v for k, v in before.items() if not isinstance(v, np.ndarray)}) == \
        json.dumps({k: v for k, v in after.items() if not isinstance(v, np.ndarray)})
    assert all(np.array_equal(before[k], after[k], equal_nan=v.dtype.kind == "f")
               for k, v in before.items() if isinstance(v, np.ndarray))


def test_progress_and_export_of_the_planner():
    S, labels = line_study(40, seed=9)
    planner = ActiveSimilarityForest(40, [f"c{v}" for v in labels], n_trees=3, random_state=9)
    planner.observe(rate(S)(planner.next_questions(50)))
    p = planner.progress()
    json.dumps(p)
    assert p["questions_asked"] == 50 and p["answers_received"] == 50 and not p["done"]
    assert p["all_pairs"] == 40 * 39 // 2
    mid = json.loads(json.dumps(planner.to_json()))
    assert mid["schema_version"] == SCHEMA_VERSION and not mid["done"]
    assert {node["status"] for tree in mid["trees"] for node in tree["nodes"]} & {"waiting"}
    build(planner, rate(S))
    doc = json.loads(json.dumps(planner.to_json()))
    assert doc["done"] and doc["questions"]["pairs_rated"] == planner.progress()["pairs_rated"]
    assert planner.progress()["trees_done"] == 3
    assert np.array_equal(SimilarityForest.from_json(doc).predict(S), planner.predict(S))


def test_planner_state_round_trip_mid_build_continues_identically():
    S, labels = line_study(60, seed=10)
    rng = np.random.default_rng(0)
    planner = ActiveSimilarityForest(60, labels, n_trees=4, n_pairs=2, repeats=2, random_state=10)
    answer = rate(S, noise=0.1, rng=rng)
    for _ in range(3):
        planner.observe(answer(planner.next_questions(150)))
    pending = planner.next_questions(20)  # outstanding while the state is saved
    state = planner.to_state()
    assert state["class"] == "ActiveSimilarityForest" and state["version"] == 1
    copy = ActiveSimilarityForest.from_state(save_load(state))
    assert copy.progress() == planner.progress()
    late = answer(pending)
    planner.observe(late)
    copy.observe(late)
    for _ in range(200):
        if planner.done:
            break
        questions = planner.next_questions(97)
        assert questions
        assert copy.next_questions(97) == questions
        answers = answer(questions)
        planner.observe(answers)
        copy.observe(answers)
    assert copy.done and copy.to_json() == planner.to_json()
    with pytest.raises(ValueError):
        ActiveSimilarityForest.from_state({**state, "version": 2})


@settings(max_examples=20, deadline=None)
@given(n=st.integers(2, 30), trees=st.integers(1, 3), pairs=st.integers(1, 2), repeats=st.integers(1, 2),
       classes=st.integers(1, 4), steps=st.integers(0, 5), budget=st.integers(1, 60), seed=st.integers(0, 2**31),
       expire=st.booleans())
def test_planner_state_round_trip_property(n, trees, pairs, repeats, classes, steps, budget, seed, expire):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, n)
    S = 1 - np.abs(x[:, None] - x[None, :])
    labels = rng.integers(0, classes, n)
    planner = ActiveSimilarityForest(n, labels, n_trees=trees, n_pairs=pairs, repeats=repeats, random_state=seed)
    answer = rate(S, noise=0.05, rng=rng)
    for step in range(steps):
        questions = planner.next_questions(budget)
        if expire and step % 2:
            planner.forget(questions[: len(questions) // 2])
            questions = questions[len(questions) // 2:]
        planner.observe(answer(questions))
    copy = ActiveSimilarityForest.from_state(save_load(planner.to_state()))
    assert copy.done == planner.done
    assert copy.progress() == planner.progress()
    questions = planner.next_questions(budget)
    assert copy.next_questions(budget) == questions
    answers = answer(questions)
    planner.observe(answers)
    copy.observe(answers)
    assert copy.to_json() == planner.to_json()
