"""Behaviour of SMERF distance trees and forests: the paper's Propositions 1–2 against scikit-learn's
trees, the split criterion with missing pairs, leaf-pair tables and their fallback, feature
importances on the §5.1 radial simulation, state and JSON export."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from engine.smerf import KIND, LEAF, SCHEMA_VERSION, DistanceForest, DistanceTree


# ----------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------
def ties_free_features(rng, n, p):
    # scikit-learn's trees work in float32: give both implementations the same numbers
    return rng.normal(size=(n, p)).astype(np.float32).astype(np.float64)


def class_data(seed, n, p=5):
    rng = np.random.default_rng(seed)
    X = ties_free_features(rng, n, p)
    c = (X[:, 0] + 0.5 * X[:, 1] + rng.normal(scale=0.7, size=n) > 0).astype(int) + (X[:, 2] > 1)
    return X, c, (c[:, None] != c[None, :]).astype(float)


def regression_data(seed, n, p=5):
    rng = np.random.default_rng(seed)
    X = ties_free_features(rng, n, p)
    y = X[:, 0] ** 2 + X[:, 1] + rng.normal(scale=0.3, size=n)
    return X, y, 0.5 * (y[:, None] - y[None, :]) ** 2


def our_node_members(tree: DistanceTree, X) -> list[frozenset]:
    """Training rows reaching each node, found by walking the thresholds (not via the tree's own apply)."""
    members = [frozenset()] * tree.node_count_

    def walk(v, rows):
        members[v] = frozenset(rows.tolist())
        if tree.feature_[v] != LEAF:
            left = X[rows, tree.feature_[v]] <= tree.threshold_[v]
            walk(tree.left_[v], rows[left])
            walk(tree.right_[v], rows[~left])

    walk(0, np.arange(len(X)))
    return members


def sklearn_node_members(model, X) -> list[frozenset]:
    path = model.decision_path(X).toarray().astype(bool)
    return [frozenset(np.flatnonzero(path[:, v]).tolist()) for v in range(path.shape[1])]


def sklearn_depths(model) -> np.ndarray:
    t = model.tree_
    depth = np.zeros(t.node_count, int)
    for v in range(t.node_count):  # preorder: parents come first
        for child in (t.children_left[v], t.children_right[v]):
            if child >= 0:
                depth[child] = depth[v] + 1
    return depth


def hierarchy(depths, members) -> set:
    """The tree as a set of (depth, rows) cells: equal sets = the same nested partitions of the
    training rows, whichever side a split calls left and whichever of two features that induce the
    same partition was used."""
    return set(zip(np.asarray(depths).tolist(), members, strict=True))


def compare_walk(ours: DistanceTree, model, X):
    """Walk both trees from the root while their cells agree.

    At every cell both hold, the split gains n·I(S) − n_L·I(S_L) − n_R·I(S_R) must be equal
    (the propositions), as must I itself. Where the two trees pick different partitions with the
    same gain (a tie, broken by scikit-learn's own random feature order) the walk stops there.
    Returns (cells compared, ties met).
    """
    t = model.tree_
    a, b = our_node_members(ours, X), sklearn_node_members(model, X)
    compared, ties = 0, 0
    stack = [(0, 0)]
    while stack:
        u, v = stack.pop()
        assert a[u] == b[v]
        assert ours.impurity_[u] == pytest.approx(t.impurity[v], rel=1e-9, abs=1e-12)
        compared += 1
        ours_leaf, sk_leaf = ours.feature_[u] == LEAF, t.children_left[v] < 0
        assert ours_leaf == sk_leaf, f"one tree stops at a cell of {len(a[u])} rows, the other splits it"
        if ours_leaf:
            continue
        kids = [t.children_left[v], t.children_right[v]]
        sk_gain = t.weighted_n_node_samples[v] * t.impurity[v] - sum(
            t.weighted_n_node_samples[k] * t.impurity[k] for k in kids)
        assert ours.gain_[u] == pytest.approx(sk_gain, rel=1e-9, abs=1e-9)
        mine = [ours.left_[u], ours.right_[u]]
        if {a[mine[0]], a[mine[1]]} != {b[kids[0]], b[kids[1]]}:
            ties += 1
            continue
        if a[mine[0]] != b[kids[0]]:
            kids = kids[::-1]
        stack.extend(zip(mine, kids, strict=True))
    return compared, ties


def unit_ball(rng, n, p):
    g = rng.normal(size=(n, p))
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    return g * rng.uniform(size=(n, 1)) ** (1.0 / p)


def radial_data(seed, n, p=20):
    """§5.1 Radial Distance: x uniform in the unit ball of R^20, z = (|x^(1:2)| − |x'^(1:2)|)²."""
    X = unit_ball(np.random.default_rng(seed), n, p)
    r = np.linalg.norm(X[:, :2], axis=1)
    return X, (r[:, None] - r[None, :]) ** 2


def with_missing(Z, share, seed):
    rng = np.random.default_rng(seed)
    drop = np.triu(rng.uniform(size=Z.shape) < share, 1)
    drop |= drop.T
    return np.where(drop, np.nan, Z)


def tree_all_features(**kwargs) -> DistanceTree:
    return DistanceTree(max_features=None, random_state=0, **kwargs)


# ----------------------------------------------------------------------------------------
# Propositions 1 and 2
# ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 3, 4])
def test_gini_distance_tree_partitions_like_sklearn_classification_tree_to_depth_3(seed):
    # Prop. 1: with z_ij = 1[c_i != c_j] and I the mean over all n² ordered pairs (diagonal
    # included), I(S) is the Gini impurity, so the trees split alike. These seeds have no tied
    # splits to depth 3 (elsewhere see the walk test below).
    X, c, Z = class_data(seed, n=200)
    model = DecisionTreeClassifier(criterion="gini", max_depth=3, random_state=0).fit(X, c)
    ours = tree_all_features(max_depth=3).fit(X, Z)
    assert hierarchy(ours.depth_, our_node_members(ours, X)) == hierarchy(sklearn_depths(model),
                                                                         sklearn_node_members(model, X))
    # the first split: same feature, same threshold position, the same samples go left
    assert ours.feature_[0] == model.tree_.feature[0]
    assert ours.threshold_[0] == pytest.approx(model.tree_.threshold[0], abs=1e-6)
    left_ours = X[:, ours.feature_[0]] <= ours.threshold_[0]
    sk_left = sklearn_node_members(model, X)[model.tree_.children_left[0]]
    assert set(np.flatnonzero(left_ours).tolist()) == sk_left
    assert ours.impurity_[0] == pytest.approx(1 - np.sum((np.bincount(c) / len(c)) ** 2))


@pytest.mark.parametrize("seed", range(6))
def test_gini_distance_tree_has_sklearns_gains_at_every_node_of_a_full_tree(seed):
    X, c, Z = class_data(seed, n=80, p=4)
    model = DecisionTreeClassifier(criterion="gini", random_state=0).fit(X, c)
    ours = tree_all_features().fit(X, Z)
    compared, ties = compare_walk(ours, model, X)
    assert compared >= 5 and ties <= 3


@pytest.mark.parametrize("seed", range(4))
def test_variance_distance_tree_equals_sklearn_regression_tree(seed):
    # Prop. 2: z_ij = ½(y_i − y_j)² makes I(S) the (biased) variance of y over S.
    X, y, Z = regression_data(seed, n=70)
    for depth in (3, None):
        model = DecisionTreeRegressor(criterion="squared_error", max_depth=depth, random_state=0).fit(X, y)
        ours = tree_all_features(max_depth=depth).fit(X, Z)
        assert ours.node_count_ == model.tree_.node_count
        assert hierarchy(ours.depth_, our_node_members(ours, X)) == hierarchy(sklearn_depths(model),
                                                                             sklearn_node_members(model, X))
        compared, ties = compare_walk(ours, model, X)
        assert ties == 0 and compared == ours.node_count_


def test_mean_over_distinct_pairs_would_not_reproduce_the_gini_tree():
    # Why the diagonal is in the mean: the mean over distinct pairs, n/(n-1) times the Gini
    # impurity, ranks splits differently. On x = 0..7 with these classes the best Gini split
    # puts 5 items left; the distinct-pair criterion would put 2.
    X = np.arange(8.0)[:, None]
    c = np.array([0, 0, 1, 0, 0, 1, 1, 0])
    Z = (c[:, None] != c[None, :]).astype(float)

    def distinct_pair_gain(t):
        def n_mean(s):
            k = len(s)
            return 0.0 if k < 2 else (s[:, None] != s[None, :]).sum() / (k - 1)
        return n_mean(c) - n_mean(c[:t]) - n_mean(c[t:])

    assert max(range(1, 8), key=distinct_pair_gain) == 2
    model = DecisionTreeClassifier(max_depth=1).fit(X, c)
    ours = tree_all_features(max_depth=1).fit(X, Z)
    assert model.tree_.threshold[0] == ours.threshold_[0] == 4.5


# ----------------------------------------------------------------------------------------
# the criterion with missing pairs and weights, against a literal evaluation
# ----------------------------------------------------------------------------------------
def literal_scaled_impurity(Z, w, rows, fallback):
    """n_S·I(S), read off the docstring literally: expand each item into w_i copies, the copies of
    one item at distance 0, unobserved pairs filled with the mean of the observed ones, then the
    mean over all ordered pairs (diagonal included) times the number of copies."""
    copies = np.repeat(rows, w[rows])
    M = Z[np.ix_(copies, copies)].copy()
    same = copies[:, None] == copies[None, :]
    M[same] = 0.0
    observed = ~np.isnan(M) & ~same
    m = M[observed].mean() if observed.any() else fallback
    M[np.isnan(M)] = m
    return len(copies) * M.mean(), m


def test_root_split_maximises_the_documented_gain_with_missing_pairs_and_bootstrap_weights():
    rng = np.random.default_rng(5)
    n, p = 24, 3
    X = rng.normal(size=(n, p))
    h = rng.normal(size=(n, 2))
    Z = with_missing(np.linalg.norm(h[:, None] - h[None], axis=2), 0.6, seed=1)
    w = rng.integers(0, 4, size=n)
    w[:2] = 1
    tree = tree_all_features(max_depth=1, min_samples_leaf=2).fit(X, Z, sample_weight=w)

    rows = np.flatnonzero(w > 0)
    parent, m_parent = literal_scaled_impurity(Z, w, rows, np.nan)
    best = (-np.inf, None)
    for f in range(p):
        values = np.unique(X[rows, f])
        for lo, hi in zip(values[:-1], values[1:], strict=True):
            left = rows[X[rows, f] <= (lo + hi) / 2]
            right = rows[X[rows, f] > (lo + hi) / 2]
            if min(len(left), len(right)) < 2:
                continue
            gain = parent - literal_scaled_impurity(Z, w, left, m_parent)[0] \
                - literal_scaled_impurity(Z, w, right, m_parent)[0]
            if gain > best[0]:
                best = (gain, set(left.tolist()))
    assert tree.gain_[0] == pytest.approx(best[0], rel=1e-10)
    chosen_left = set(rows[X[rows, tree.feature_[0]] <= tree.threshold_[0]].tolist())
    assert chosen_left == best[1]
    assert tree.weight_[0] == w.sum()
    assert tree.impurity_[0] * tree.weight_[0] == pytest.approx(parent)


def test_bootstrap_weights_equal_duplicated_items_at_distance_zero():
    rng = np.random.default_rng(2)
    n = 30
    X = rng.normal(size=(n, 3))
    h = rng.normal(size=n)
    # every pair observed: with missing pairs the duplicated version would also count the copies'
    # zeros in the observed mean, which bootstrap weights deliberately do not
    Z = np.abs(h[:, None] - h[None])
    w = rng.integers(1, 4, size=n)
    weighted = tree_all_features().fit(X, Z, sample_weight=w)
    copies = np.repeat(np.arange(n), w)
    Z_copies = Z[np.ix_(copies, copies)]
    Z_copies[copies[:, None] == copies[None, :]] = 0.0
    expanded = tree_all_features().fit(X[copies], Z_copies)
    X_new = rng.normal(size=(25, 3))
    np.testing.assert_allclose(weighted.predict(X_new, X), expanded.predict(X_new, X), rtol=1e-9, atol=1e-12)


def test_pair_weight_zero_is_an_unobserved_pair_and_a_constant_weight_changes_nothing():
    X, Z = radial_data(4, 50, p=4)
    drop = np.triu(np.random.default_rng(0).uniform(size=Z.shape) < 0.4, 1)
    drop |= drop.T
    X_new = unit_ball(np.random.default_rng(9), 20, 4)
    reference = DistanceForest(n_trees=5, random_state=1).fit(X, np.where(drop, np.nan, Z)).predict(X_new)
    zero_weight = DistanceForest(n_trees=5, random_state=1).fit(X, Z, pair_weight=np.where(drop, 0.0, 1.0))
    np.testing.assert_allclose(zero_weight.predict(X_new), reference, rtol=1e-9, atol=1e-12)
    constant = DistanceForest(n_trees=5, random_state=1).fit(X, np.where(drop, np.nan, Z),
                                                             pair_weight=np.full(Z.shape, 3.0))
    np.testing.assert_allclose(constant.predict(X_new), reference, rtol=1e-9, atol=1e-12)


def test_heavier_pairs_pull_the_leaf_distance_towards_them():
    X = np.array([[0.0], [1.0], [10.0], [11.0]])
    Z = np.array([[0, 1, 5, 7], [1, 0, 9, 5], [5, 9, 0, 1], [7, 5, 1, 0]], float)
    tree = tree_all_features(max_depth=1).fit(X, Z)
    assert tree.predict([[0.5]], [[10.5]])[0, 0] == pytest.approx((5 + 7 + 9 + 5) / 4)
    pw = np.ones((4, 4))
    pw[1, 2] = pw[2, 1] = 3.0
    tree = tree_all_features(max_depth=1).fit(X, Z, pair_weight=pw)
    assert tree.predict([[0.5]], [[10.5]])[0, 0] == pytest.approx((5 + 7 + 3 * 9 + 5) / 6)


# ----------------------------------------------------------------------------------------
# leaf-pair tables and prediction
# ----------------------------------------------------------------------------------------
def test_fully_grown_tree_reproduces_the_training_distances():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 4))
    Z = np.linalg.norm(X[:, None, :2] - X[None, :, :2], axis=2) ** 1.5
    tree = tree_all_features().fit(X, Z)
    assert tree.n_leaves_ == 40
    np.testing.assert_allclose(tree.predict(X), Z, atol=1e-12)


