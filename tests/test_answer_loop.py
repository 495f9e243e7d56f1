"""The whole loop in-process: question → answer → log → RQ worker → engine state → pool → export."""
from __future__ import annotations

import csv
import io
import json

from helpers import answer, fetch_question, index_of, run_worker

from workers.jobs.update_pass import apply_new_answers
from workers.store import engine_state, keys
from workers.store.answers import count_answers, read_answers
from workers.store.studies import get_items


def test_answer_flows_from_api_through_worker_into_engine_and_export(client, researcher_client, conn, study_id):
    question = fetch_question(client)
    assert question["kind"] == "triplet"
    head, (a, b) = question["head"], question["candidates"]
    assert len({index_of(head), index_of(a), index_of(b)}) == 3

    response = answer(client, question, choice=index_of(b), response_ms=1234)
    assert response.status_code == 201
    body = response.get_json()
    assert body["next"]["token"] != question["token"]  # one round trip: the next question comes back

    [logged] = read_answers(conn, study_id)
    assert (logged.head, logged.a, logged.b, logged.choice) == (index_of(head), index_of(a), index_of(b), index_of(b))
    assert logged.response_ms == 1234 and logged.id == body["answer"]["id"]

    assert run_worker(conn) == 1
    state = engine_state.load(conn, study_id, "random_triplets")
    assert engine_state.load_cursor(conn, study_id) == logged.id
    assert state["n_answers"] == 1
    assert state["wins"][index_of(head), index_of(b)] == 1
    assert state["shown"][index_of(head), index_of(a)] == 1
    assert conn.llen(keys.pool(study_id, "random_triplets")) == 8  # the worker refilled the pool to pool_size

    csv_text = researcher_client.get(f"/studies/{study_id}/answers.csv").get_data(as_text=True)
    rows = list(csv.DictReader(io.StringIO(csv_text)))
    assert len(rows) == 1
    ids = [item.id for item in get_items(conn, study_id)]
    assert rows[0]["choice_id"] == ids[index_of(b)] and rows[0]["head_id"] == ids[index_of(head)]
    jsonl = researcher_client.get(f"/studies/{study_id}/answers.jsonl").get_data(as_text=True).splitlines()
    assert json.loads(jsonl[0])["answer_id"] == logged.id


def test_pool_questions_are_served_after_the_first_update(client, researcher_client, conn, study_id):
    apply_new_answers(conn, study_id)
    pooled = [json.loads(q) for q in conn.lrange(keys.pool(study_id, "random_triplets"), 0, -1)]
    question = fetch_question(client)
    offered = (index_of(question["head"]), *[index_of(c) for c in question["candidates"]])
    first = pooled[0]
    assert offered == (first["head"], *first["candidates"])
    assert conn.llen(keys.pool(study_id, "random_triplets")) == len(pooled) - 1
    stats = researcher_client.get(f"/api/studies/{study_id}/stats").get_json()
    assert stats["fallback_served"] == 0 and stats["questions_served"] == 1


def test_empty_pool_serves_a_counted_fallback_question(client, researcher_client, conn, study_id):
    assert conn.llen(keys.pool(study_id, "random_triplets")) == 0
    question = fetch_question(client)
    assert len({index_of(question["head"]), *[index_of(c) for c in question["candidates"]]}) == 3
    stats = researcher_client.get(f"/api/studies/{study_id}/stats").get_json()
    assert stats["fallback_served"] == 1 and stats["fallback_rate"] == 1.0
    assert answer(client, question).status_code == 201
    [logged] = read_answers(conn, study_id)
    assert logged.fallback is True


def test_many_answers_queue_one_update_job_and_one_pass_applies_them_all(client, researcher_client, conn, study_id):
    apply_new_answers(conn, study_id)
    question = fetch_question(client)
    for _ in range(5):
        response = answer(client, question)
        assert response.status_code == 201
        question = response.get_json()["next"]
    assert run_worker(conn) == 1  # deduplicated: one job for five answers
    state = engine_state.load(conn, study_id, "random_triplets")
    assert state["n_answers"] == 5
    stats = researcher_client.get(f"/api/studies/{study_id}/stats").get_json()
    assert stats["answers"] == 5 and stats["raters"] == 1
    assert stats["engine"]["answers_applied"] == 5
    assert stats["algorithms"][0]["progress"]["answers"] == 5


def test_update_applies_each_answer_once_however_often_it_runs(client, conn, study_id):
    question = fetch_question(client)
    answer(client, question)
    apply_new_answers(conn, study_id)
    apply_new_answers(conn, study_id)
    run_worker(conn)
    state = engine_state.load(conn, study_id, "random_triplets")
    assert state["n_answers"] == count_answers(conn, study_id) == 1


def test_expired_questions_are_released_and_cannot_be_answered_after(client, conn, study_id):
    question = fetch_question(client)
    assert conn.zcard(keys.issued(study_id)) == 1
    summary = apply_new_answers(conn, study_id, now=10**10)  # far past every expiry
    assert summary["released"] == 1
    assert conn.zcard(keys.issued(study_id)) == 0
    response = answer(client, question)
    assert response.status_code == 410
    assert response.get_json()["error"]["code"] == "expired_token"
    assert count_answers(conn, study_id) == 0


def test_distinct_raters_are_counted_by_session(app, researcher_client, conn, study_id):
    for _ in range(3):
        client = app.test_client()
        assert answer(client, fetch_question(client)).status_code == 201
    stats = researcher_client.get(f"/api/studies/{study_id}/stats").get_json()
    assert stats["raters"] == 3 and stats["answers"] == 3


def test_a_starting_worker_catches_up_on_answers_a_crashed_job_left_behind(client, conn, study_id):
    from workers.store.queue import get_queue, schedule_stale_studies

    answer(client, fetch_question(client))
    get_queue(conn).empty()  # the queued job is lost, as if its worker died before running it
    conn.delete(keys.update_scheduled(study_id))
    assert schedule_stale_studies(conn) == [study_id]
    assert schedule_stale_studies(conn) == []  # already queued
    run_worker(conn)
    state = engine_state.load(conn, study_id, "random_triplets")
    assert state["n_answers"] == 1
    assert schedule_stale_studies(conn) == []  # up to date


def test_a_starting_worker_catches_up_when_the_update_flag_outlived_its_job(client, conn, study_id):
    """A worker killed (or cut off from a restarting Redis) between taking the job off the queue and starting it
    leaves the update flag set with no job behind it: later answers queue none until the flag expires."""
    from workers.store.queue import UPDATE_FLAG_TTL, get_queue, schedule_stale_studies

    answer(client, fetch_question(client))
    get_queue(conn).empty()  # taken off the queue by a worker that died before starting it: the flag stays
    assert conn.ttl(keys.update_scheduled(study_id)) > UPDATE_FLAG_TTL - 10
    assert answer(client, fetch_question(client)).status_code == 201
    assert len(get_queue(conn)) == 0  # the flag kept the second answer from queueing an update
    assert schedule_stale_studies(conn) == [study_id]
    run_worker(conn)
    assert engine_state.load(conn, study_id, "random_triplets")["n_answers"] == 2
