"""Validation repeats (issue 18): a triplet a rater already answered is asked again later with its
candidates swapped, sealed like every question; each rater's self-agreement is recorded, shown and
exported, flags a rater answering at random, and repeats never reach a learner."""
from __future__ import annotations

import json
import random

import pytest
from helpers import index_of, positioned_study, run_worker, wire_body

from engine.planners import restore_planner
from webapp.tokens import verify_question
from workers.store.answers import CATCH_ALGORITHM, REPEAT_ALGORITHM, export_triplets, iter_answers
from workers.store.config import ConfigError, StudyConfig
from workers.store.engine_state import load as load_state
from workers.store.raters import export_raters_csv, rater_table

N_ITEMS, REPEATS, QUESTIONS = 12, 20, 120
# distinct gaps between positions: no triplet is a tie, so an honest rater always answers alike
POSITIONS = [float(i * i) for i in range(N_ITEMS)]
RANDOM_SEED = 18  # the global random the platform draws from (conftest's ``seeded``)


def repeats_study(conn, **attention) -> str:
    return positioned_study(conn, "repeats", POSITIONS, random_state=3, limits={"max_questions_per_rater": QUESTIONS},
                            attention={"validation_repeats": REPEATS, "min_self_agreement": 0.75, **attention})


def honest(q, rng):
    h = POSITIONS[index_of(q["head"])]
    a, b = (index_of(c) for c in q["candidates"])
    return a if abs(POSITIONS[a] - h) < abs(POSITIONS[b] - h) else b


def always_left(q, rng):
    return index_of(q["candidates"][0])


def coin_flip(q, rng):
    return index_of(q["candidates"][rng.random() < 0.5])


def run_rater(app, conn, study_id, choose, seed=0) -> list[dict]:
    """One rater answering until the study says they are done; returns the payloads they were shown."""
    client, rng, shown = app.test_client(), random.Random(seed), []
    response = client.get(f"/api/studies/{study_id}/questions/next")
    question = response.get_json()["question"]
    while question is not None:
        shown.append(question)
        sent = wire_body(question, {"token": question["token"], "choice": choose(question, rng)})
        body = client.post(f"/api/studies/{study_id}/answers", json=sent).get_json()
        assert "answer" in body, body
        question = body.get("next")
        if len(shown) % 20 == 0:
            run_worker(conn)
    run_worker(conn)
    return shown


def rows_by_rater(conn, study_id):
    return {row["rater"]: row for row in rater_table(conn, study_id)}


def test_an_honest_rater_agrees_with_themself_and_repeats_are_the_swapped_triplets(app, conn, seeded):
    study_id = repeats_study(conn)
    shown = run_rater(app, conn, study_id, honest)
    assert len(shown) == QUESTIONS
    answers = list(iter_answers(conn, study_id))
    repeats = [a for a in answers if a.algorithm == REPEAT_ALGORITHM]
    assert len(repeats) >= REPEATS - 2  # every queued repeat is due well before the rater's limit
    originals = [a for a in answers if a.algorithm != REPEAT_ALGORITHM]
    for rep in repeats:
        # the same head, the candidates swapped, asked at least a few answers after the original
        first = [a for a in originals if a.head == rep.head and (a.a, a.b) == (rep.b, rep.a)]
        assert first and first[0].id < rep.id
        assert "repeat_agree" in rep.flags.split(",")
    row = rows_by_rater(conn, study_id)[repeats[0].rater]
    assert row["repeats"] == len(repeats) and row["self_agreement"] == 1.0 and not row["flagged"]


def test_repeats_look_like_every_other_question_to_the_rater(app, conn, seeded):
    study_id = repeats_study(conn)
    shown = run_rater(app, conn, study_id, honest)
    kinds = {frozenset(q) for q in shown}
    assert len(kinds) == 1, "a repeat's payload has other fields than an ordinary question's"
    sealed = [verify_question(app.config["SECRET_KEY"], q["token"], max_age=3600)["q"] for q in shown]
    assert sum(1 for q in sealed if q["algorithm"] == REPEAT_ALGORITHM) >= REPEATS - 2
    for q in shown:  # nothing readable in the page's data says "repeat"
        assert "repeat" not in json.dumps({k: v for k, v in q.items() if k != "token"})


def test_a_rater_answering_at_random_has_about_half_self_agreement_and_is_flagged(app, conn, seeded):
    study_id = repeats_study(conn)
    run_rater(app, conn, study_id, coin_flip, seed=1)
    run_rater(app, conn, study_id, always_left, seed=2)
    run_rater(app, conn, study_id, honest, seed=3)
    rows = sorted(rater_table(conn, study_id), key=lambda r: r["self_agreement"])
    left, flipper, person = rows
    assert left["self_agreement"] == 0.0 and left["flagged"]  # the swap catches "always the left one"
    assert 0.25 <= flipper["self_agreement"] <= 0.72 and flipper["flagged"]
    assert person["self_agreement"] == 1.0 and not person["flagged"]
    assert all(r["repeats"] >= REPEATS - 2 for r in rows)
    header, *lines = "".join(export_raters_csv(conn, study_id)).splitlines()
    assert "repeats" in header.split(",") and "self_agreement" in header.split(",")
    assert any(",0.0," in line for line in lines) and any(",1.0," in line for line in lines)


def test_repeats_are_never_given_to_a_learner_nor_exported_as_triplets(app, conn, seeded):
    study_id = repeats_study(conn)
    run_rater(app, conn, study_id, honest)
    answers = list(iter_answers(conn, study_id))
    # (catch trials, on by default for items with positions, are no learner's either)
    new = [a for a in answers if a.algorithm not in (REPEAT_ALGORITHM, CATCH_ALGORITHM)]
    assert len(new) < len(answers)
    learner = restore_planner(load_state(conn, study_id, "random_triplets"))
    # each answer once; no repeat counted (nor a held-out answer: those score the learner, tests/test_heldout.py)
    assert learner.progress()["answers"] == sum(not a.heldout for a in new)
    triplets = "".join(export_triplets(answers)).splitlines()
    assert len(triplets) == len(new)


def test_repeats_need_triplets_and_a_reserved_label_is_refused():
    with pytest.raises(ConfigError, match="validation_repeats"):
        StudyConfig.from_dict({"name": "r", "question_kind": "rating", "attention": {"validation_repeats": 5}})
    with pytest.raises(ConfigError, match="reserved"):
        StudyConfig.from_dict({"name": "r", "algorithms": [{"algorithm": "random_triplets", "label": "repeat"}]})
    with pytest.raises(ConfigError, match="validation_repeats"):
        StudyConfig.from_dict({"name": "r", "attention": {"validation_repeats": -1}})