def test_leaf_pair_without_observed_pairs_takes_the_mean_across_its_lowest_common_split():
    X, Z = radial_data(1, 60, p=4)
    Zm = with_missing(Z, 0.7, seed=2)
    tree = tree_all_features().fit(X, Zm)
    members = our_node_members(tree, X)
    leaf_of = tree.apply(X)
    checked = 0
    for i, j in zip(*np.nonzero(np.triu(np.isnan(Zm), 1)), strict=True):
        a, b = leaf_of[i], leaf_of[j]
        rows_a = np.flatnonzero(leaf_of == a)
        rows_b = np.flatnonzero(leaf_of == b)
        if a == b or not np.isnan(Zm[np.ix_(rows_a, rows_b)]).all():
            continue
        lca = max((v for v in range(tree.node_count_) if i in members[v] and j in members[v]),
                  key=lambda v: tree.depth_[v])
        left = sorted(members[tree.left_[lca]])
        right = sorted(members[tree.right_[lca]])
        across = Zm[np.ix_(left, right)]
        if np.isnan(across).all():
            inside = Zm[np.ix_(sorted(members[lca]), sorted(members[lca]))]
            expected = np.nanmean(inside[~np.eye(len(inside), dtype=bool)])
        else:
            expected = np.nanmean(across)
        assert tree.predict(X[[i]], X[[j]])[0, 0] == pytest.approx(expected, rel=1e-12)
        checked += 1
    assert checked >= 10


