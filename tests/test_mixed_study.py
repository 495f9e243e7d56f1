"""A study asking ratings and triplets of the same items learns one model: the pooled rating learner also
takes the triplets the study's triplet learner asked (``Algorithm.takes_triplets``), live and on a rebuild."""
from __future__ import annotations

import time

import numpy as np

from engine.kinds import kind_of
from workers.jobs.learner_cache import load_learners
from workers.jobs.rebuild import rebuild_study
from workers.jobs.update_pass import apply_new_answers
from workers.store.answers import accept_answer, read_answers
from workers.store.config import StudyConfig
from workers.store.questions import issue_question
from workers.store.studies import Item, create_study, get_study

POSITIONS = np.sort(np.random.default_rng(7).uniform(0, 10, 16))


def test_the_pooled_learner_of_a_mixed_study_learns_from_its_triplets_too(conn):
    items = [Item(id=f"p{i}", kind="color", color="#203040", position=(float(x),)) for i, x in enumerate(POSITIONS)]
    config = StudyConfig.from_dict({
        "name": "mixed", "random_state": 2, "pool_size": 30, "attention": {"rate": 0}, "heldout_share": 0.1,
        "algorithms": [{"algorithm": "pooled", "question_kind": "rating"},
                       {"algorithm": "random_triplets", "question_kind": "triplet"}]})
    sid = create_study(conn, config, items, study_id="mixed")
    apply_new_answers(conn, sid)
    study = get_study(conn, sid)
    rng = np.random.default_rng(0)
    for t in range(300):
        now = time.time()
        question, _, _ = issue_question(conn, sid, study.config, study.n_items, f"r{t % 3}", now, now + 600)
        shown = kind_of(question).shown(question)
        if question["kind"] == "rating":
            i, j = shown
            choice, value = None, float(np.clip(5 - 0.4 * abs(POSITIONS[i] - POSITIONS[j]) + rng.normal(0, .5), 1, 5))
        else:
            h, a, b = shown
            choice, value = (a if abs(POSITIONS[h] - POSITIONS[a]) < abs(POSITIONS[h] - POSITIONS[b]) else b), None
        accept_answer(conn, sid, question, f"r{t % 3}", choice, issued_at=now, response_ms=1500, used_ttl=600,
                      value=value)
        if t % 30 == 29:
            apply_new_answers(conn, sid)
    apply_new_answers(conn, sid)
    logged = read_answers(conn, sid)
    triplets = [a for a in logged if a.kind == "triplet" and not a.heldout]
    ratings = [a for a in logged if a.kind == "rating" and not a.heldout]
    assert triplets and ratings and any(a.heldout for a in logged)
    pooled = load_learners(conn, get_study(conn, sid))["pooled"].planner
    # every triplet answer reached the pooled learner beside every rating (held-out ones did not)
    assert len(pooled.triplets_) == len(triplets) and len(pooled.log_) == len(ratings)
    assert sorted(map(tuple, pooled.triplets_.rows.tolist())) == sorted(
        (a.head, a.choice, a.b if a.choice == a.a else a.a) for a in triplets)
    rebuild_study(conn, sid)
    again = load_learners(conn, get_study(conn, sid))["pooled"].planner
    assert len(again.triplets_) == len(triplets) and len(again.log_) == len(ratings)
