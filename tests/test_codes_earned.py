"""No pay without honest work (issue 26, items 3 and 4): a code means the work was done, a study
that runs out gives a partial code or none (never the full one), a late last answer completes the
rater, and the anonymous-session cap counts sessions however they are made."""
from __future__ import annotations

import csv
import io

from click.testing import CliRunner
from helpers import SECRET, answer, colour_items, fetch_question

from webapp import questions_answers
from webapp.cli import main
from webapp.questions_answers import completion_code
from workers.store import keys
from workers.store.config import StudyConfig
from workers.store.raters import export_raters_csv
from workers.store.studies import create_study, set_status


def make_study(conn, study_id="codes", **fields):
    config = StudyConfig.from_dict({"name": "Codes", "algorithm": "random_triplets", "pool_size": 8, **fields})
    return create_study(conn, config, colour_items(), study_id=study_id)


def finish_page(client, study_id="codes") -> tuple[str | None, str]:
    """(the code the finish page shows or None, the page)."""
    page = client.get(f"/s/{study_id}/done").get_data(as_text=True)
    marker = 'id="completion-code"'
    if marker not in page:
        return None, page
    return page.split(marker, 1)[1].split(">", 1)[1].split("<", 1)[0].strip(), page


def one_answer_each(app, n: int, prefix: str = "r-once") -> list:
    raters = []
    for i in range(n):
        rater = app.test_client()
        rater.get(f"/s/codes?rater={prefix}-{i}")
        assert answer(rater, fetch_question(rater, "codes"), study_id="codes").status_code == 201
        raters.append(rater)
    return raters


def test_by_default_a_study_running_out_gives_no_code_for_fewer_answers_than_the_per_rater_count(app, conn):
    make_study(conn, limits={"answer_budget": 3, "max_questions_per_rater": 20})
    raters = one_answer_each(app, 3)
    for rater in raters:
        response = rater.get("/api/studies/codes/questions/next")
        assert response.get_json()["error"]["code"] == "budget_reached"  # marks the rater completed
        code, page = finish_page(rater)
        assert code is None and "filled up" in page


def test_partial_code_policy_gives_a_different_code_the_researcher_can_tell_apart(app, conn, tmp_path, monkeypatch):
    make_study(conn, limits={"answer_budget": 2, "max_questions_per_rater": 20}, completion={"partial_code": True})
    [rater, _] = one_answer_each(app, 2)
    rater.get("/api/studies/codes/questions/next")
    code, page = finish_page(rater)
    assert code == completion_code(SECRET, "codes", "r-once-0", "partial")
    assert code != completion_code(SECRET, "codes", "r-once-0")
    assert 'id="partial"' in page and "partial-completion code" in page
    assert questions_answers.completion_code_kind(SECRET, "codes", "r-once-0", code) == "partial"
    rows = {r["rater"]: r for r in csv.DictReader(io.StringIO("".join(export_raters_csv(conn, "codes"))))}
    assert rows["r-once-0"]["completion_code"] == code and rows["r-once-0"]["code_kind"] == "partial"
    assert rows["r-once-1"]["code_kind"] == ""  # never shown a code
    # verify-code tells the researcher it is a partial code, not a full one
    instance = tmp_path / "cli-instance"
    instance.mkdir()
    (instance / "secret_key").write_text(SECRET)
    monkeypatch.delenv("PROXIMA_SECRET_KEY", raising=False)
    monkeypatch.setenv("PROXIMA_INSTANCE_PATH", str(instance))
    result = CliRunner().invoke(main, ["verify-code", "codes", "r-once-0", code])
    assert result.exit_code == 0 and result.stdout.startswith("partial:"), result.output


def test_a_rater_who_did_the_work_gets_the_full_code_and_the_export_says_full(client, conn):
    make_study(conn, limits={"max_questions_per_rater": 3}, completion={"partial_code": True})
    client.get("/s/codes?rater=r-full")
    question = fetch_question(client, "codes")
    for _ in range(3):
        body = answer(client, question, study_id="codes").get_json()
        question = body["next"]
    assert body["done"]["code"] == "rater_done"
    code, _ = finish_page(client)
    assert code == completion_code(SECRET, "codes", "r-full")
    rows = list(csv.DictReader(io.StringIO("".join(export_raters_csv(conn, "codes")))))
    assert rows[0]["code_kind"] == "full"


def test_a_late_last_answer_under_accept_late_answers_completes_the_rater(client, conn):
    make_study(conn, accept_late_answers=True, limits={"max_questions_per_rater": 3})
    client.get("/s/codes?rater=r-late")
    question = fetch_question(client, "codes")
    for _ in range(2):
        question = answer(client, question, study_id="codes").get_json()["next"]
    set_status(conn, "codes", "closed")
    response = answer(client, question, study_id="codes")
    assert response.status_code == 201
    body = response.get_json()
    assert body["done"]["code"] == "rater_done" and body["done"]["finish_url"].endswith("/s/codes/done")
    code, _ = finish_page(client)
    assert code == completion_code(SECRET, "codes", "r-late")


