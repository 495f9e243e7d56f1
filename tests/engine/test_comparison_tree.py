"""Behaviour of comparison-tree forests: building, voting, pending questions, state, routing."""
from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import save_load
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.distance import cdist

from engine.comparison_tree import (
    LEAF,
    SPLIT,
    ComparisonForest,
    VoteRule,
    run_with_oracle,
)
from engine.forest_export import SCHEMA_VERSION, forest_from_json, forest_to_json
from engine.graph import NO_NEIGHBOR
from simulation.oracles import TripletOracle


def points(n, d=2, seed=0):
    return np.random.default_rng(seed).normal(size=(n, d))


def built_forest(X, n_trees=5, seed=1, **kwargs):
    forest = ComparisonForest(len(X), n_trees=n_trees, random_state=seed, **kwargs)
    run_with_oracle(forest, TripletOracle.from_points(X), batch=10_000)
    return forest


def subtree_items(res, tree, node):
    """Items whose leaf lies below ``node`` in ``tree``."""
    items = []
    for item, leaf in enumerate(res.item_node[tree]):
        v = leaf
        while v != -1:
            if v == node:
                items.append(item)
                break
            v = res.node_parent[v]
    return np.array(items)


# -- building with a noise-free Euclidean oracle --------------------------------------------
def test_every_tree_partitions_the_items_into_leaves():
    X = points(200)
    forest = built_forest(X, leaf_size=3)
    res = forest.result()
    assert forest.done and res.done
    for t in range(5):
        leaves = res.leaves(t)
        assert set(np.unique(res.item_node[t])) == set(leaves.tolist())
        sizes = [len(res.members(v)) for v in leaves]
        assert sum(sizes) == 200 and max(sizes) <= 3 and min(sizes) >= 1


def test_each_split_agrees_with_true_distances_to_the_pivots():
    X = points(120)
    D = cdist(X, X)
    res = built_forest(X, n_trees=3).result()
    for v in np.flatnonzero(res.node_status == SPLIT):
        t = res.node_tree[v]
        p1, p2 = res.node_pivots[v]
        c1, c2 = res.node_children[v]
        left, right = subtree_items(res, t, c1), subtree_items(res, t, c2)
        assert p1 in left and p2 in right
        assert np.all(D[left, p1] <= D[left, p2])
        assert np.all(D[right, p2] < D[right, p1])
        assert len(left) + len(right) == res.node_size[v]


def test_depth_is_logarithmic_on_random_data():
    X = points(1000, d=3)
    res = built_forest(X, n_trees=4).result()
    assert res.depth() <= 4 * np.log2(1000)


def test_a_tree_costs_about_n_log_n_triplets():
    n = 500
    forest = built_forest(points(n), n_trees=2)
    per_tree = forest.progress()["answers_counted"] / 2
    assert n * np.log2(n) / 2 < per_tree < 3 * n * np.log2(n)


def test_same_seed_same_forest_and_trees_differ():
    X = points(100)
    a, b = built_forest(X, seed=7).result(), built_forest(X, seed=7).result()
    assert np.array_equal(a.node_pivots, b.node_pivots)
    assert not np.array_equal(a.item_node[0], a.item_node[1])


def test_tree_does_not_depend_on_answer_order():
    X = points(80)
    oracle = TripletOracle.from_points(X)
    small = ComparisonForest(80, n_trees=2, random_state=3)
    run_with_oracle(small, oracle, batch=7)
    big = built_forest(X, n_trees=2, seed=3)
    assert tree_shapes(small.result()) == tree_shapes(big.result())  # node ids may differ


def tree_shapes(res):
    """Per tree: the set of pivot pairs and the set of leaves (as member sets)."""
    shapes = []
    for t in range(res.n_trees):
        split = np.flatnonzero((res.node_tree == t) & (res.node_status == SPLIT))
        leaves = {frozenset(res.members(v).tolist()) for v in res.leaves(t)}
        shapes.append(({tuple(res.node_pivots[v]) for v in split}, leaves))
    return shapes


def test_supervised_pivots_have_different_labels_whenever_the_node_has_two():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(150, 2))
    labels = (rng.random(150) < 0.08).astype(int)  # rare class: random re-draws often fail
    res = built_forest(X, n_trees=6, labels=labels).result()
    checked = 0
    for v in np.flatnonzero(res.node_status == SPLIT):
        members = subtree_items(res, res.node_tree[v], v)
        if len(set(labels[members])) == 2:
            p1, p2 = res.node_pivots[v]
            assert labels[p1] != labels[p2]
            checked += 1
    assert checked > 10