def test_a_leaf_with_itself_is_the_leaf_mean_over_all_ordered_pairs():
    X, Z = radial_data(2, 80, p=4)
    tree = tree_all_features(min_samples_leaf=5).fit(X, Z)
    leaf_of = tree.apply(X)
    for a in range(tree.n_leaves_):
        rows = np.flatnonzero(leaf_of == a)
        assert tree.leaf_distances_[a, a] == pytest.approx(Z[np.ix_(rows, rows)].mean(), rel=1e-12)


def test_predictions_are_symmetric_and_pairs_agree_with_the_matrix():
    X, Z = radial_data(3, 60, p=5)
    forest = DistanceForest(n_trees=10, random_state=0).fit(X, with_missing(Z, 0.5, seed=4))
    rng = np.random.default_rng(1)
    A, B = unit_ball(rng, 15, 5), unit_ball(rng, 12, 5)
    P = forest.predict(A, B)
    assert P.shape == (15, 12)
    np.testing.assert_allclose(forest.predict(B, A), P.T)
    np.testing.assert_allclose(forest.predict(A), forest.predict(A).T)
    np.testing.assert_allclose(forest.predict_pairs(A[:12], B), np.diag(P[:12]))
    # Proxima's use: distances from newly added items to the study's items
    assert forest.predict(A, X).shape == (15, 60)
    assert np.all(np.isfinite(P)) and P.min() >= 0