def test_a_late_answer_short_of_the_count_gets_no_full_code(client, conn):
    make_study(conn, accept_late_answers=True, limits={"max_questions_per_rater": 5, "max_outstanding": 3})
    client.get("/s/codes?rater=r-short")
    held = [fetch_question(client, "codes") for _ in range(2)]
    set_status(conn, "codes", "closed")
    body = answer(client, held[0], study_id="codes").get_json()
    assert body["done"]["code"] == "study_closed"
    code, page = finish_page(client)
    assert code is None and "no completion code" in page
    assert conn.hget(keys.rater_stats("codes"), "r-short:completed") is None


# ---------------------------------------------------------------- item 4: every entry counts
def test_anonymous_sessions_made_by_the_question_api_count_against_the_cap(app, conn):
    make_study(conn, limits={"anonymous_sessions_per_address": 3})
    statuses = [app.test_client().get("/api/studies/codes/questions/next").status_code for _ in range(5)]
    assert statuses == [200, 200, 200, 429, 429]
    refused = app.test_client().get("/api/studies/codes/questions/next")
    assert refused.get_json()["error"]["code"] == "too_many_sessions" and refused.headers["Retry-After"]
    # one count per address: the page is refused too, and a session already made goes on
    assert app.test_client().get("/s/codes").status_code == 429


def test_an_address_capped_on_the_page_gets_no_session_from_the_api(app, conn):
    make_study(conn, limits={"anonymous_sessions_per_address": 2})
    assert [app.test_client().get("/s/codes").status_code for _ in range(3)] == [200, 200, 429]
    bot = app.test_client(use_cookies=False)
    for _ in range(5):
        assert bot.get("/api/studies/codes/questions/next").status_code == 429
        response = bot.post("/api/studies/codes/answers", json={"token": "x", "choice": 1})
        assert response.status_code == 429 and response.get_json()["error"]["code"] == "too_many_sessions"
    assert conn.xlen(keys.answers("codes")) == 0


def test_the_cap_holds_with_rate_limits_on(app, conn):
    app.config.update(RATE_LIMIT_EXEMPT_ADDRESSES=())
    make_study(conn, limits={"anonymous_sessions_per_address": 2})
    statuses = [app.test_client().get("/api/studies/codes/questions/next").status_code for _ in range(3)]
    assert statuses == [200, 200, 429]


def test_the_finish_page_mints_no_session_that_would_skip_the_cap(app, conn):
    make_study(conn, limits={"anonymous_sessions_per_address": 1})
    assert app.test_client().get("/s/codes").status_code == 200
    sneaky = app.test_client()
    assert sneaky.get("/s/codes/done").status_code == 302
    assert sneaky.get("/s/codes").status_code == 429
    assert sneaky.get("/api/studies/codes/questions/next").status_code == 429


# ---------------------------------------------------------------- item 7: a stopped rater knows what to do
def stopped_page(app, conn, link: str, **completion) -> str:
    make_study(conn, attention={"rate": 0.0, "stop_flagged": True}, completion=completion)
    rater = app.test_client()
    rater.get(link)
    rater_id = next(part.split("=", 1)[1] for part in link.split("?", 1)[1].split("&")
                    if part.split("=")[0] in ("PROLIFIC_PID", "workerId"))
    conn.hset(keys.rater_stats("codes"), f"{rater_id}:flagged", 1)
    response = rater.get("/api/studies/codes/questions/next")
    assert response.get_json()["error"]["code"] == "rater_stopped"
    page = rater.get("/s/codes/done").get_data(as_text=True)
    assert 'id="completion-code"' not in page
    return page


def test_a_stopped_prolific_rater_is_told_the_study_ended_and_to_return_the_submission(app, conn):
    page = stopped_page(app, conn, "/s/codes?PROLIFIC_PID=p-stopped&STUDY_ID=s&SESSION_ID=x")
    assert "The study has ended for you" in page and "no completion code" in page
    assert "return your submission" in page and "Prolific" in page and "message the researcher" in page


def test_a_stopped_mturk_rater_is_told_to_return_the_hit(app, conn):
    page = stopped_page(app, conn, "/s/codes?workerId=w-stopped&assignmentId=a1&hitId=h1")
    assert "The study has ended for you" in page and "return the HIT" in page


def test_the_study_can_say_it_in_its_own_words(app, conn):
    page = stopped_page(app, conn, "/s/codes?PROLIFIC_PID=p-own", stopped_message="Sorry! **Return** it, please.")
    assert "Sorry! <strong>Return</strong> it, please." in page and "The study has ended for you" not in page
    assert 'id="next-step"' in page
