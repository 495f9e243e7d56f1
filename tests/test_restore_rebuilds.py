"""Restore rebuilds, never trusts (issue 26, item 5): rater statistics, flags, attention-check and repeat
outcomes and completion come from the restored answer log, not from the file; a log answering one
question twice is refused, naming the question."""
from __future__ import annotations

import json

import pytest
from helpers import answer, colour_items, fetch_question

from workers.store import keys
from workers.store.answers import read_answers
from workers.store.backup import BackupError, backup_lines, restore_study
from workers.store.config import StudyConfig
from workers.store.studies import create_study

#: Rater-stats fields the live path keeps that a replay does not reproduce: the queued-repeat count
#: (repeats queued, answered or not) and the code shown (the finish page shows it again).
NOT_REPLAYED = ("repeat_sources", "code_shown", "code_kind")


def live_study(app, conn) -> None:
    """Raters answering through the web app: attention checks, validation repeats, too-fast answers."""
    config = StudyConfig.from_dict({
        "name": "Live", "algorithm": "random_triplets", "pool_size": 8, "random_state": 2,
        "limits": {"max_questions_per_rater": 14, "min_response_ms": 5000},
        "attention": {"rate": 0.4, "min_checks": 2, "max_failure_share": 0.5, "validation_repeats": 3}})
    create_study(conn, config, colour_items(), study_id="live")
    for n, pick in enumerate((0, 1, 0)):
        client = app.test_client()
        client.get(f"/s/live?rater=r-{n}")
        question = fetch_question(client, "live")
        while question is not None:
            body = answer(client, question, choice=question["candidates"][pick]["handle"], study_id="live").get_json()
            question = body.get("next")


def stats(conn, study_id) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in conn.hgetall(keys.rater_stats(study_id)).items()
            if k.decode().rsplit(":", 1)[1] not in NOT_REPLAYED}


def records(lines):
    return [json.loads(line) for line in lines]


def rewrite(docs) -> list[str]:
    return [json.dumps(doc) + "\n" for doc in docs]


def test_a_restore_recomputes_what_the_live_path_counted(app, conn):
    live_study(app, conn)
    restore_study(conn, list(backup_lines(conn, "live")), as_id="copy")
    assert stats(conn, "copy") == stats(conn, "live")
    assert {k: v for k, v in stats(conn, "live").items() if k.endswith(":catch")}  # there were checks
    assert [a.flags for a in read_answers(conn, "copy")] == [a.flags for a in read_answers(conn, "live")]
    assert conn.smembers(keys.raters("copy")) == conn.smembers(keys.raters("live"))


def test_forged_statistics_flags_and_outcomes_in_the_file_are_not_kept(app, conn):
    live_study(app, conn)
    docs = records(backup_lines(conn, "live"))
    for doc in docs:
        if doc.get("type") == "answer":  # every check passed, every repeat agreed, nothing too fast
            flags = doc["fields"]["flags"].replace("catch_fail", "catch_pass").replace("repeat_disagree",
                                                                                         "repeat_agree")
            doc["fields"]["flags"] = ",".join(f for f in flags.split(",") if f != "too_fast")
        if doc.get("type") == "rater_stats":
            fields = {k: v for k, v in doc["fields"].items() if not k.endswith((":flagged", ":catch_failed"))}
            fields.update({"ghost:answers": "14", "ghost:completed": "1", "ghost:code_shown": "FAKECODE1234",
                           "r-0:code_shown": "FAKECODE1234", "r-0:debrief": "clear enough"})
            doc["fields"] = fields
        if doc.get("type") == "raters":
            doc["raters"].append("ghost")
    restore_study(conn, rewrite(docs), as_id="forged")
    assert stats(conn, "forged") == {**stats(conn, "live"), "r-0:debrief": "clear enough"}
    assert [a.flags for a in read_answers(conn, "forged")] == [a.flags for a in read_answers(conn, "live")]
    assert b"ghost" not in conn.smembers(keys.raters("forged"))
    assert conn.hget(keys.rater_stats("forged"), "r-0:code_shown") is None


def test_a_rater_with_no_answer_in_the_log_gets_no_code_after_a_restore(app, conn):
    live_study(app, conn)
    docs = records(backup_lines(conn, "live"))
    for doc in docs:
        if doc.get("type") == "rater_stats":
            doc["fields"].update({"ghost:answers": "14", "ghost:completed": "1"})
    restore_study(conn, rewrite(docs), as_id="ghosts")
    ghost = app.test_client()
    with ghost.session_transaction() as session:
        session["rater_id"] = "ghost"
    page = ghost.get("/s/ghosts/done")
    assert page.status_code == 302  # nothing to finish: back to the study page
    assert conn.hget(keys.rater_stats("ghosts"), "ghost:answers") is None


def test_a_log_answering_one_question_twice_is_refused_naming_the_question(app, conn):
    live_study(app, conn)
    docs = records(backup_lines(conn, "live"))
    answers = [d for d in docs if d.get("type") == "answer"]
    answers[3]["fields"]["qid"] = answers[1]["fields"]["qid"]
    qid = answers[1]["fields"]["qid"]
    with pytest.raises(BackupError, match=f"answers one question twice: question {qid} "
                                          rf"\(answers {answers[1]['id']} and {answers[3]['id']}, lines \d+ and \d+\)"):
        restore_study(conn, rewrite(docs), as_id="twice")
    assert not conn.exists(keys.study("twice"))