def test_string_labels_are_supported():
    X = np.r_[points(30, seed=1) - 5, points(30, seed=2) + 5]
    labels = np.array(["cat"] * 30 + ["dog"] * 30)
    forest = built_forest(X, labels=labels)
    search = forest.route(3)
    run_with_oracle(search, TripletOracle.from_points(X))
    assert search.result().label == "cat"


# -- planning: budget, pending, late, duplicates, forget -------------------------------------
def test_next_questions_respects_budget_and_counts_pending():
    forest = ComparisonForest(50, n_trees=3, random_state=0)
    first = forest.next_questions(20)
    assert len(first) == 20
    assert all(type(v) is int for q in first for v in q)
    rest = forest.next_questions(10_000)
    canon = {(x, min(a, b), max(a, b)) for x, a, b in first + rest}
    assert len(canon) == len(first) + len(rest)  # nothing handed out twice while pending
    assert forest.next_questions(10) == []
    assert forest.progress()["pending_questions"] == len(first) + len(rest)


def test_forget_releases_expired_questions():
    forest = ComparisonForest(30, n_trees=2, random_state=0)
    qs = forest.next_questions(5)
    forest.next_questions(10_000)
    assert forest.forget(qs[:2]) == 2
    again = forest.next_questions(10_000)
    assert sorted(again) == sorted(qs[:2]) or {(x, min(a, b), max(a, b)) for x, a, b in again} == {
        (x, min(a, b), max(a, b)) for x, a, b in qs[:2]}
    assert forest.forget([(0, 1, 2)]) in (0, 1)  # not pending: ignored


def test_late_and_duplicate_answers_are_ignored_and_counted():
    X = points(40)
    oracle = TripletOracle.from_points(X)
    forest = ComparisonForest(40, n_trees=2, random_state=0)
    qs = forest.next_questions(10_000)
    answers = oracle.answer(qs)
    forest.observe(answers + answers[:5])  # duplicates in the same batch
    forest.observe(answers[:3])  # late, in a later batch
    progress = forest.progress()
    assert progress["late_answers"] == 8
    assert progress["answers_counted"] == len(answers)


def test_answers_with_pivots_swapped_are_the_same_triplet():
    X = points(40)
    D = cdist(X, X)
    forest = ComparisonForest(40, n_trees=1, random_state=0)
    x, a, b = forest.next_questions(1)[0]
    winner = a if D[x, a] <= D[x, b] else b
    forest.observe([(x, b, a, winner)])
    assert forest.progress()["answers_counted"] == 1


def test_observe_rejects_bad_answers_and_changes_nothing():
    forest = ComparisonForest(20, n_trees=2, random_state=0)
    x, a, b = forest.next_questions(1)[0]
    before = forest.to_state()
    bad_batches = [
        [(x, a, b, 99)],  # winner out of range
        [(x, a, b, x)],  # winner not a pivot
        [(x, a, a, a)],  # pivots equal
        [(25, a, b, a)],  # item out of range
        [(x, a, b, a), (-1, a, b, a)],  # one bad row spoils the batch
        [(x, a, b)],  # wrong width
        [(x, a, b, 1.5)],  # not integers
    ]
    never = next((q, p, r) for q in range(20) for p in range(20) for r in range(20)
                 if len({q, p, r}) == 3 and (q, min(p, r), max(p, r)) != (x, min(a, b), max(a, b)))
    bad_batches.append([(*never, never[1])])
    for batch in bad_batches:
        with pytest.raises(ValueError):
            forest.observe(batch)
    after = forest.to_state()
    for key, value in before.items():
        assert np.array_equal(value, after[key]) if isinstance(value, np.ndarray) else value == after[key], key


def test_bad_parameters_raise_value_error():
    for kwargs in ({"n_trees": 0}, {"leaf_size": 0}, {"redundancy": 2}, {"redundancy": "often"},
                   {"labels": [1, 2]}, {"values": [np.nan] * 10}):
        with pytest.raises(ValueError):
            ComparisonForest(10, **kwargs).next_questions(1)
    with pytest.raises(ValueError):
        ComparisonForest(10).next_questions(-1)


