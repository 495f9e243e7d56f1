"""A rating study of the pooled rating learner through the live platform: the worker passes who gave
each rating (the entry ``takes_raters``), and the learner finds the neighbours."""
from __future__ import annotations

import numpy as np
from helpers import run_worker
from test_engine_studies import TRUE_NN, drive, learned_neighbors, make_study, truthful

from engine.ratings.log import RatingLog
from workers.store import engine_state
from workers.store.answers import read_answers


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
