"""Seed learners in studies: SimForest as a study algorithm asking ratings; SMERF, similarity TreeRank
and SimForest trained on what a study collected, stored, exported and used for new items."""
from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import index_of
from test_engine_studies import drive

from workers.jobs.learners import Learner
from workers.results.exports import ExportError, export
from workers.results.models import ModelError, crowd_distances, load_model, predict_for_items, train, trained_models
from workers.store import engine_state
from workers.store.config import ConfigError, StudyConfig
from workers.store.studies import Item, StudyError, create_study


def clustered_items(n=30, seed=0, with_labels=True):
    """Items in three clusters of a 4-feature space; only features a and b carry the clusters."""
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 3.0]])
    items = []
    for i in range(n):
        c = i % 3
        a, b = centres[c] + rng.normal(0, 0.4, 2)
        noise1, noise2 = rng.normal(0, 1, 2)
        items.append(Item(id=f"x{i}", kind="text", text=f"item {i}", label=f"class{c}" if with_labels else None,
                          features={"a": round(float(a), 4), "b": round(float(b), 4),
                                    "n1": round(float(noise1), 4), "n2": round(float(noise2), 4)}))
    return items


def true_distance(items):
    X = np.array([[it.features["a"], it.features["b"]] for it in items])
    D = np.sqrt(((X[:, None] - X[None]) ** 2).sum(-1))
    return D / D.max()


def crowd_study(conn, items, study_id="crowd", answers_per_pair=1, share_observed=1.0, seed=0, truth=None):
    """A study whose ANNTri learner has applied noiseless ratings for (a share of) all pairs
    (distances from the features of ``truth``, default ``items``)."""
    config = StudyConfig.from_dict({"name": study_id, "random_state": 3, "question_kind": "rating",
                                    "algorithms": [{"algorithm": "anntri", "question_kind": "rating"}]})
    create_study(conn, config, items, study_id=study_id)
    learner = Learner.new(config.algorithms[0], config, len(items))
    D = true_distance(truth or items)
    rng = np.random.default_rng(seed)
    rows = [(i, j, float(D[i, j])) for i in range(len(items)) for j in range(i + 1, len(items))
            if rng.random() < share_observed for _ in range(answers_per_pair)]
    learner.planner.observe(rows)
    with conn.pipeline(transaction=True) as pipe:
        engine_state.save(pipe, study_id, learner.label, learner.to_state())
        pipe.execute()
    return study_id


def test_simforest_is_a_rating_algorithm_that_needs_labels(conn):
    config = StudyConfig.from_dict({"name": "s", "algorithms": [{"algorithm": "simforest",
                                                                  "params": {"n_trees": 3}}]})
    assert config.algorithms[0].question_kind == "rating"
    with pytest.raises(ConfigError, match="simforest asks rating or same_different questions, not triplet"):
        StudyConfig.from_dict({"name": "s", "algorithms": [{"algorithm": "simforest", "question_kind": "triplet"}]})
    with pytest.raises(ConfigError, match="n_tree"):
        StudyConfig.from_dict({"name": "s", "algorithms": [{"algorithm": "simforest", "params": {"n_tree": 3}}]})
    with pytest.raises(StudyError, match="needs a label for every item.*x0"):
        create_study(conn, config, clustered_items(6, with_labels=False), study_id="nolabels")


def test_a_simforest_study_learns_a_classifier_from_crowd_ratings(app, conn):
    items = clustered_items(24)
    config = StudyConfig.from_dict({"name": "sf", "random_state": 5, "pool_size": 10,
                                    "algorithms": [{"algorithm": "simforest", "params": {"n_trees": 3}}]})
    create_study(conn, config, items, study_id="sf")
    D = true_distance(items)
    asked = []

    def respond(q):
        assert q["kind"] == "rating"
        i, j = (index_of(item) for item in q["items"])
        asked.append((min(i, j), max(i, j)))
        scale = q["scale"]
        value = scale["min"] + (1.0 - D[i, j]) * (scale["max"] - scale["min"])
        step = scale["step"]
        if step:
            value = scale["min"] + round((value - scale["min"]) / step) * step
        return {"value": value}

    sent = drive(app, conn, "sf", respond, max_answers=2000)
    assert sent < 2000, "the forest never finished"
    n = len(items)
    assert len(set(asked)) < n * (n - 1) / 2  # not the full matrix
    learner = Learner.from_state(config.algorithms[0], config, engine_state.load(conn, "sf", "simforest"))
    assert learner.finished
    S = 1.0 - D
    predicted = learner.planner.predict(S)
    assert np.mean(predicted == np.array([it.label for it in items])) >= 0.9
    doc = json.loads("".join(export(conn, "sf", "forest", "json").chunks))
    assert doc["schema_version"] == 1 and doc["kind"] == "similarity_forest"
    assert doc["study"] == "sf" and doc["items"][0] == "x0"