def test_forest_prediction_is_the_mean_of_its_trees():
    X, Z = radial_data(5, 50, p=4)
    forest = DistanceForest(n_trees=7, random_state=3).fit(X, Z)
    A = unit_ball(np.random.default_rng(0), 9, 4)
    np.testing.assert_allclose(forest.predict(A, X), np.mean([t.predict(A, X) for t in forest.estimators_], axis=0))
    assert forest.apply(A).shape == (9, 7)


# ----------------------------------------------------------------------------------------
# feature importances
# ----------------------------------------------------------------------------------------
def test_radial_simulation_finds_the_first_two_features_most_important():
    # §5.1: only the first two of 20 features enter the distance
    X, Z = radial_data(0, 120)
    forest = DistanceForest(n_trees=60, random_state=0).fit(X, Z)
    imp = forest.feature_importances_
    assert set(np.argsort(-imp)[:2]) == {0, 1}
    assert imp.min() >= 0 and imp.sum() == pytest.approx(1.0)
    assert imp[:2].sum() > 2 * imp[2:].max() * 2


def test_radial_importances_survive_missing_pairs():
    X, Z = radial_data(1, 120)
    forest = DistanceForest(n_trees=60, random_state=0).fit(X, with_missing(Z, 0.7, seed=0))
    assert set(np.argsort(-forest.feature_importances_)[:2]) == {0, 1}


