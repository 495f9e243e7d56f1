"""Behaviour of similarity TreeRank: symmetry, LeafRank splits, ROC analysis, pair labels, state,
JSON export, and convergence to the optimal ROC on the paper's synthetic ranking tree."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import roc_auc_score
from sklearn.metrics import roc_curve as sk_roc_curve

from engine.treerank import (
    NO_NODE,
    GroundTruthTree,
    RankingForest,
    SimilarityTreeRank,
    auc,
    pairs_from_labels,
    pairs_from_ratings,
    roc_curve,
    symmetric_features,
    tpr_at_fpr,
)


def blobs(n=120, p=4, seed=0, classes=3):
    """Items in ``classes`` Gaussian blobs: (features, labels)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, size=n)
    centres = rng.normal(scale=2.0, size=(classes, p))
    return centres[labels] + rng.normal(size=(n, p)), labels


def fitted_tree(seed=0, **kwargs):
    X, labels = blobs(seed=seed)
    pairs, y = pairs_from_labels(labels, n_pairs=3000, random_state=seed)
    params = {"max_depth": 4, "leafrank_depth": 2, "min_samples_leaf": 5, "random_state": seed} | kwargs
    return SimilarityTreeRank(**params).fit_pairs(X, pairs, y), X


def fitted_forest(seed=0, **kwargs):
    X, labels = blobs(seed=seed)
    pairs, y = pairs_from_labels(labels, n_pairs=3000, random_state=seed)
    params = {"n_trees": 5, "max_depth": 4, "random_state": seed} | kwargs
    return RankingForest(**params).fit_pairs(X, pairs, y), X


def json_round_trip(doc: dict) -> dict:
    return json.loads(json.dumps(doc))


# ----------------------------------------------------------------------------------------
# symmetry
# ----------------------------------------------------------------------------------------
@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), p=st.integers(1, 5), scale=st.sampled_from([1e-3, 1.0, 1e6]))
def test_symmetric_features_are_bitwise_equal_in_either_order(seed, p, scale):
    rng = np.random.default_rng(seed)
    X1, X2 = rng.normal(scale=scale, size=(50, p)), rng.normal(scale=scale, size=(50, p))
    F = symmetric_features(X1, X2)
    assert F.shape == (50, 2 * p)
    assert np.array_equal(F, symmetric_features(X2, X1))
    assert np.allclose(F[:, :p], (X1 + X2) / np.sqrt(2)) and np.allclose(F[:, p:], np.abs(X1 - X2) / np.sqrt(2))


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10**6), forest=st.booleans())
def test_scores_are_exactly_symmetric(seed, forest):
    model, X = fitted_forest(seed, n_trees=3) if forest else fitted_tree(seed)
    rng = np.random.default_rng(seed + 1)
    i, j = rng.integers(0, len(X), size=(2, 400))
    A = np.r_[X[i], rng.normal(scale=3.0, size=(100, X.shape[1]))]
    B = np.r_[X[j], rng.normal(scale=3.0, size=(100, X.shape[1]))]
    s = model.score(A, B)
    assert np.array_equal(s, model.score(B, A))
    assert np.unique(s).size > 1  # not a constant: the symmetry is not vacuous
    M = model.score_matrix(X[:40], X[:40])
    assert np.array_equal(M, M.T)


@pytest.mark.parametrize("forest", [False, True])
def test_score_matrix_equals_score_of_every_pair(forest):
    model, X = fitted_forest(3) if forest else fitted_tree(3)
    XA, XB = X[:17], X[20:51]
    M = model.score_matrix(XA, XB)
    assert M.shape == (17, 31)
    ia, ib = np.meshgrid(np.arange(17), np.arange(31), indexing="ij")
    assert np.array_equal(M.ravel(), model.score(XA[ia.ravel()], XB[ib.ravel()]))