def test_smerf_trained_on_crowd_distances_finds_the_features_that_matter(conn):
    items = clustered_items(36)
    sid = crowd_study(conn, items, share_observed=0.6)
    crowd = crowd_distances(conn, sid)
    assert crowd.algorithm == "anntri" and 0.4 < crowd.n_observed_pairs / (36 * 35 / 2) < 0.8
    meta = train(conn, sid, "smerf", params={"n_trees": 30})
    ranked = [f["feature"] for f in meta["summary"]["feature_importances"]]
    assert set(ranked[:2]) == {"a", "b"}
    assert meta["summary"]["held_out_spearman"] > 0.6
    assert trained_models(conn, sid)["smerf"]["summary"] == meta["summary"]
    doc = json.loads("".join(export(conn, sid, "model", "json", model="smerf").chunks))
    assert doc["schema_version"] == 1 and doc["model"] == "smerf" and doc["estimator"]["schema_version"] == 1
    # a new item that copies an existing one's features is predicted nearest to it
    new = [Item(id="new0", kind="text", text="n", features=dict(items[7].features)),
           Item(id="new1", kind="text", text="m", features=dict(items[20].features))]
    new_ids, study_ids, D = predict_for_items(conn, sid, "smerf", new)
    assert new_ids == ["new0", "new1"] and len(study_ids) == 36 and D.shape == (2, 36)
    assert D[0, 7] <= np.sort(D[0])[2] and D[1, 20] <= np.sort(D[1])[2]
    model, _ = load_model(conn, sid, "smerf")
    assert np.allclose(model.predict(np.array([[it.features[k] for k in "a b n1 n2".split()] for it in new])),
                       model.predict(np.array([[it.features[k] for k in "a b n1 n2".split()] for it in new])))


def test_treerank_learns_alike_pairs_from_labels_or_thresholded_crowd_distances(conn):
    items = clustered_items(36)
    sid = crowd_study(conn, items)
    meta = train(conn, sid, "treerank", params={"max_depth": 3})
    assert meta["summary"]["pair_labels"] == "item labels"
    assert meta["summary"]["held_out_auc"] > 0.85
    meta = train(conn, sid, "ranking_forest", threshold=0.3, params={"n_trees": 5, "max_depth": 3})
    assert meta["summary"]["pair_labels"] == "crowd distance <= 0.3" and meta["summary"]["held_out_auc"] > 0.85
    new = [Item(id="new0", kind="text", text="n", features=dict(items[4].features))]
    _, _, scores = predict_for_items(conn, sid, "ranking_forest", new)
    same = [i for i, it in enumerate(items) if it.label == items[4].label]
    other = [i for i, it in enumerate(items) if it.label != items[4].label]
    assert scores[0, same].mean() > scores[0, other].mean()
    with pytest.raises(ModelError, match="every observed pair is alike.*choose a threshold"):
        train(conn, sid, "treerank", threshold=5.0)


def test_simforest_trained_on_crowd_similarities_with_missing_pairs(conn):
    items = clustered_items(36)
    sid = crowd_study(conn, items, share_observed=0.85)
    meta = train(conn, sid, "simforest", params={"n_trees": 20})
    assert 0.1 < meta["summary"]["missing_share"] < 0.2
    assert meta["summary"]["held_out_accuracy"] >= 0.8
    assert meta["summary"]["classes"] == ["class0", "class1", "class2"]
    with pytest.raises(ModelError, match="does not predict from features"):
        predict_for_items(conn, sid, "simforest", items[:1])


def test_models_say_what_the_study_lacks(conn):
    sid = crowd_study(conn, clustered_items(12, with_labels=False))
    with pytest.raises(ModelError, match="there is no model 'umap'"):
        train(conn, sid, "umap")
    with pytest.raises(ModelError, match="need labels.*x0"):
        train(conn, sid, "simforest")
    with pytest.raises(ExportError, match="no treerank model has been trained.*proxima train"):
        export(conn, sid, "model", "json", model="treerank")
    with pytest.raises(ExportError, match="say which trained model"):
        export(conn, sid, "model", "json")
    with pytest.raises(ModelError, match="has no algorithm 'nope'"):
        train(conn, sid, "smerf", algorithm="nope")
    with pytest.raises(ModelError, match="unexpected keyword|n_tres"):
        train(conn, sid, "smerf", params={"n_tres": 3})
    plain = [Item(id=f"p{i}", kind="text", text=f"t{i}", label="ab"[i % 2]) for i in range(5)]
    config = StudyConfig.from_dict({"name": "p", "algorithms": [{"algorithm": "random_triplets"}]})
    create_study(conn, config, plain, study_id="plain")
    with pytest.raises(ModelError, match="no features"):
        train(conn, "plain", "smerf")
    with pytest.raises(ModelError, match="no algorithm that estimates distances"):
        train(conn, "plain", "simforest")
    trained = train(conn, sid, "smerf", params={"n_trees": 3})
    new = [Item(id="z", kind="text", text="z", features={"a": 1.0})]
    with pytest.raises(ModelError, match="features a but the model was trained on a, b, n1, n2"):
        predict_for_items(conn, sid, "smerf", new)
    assert trained["model"] == "smerf"