def test_importance_is_the_split_gain_over_the_root_weight():
    X, y, Z = regression_data(0, 50, p=3)
    tree = tree_all_features(max_depth=2).fit(X, Z)
    raw = np.zeros(3)
    for v in range(tree.node_count_):
        if tree.feature_[v] != LEAF:
            left, right = tree.left_[v], tree.right_[v]
            raw[tree.feature_[v]] += (tree.weight_[v] * tree.impurity_[v] - tree.weight_[left] * tree.impurity_[left]
                                      - tree.weight_[right] * tree.impurity_[right])
    np.testing.assert_allclose(tree.feature_importances_, raw / raw.sum())


def test_no_split_means_zero_importances():
    X = np.random.default_rng(0).normal(size=(10, 3))
    forest = DistanceForest(n_trees=3, random_state=0).fit(X, np.zeros((10, 10)))
    assert all(t.node_count_ == 1 for t in forest.estimators_)
    np.testing.assert_array_equal(forest.feature_importances_, np.zeros(3))
    np.testing.assert_array_equal(forest.predict(X), np.zeros((10, 10)))


# ----------------------------------------------------------------------------------------
# randomisation and parameters
# ----------------------------------------------------------------------------------------
def test_same_seed_same_forest_other_seed_other_forest():
    X, Z = radial_data(6, 40, p=6)
    a = DistanceForest(n_trees=4, random_state=11).fit(X, Z)
    b = DistanceForest(n_trees=4, random_state=11).fit(X, Z)
    c = DistanceForest(n_trees=4, random_state=12).fit(X, Z)
    assert a.to_state() == b.to_state()
    assert not np.allclose(a.predict(X), c.predict(X))