# -- noisy raters: redundancy --------------------------------------------------------------
def test_redundancy_three_asks_two_then_a_third_only_on_disagreement():
    forest = ComparisonForest(10, n_trees=1, redundancy=3, random_state=0)
    qs = forest.next_questions(1000)
    canon = [(x, min(a, b), max(a, b)) for x, a, b in qs]
    assert len(qs) == 2 * len(set(canon))  # two copies of every triplet
    (x, a, b), (y, c, d) = qs[0], qs[1]
    assert (x, min(a, b)) == (y, min(c, d))
    forest.observe([(x, a, b, a), (y, c, d, a)])  # the two copies agree: decided
    forest.observe([(x, a, b, b)])  # a late third answer changes nothing
    assert forest.progress()["late_answers"] == 1
    (u, e, f), (v, g, h) = qs[2], qs[3]
    forest.observe([(u, e, f, e), (v, g, h, f)])  # disagree
    third = [q for q in forest.next_questions(1000) if (q[0], min(q[1:]), max(q[1:])) == (u, min(e, f), max(e, f))]
    assert len(third) == 1


def test_vote_rules():
    three = VoteRule(3)
    assert three.decided(np.array([2, 1, 1, 2]), np.array([0, 1, 0, 2])).tolist() == [True, False, False, False]
    assert three.needed(np.array([0, 1, 1, 2]), np.array([0, 1, 0, 2])).tolist() == [2, 1, 1, 1]
    ada = VoteRule("adaptive")
    assert ada.decided(np.array([2, 2, 3, 3]), np.array([0, 1, 2, 3])).tolist() == [True, False, True, False]
    assert ada.needed(np.array([0, 1, 2]), np.array([0, 1, 1])).tolist() == [2, 2, 1]


@pytest.mark.parametrize("redundancy", [1, 3, "adaptive"])
def test_majority_voting_builds_with_noisy_raters(redundancy):
    X = points(60)
    oracle = TripletOracle.from_points(X, noise=0.2, random_state=0)
    forest = ComparisonForest(60, n_trees=2, redundancy=redundancy, random_state=0)
    asked = run_with_oracle(forest, oracle, batch=50)
    assert forest.done
    assert forest.progress()["answers_counted"] <= asked


def test_redundancy_reduces_wrong_splits():
    X = points(200)
    D = cdist(X, X)
    wrong = {}
    for r in (1, 5):
        oracle = TripletOracle.from_points(X, noise=0.25, random_state=1)
        res = built_forest_with(X, oracle, redundancy=r)
        count = 0
        for t in range(res.n_trees):
            node = res.item_node[t].copy()
            items = np.arange(len(X))
            while True:  # walk every item up to the root, checking each split it went through
                up = res.node_parent[node]
                has = up >= 0
                if not has.any():
                    break
                v, c, x = up[has], node[has], items[has]
                side = (res.node_children[v, 1] == c).astype(int)
                mine = res.node_pivots[v, side]
                other = res.node_pivots[v, 1 - side]
                count += np.sum((D[x, mine] > D[x, other]) & (x != mine))
                node, items = v, x
        wrong[r] = count
    assert wrong[5] < wrong[1] / 2


def built_forest_with(X, oracle, **kwargs):
    forest = ComparisonForest(len(X), n_trees=4, random_state=0, **kwargs)
    run_with_oracle(forest, oracle, batch=1000)
    return forest.result()


# -- state ----------------------------------------------------------------------------------
def test_state_round_trip_mid_build_gives_identical_next_questions():
    X = points(90)
    oracle = TripletOracle.from_points(X, noise=0.1, random_state=0)
    forest = ComparisonForest(90, n_trees=4, redundancy=3, labels=np.arange(90) % 3, random_state=5)
    for _ in range(4):
        forest.observe(oracle.answer(forest.next_questions(60)))
    forest.next_questions(17)  # some pending
    state = forest.to_state()
    assert state["class"] == "ComparisonForest" and isinstance(state["version"], int)
    assert all(isinstance(v, np.ndarray) or v is None or isinstance(v, (int, str, bool, float, list, dict))
               for v in state.values())
    copy = ComparisonForest.from_state(save_load(state))
    assert copy.next_questions(40) == forest.next_questions(40)
    answers = oracle.answer(forest.next_questions(1000))
    copy.next_questions(1000)
    forest.observe(answers)
    copy.observe(answers)
    assert copy.next_questions(500) == forest.next_questions(500)
    assert copy.progress() == forest.progress()