def test_cli_sets_features_trains_exports_and_predicts(cli, conn, tmp_path):
    items = clustered_items(30)
    plain = [Item(id=it.id, kind="text", text=it.text, label=it.label) for it in items]
    sid = crowd_study(conn, plain, truth=items)
    features = tmp_path / "features.csv"
    features.write_text("id,a,b,n1,n2\n" + "".join(
        f"{it.id},{it.features['a']},{it.features['b']},{it.features['n1']},{it.features['n2']}\n" for it in items))
    result = cli("train", sid, "--model", "smerf")
    assert result.exit_code == 1 and "no features" in result.output
    result = cli("features", sid, features)
    assert result.exit_code == 0 and "Set 4 feature(s) (a, b, n1, n2) on 30 items" in result.output
    out = tmp_path / "smerf.json"
    result = cli("train", sid, "--model", "smerf", "--param", "n_trees=20", "-o", out)
    assert result.exit_code == 0, result.output
    assert "held out spearman" in result.output and "feature importances" in result.output
    assert json.loads(out.read_text())["estimator"]["kind"] == "distance_forest"
    result = cli("export", sid, "--what", "model", "--model", "smerf")
    assert result.exit_code == 0 and json.loads(result.stdout)["model"] == "smerf"
    new = tmp_path / "new.csv"
    new.write_text("id,text,a,b,n1,n2\n" + f"q,new,{items[3].features['a']},{items[3].features['b']},0,0\n")
    result = cli("predict", sid, "--model", "smerf", "--items", new, "--k", "3")
    assert result.exit_code == 0, result.output
    rows = result.stdout.strip().splitlines()
    assert rows[0] == "new_item,item,rank,distance" and len(rows) == 4 and rows[1].startswith("q,")
    nearest = rows[1].split(",")[1]
    assert next(it.label for it in items if it.id == nearest) == items[3].label
    result = cli("train", sid, "--model", "treerank", "--param", "max_depth=3", "--threshold", "0.3")
    assert result.exit_code == 0 and "held out auc" in result.output
    for args, words in [
        (("train", sid, "--model", "smerf", "--param", "n_trees"), "NAME=VALUE"),
        (("train", sid, "--model", "smerf", "--param", "n_trees=-3"), "n_trees"),
        (("train", "nope", "--model", "smerf"), "no study with id 'nope'"),
        (("predict", sid, "--model", "ranking_forest", "--items", new), "no ranking_forest model has been trained"),
        (("features", sid, tmp_path / "missing.csv"), "does not exist"),
    ]:
        result = cli(*args)
        assert result.exit_code != 0 and words in result.output, (args, result.output)


def test_dashboard_shows_trained_models_with_feature_importances_and_set_aside_answers(conn, researcher_client):
    from workers.store import keys

    items = clustered_items(24)
    sid = crowd_study(conn, items)
    page = researcher_client.get(f"/studies/{sid}?tab=downloads").get_data(as_text=True)
    assert "proxima train crowd --model smerf" in page
    assert "None: every answer could be used." in researcher_client.get(f"/studies/{sid}?tab=raters").get_data(
        as_text=True)
    train(conn, sid, "smerf", params={"n_trees": 10})
    answer_id = conn.xadd(keys.answers(sid), {"qid": "q1", "rater": "r<b>1</b>", "kind": "rating",
                                               "algorithm": "anntri"}).decode()
    conn.hset(keys.poisoned(sid), answer_id, "anntri: item index 99 is out of range")
    page = researcher_client.get(f"/studies/{sid}?tab=downloads").get_data(as_text=True)
    page += researcher_client.get(f"/studies/{sid}?tab=raters").get_data(as_text=True)
    assert 'id="model-smerf"' in page and "held out spearman" in page
    assert page.index(">a</td>") < page.index(">n1</td>") and "<meter" in page
    assert "export/model.json?model=smerf" in page
    assert answer_id in page and "item index 99 is out of range" in page and "r&lt;b&gt;1&lt;/b&gt;" in page
    response = researcher_client.get(f"/studies/{sid}/export/model.json?model=smerf")
    assert response.status_code == 200 and response.get_json()["model"] == "smerf"
    assert researcher_client.get(f"/studies/{sid}/export/model.json?model=treerank").status_code == 404
