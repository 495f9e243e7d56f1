"""Raters cannot earn a code without the work: what the browser receives hides attention checks,
questions held unanswered are capped and paced by the server, flags and study state apply to
questions already handed out, and used-token markers outlive any token TTL."""
from __future__ import annotations

import base64
import json
import time

from helpers import NO_CHECKS, answer, closer_candidate, colour_items, fetch_question

from workers.store import keys
from workers.store.answers import read_answers
from workers.store.config import StudyConfig
from workers.store.studies import create_study, set_status

REVEALING = ("catch", "algorithm", "probe", "fallback", "qid")


def make_study(conn, study_id="honest", **fields):
    config = StudyConfig.from_dict({"name": "Honest", "algorithm": "random_triplets", "pool_size": 8,
                                    **NO_CHECKS, **fields})
    return create_study(conn, config, colour_items(), study_id=study_id)


def readable_parts(token: str) -> str:
    """Everything a client can decode from a token: each dot-separated part, base64-decoded if it is."""
    out = []
    for part in token.split("."):
        padded = part + "=" * (-len(part) % 4)
        try:
            out.append(base64.urlsafe_b64decode(padded).decode("utf-8", errors="replace"))
        except ValueError:
            pass
        out.append(part)
    return "\n".join(out)


def stats_of(conn, study_id, rater):
    raw = conn.hgetall(keys.rater_stats(study_id))
    return {k.decode().rsplit(":", 1)[1]: v.decode() for k, v in raw.items() if k.decode().startswith(rater + ":")}


def one_catch_answered(client, conn, rater: str):
    """(question, stored answer): ``rater`` answers one catch trial as a careful person would, in a study
    of catch trials only."""
    make_study(conn, attention={"rate": 1.0})
    client.get(f"/s/honest?rater={rater}")
    question = fetch_question(client, "honest")
    assert answer(client, question, choice=closer_candidate(question), study_id="honest").status_code == 201
    [stored] = read_answers(conn, "honest")
    return question, stored


def refusal(response) -> str:
    """The error code of a 409 refusal of an answer."""
    assert response.status_code == 409, response.get_data(as_text=True)
    return response.get_json()["error"]["code"]


def test_item4_nothing_the_browser_receives_names_the_check_or_the_algorithm(client, conn):
    make_study(conn, attention={"rate": 1.0})
    client.get("/s/honest?rater=r-bot")
    response = client.get("/api/studies/honest/questions/next")
    body = response.get_data(as_text=True)
    question = response.get_json()["question"]
    decoded = readable_parts(question["token"])
    for word in REVEALING:
        assert word not in decoded, word
        assert f'"{word}"' not in body, word
    # the head's index appears only where the page shows it, not as a hidden expected answer
    assert '"head"' not in decoded and "head" not in decoded


def test_item4_the_token_still_carries_the_question_to_the_server(client, conn):
    _, stored = one_catch_answered(client, conn, "r-honest")
    assert stored.algorithm == "catch" and "catch_pass" in stored.flags


def test_item4_abandoned_catch_trials_count_as_failed(client, conn):
    make_study(conn, attention={"rate": 1.0, "min_checks": 2, "max_failure_share": 0.0},
               limits={"max_outstanding": 2})
    client.get("/s/honest?rater=r-skipper")
    held = [fetch_question(client, "honest") for _ in range(4)]  # asks again instead of answering
    stats = stats_of(conn, "honest", "r-skipper")
    assert stats.get("catch") == "2" and stats.get("catch_failed") == "2"
    # the next answer applies the flag rule: two checks, both failed (abandoned)
    assert answer(client, held[-1], choice=closer_candidate(held[-1]), study_id="honest").status_code == 201
    assert stats_of(conn, "honest", "r-skipper").get("flagged") == "1"


def test_item5_at_most_max_outstanding_questions_are_answerable(client, conn):
    make_study(conn, limits={"max_outstanding": 2})
    client.get("/s/honest?rater=r-pre")
    held = [fetch_question(client, "honest") for _ in range(5)]
    codes = [answer(client, q, study_id="honest").status_code for q in held]
    assert codes == [410, 410, 410, 201, 201]
    assert len(read_answers(conn, "honest")) == 2


def test_item5_a_burst_of_held_answers_is_too_fast(client, conn):
    make_study(conn, limits={"min_response_ms": 500, "max_outstanding": 2})
    client.get("/s/honest?rater=r-burst")
    held = [fetch_question(client, "honest") for _ in range(2)]
    time.sleep(0.6)
    for q in held:
        assert answer(client, q, study_id="honest", response_ms=900).status_code == 201
    flags = [a.flags for a in read_answers(conn, "honest")]
    assert flags == ["", "too_fast"]  # the second came milliseconds after the first
    assert stats_of(conn, "honest", "r-burst").get("too_fast") == "1"


def test_item5_a_paced_rater_is_not_flagged(client, conn):
    make_study(conn, limits={"min_response_ms": 200})
    client.get("/s/honest?rater=r-calm")
    question = fetch_question(client, "honest")
    for _ in range(3):
        time.sleep(0.25)
        response = answer(client, question, study_id="honest")
        assert response.status_code == 201
        question = response.get_json()["next"]
    assert all(a.flags == "" for a in read_answers(conn, "honest"))