def test_max_samples_without_bootstrap_gives_each_tree_that_many_distinct_items():
    X, Z = radial_data(7, 40, p=3)
    forest = DistanceForest(n_trees=3, bootstrap=False, max_samples=0.5, random_state=0).fit(X, Z)
    for tree in forest.estimators_:
        assert tree.n_items_[0] == 20 and tree.weight_[0] == 20
    forest = DistanceForest(n_trees=3, bootstrap=True, max_samples=25, random_state=0).fit(X, Z)
    for tree in forest.estimators_:
        assert tree.weight_[0] == 25 and tree.n_items_[0] <= 25


def test_min_samples_leaf_and_max_depth_are_respected():
    X, Z = radial_data(8, 60, p=3)
    tree = DistanceTree(min_samples_leaf=7, max_depth=4, random_state=0).fit(X, Z)
    leaves = tree.feature_ == LEAF
    assert tree.n_items_[leaves].min() >= 7
    assert tree.depth_.max() <= 4


@pytest.mark.parametrize("kwargs", [
    {"n_trees": 0}, {"max_features": 0}, {"max_features": 1.5}, {"max_features": "all"},
    {"min_samples_leaf": 0}, {"max_depth": -1}, {"bootstrap": "yes"}, {"max_samples": 0.0},
    {"max_samples": True},
])
def test_bad_parameters_are_refused_at_fit(kwargs):
    X, Z = radial_data(0, 10, p=3)
    with pytest.raises(ValueError):
        DistanceForest(**kwargs).fit(X, Z)


def test_bad_inputs_are_refused():
    X, Z = radial_data(0, 10, p=3)
    forest = DistanceForest(n_trees=2, random_state=0)
    with pytest.raises(ValueError, match="not fitted"):
        forest.predict(X)
    bad = Z.copy()
    bad[0, 1] += 1.0
    with pytest.raises(ValueError, match="symmetric"):
        forest.fit(X, bad)
    half = Z.copy()
    half[0, 1] = np.nan
    with pytest.raises(ValueError, match="symmetric"):
        forest.fit(X, half)
    with pytest.raises(ValueError, match="inf"):
        forest.fit(X, np.where(np.eye(10, k=1) + np.eye(10, k=-1) > 0, np.inf, Z))
    with pytest.raises(ValueError, match="no observed pair"):
        forest.fit(X, np.full((10, 10), np.nan))
    with pytest.raises(ValueError, match="shape"):
        forest.fit(X, Z[:9, :9])
    with pytest.raises(ValueError, match="finite"):
        forest.fit(np.where(np.eye(10, 3) > 0, np.nan, X), Z)
    with pytest.raises(ValueError, match="pair_weight"):
        forest.fit(X, Z, pair_weight=-np.ones((10, 10)))
    with pytest.raises(ValueError, match="feature_names"):
        forest.fit(X, Z, feature_names=["a"])
    forest.fit(X, Z)
    with pytest.raises(ValueError, match="features"):
        forest.predict(X[:, :2])
    with pytest.raises(ValueError, match="same number of rows"):
        forest.predict_pairs(X, X[:3])


def test_the_diagonal_is_ignored():
    X, Z = radial_data(9, 30, p=3)
    Zd = Z.copy()
    np.fill_diagonal(Zd, np.nan)
    Ze = Z.copy()
    np.fill_diagonal(Ze, 5.0)
    ref = DistanceForest(n_trees=3, random_state=0).fit(X, Z).to_state()
    assert DistanceForest(n_trees=3, random_state=0).fit(X, Zd).to_state() == ref
    assert DistanceForest(n_trees=3, random_state=0).fit(X, Ze).to_state() == ref


# ----------------------------------------------------------------------------------------
# state and export
# ----------------------------------------------------------------------------------------
def json_round_trip(doc):
    return json.loads(json.dumps(doc, allow_nan=False))


@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(2, 25),
    p=st.integers(1, 4),
    missing=st.sampled_from([0.0, 0.5, 0.9]),
    n_trees=st.integers(1, 3),
    max_features=st.sampled_from([None, "sqrt", 2, 0.5]),
    min_samples_leaf=st.integers(1, 3),
    bootstrap=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