@pytest.mark.parametrize("forest", [False, True])
def test_scores_do_not_depend_on_how_many_pairs_are_scored_at_once(forest, monkeypatch):
    import engine.treerank as treerank

    model, X = fitted_forest(4) if forest else fitted_tree(4)
    i = np.arange(len(X))
    whole = model.score(X, X[i[::-1]])
    monkeypatch.setattr(treerank, "CHUNK_ELEMENTS", 3 * 2 * X.shape[1])  # blocks of 3 pairs
    assert np.array_equal(model.score(X, X[i[::-1]]), whole)
    assert np.array_equal(model.score_matrix(X[:9], X[:9]).diagonal(), model.score(X[:9], X[:9]))


# ----------------------------------------------------------------------------------------
# tree structure and LeafRank
# ----------------------------------------------------------------------------------------
def test_leaf_scores_follow_the_left_to_right_order():
    tree, X = fitted_tree(1, max_depth=4)
    assert 1 < tree.n_leaves_ <= 2**4
    leaves = tree.leaves_
    scores = tree.node_score_[leaves]
    assert np.all(np.diff(scores) < 0)  # rank order, most alike first, no ties between leaves
    j, k = tree.node_depth_[leaves], tree.node_position_[leaves]
    assert np.array_equal(scores, 2.0**4 * (1 - k / 2.0**j))
    # the leaf intervals [k / 2^j, (k + 1) / 2^j) tile [0, 1) left to right
    starts, ends = k / 2.0**j, (k + 1) / 2.0**j
    assert starts[0] == 0 and ends[-1] == 1 and np.array_equal(starts[1:], ends[:-1])
    # a pair scores its leaf's value
    i = np.arange(60)
    assert np.array_equal(tree.score(X[i], X[i[::-1]]), tree.node_score_[tree.apply(X[i], X[i[::-1]])])


def test_every_split_sends_the_richer_share_of_alike_pairs_left():
    tree, _ = fitted_tree(2, max_depth=5, leafrank_depth=3)
    inner = np.flatnonzero(tree.node_left_ != NO_NODE)
    assert inner.size >= 3
    share = tree.node_n_alike_ / (tree.node_n_alike_ + tree.node_n_other_)
    for v in inner:
        left, right = tree.node_left_[v], tree.node_right_[v]
        assert share[left] > share[v] > share[right]
        assert tree.node_n_alike_[left] + tree.node_n_alike_[right] == tree.node_n_alike_[v]
        assert tree.node_n_other_[left] + tree.node_n_other_[right] == tree.node_n_other_[v]


def test_cells_respect_min_samples_leaf_and_max_depth():
    tree, _ = fitted_tree(4, max_depth=6, min_samples_leaf=40)
    sizes = tree.node_n_alike_ + tree.node_n_other_
    assert sizes.min() >= 40
    assert tree.node_depth_.max() <= 6
    assert tree.n_leaves_ <= 2**6


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_stump_leafrank_maximises_the_empirical_auc_increment(seed):
    """With one threshold per split, step (3) of the algorithm is solved exactly: the root split
    maximises TPR - FPR within the cell over every symmetric feature and threshold, even with
    few alike pairs (an unweighted classifier would call everything 'not alike')."""
    rng = np.random.default_rng(seed)
    X1 = rng.integers(0, 6, size=(300, 3)).astype(float)
    X2 = rng.integers(0, 6, size=(300, 3)).astype(float)
    near = np.abs(X1 - X2).sum(axis=1)
    y = np.where(rng.random(300) < 0.6 * np.exp(-near / 3), 1, -1)
    assert 0.05 < np.mean(y > 0) < 0.3
    tree = SimilarityTreeRank(max_depth=1, leafrank_depth=1, min_samples_leaf=1).fit(X1, X2, y)
    F, alike = symmetric_features(X1, X2), y > 0
    best = 0.0
    for f in F.T:
        for t in np.unique(f):
            left = f <= t
            best = max(best, abs(left[alike].mean() - left[~alike].mean()))
    fpr, tpr = tree.training_roc()
    assert tree.n_leaves_ == 2
    assert tpr[1] - fpr[1] == pytest.approx(best, abs=1e-12)