@settings(max_examples=15, deadline=None)
@given(n=st.integers(3, 40), trees=st.integers(1, 4), leaf=st.integers(1, 4), steps=st.integers(0, 6),
       budget=st.integers(1, 50), seed=st.integers(0, 2**31), redundancy=st.sampled_from([1, 3, "adaptive"]))
def test_state_round_trip_property(n, trees, leaf, steps, budget, seed, redundancy):
    X = points(n, seed=seed % 1000)
    oracle = TripletOracle.from_points(X, noise=0.2, random_state=seed)
    forest = ComparisonForest(n, n_trees=trees, leaf_size=leaf, redundancy=redundancy, random_state=seed)
    for _ in range(steps):
        forest.observe(oracle.answer(forest.next_questions(budget)))
    copy = ComparisonForest.from_state(save_load(forest.to_state()))
    assert copy.done == forest.done
    assert copy.next_questions(budget) == forest.next_questions(budget)
    assert np.array_equal(copy.result().item_node, forest.result().item_node)


def test_from_state_rejects_other_classes_and_versions():
    state = ComparisonForest(10, random_state=0).to_state()
    with pytest.raises(ValueError):
        ComparisonForest.from_state({**state, "version": 999})
    with pytest.raises(ValueError):
        ComparisonForest.from_state({**state, "class": "ANNTri"})


# -- JSON export ------------------------------------------------------------------------------
def test_json_export_has_schema_version_and_round_trips():
    X = points(60)
    forest = built_forest(X, n_trees=3, labels=np.arange(60) % 2, values=np.linspace(0, 1, 60))
    doc = json.loads(json.dumps(forest_to_json(forest)))
    assert doc["schema_version"] == SCHEMA_VERSION and doc["kind"] == "comparison_forest"
    assert len(doc["trees"]) == 3
    root = doc["trees"][0]["nodes"][0]
    assert root["id"] == 0 and root["parent"] is None and len(root["pivots"]) == 2
    members = sorted(i for node in doc["trees"][1]["nodes"] if node["status"] == "leaf" for i in node["members"])
    assert members == list(range(60))
    again = forest_from_json(doc)
    assert forest_to_json(again) == doc
    assert tree_shapes(again.result()) == tree_shapes(forest.result())


def test_json_export_mid_build_resumes_the_same_tree():
    X = points(50)
    oracle = TripletOracle.from_points(X)
    forest = ComparisonForest(50, n_trees=2, random_state=4)
    for _ in range(3):
        forest.observe(oracle.answer(forest.next_questions(30)))
    resumed = forest_from_json(json.loads(json.dumps(forest.to_json())))
    run_with_oracle(resumed, oracle)
    run_with_oracle(forest, oracle)
    assert tree_shapes(resumed.result()) == tree_shapes(forest.result())


def test_json_export_rejects_unknown_schema():
    doc = forest_to_json(built_forest(points(20), n_trees=1))
    with pytest.raises(ValueError):
        forest_from_json({**doc, "schema_version": SCHEMA_VERSION + 1})


# -- routing, prediction, neighbours ----------------------------------------------------------
def test_route_of_a_training_item_reaches_a_leaf_containing_it():
    X = points(150)
    forest = built_forest(X, leaf_size=4)
    oracle = TripletOracle.from_points(X)
    for item in (0, 17, 149):
        search = forest.route(item)
        run_with_oracle(search, oracle)
        result = search.result()
        assert result.done
        for leaf in result.leaves:
            assert forest.result().node_status[leaf] == LEAF
            assert item in forest.leaf_members(leaf)


def test_route_of_a_new_item_asks_one_triplet_per_level():
    X = points(201)
    train = X[:200]
    forest = built_forest(train, n_trees=4)
    oracle = TripletOracle.from_points(X)  # item 200 is held out: the oracle knows it, the forest does not
    search = forest.route(200, refine=0)
    first = search.next_questions(1000)
    assert len(first) <= 4 and all(q[0] == 200 for q in first)
    assert search.next_questions(1000) == []  # pending
    search.observe(oracle.answer(first))
    run_with_oracle(search, oracle)
    res = search.result()
    depth = forest.result().node_depth[res.leaves].sum()
    assert search.progress()["answers_counted"] <= depth
    with pytest.raises(ValueError):
        search.observe([(199, 0, 1, 0)])  # answers must be about the routed item


