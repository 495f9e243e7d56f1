"""The rater flow on the server: entry and consent, limits, too-fast flags, catch trials and
per-rater stats, completion codes (page and CLI), and config errors for the rater options."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import NO_CHECKS, SECRET, answer, closer_candidate, colour_items, fetch_question, index_of

from webapp.cli import main
from webapp.questions_answers import completion_code
from workers.store import keys
from workers.store.answers import read_answers
from workers.store.config import ConfigError, StudyConfig
from workers.store.studies import create_study, set_status


def make_study(conn, study_id="flow", **fields):
    config = StudyConfig.from_dict({"name": "Flow", "algorithm": "random_triplets", "pool_size": 8,
                                    **NO_CHECKS, **fields})
    return create_study(conn, config, colour_items(), study_id=study_id)


def stats_of(conn, study_id, rater):
    raw = conn.hgetall(keys.rater_stats(study_id))
    # last_answer_at is the pacing clock, not a counter
    return {k.decode().rsplit(":", 1)[1]: v.decode() for k, v in raw.items()
            if k.decode().startswith(rater + ":") and not k.decode().endswith(":last_answer_at")}


def test_entry_keeps_prolific_and_mturk_parameters_in_the_session(client, conn, study_id):
    client.get(f"/s/{study_id}?PROLIFIC_PID=p-1&STUDY_ID=s-9&SESSION_ID=x-3")
    with client.session_transaction() as session:
        assert session["rater_id"] == "p-1"
        assert session["recruitment"] == {"PROLIFIC_PID": "p-1", "STUDY_ID": "s-9", "SESSION_ID": "x-3"}
    other = client.application.test_client()
    other.get(f"/s/{study_id}?workerId=W1&assignmentId=A2&hitId=H3")
    with other.session_transaction() as session:
        assert session["rater_id"] == "W1"
        assert session["recruitment"] == {"workerId": "W1", "assignmentId": "A2", "hitId": "H3"}


@pytest.mark.parametrize("status", ["paused", "closed"])
def test_a_paused_or_closed_study_shows_a_friendly_page(client, conn, study_id, status):
    set_status(conn, study_id, status)
    response = client.get(f"/s/{study_id}")
    assert response.status_code == 200
    assert "not collecting answers right now" in response.get_data(as_text=True)


def test_max_questions_per_rater_ends_politely_with_a_completion_code(client, conn):
    make_study(conn, limits={"max_questions_per_rater": 3})
    client.get("/s/flow?PROLIFIC_PID=p-max")
    question = fetch_question(client, "flow")
    assert question["progress"] == {"answered": 0, "total": 3}
    for n in range(3):
        body = answer(client, question, study_id="flow").get_json()
        question = body["next"]
        if n < 2:
            assert question["progress"]["answered"] == n + 1
    assert question is None
    assert body["done"]["code"] == "rater_done" and body["done"]["finish_url"] == "/s/flow/done"
    again = client.get("/api/studies/flow/questions/next")
    assert again.status_code == 409 and again.get_json()["error"]["code"] == "rater_done"
    assert len(read_answers(conn, "flow")) == 3
    assert stats_of(conn, "flow", "p-max")["completed"] == "1"
    # reopening the study link goes to the finish page
    assert client.get("/s/flow").headers["Location"].endswith("/s/flow/done")
    page = client.get("/s/flow/done").get_data(as_text=True)
    assert completion_code(SECRET, "flow", "p-max") in page


def test_the_limit_holds_for_questions_fetched_in_parallel(client, conn):
    make_study(conn, limits={"max_questions_per_rater": 2, "max_outstanding": 3})
    questions = [fetch_question(client, "flow") for _ in range(3)]
    assert [answer(client, q, study_id="flow").status_code for q in questions[:2]] == [201, 201]
    refused = answer(client, questions[2], study_id="flow")
    assert refused.status_code == 409 and refused.get_json()["error"]["code"] == "rater_done"
    assert len(read_answers(conn, "flow")) == 2


def test_the_study_answer_budget_is_enforced_across_raters(app, conn):
    make_study(conn, limits={"answer_budget": 3})
    raters = [app.test_client() for _ in range(2)]
    for rater in raters:
        assert answer(rater, fetch_question(rater, "flow"), study_id="flow").status_code == 201
    pending = fetch_question(raters[1], "flow")
    stale = fetch_question(raters[0], "flow")
    assert answer(raters[1], pending, study_id="flow").get_json()["done"]["code"] == "budget_reached"
    refused = answer(raters[0], stale, study_id="flow")
    assert refused.status_code == 409 and refused.get_json()["error"]["code"] == "budget_reached"
    assert len(read_answers(conn, "flow")) == 3


def test_too_fast_answers_are_kept_and_flagged(client, conn):
    make_study(conn, limits={"min_response_ms": 60000})
    client.get("/s/flow?rater=r-fast")
    assert answer(client, fetch_question(client, "flow"), study_id="flow", response_ms=90000).status_code == 201
    [stored] = read_answers(conn, "flow")
    assert stored.flags == "too_fast"  # the server's clock says seconds, whatever the page claims
    assert stats_of(conn, "flow", "r-fast") == {"answers": "1", "too_fast": "1"}


def test_answers_without_a_minimum_have_no_flags(client, conn, study_id):
    assert answer(client, fetch_question(client), response_ms=5).status_code == 201
    assert read_answers(conn, study_id)[0].flags == ""


def test_catch_trials_are_logged_apart_and_failures_flag_the_rater(client, conn):
    make_study(conn, attention={"rate": 1.0, "max_failure_share": 0.4, "min_checks": 2})
    client.get("/s/flow?rater=r-careless")
    question = fetch_question(client, "flow")
    # three distinct items: the head with a very similar and a very different one (by their positions)
    assert len({index_of(question["head"]), *(index_of(c) for c in question["candidates"])}) == 3
    assert "catch" not in json.dumps(question)  # only the signed token knows
    right = answer(client, question, choice=closer_candidate(question), study_id="flow").get_json()
    wrong_q = right["next"]
    other = next(index_of(c) for c in wrong_q["candidates"] if index_of(c) != closer_candidate(wrong_q))
    assert answer(client, wrong_q, choice=other, study_id="flow").status_code == 201
    stored = read_answers(conn, "flow")
    assert [(a.kind, a.algorithm, a.flags) for a in stored] == [("triplet", "catch", "catch_pass"),
                                                                ("triplet", "catch", "catch_fail")]
    stats = stats_of(conn, "flow", "r-careless")
    assert stats["catch"] == "2" and stats["catch_failed"] == "1"
    assert stats["flagged"] == "1"  # 1/2 > 0.4 after the minimum of 2 checks
    assert int(conn.hget(keys.counters("flow"), "questions_served") or 0) == 0  # pools untouched


def test_a_flagged_rater_can_be_stopped_politely_without_a_code(client, conn):
    make_study(conn, attention={"rate": 1.0, "max_failure_share": 0.0, "min_checks": 1, "stop_flagged": True})
    question = fetch_question(client, "flow")
    wrong = next(index_of(c) for c in question["candidates"] if index_of(c) != closer_candidate(question))
    body = answer(client, question, choice=wrong, study_id="flow").get_json()
    assert body["next"] is None and body["done"]["code"] == "rater_stopped"
    page = client.get("/s/flow/done").get_data(as_text=True)
    assert "no more questions for you" in page and "completion-code" not in page


def test_a_forged_catch_flag_is_refused(client, conn, study_id):
    from webapp.tokens import sign_question

    question = fetch_question(client)
    forged = sign_question("not-the-key", {"s": study_id, "q": {"catch": True}, "r": "x", "t": 0})
    response = client.post(f"/api/studies/{study_id}/answers", json={"token": forged, "choice": 0})
    assert response.status_code == 400 and response.get_json()["error"]["code"] == "invalid_token"
    assert answer(client, question).status_code == 201


def test_consent_gates_the_questions_and_declining_stores_nothing(app, conn):
    make_study(conn, consent="## Consent\n\nWe store your answers. <script>alert(1)</script> [x](javascript:alert(2))")
    rater = app.test_client()
    page = rater.get("/s/flow").get_data(as_text=True)
    assert "<h2>Consent</h2>" in page and "&lt;script&gt;" in page
    assert "<script>alert" not in page and 'href="javascript:' not in page
    assert rater.get("/api/studies/flow/questions/next").get_json()["error"]["code"] == "consent_required"
    html = rater.post("/s/flow/consent", data={"decision": "decline", "csrf_token": _csrf(page)})
    assert "did not give consent" in html.get_data(as_text=True)
    assert rater.get("/api/studies/flow/questions/next").status_code == 403
    agreed = rater.post("/s/flow/consent", data={"decision": "agree", "csrf_token": _csrf(page)})
    assert agreed.status_code == 302
    assert "id=\"instructions\"" in rater.get("/s/flow").get_data(as_text=True)
    assert answer(rater, fetch_question(rater, "flow"), study_id="flow").status_code == 201
    assert len(read_answers(conn, "flow")) == 1


def _csrf(html):
    import re

    return re.search(r'name="csrf_token" value="([^"]+)"', html).group(1)


def test_finish_page_redirects_to_prolific_and_stores_the_debrief(client, conn):
    make_study(conn, limits={"max_questions_per_rater": 1},
               completion={"prolific_redirect_url": "https://app.prolific.com/submissions/complete?cc={code}",
                           "debrief_question": "Was anything unclear?"})
    assert client.get("/s/flow/done").status_code == 302  # not done yet: back to the study
    client.get("/s/flow?PROLIFIC_PID=p-done")
    answer(client, fetch_question(client, "flow"), study_id="flow")
    page = client.get("/s/flow/done").get_data(as_text=True)
    code = completion_code(SECRET, "flow", "p-done")
    assert f"https://app.prolific.com/submissions/complete?cc={code}" in page
    assert "Was anything unclear?" in page
    client.post("/s/flow/done", data={"debrief": "All clear <b>thanks</b>", "csrf_token": _csrf(page)})
    assert conn.hget(keys.rater_stats("flow"), "p-done:debrief") == b"All clear <b>thanks</b>"
    assert len(read_answers(conn, "flow")) == 1  # the debrief is not an answer


def test_verify_code_cli_accepts_the_minted_code_only(conn, redis_url, tmp_path, monkeypatch):
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("PROXIMA_INSTANCE_PATH", str(tmp_path / "instance"))
    monkeypatch.setenv("PROXIMA_SECRET_KEY", SECRET)
    runner = CliRunner()
    code = completion_code(SECRET, "flow", "p-7")
    ok = runner.invoke(main, ["verify-code", "flow", "p-7", code.lower()])
    assert ok.exit_code == 0 and "valid" in ok.output
    for args in (["flow", "p-8", code], ["other", "p-7", code], ["flow", "p-7", "AAAAAAAAAAAA"]):
        bad = runner.invoke(main, ["verify-code", *args])
        assert bad.exit_code == 1 and "invalid" in bad.output


@pytest.mark.parametrize("fields, message", [
    ({"limits": {"max_questions": 3}}, "unknown field(s) max_questions in 'limits'"),
    ({"limits": {"max_questions_per_rater": 0}}, "limits.max_questions_per_rater"),
    ({"attention": {"rate": 1.5}}, "attention.rate"),
    ({"attention": {"stop_flagged": "yes"}}, "attention.stop_flagged"),
    ({"completion": {"prolific_redirect_url": "javascript:alert(1)"}}, "completion.prolific_redirect_url"),
    ({"practice": [{"head": "c0", "candidates": ["c1", "c2"], "answer": "c9"}]}, "practice.0.answer"),
    ({"consent": 3}, "consent"),
])
def test_rater_options_are_validated_with_readable_errors(fields, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        StudyConfig.from_dict({"name": "x", **fields})


def test_configs_without_the_rater_options_keep_their_defaults():
    config = StudyConfig.from_dict({"name": "x"})
    assert config.consent is None and config.practice == ()
    # no threshold of its own: each question kind's (none for triplets, as before)
    assert config.limits.max_questions_per_rater is None and config.limits.min_response_ms is None
    assert config.too_fast_ms("triplet") == 0
    assert config.attention.rate == "auto" and config.completion.prolific_redirect_url is None
    assert StudyConfig.from_stored(json.loads(config.to_json())) == config


def test_one_session_per_rater_id_the_latest_page_wins_and_answers_are_kept(app, conn, study_id):
    first, second = app.test_client(), app.test_client()
    assert first.get(f"/s/{study_id}?PROLIFIC_PID=p-77").status_code == 200
    question = fetch_question(first, study_id)
    assert second.get(f"/s/{study_id}?PROLIFIC_PID=p-77").status_code == 200  # same id, another browser
    response = first.get(f"/api/studies/{study_id}/questions/next")
    assert response.status_code == 409 and response.get_json()["error"]["code"] == "session_replaced"
    assert "another tab, browser or device" in response.get_json()["error"]["message"]
    # the question the first session already had is still answered and kept
    response = answer(first, question, study_id=study_id)
    assert response.status_code == 409 and response.get_json()["error"]["code"] == "session_replaced"
    assert [a.rater for a in read_answers(conn, study_id)] == ["p-77"]
    assert fetch_question(second, study_id)["token"]
    # reloading the page in the first browser makes it the rater's session again
    assert first.get(f"/s/{study_id}?PROLIFIC_PID=p-77").status_code == 200
    assert fetch_question(first, study_id)["token"]
    response = second.get(f"/api/studies/{study_id}/questions/next")
    assert response.status_code == 409
    # anonymous raters and API clients that never opened the page are not affected
    assert fetch_question(app.test_client(), study_id)["token"]


# ---------------------------------------------------------------- "can't decide" and rating catch trials

def test_a_skip_is_kept_and_flagged_counts_for_progress_and_the_planner_asks_again(client, conn):
    from engine.anntri import planner_from_state
    from workers.jobs.update_pass import apply_new_answers
    from workers.store.answers import NO_ITEM, export_triplets
    from workers.store.engine_state import load
    from workers.store.questions import pooled_questions

    make_study(conn, study_id="skips", algorithm="anntri", allow_skip=True, skip_label="Not sure",
               limits={"max_questions_per_rater": 3}, random_state=1)
    apply_new_answers(conn, "skips")
    assert "Not sure" in client.get("/s/skips?rater=r-skip").get_data(as_text=True)
    question = fetch_question(client, "skips")
    response = client.post("/api/studies/skips/answers", json={"token": question["token"], "skip": True,
                                                               "response_ms": 2400})
    assert response.status_code == 201, response.get_json()
    following = response.get_json()["next"]
    assert following["progress"]["answered"] == 1  # a skip costs the rater time: it counts
    (stored,) = read_answers(conn, "skips")
    assert stored.skipped and stored.flags == "skipped" and stored.choice == NO_ITEM and stored.value is None
    assert stored.response_ms == 2400 and stats_of(conn, "skips", "r-skip")["skipped"] == "1"
    # the pair goes back to the planner: one pending question fewer, no sample, nothing learned
    pair = (stored.head, stored.probe)
    pooled = [(q["head"], q["probe"]) for q in pooled_questions(conn, "skips", "anntri")]
    assert pair not in pooled and planner_from_state(load(conn, "skips", "anntri")).pending_[pair] == 1
    apply_new_answers(conn, "skips")
    planner = planner_from_state(load(conn, "skips", "anntri"))
    assert planner.count_.sum() == 0
    assert pair in [(q["head"], q["probe"]) for q in pooled_questions(conn, "skips", "anntri")]  # asked again
    assert planner.pending_[pair] == 1  # released, then planned once more
    assert "".join(export_triplets(read_answers(conn, "skips"))) == ""
    # the same token cannot be answered after it was skipped
    again = answer(client, question, study_id="skips")
    assert again.status_code == 409 and again.get_json()["error"]["code"] == "already_answered"


def test_skipping_is_refused_where_the_study_does_not_allow_it(client, conn, study_id):
    question = fetch_question(client)
    refused = client.post(f"/api/studies/{study_id}/answers", json={"token": question["token"], "skip": True})
    assert refused.status_code == 400 and refused.get_json()["error"]["code"] == "skip_not_allowed"
    assert "please choose an answer" in refused.get_json()["error"]["message"]
    both = client.post(f"/api/studies/{study_id}/answers",
                       json={"token": question["token"], "skip": True, "choice": question["candidates"][0]["handle"]})
    assert both.status_code == 400 and both.get_json()["error"]["code"] == "malformed_answer"
    not_bool = client.post(f"/api/studies/{study_id}/answers", json={"token": question["token"], "skip": "yes"})
    assert not_bool.status_code == 400 and "'skip' must be true" in not_bool.get_json()["error"]["message"]
    assert read_answers(conn, study_id) == []
    assert answer(client, question).status_code == 201  # the question is still open


def test_a_skipped_catch_trial_counts_as_failed(client, conn):
    make_study(conn, allow_skip=True, attention={"rate": 1.0, "max_failure_share": 0.4, "min_checks": 1})
    client.get("/s/flow?rater=r-skipper")
    question = fetch_question(client, "flow")
    assert client.post("/api/studies/flow/answers", json={"token": question["token"], "skip": True}).status_code == 201
    (stored,) = read_answers(conn, "flow")
    assert stored.flags == "skipped,catch_fail"
    stats = stats_of(conn, "flow", "r-skipper")
    assert stats["catch"] == "1" and stats["catch_failed"] == "1" and stats["skipped"] == "1"
    assert stats["flagged"] == "1"


def test_rating_studies_get_rating_catch_trials_a_very_similar_or_a_very_different_pair(client, conn):
    make_study(conn, algorithm="anntri", question_kind="rating",
               attention={"rate": 1.0, "max_failure_share": 0.4, "min_checks": 2})
    client.get("/s/flow?rater=r-rating")
    question, outcomes = fetch_question(client, "flow"), []
    for _ in range(12):
        assert question["kind"] == "rating"
        i, j = (index_of(item) for item in question["items"])
        assert i != j  # never one item twice: that is answered without a look
        alike = abs(i - j) == 1  # a neighbour (position i) or one of the farthest quarter
        assert alike or abs(i - j) >= 4
        value = 5 if alike else 1  # what a careful rater answers
        if len(outcomes) == 1:
            value = 1 if alike else 5  # one careless answer
        outcomes.append(value)
        body = client.post("/api/studies/flow/answers", json={"token": question["token"], "value": value}).get_json()
        if body["next"] is None:
            break
        question = body["next"]
    stored = read_answers(conn, "flow")
    assert {a.algorithm for a in stored} == {"catch"}
    assert [a.flags for a in stored[:3]] == ["catch_pass", "catch_fail", "catch_pass"]
    stats = stats_of(conn, "flow", "r-rating")
    assert stats["catch_failed"] == "1" and stats["flagged"] == "1"  # 1 of 2 > 0.4


def test_a_study_without_positions_or_labels_asks_no_catch_trial(client, conn):
    from workers.store.studies import Item
    items = [Item(id=f"t{i}", kind="text", text=f"word {i}") for i in range(10)]
    config = StudyConfig.from_dict({"name": "Flow", "algorithm": "random_triplets", "pool_size": 8,
                                    "attention": {"rate": 1.0}})
    create_study(conn, config, items, study_id="flow")
    client.get("/s/flow?rater=r-plain")
    assert answer(client, fetch_question(client, "flow"), study_id="flow").status_code == 201
    assert [a.algorithm for a in read_answers(conn, "flow")] == ["random_triplets"]


def test_labelled_items_give_catch_trials_of_one_same_label_and_one_other_label_candidate(client, conn):
    from workers.store.studies import Item
    items = [Item(id=f"t{i}", kind="text", text=f"word {i}", label="ab"[i % 2]) for i in range(10)]
    config = StudyConfig.from_dict({"name": "Flow", "algorithm": "random_triplets", "pool_size": 8,
                                    "attention": {"rate": 1.0}})
    create_study(conn, config, items, study_id="flow")
    client.get("/s/flow?rater=r-labels")
    question = fetch_question(client, "flow")
    head, (a, b) = index_of(question["head"]), (index_of(c) for c in question["candidates"])
    assert head not in (a, b) and {a % 2, b % 2} == {0, 1}
    same = a if a % 2 == head % 2 else b
    assert answer(client, question, choice=same, study_id="flow").status_code == 201
    assert read_answers(conn, "flow")[0].flags == "catch_pass"


@pytest.mark.parametrize("kind, expected", [("auto", "triplet"), ("rating", "rating"), ("triplet", "triplet")])
def test_the_attention_check_kind_is_chosen_by_config(kind, expected):
    config = StudyConfig.from_dict({"name": "x", "algorithm": "random_triplets", "attention": {"kind": kind}})
    assert config.catch_kind == expected
    rating = StudyConfig.from_dict({"name": "x", "algorithm": "anntri", "question_kind": "rating"})
    assert rating.catch_kind == "rating"


@pytest.mark.parametrize("fields, message", [
    ({"attention": {"kind": "quiz"}}, "field 'attention.kind' is 'quiz'; allowed values: auto, triplet, rating"),
    ({"allow_skip": "yes"}, "field 'allow_skip' must be of type boolean"),
    ({"skip_label": ""}, "skip_label"),
])
def test_skip_and_check_options_are_validated(fields, message):
    with pytest.raises(ConfigError, match=message):
        StudyConfig.from_dict({"name": "x", **fields})


def test_instructions_show_the_studys_own_items_as_example_images(client, conn):
    from workers.store.studies import Item

    items = [Item(id=f"shoe-{i}", kind="image", media_type="image/png") for i in range(3)]
    config = StudyConfig.from_dict({
        "name": "Shoes", "algorithm": "random_triplets",
        "instructions": "Like these two:\n\n![two similar shoes](item:shoe-2) "
                        "![remote](https://example.org/x.png)",
        "consent": "Example: ![a shoe](item:shoe-1)"})
    create_study(conn, config, items, media={i: b"\x89PNG fake" for i in range(3)}, study_id="shoes")
    consent_page = client.get("/s/shoes").get_data(as_text=True)
    # by a handle of its own, as a question's items: a rater's page is given no item index
    src = re.search(r'<img src="(/media/shoes/h/[A-Za-z0-9_-]+)" alt="a shoe"', consent_page).group(1)
    assert index_of({"handle": src.rsplit("/", 1)[1]}) == 1
    client.post("/s/shoes/consent", data={"decision": "agree", "csrf_token": _csrf(consent_page)})
    page = client.get("/s/shoes").get_data(as_text=True)
    src = re.search(r'<img src="(/media/shoes/h/[A-Za-z0-9_-]+)" alt="two similar shoes"', page).group(1)
    assert index_of({"handle": src.rsplit("/", 1)[1]}) == 2
    # an unknown id is refused at creation (tests/test_paid_study.py)
    assert client.get(src).status_code == 200 and client.get(src).data.startswith(b"\x89PNG fake")
    assert client.get("/media/shoes/2").status_code == 404  # by index: the researcher's dashboard only


def test_the_raters_export_lists_checks_skips_flags_and_debrief_answers(client, conn, redis_url, monkeypatch,
                                                                        tmp_path):
    import csv
    import io

    make_study(conn, allow_skip=True, limits={"max_questions_per_rater": 2},
               completion={"debrief_question": "Anything unclear?"})
    client.get("/s/flow?PROLIFIC_PID=p-debrief")
    question = fetch_question(client, "flow")
    body = client.post("/api/studies/flow/answers", json={"token": question["token"], "skip": True}).get_json()
    answer(client, body["next"], study_id="flow")
    page = client.get("/s/flow/done").get_data(as_text=True)
    client.post("/s/flow/done", data={"debrief": "=HYPERLINK(\"x\") the colours, all fine",
                                      "csrf_token": _csrf(page)})
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("PROXIMA_INSTANCE_PATH", str(tmp_path / "instance"))
    result = CliRunner().invoke(main, ["export", "flow", "--what", "raters"])
    assert result.exit_code == 0, result.output
    (row,) = list(csv.DictReader(io.StringIO(result.stdout)))
    assert row["rater"] == "p-debrief" and row["answers"] == "2" and row["skipped"] == "1"
    assert row["completed"] == "1" and row["flagged"] == "0" and row["excluded"] == "0"
    assert row["debrief"] == "'=HYPERLINK(\"x\") the colours, all fine"  # no formula in a spreadsheet


def test_the_start_button_is_served_disabled_until_the_rater_script_enables_it(client, study_id):
    # a click before rater.js has run would do nothing (the rater would think the page is broken)
    html = client.get(f"/s/{study_id}?PROLIFIC_PID=p-7").get_data(as_text=True)
    assert re.search(r'<button type="button" id="start" class="primary" disabled>', html)
    script = (Path(__file__).resolve().parents[1] / "static" / "js" / "rater.js").read_text()
    assert '$("start").disabled = false;' in script