def test_item7_a_flagged_stopped_raters_held_questions_are_refused(client, conn):
    make_study(conn, attention={"rate": 0.0, "stop_flagged": True}, limits={"max_outstanding": 3})
    client.get("/s/honest?rater=r-flagged")
    held = [fetch_question(client, "honest") for _ in range(3)]
    conn.hset(keys.rater_stats("honest"), "r-flagged:flagged", 1)
    assert [refusal(answer(client, q, study_id="honest")) for q in held] == ["rater_stopped"] * 3
    assert read_answers(conn, "honest") == []


def test_item7_paused_and_closed_studies_refuse_earlier_tokens(client, conn):
    make_study(conn, limits={"max_outstanding": 3})
    client.get("/s/honest?rater=r-late")
    held = [fetch_question(client, "honest") for _ in range(2)]
    refusals = []
    for status, q in zip(("paused", "closed"), held, strict=True):
        set_status(conn, "honest", status)
        refusals.append(refusal(answer(client, q, study_id="honest")))
    assert refusals == ["study_closed", "study_closed"]
    assert read_answers(conn, "honest") == []


def test_item8_used_token_markers_outlive_the_longest_token_ttl(client, conn):
    question, stored = one_catch_answered(client, conn, "r-twice")
    marker_ttl = conn.ttl(keys.used_token("honest", stored.qid))
    assert marker_ttl > 7 * 24 * 3600  # the schema's longest token_ttl_seconds
    # the researcher raises the TTL on the running study: the same token is still answered once
    raw = json.loads(conn.hget(keys.study("honest"), "config"))
    raw["token_ttl_seconds"] = 7 * 24 * 3600
    conn.hset(keys.study("honest"), "config", json.dumps(raw))
    again = answer(client, question, choice=closer_candidate(question), study_id="honest")
    assert again.status_code == 409
    assert len(read_answers(conn, "honest")) == 1


def finish_code(client, study_id="honest"):
    page = client.get(f"/s/{study_id}/done").get_data(as_text=True)
    return 'id="completion-code"' in page, page


def test_item6_a_full_study_says_so_before_any_work_and_gives_no_code(app, conn):
    make_study(conn, limits={"answer_budget": 1})
    first = app.test_client()
    first.get("/s/honest?rater=r-first")
    assert answer(first, fetch_question(first, "honest"), study_id="honest").status_code == 201
    codes = 0
    for n in range(10):
        late = app.test_client()
        page = late.get(f"/s/honest?rater=r-late-{n}").get_data(as_text=True)
        assert 'id="full"' in page
        late.get("/api/studies/honest/questions/next")  # a bot asks anyway: budget_reached marks it done
        shown, _ = finish_code(late)
        codes += shown
    assert codes == 0
    assert finish_code(first)[0]  # the one who answered keeps their code


def test_item6_a_code_needs_the_configured_minimum_of_answers(client, conn):
    make_study(conn, limits={"min_answers_for_code": 3, "max_questions_per_rater": 10})
    client.get("/s/honest?rater=r-short")
    question = fetch_question(client, "honest")
    for _ in range(2):
        question = answer(client, question, study_id="honest").get_json()["next"]
    conn.hset(keys.rater_stats("honest"), "r-short:completed", 1)  # e.g. the study completed under them
    shown, page = finish_code(client)
    assert not shown and "at least 3 answers" in page
    conn.hdel(keys.rater_stats("honest"), "r-short:completed")
    client.get("/s/honest")
    answer(client, question, study_id="honest")
    conn.hset(keys.rater_stats("honest"), "r-short:completed", 1)
    assert finish_code(client)[0]


def test_item6_a_held_unanswered_catch_trial_withholds_the_code(client, conn):
    make_study(conn, attention={"rate": 1.0, "min_checks": 1, "max_failure_share": 0.0})
    client.get("/s/honest?rater=r-dodger")
    fetch_question(client, "honest")  # a catch trial, never answered
    conn.hset(keys.rater_stats("honest"), "r-dodger:completed", 1)
    conn.hset(keys.rater_stats("honest"), "r-dodger:answers", 5)
    shown, page = finish_code(client)
    assert not shown and "attention checks" in page


def test_item6_anonymous_sessions_per_address_are_limited(app, conn):
    make_study(conn, limits={"anonymous_sessions_per_address": 3})
    statuses = [app.test_client().get("/s/honest").status_code for _ in range(5)]
    assert statuses == [200, 200, 200, 429, 429]
    assert app.test_client().get("/s/honest?rater=r-recruited").status_code == 200  # recruited ids pass


def test_item6_code_minting_is_rate_limited_per_address(app, conn):
    app.config.update(CODE_RATE_PER_ADDRESS=0.001, CODE_BURST_PER_ADDRESS=2, RATE_LIMIT_EXEMPT_ADDRESSES=())
    make_study(conn, limits={"max_questions_per_rater": 1})
    statuses = []
    for n in range(3):
        rater = app.test_client()
        rater.get(f"/s/honest?rater=r-mint-{n}")
        response = answer(rater, fetch_question(rater, "honest"), study_id="honest")
        assert response.status_code == 201
        statuses.append(rater.get("/s/honest/done").status_code)
        assert rater.get("/s/honest/done").status_code == statuses[-1]  # a reload costs nothing more
    assert statuses == [200, 200, 429]