def test_route_neighbours_find_the_true_nearest_neighbour_mostly():
    X = points(401, d=2, seed=3)
    forest = built_forest(X[:400], n_trees=10)
    oracle = TripletOracle.from_points(X)
    search = forest.route(400, refine=8)
    run_with_oracle(search, oracle)
    nn = int(np.argmin(cdist(X[400:], X[:400])[0]))
    res = search.result()
    assert nn in res.neighbors[:3].tolist()
    assert res.counts[0] >= 1


def test_classification_on_a_separable_toy_set_is_perfect():
    rng = np.random.default_rng(0)
    centres = np.array([[0, 0], [10, 0], [0, 10]])
    y = np.repeat([0, 1, 2], 40)
    X = centres[y] + rng.normal(size=(120, 2))
    test = centres[[0, 1, 2, 0, 1, 2]] + rng.normal(size=(6, 2))
    full = np.r_[X, test]
    oracle = TripletOracle.from_points(full)
    for labels in (y, None):
        forest = ComparisonForest(120, n_trees=10, labels=y if labels is not None else None, random_state=0)
        if labels is None:
            forest = ComparisonForest(120, n_trees=10, random_state=0, values=y.astype(float))
        run_with_oracle(forest, oracle)
        for j in range(6):
            search = forest.route(120 + j, refine=0)
            run_with_oracle(search, oracle)
            res = search.result()
            if labels is not None:
                assert res.label == j % 3
            else:
                assert res.value == pytest.approx(j % 3)


def test_vote_by_trees_and_labels_for_training_items():
    X = np.r_[points(30, seed=1) - 6, points(30, seed=2) + 6]
    y = np.repeat([4, 9], 30)
    forest = built_forest(X, labels=y)
    oracle = TripletOracle.from_points(X)
    for vote in ("pooled", "trees"):
        search = forest.route(45, vote=vote)
        run_with_oracle(search, oracle)
        assert search.result().label == 9


def test_regression_recovers_a_step_function():
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 1, size=300)
    y = np.where(x < 0.5, 0.0, 1.0)
    grid = np.array([0.1, 0.3, 0.45, 0.55, 0.7, 0.9])
    full = np.r_[x, grid][:, None]
    forest = ComparisonForest(300, n_trees=20, values=y, random_state=0)
    oracle = TripletOracle.from_points(full)
    run_with_oracle(forest, oracle)
    for j, g in enumerate(grid):
        search = forest.route(300 + j)
        run_with_oracle(search, oracle)
        assert abs(search.result().value - (g >= 0.5)) < 0.2


def test_route_state_round_trip():
    X = points(101)
    forest = built_forest(X[:100])
    oracle = TripletOracle.from_points(X)
    search = forest.route(100)
    search.observe(oracle.answer(search.next_questions(3)))
    copy = type(search).from_state(save_load(search.to_state()), forest)
    assert copy.next_questions(10) == search.next_questions(10)


def test_route_needs_a_built_forest():
    forest = ComparisonForest(10, random_state=0)
    with pytest.raises(ValueError):
        forest.route(11)


def test_neighbor_graph_finds_mostly_true_neighbours():
    X = points(300)
    forest = built_forest(X, n_trees=20)
    graph = forest.neighbor_graph(k=3)
    assert graph.neighbors.shape == (300, 3)
    D = cdist(X, X)
    np.fill_diagonal(D, np.inf)
    true_nn = D.argmin(axis=1)
    assert np.mean(graph.neighbors[:, 0] == true_nn) > 0.5
    assert np.all(graph.neighbors != np.arange(300)[:, None])
    found = graph.neighbors != NO_NEIGHBOR
    assert np.all(np.isnan(graph.estimates) == ~found)  # an estimate for every neighbour, none without
    assert np.all((graph.estimates[found] >= 0) & (graph.estimates[found] < 1))
    assert np.all(np.diff(np.where(found, graph.estimates, np.inf), axis=1) >= 0)  # closest first


def test_progress_reports_the_build():
    forest = ComparisonForest(64, n_trees=3, random_state=0)
    p = forest.progress()
    assert p["trees_built"] == 0 and min(p["nodes_pending"]) >= 1 and p["nodes_built"] == [0, 0, 0]
    json.dumps(p)
    run_with_oracle(forest, TripletOracle.from_points(points(64)))
    p = forest.progress()
    assert p["trees_built"] == 3 and p["done"] and p["pending_questions"] == 0 and min(p["depth"]) >= 6