def test_fit_pairs_equals_fit_on_the_gathered_rows():
    X, labels = blobs(seed=5)
    pairs, y = pairs_from_labels(labels, n_pairs=1500, random_state=5)
    a = SimilarityTreeRank(random_state=0).fit_pairs(X, pairs, y)
    b = SimilarityTreeRank(random_state=0).fit(X[pairs[:, 0]], X[pairs[:, 1]], y)
    assert a.to_state() == b.to_state()


def test_learns_a_similarity_the_euclidean_distance_misses():
    """Classes differ in one feature; nine loud irrelevant features drown Euclidean distance."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, size=300)
    X = np.c_[labels * 3.0 + rng.normal(scale=0.5, size=300), rng.normal(scale=5.0, size=(300, 9))]
    train, test = np.arange(200), np.arange(200, 300)
    pairs, y = pairs_from_labels(labels[train], random_state=0)
    tree = SimilarityTreeRank(max_depth=3).fit_pairs(X[train], pairs, y)
    tp, ty = pairs_from_labels(labels[test])
    A, B = X[test][tp[:, 0]], X[test][tp[:, 1]]
    assert auc(-np.linalg.norm(A - B, axis=1), ty) < 0.65
    assert auc(tree.score(A, B), ty) > 0.9


# ----------------------------------------------------------------------------------------
# the paper's synthetic case: learned AUC approaches the optimum
# ----------------------------------------------------------------------------------------
def test_ground_truth_tree_has_the_optimal_auc_it_claims():
    gt = GroundTruthTree(n_features=3, depth=3, delta=0.05, random_state=7)
    X1, X2, y = gt.sample(60_000, random_state=1)
    assert auc(gt.optimal_score(X1, X2), y) == pytest.approx(gt.optimal_auc(), abs=0.004)
    fpr, tpr = gt.optimal_roc()
    assert fpr[-1] == pytest.approx(1) and tpr[-1] == pytest.approx(1)
    # alike pairs land in the cells with the planned probabilities
    cells = gt.cell(X1[y > 0], X2[y > 0])
    assert np.allclose(np.bincount(cells, minlength=8) / cells.size, gt.alike_mass_, atol=0.01)


def test_learned_auc_approaches_the_optimal_auc_as_pairs_grow():
    gt = GroundTruthTree(n_features=3, depth=3, delta=0.05, random_state=7)
    Xt1, Xt2, yt = gt.sample(40_000, random_state=100)
    best = gt.optimal_auc()
    gaps = []
    for n in (250, 1000, 4000, 16_000):
        runs = []
        for seed in range(3):
            X1, X2, y = gt.sample(n, random_state=seed)
            tree = SimilarityTreeRank(max_depth=3, leafrank_depth=2, random_state=seed).fit(X1, X2, y)
            runs.append(best - auc(tree.score(Xt1, Xt2), yt))
        gaps.append(float(np.mean(runs)))
    assert all(later < earlier for earlier, later in zip(gaps, gaps[1:], strict=False)), gaps
    assert gaps[0] > 0.02, gaps  # the small sample is far enough from optimal for the curve to mean something
    assert gaps[-1] < 0.01, gaps
    forest = RankingForest(n_trees=10, max_depth=3, random_state=0).fit(*gt.sample(4000, random_state=0))
    one_tree = SimilarityTreeRank(max_depth=3).fit(*gt.sample(4000, random_state=0))
    assert auc(forest.score(Xt1, Xt2), yt) >= auc(one_tree.score(Xt1, Xt2), yt) - 0.002


# ----------------------------------------------------------------------------------------
# ROC analysis
# ----------------------------------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), m=st.integers(2, 80), levels=st.integers(1, 6))
def test_roc_and_auc_agree_with_scikit_learn_including_ties(seed, m, levels):
    rng = np.random.default_rng(seed)
    y = np.where(rng.random(m) < 0.4, 1, -1)
    y[0], y[1] = 1, -1
    s = rng.integers(0, levels, size=m).astype(float)  # few levels: many ties
    fpr, tpr = roc_curve(s, y)
    sk_fpr, sk_tpr, _ = sk_roc_curve(y, s, drop_intermediate=False)
    assert np.allclose(fpr, sk_fpr) and np.allclose(tpr, sk_tpr)
    assert auc(s, y) == pytest.approx(roc_auc_score(y, s))
    assert auc(s, y) == pytest.approx(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2))
    assert auc(-s, y) == pytest.approx(1 - auc(s, y))


def test_auc_counts_ties_as_half():
    assert auc([1, 1, 1, 1], [1, -1, 1, -1]) == 0.5
    assert auc([3, 2, 2, 1], [1, 1, -1, -1]) == pytest.approx((1 + 1 + 0.5 + 1) / 4)


def test_tpr_at_fpr_reads_the_roc_curve():
    s = [9, 8, 7, 6, 5, 4, 3, 2, 1, 0]
    y = [1, 1, -1, 1, -1, -1, 1, -1, -1, -1]  # 4 alike, 6 not
    assert tpr_at_fpr(s, y, 0.0) == pytest.approx(0.5)  # top of the first vertical segment
    assert tpr_at_fpr(s, y, 1 / 6) == pytest.approx(0.75)
    assert tpr_at_fpr(s, y, 1 / 12) == pytest.approx(0.5)  # a flat stretch
    assert tpr_at_fpr(s, y, 1.0) == 1.0
    # on a tie the best level-alpha test randomises: interpolate along the tied segment
    assert tpr_at_fpr([1, 1], [1, -1], 0.25) == pytest.approx(0.25)
    with pytest.raises(ValueError):
        tpr_at_fpr(s, y, 1.5)


# ----------------------------------------------------------------------------------------
# pair labels
# ----------------------------------------------------------------------------------------
def test_pairs_from_labels_gives_every_pair_once_with_its_label():
    labels = np.array(["a", "b", "a", "c", "b"])
    pairs, y = pairs_from_labels(labels)
    assert pairs.shape == (10, 2) and np.all(pairs[:, 0] < pairs[:, 1])
    assert len({tuple(p) for p in pairs.tolist()}) == 10
    assert np.array_equal(y, np.where(labels[pairs[:, 0]] == labels[pairs[:, 1]], 1, -1))
    assert sorted(map(tuple, pairs[y > 0].tolist())) == [(0, 2), (1, 4)]


@pytest.mark.parametrize("n", [120, 2200])  # the second has > 2M pairs: drawn by rejection, not enumerated
def test_pairs_from_labels_samples_distinct_pairs_reproducibly(n):
    labels = np.random.default_rng(0).integers(0, 10, size=n)
    pairs, y = pairs_from_labels(labels, n_pairs=500, random_state=3)
    assert pairs.shape == (500, 2) and np.all(pairs[:, 0] < pairs[:, 1])
    assert np.unique(pairs[:, 0] * n + pairs[:, 1]).size == 500
    assert np.array_equal(y, np.where(labels[pairs[:, 0]] == labels[pairs[:, 1]], 1, -1))
    again, _ = pairs_from_labels(labels, n_pairs=500, random_state=3)
    assert np.array_equal(pairs, again)
    balanced, yb = pairs_from_labels(labels, n_pairs=500, random_state=3, balanced=True)
    assert (yb > 0).sum() == 250 and (yb < 0).sum() == 250
    assert np.unique(balanced[:, 0] * n + balanced[:, 1]).size == 500
    assert np.array_equal(yb, np.where(labels[balanced[:, 0]] == labels[balanced[:, 1]], 1, -1))
    # every class contributes alike pairs, roughly in proportion to its number of pairs
    sizes = np.bincount(labels)
    expected = sizes * (sizes - 1) / (sizes * (sizes - 1)).sum()
    got = np.bincount(labels[balanced[yb > 0, 0]], minlength=10) / 250
    assert np.abs(got - expected).max() < 0.08


def test_balanced_pairs_without_a_count_take_every_alike_pair():
    labels = np.repeat([0, 1, 2, 3], 5)  # 4 * 10 alike pairs out of 190
    pairs, y = pairs_from_labels(labels, balanced=True, random_state=0)
    assert (y > 0).sum() == 40 and (y < 0).sum() == 40
    few, yf = pairs_from_labels([0, 0, 0, 1], n_pairs=10, balanced=True, random_state=0)
    assert len(few) == 6 and (yf > 0).sum() == 3  # fewer pairs exist than asked


def test_pairs_from_ratings_thresholds_the_mean_rating_of_each_pair():
    pairs = np.array([[0, 1], [1, 0], [2, 3], [0, 2]])
    ratings = np.array([5.0, 2.0, 4.0, 1.0])
    assert pairs_from_ratings(pairs, ratings, 3.5).tolist() == [1, 1, 1, -1]  # (0, 1) pooled: 3.5
    assert pairs_from_ratings(pairs, ratings, 3.5, pool=False).tolist() == [1, -1, 1, -1]
    distances = np.array([0.1, 0.3, 0.9, 0.2])
    assert pairs_from_ratings(pairs, distances, 0.2, higher_is_alike=False).tolist() == [1, 1, -1, 1]


# ----------------------------------------------------------------------------------------
# state and export
# ----------------------------------------------------------------------------------------
@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10**6), forest=st.booleans(), depth=st.integers(1, 5))
def test_state_round_trips_through_json(seed, forest, depth):
    model, X = fitted_forest(seed, n_trees=3, max_depth=depth) if forest else fitted_tree(seed, max_depth=depth)
    cls = type(model)
    state = model.to_state()
    restored = cls.from_state(json_round_trip(state))
    assert restored.to_state() == state
    i = np.arange(len(X))
    assert np.array_equal(restored.score(X, X[i[::-1]]), model.score(X, X[i[::-1]]))
    # the export reads back to the same scores too
    again = cls.from_json(json_round_trip(model.to_json()))
    assert np.array_equal(again.score(X, X[i[::-1]]), model.score(X, X[i[::-1]]))


def test_unfitted_state_round_trips_and_refuses_to_score():
    tree = SimilarityTreeRank(max_depth=3, random_state=4)
    restored = SimilarityTreeRank.from_state(json_round_trip(tree.to_state()))
    assert restored.max_depth == 3 and restored.random_state == 4
    with pytest.raises(ValueError, match="not fitted"):
        restored.score(np.zeros((1, 2)), np.zeros((1, 2)))


def test_from_state_rejects_other_classes_and_versions():
    tree, _ = fitted_tree()
    state = tree.to_state()
    with pytest.raises(ValueError):
        RankingForest.from_state(state)
    with pytest.raises(ValueError):
        SimilarityTreeRank.from_state(state | {"version": 99})
    broken = json_round_trip(state)
    broken["node_left"][0] = 10_000
    with pytest.raises(ValueError):
        SimilarityTreeRank.from_state(broken)


def test_tree_json_export_describes_nodes_rules_and_ranked_leaves():
    tree, X = fitted_tree(6, max_depth=3, leafrank_depth=2)
    doc = json_round_trip(tree.to_json())
    assert doc["schema_version"] == 1 and doc["kind"] == "similarity_treerank"
    assert doc["params"]["max_depth"] == 3 and doc["n_features"] == X.shape[1]
    assert doc["symmetric_features"]["size"] == 2 * X.shape[1]
    (t,) = doc["trees"]
    nodes = {n["id"]: n for n in t["nodes"]}
    assert len(nodes) == t["n_nodes"]
    for node in nodes.values():
        if "leafrank" in node:
            rule = {r["id"]: r for r in node["leafrank"]}
            assert any(r.get("alike") is True for r in rule.values())
            assert any(r.get("alike") is False for r in rule.values())
            for r in rule.values():
                if "feature" in r:
                    assert r["left"] in rule and r["right"] in rule
                    assert r["transform"] == ("sum" if r["feature"] < X.shape[1] else "absdiff")
            assert nodes[node["alike_child"]]["parent"] == node["id"]
    leaves = t["leaves"]
    assert [leaf["rank"] for leaf in leaves] == list(range(t["n_leaves"]))
    assert all(a["score"] > b["score"] for a, b in zip(leaves, leaves[1:], strict=False))
    assert all(nodes[leaf["node"]]["rank"] == leaf["rank"] for leaf in leaves)
    assert sum(leaf["n_alike"] + leaf["n_not_alike"] for leaf in leaves) == 3000
    roc = t["training_roc"]
    assert roc["fpr"][0] == 0 and roc["tpr"][-1] == pytest.approx(1) and 0.5 < roc["auc"] <= 1


def test_forest_json_export_holds_every_tree_and_the_aggregation():
    forest, X = fitted_forest(7, n_trees=4)
    doc = json_round_trip(forest.to_json())
    assert doc["schema_version"] == 1 and doc["kind"] == "ranking_forest"
    assert doc["aggregation"] == "mean_rank" and len(doc["trees"]) == 4
    assert [t["seed"] for t in doc["trees"]] == [int(s) for s in forest.tree_seeds_]
    # the forest score is 1 - the mean over trees of the pair's leaf mid-rank
    i = np.arange(30)
    mids = np.mean([t.mid_rank(X[i], X[i + 30]) for t in forest.estimators_], axis=0)
    assert np.allclose(forest.score(X[i], X[i + 30]), 1 - mids)
    with pytest.raises(ValueError):
        SimilarityTreeRank.from_json(doc)


def test_forest_trees_differ_and_follow_their_seeds():
    a, X = fitted_forest(8, n_trees=4)
    b, _ = fitted_forest(8, n_trees=4)
    assert a.to_state() == b.to_state()
    states = [json.dumps(t.to_state()["node_n_alike"]) for t in a.estimators_]
    assert len(set(states)) > 1  # bagging: the trees saw different pairs


# ----------------------------------------------------------------------------------------
# validation at the boundary
# ----------------------------------------------------------------------------------------
def test_bad_inputs_are_rejected_with_a_reason():
    X1, X2 = np.zeros((4, 2)), np.ones((4, 2))
    tree = SimilarityTreeRank()
    with pytest.raises(ValueError, match=r"\+1"):
        tree.fit(X1, X2, [1, 0, 1, 0])
    with pytest.raises(ValueError, match="both"):
        tree.fit(X1, X2, [1, 1, 1, 1])
    with pytest.raises(ValueError, match="same shape"):
        tree.fit(X1, np.ones((3, 2)), [1, -1, 1])
    with pytest.raises(ValueError, match="NaN"):
        tree.fit(np.full((4, 2), np.nan), X2, [1, -1, 1, -1])
    with pytest.raises(ValueError, match="max_depth"):
        SimilarityTreeRank(max_depth=0).fit(X1, X2, [1, -1, 1, -1])
    with pytest.raises(ValueError, match="max_features"):
        RankingForest(max_features="most").fit(X1, X2, [1, -1, 1, -1])
    with pytest.raises(ValueError, match="pair indices"):
        tree.fit_pairs(X1, [[0, 9]], [1])
    fitted, X = fitted_tree()
    with pytest.raises(ValueError, match="features"):
        fitted.score(np.zeros((2, 7)), np.zeros((2, 7)))
    with pytest.raises(ValueError, match="both"):
        auc([0.1, 0.2], [1, 1])
