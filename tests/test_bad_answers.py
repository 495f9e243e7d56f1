"""Every bad answer gets a 4xx with the JSON error shape and leaves the answer log unchanged."""
from __future__ import annotations

import time

import pytest
from helpers import answer, colour_items, fetch_question, index_of

from webapp.tokens import sign_question
from workers.store.answers import count_answers
from workers.store.config import StudyConfig
from workers.store.studies import create_study


def error_of(response, status):
    assert response.status_code == status, response.get_data(as_text=True)
    body = response.get_json()
    assert set(body) == {"error"} and {"code", "message"} <= set(body["error"])
    assert body["error"]["message"]
    return body["error"]["code"]


def test_forged_token_is_refused(client, conn, study_id):
    question = fetch_question(client)
    forged = dict(question, token=question["token"][:-4] + "AAAA")
    assert error_of(answer(client, forged), 400) == "invalid_token"
    payload = {"s": study_id, "q": {"qid": "x", "kind": "triplet", "head": 0, "candidates": [1, 2]}, "r": "me",
               "t": time.time()}
    other_key = dict(question, token=sign_question("not-the-server-key", payload))
    assert error_of(answer(client, other_key, choice=question["candidates"][0]["handle"]), 400) == "invalid_token"
    assert count_answers(conn, study_id) == 0


def test_expired_token_is_refused(client, conn, study_id, monkeypatch):
    real_time = time.time
    monkeypatch.setattr("itsdangerous.timed.time.time", lambda: real_time() - 3600)
    question = fetch_question(client)
    monkeypatch.setattr("itsdangerous.timed.time.time", real_time)
    assert error_of(answer(client, question), 410) == "expired_token"
    assert count_answers(conn, study_id) == 0


def test_reused_token_is_refused_and_the_first_answer_kept(client, conn, study_id):
    question = fetch_question(client)
    first = answer(client, question, choice=question["candidates"][0]["handle"])
    assert first.status_code == 201
    again = answer(client, question, choice=question["candidates"][1]["handle"])
    assert error_of(again, 409) == "already_answered"
    assert again.get_json()["error"]["answer_id"] == first.get_json()["answer"]["id"]
    assert count_answers(conn, study_id) == 1


@pytest.mark.parametrize("choice", ["head", 999, -1, "1", 1.5, True, None])
def test_choice_not_offered_is_refused(client, conn, study_id, choice):
    question = fetch_question(client)
    offered = {index_of(c) for c in question["candidates"]}
    if choice == "head":
        choice = question["head"]["handle"]
    elif choice == 999:
        choice = next(i for i in range(10) if i not in offered and i != index_of(question["head"]))
    body = {"token": question["token"], "choice": choice}
    response = client.post(f"/api/studies/{study_id}/answers", json=body)
    assert error_of(response, 400) in {"choice_not_offered", "malformed_answer", "item_not_shown"}
    assert count_answers(conn, study_id) == 0


@pytest.mark.parametrize("data,content_type,status,code", [
    ("{not json", "application/json", 400, "malformed_json"),
    ("[1, 2]", "application/json", 400, "malformed_answer"),
    ('{"choice": "a-handle"}', "application/json", 400, "invalid_token"),
    ("token=abc&choice=1", "application/x-www-form-urlencoded", 415, "unsupported_media_type"),
])
def test_malformed_bodies_are_refused(client, conn, study_id, data, content_type, status, code):
    fetch_question(client)
    response = client.post(f"/api/studies/{study_id}/answers", data=data, content_type=content_type)
    assert error_of(response, status) == code
    assert count_answers(conn, study_id) == 0


def test_enormous_body_is_refused(client, conn, study_id):
    response = client.post(f"/api/studies/{study_id}/answers", data="x" * (1 << 20), content_type="application/json")
    assert error_of(response, 413) == "request_entity_too_large"
    assert count_answers(conn, study_id) == 0


def test_unknown_study_is_refused(client, researcher_client, conn, study_id):
    assert error_of(client.get("/api/studies/nope/questions/next"), 404) == "unknown_study"
    assert error_of(client.post("/api/studies/nope/answers", json={"token": "x", "choice": 1}), 404) == "unknown_study"
    assert error_of(researcher_client.get("/api/studies/NOT..valid/stats"), 404) == "unknown_study"
    assert researcher_client.get("/studies/nope").status_code == 404
    assert client.get("/s/nope").status_code == 404


def test_token_of_another_study_is_refused(client, conn, study_id):
    create_study(conn, StudyConfig(name="Other"), colour_items(5), study_id="other")
    question = fetch_question(client, "other")
    response = answer(client, question, study_id=study_id)
    assert error_of(response, 400) == "wrong_study"
    assert count_answers(conn, study_id) == count_answers(conn, "other") == 0


def test_token_of_another_rater_is_refused(app, conn, study_id):
    alice, mallory = app.test_client(), app.test_client()
    question = fetch_question(alice)
    assert error_of(answer(mallory, question), 403) == "wrong_rater"
    assert count_answers(conn, study_id) == 0
    assert answer(alice, question).status_code == 201


def test_bad_response_time_is_refused(client, conn, study_id):
    question = fetch_question(client)
    assert error_of(answer(client, question, response_ms=-5), 400) == "malformed_answer"
    assert count_answers(conn, study_id) == 0


def test_unknown_api_route_answers_in_the_json_shape(client):
    assert error_of(client.get("/api/nothing-here"), 404) == "not_found"
    assert error_of(client.put("/api/studies/x/answers"), 405) == "method_not_allowed"


def test_the_same_token_sent_concurrently_is_stored_exactly_once(app, conn, study_id):
    from concurrent.futures import ThreadPoolExecutor

    first = app.test_client()
    question = fetch_question(first)
    with first.session_transaction() as session:
        rater = session["rater_id"]

    def send(_):
        client = app.test_client()
        with client.session_transaction() as session:
            session["rater_id"] = rater
        return answer(client, question).status_code

    with ThreadPoolExecutor(max_workers=8) as pool:
        statuses = sorted(pool.map(send, range(16)))
    assert statuses == [201] + [409] * 15
    assert count_answers(conn, study_id) == 1
