"""A rating study of the pooled rating learner through the live platform: the worker passes who gave
each rating (the entry ``takes_raters``) and the items' features, and the learner finds the neighbours."""
from __future__ import annotations

import numpy as np
from helpers import NO_CHECKS, run_worker
from test_engine_studies import POSITIONS, TRUE_NN, drive, learned_neighbors, make_study, truthful

from engine.ratings.log import RatingLog
from workers.store import engine_state
from workers.store.answers import read_answers
from workers.store.config import StudyConfig
from workers.store.studies import Item, create_study


def test_a_pooled_rating_study_learns_with_each_raters_id(app, conn):
    sid = make_study(conn, "pooled-rated", question_kind="rating",
                     rating={"min": 0, "max": 100, "step": None, "widget": "slider"},
                     algorithms=[{"algorithm": "pooled"}])
    drive(app, conn, sid, truthful(np.random.default_rng(0), noise=0.05), max_answers=240)
    run_worker(conn)
    nn, _ = learned_neighbors(conn, sid)
    assert nn == TRUE_NN
    state = engine_state.load(conn, sid, "pooled")
    logged = read_answers(conn, sid)
    # every rating was observed with the id of the rater who gave it
    ids = RatingLog.from_state(state).rater_ids
    assert sorted(set(ids)) == sorted({a.rater for a in logged}) and len(ids) == 3
    assert len(state["raters"]) == len(logged) and (np.asarray(state["raters"]) >= 0).all()


def test_a_pooled_rating_study_with_item_features_fits_their_map(app, conn, researcher_client):
    # the items' numeric features reach the rating learner through the worker, a fit maps them, and the
    # Learning tab says how much of the space their map holds
    items = [Item(id=f"p{i}", kind="text", text=f"point {i}", features={"x": x, "twice": 2 * x + (i % 2)})
             for i, x in enumerate(POSITIONS)]
    config = StudyConfig.from_dict({**NO_CHECKS, "name": "pooled-features", "random_state": 1, "pool_size": 6,
                                    "question_kind": "rating", "algorithms": [{"algorithm": "pooled"}],
                                    "rating": {"min": 0, "max": 100, "step": None, "widget": "slider"}})
    sid = create_study(conn, config, items, study_id="pooled-features")
    drive(app, conn, sid, truthful(np.random.default_rng(0), noise=0.05), max_answers=240)
    run_worker(conn)
    nn, _ = learned_neighbors(conn, sid)
    assert nn == TRUE_NN
    state = engine_state.load(conn, sid, "pooled")
    assert np.asarray(state["features"]).shape == (6, 2)
    assert np.abs(np.asarray(state["fit"]["feature_map"])).sum() > 0
    sentence = researcher_client.get(f"/api/studies/{sid}/stats").get_json()["features"]["sentence"]
    assert "pooled: the features' distances predict the ratings, so their map holds" in sentence, sentence
