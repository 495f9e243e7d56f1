"""A web process keeps its own copy of each study, and a rater's request checks that copy inside
its one Redis script: a change made by another process (the dashboard on another web process, the
CLI, a second machine) must hold from the very next request, and a request made on a stale copy
stores nothing before it is redone on the stored study."""
from __future__ import annotations

from helpers import answer, colour_items, fetch_question

from workers.store.answers import read_answers
from workers.store.config import StudyConfig
from workers.store.studies import create_study, set_status, update_config


def make_study(conn, study_id="copy", **fields):
    config = StudyConfig.from_dict({"name": "Copy", "algorithm": "random_triplets", "pool_size": 8, **fields})
    return create_study(conn, config, colour_items(), study_id=study_id)


def test_a_pause_made_elsewhere_stops_questions_at_the_next_request_and_a_resume_restarts_them(client, conn):
    make_study(conn)
    client.get("/s/copy?rater=r-pause")
    fetch_question(client, "copy")  # the web process now holds its copy of the running study
    set_status(conn, "copy", "paused")  # another process pauses it
    response = client.get("/api/studies/copy/questions/next")
    assert response.status_code == 409
    assert response.get_json()["error"]["code"] == "study_not_running"
    set_status(conn, "copy", "running")
    assert fetch_question(client, "copy")["token"]


def test_an_answer_on_a_stale_copy_is_stored_once_under_the_stored_study(client, conn):
    make_study(conn, limits={"max_outstanding": 2})
    client.get("/s/copy?rater=r-stale")
    first, second = fetch_question(client, "copy"), fetch_question(client, "copy")
    # another process changes the config: the web process's copy no longer matches the stored one
    update_config(conn, "copy", name="Copy, renamed", limits={"min_response_ms": 0})
    assert answer(client, first, study_id="copy").status_code == 201
    assert answer(client, first, study_id="copy").status_code == 409  # answered once, not twice
    assert answer(client, second, study_id="copy").status_code == 201
    assert len(read_answers(conn, "copy")) == 2


def test_a_question_limit_lowered_elsewhere_ends_the_rater_at_the_new_limit(client, conn):
    make_study(conn, limits={"max_questions_per_rater": 10})
    client.get("/s/copy?PROLIFIC_PID=p-limit")
    question = fetch_question(client, "copy")
    assert question["progress"]["total"] == 10
    body = answer(client, question, study_id="copy").get_json()
    assert body["next"]["progress"] == {"answered": 1, "total": 10}
    update_config(conn, "copy", limits={"max_questions_per_rater": 2})
    body = answer(client, body["next"], study_id="copy").get_json()
    # the second answer reaches the new limit: no next question, the rater is done with a code
    assert body["next"] is None
    assert body["done"]["code"] == "rater_done"
    response = client.get("/api/studies/copy/questions/next")
    assert response.status_code == 409
    assert response.get_json()["error"]["code"] == "rater_done"
    assert len(read_answers(conn, "copy")) == 2


def test_a_study_deleted_and_created_again_under_its_id_is_read_afresh(client, conn):
    make_study(conn)
    client.get("/s/copy?rater=r-again")
    old = fetch_question(client, "copy")
    conn.flushall()  # the study is gone (e.g. a restore into an empty Redis) ...
    assert client.get("/api/studies/copy/questions/next").status_code == 404
    make_study(conn, limits={"max_questions_per_rater": 4})  # ... and made again with other limits
    client.get("/s/copy?rater=r-again")
    assert fetch_question(client, "copy")["progress"]["total"] == 4
    # the old question's token is not one of the new study's questions
    assert answer(client, old, study_id="copy").status_code in (400, 409, 410)
    assert read_answers(conn, "copy") == []