def test_state_round_trips_through_json_and_predicts_the_same(n, p, missing, n_trees, max_features,
                                                               min_samples_leaf, bootstrap, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    Z = np.abs(rng.normal(size=(n, n)))
    Z = with_missing(Z + Z.T, missing, seed)
    Z[0, 1] = Z[1, 0] = 1.0  # at least one observed pair
    forest = DistanceForest(n_trees=n_trees, max_features=max_features, min_samples_leaf=min_samples_leaf,
                            bootstrap=bootstrap, random_state=seed).fit(X, Z)
    state = forest.to_state()
    restored = DistanceForest.from_state(json_round_trip(state))
    assert restored.to_state() == state
    X_new = rng.normal(size=(7, p))
    np.testing.assert_array_equal(restored.predict(X_new, X), forest.predict(X_new, X))
    np.testing.assert_array_equal(restored.feature_importances_, forest.feature_importances_)
    from_json = DistanceForest.from_json(json_round_trip(forest.to_json()))
    np.testing.assert_array_equal(from_json.predict(X_new, X), forest.predict(X_new, X))
    np.testing.assert_array_equal(from_json.feature_importances_, forest.feature_importances_)
    assert from_json.to_state()["trees"] == state["trees"]


def test_unfitted_state_round_trips():
    forest = DistanceForest(n_trees=3, max_features=0.5, max_depth=4, random_state=5)
    restored = DistanceForest.from_state(json_round_trip(forest.to_state()))
    assert restored.to_state() == forest.to_state()
    tree = DistanceTree.from_state(json_round_trip(DistanceTree(max_depth=2).to_state()))
    assert tree.max_depth == 2


def test_tree_state_round_trips():
    X, Z = radial_data(10, 30, p=3)
    tree = DistanceTree(random_state=0).fit(X, with_missing(Z, 0.5, 1), feature_names=["a", "b", "c"])
    restored = DistanceTree.from_state(json_round_trip(tree.to_state()))
    np.testing.assert_array_equal(restored.predict(X), tree.predict(X))
    assert restored.feature_names_in_ == ["a", "b", "c"]


def test_json_export_describes_nodes_leaves_and_the_leaf_pair_table():
    X, Z = radial_data(11, 40, p=3)
    forest = DistanceForest(n_trees=2, random_state=0).fit(X, Z, feature_names=["r1", "r2", "noise"])
    doc = forest.to_json()
    text = json.dumps(doc, allow_nan=False)
    assert json.loads(text) == doc
    assert doc["schema_version"] == SCHEMA_VERSION == 1 and doc["kind"] == KIND == "distance_forest"
    assert doc["feature_names"] == ["r1", "r2", "noise"]
    assert doc["params"]["n_trees"] == 2 and len(doc["trees"]) == 2
    assert sum(doc["feature_importances"]) == pytest.approx(1.0)
    for entry, tree in zip(doc["trees"], forest.estimators_, strict=True):
        nodes = entry["nodes"]
        leaves = [nd for nd in nodes if "leaf" in nd]
        splits = [nd for nd in nodes if "children" in nd]
        assert len(leaves) == entry["n_leaves"] == tree.n_leaves_ and len(splits) == len(nodes) - len(leaves)
        assert all({"feature", "threshold", "gain"} <= set(nd) for nd in splits)
        table = entry["leaf_distances"]
        assert [len(row) for row in table] == list(range(entry["n_leaves"], 0, -1))
        a, b = 0, entry["n_leaves"] - 1
        assert table[a][b - a] == pytest.approx(tree.leaf_distances_[a, b])


def test_from_json_refuses_other_documents():
    X, Z = radial_data(12, 20, p=2)
    doc = DistanceForest(n_trees=1, random_state=0).fit(X, Z).to_json()
    with pytest.raises(ValueError, match="kind"):
        DistanceForest.from_json({**doc, "kind": "comparison_forest"})
    with pytest.raises(ValueError, match="schema_version"):
        DistanceForest.from_json({**doc, "schema_version": 99})
    broken = json_round_trip(doc)
    broken["trees"][0]["leaf_distances"] = broken["trees"][0]["leaf_distances"][1:]
    with pytest.raises(ValueError, match="leaf_distances"):
        DistanceForest.from_json(broken)
    with pytest.raises(ValueError, match="state is of ComparisonForest v1, not DistanceForest v"):
        DistanceForest.from_state({**DistanceForest().to_state(), "class": "ComparisonForest"})
