"""Issue 40: catch trials by labels alone, judged by the crowd in a running study (webapp.catches,
workers/jobs/rater_checks.py). Text items labelled by bins of a line the study does not know: a label states
no margin, so careful raters miss some label comparisons (an item of the next bin nearer the head than one of
its own), and the stated-rate rule flagged them. Here a miss waits for the other raters' answers, careful
raters keep their code, raters answering at random are flagged, and the finish page shows a code whose verdict
is still to come marked unconfirmed. Real Redis, the Flask test client, the worker run in this process;
everything seeded."""
from __future__ import annotations

import math
import random
import time

import pytest
from helpers import index_of, run_rater, run_worker

from webapp import catches
from webapp.questions_answers import catch_question, crowd_catch_question
from workers.jobs import rater_checks
from workers.store import keys
from workers.store.answers import CATCH_ALGORITHM, Answer
from workers.store.config import StudyConfig
from workers.store.queue import schedule_update
from workers.store.raters import (
    ANSWER_CHECK_WAIT_SECONDS,
    CATCH_PENDING,
    CODE_BEFORE_CHECK_FIELD,
    rater_table,
)
from workers.store.studies import Item, create_study, get_study, set_status

RANDOM_SEED = 40  # the global random the platform draws from (conftest's ``seeded``)
#: Twelve text items on a line (0 .. 11), labelled by thirds: the study knows the labels, not the line.
N_ITEMS, BINS, QUESTIONS = 12, 3, 40
LAPSE = 0.1
#: How sharply a careful rater tells two distances apart (per unit of the line): with these the stated-rate
#: rule (the code before this) withheld the codes of 3 of the first test's 27 careful raters.
SHARPNESS = 0.7
CREATED_AT = 1_800_000_000.0


@pytest.fixture(autouse=True)
def retired_read_at_every_request(monkeypatch):
    """Each request reads the retired comparisons (a web process keeps them RETIRED_CACHE_SECONDS of wall-clock
    time, which would make the questions a test's raters see depend on its speed), and no copy of another test's
    study is kept."""
    catches.forget()
    monkeypatch.setattr(catches, "RETIRED_CACHE_SECONDS", 0.0)
    yield
    catches.forget()


def labels_study(conn, study_id: str, **attention) -> str:
    """A triplet study of text items with labels alone (no positions, no features), 40 questions per rater, the
    answer check off (only the catch trials judge the raters here). Each test its own ``study_id``: the creation
    time is fixed, and a process keeps copies of a study by its id and creation time."""
    items = [Item(id=f"w{i}", kind="text", text=f"word {i}", label=f"bin {i * BINS // N_ITEMS}")
             for i in range(N_ITEMS)]
    config = StudyConfig.from_dict({
        "name": "Words", "algorithms": [{"algorithm": "random_triplets"}], "pool_size": 10, "random_state": 3,
        "heldout_share": 0, "limits": {"max_questions_per_rater": QUESTIONS, "min_answers_for_code": QUESTIONS},
        "attention": {"answer_check": False, **attention}})
    create_study(conn, config, items, study_id=study_id)
    # the comparisons a study asks are drawn from its id and creation time: a fixed time, the same ones every run
    conn.hset(keys.study(study_id), "created_at", repr(CREATED_AT))
    run_worker(conn)
    return study_id


def careful(question: dict, rng: random.Random) -> int:
    """A careful rater as people are: the candidate nearer the head on the line with a chance logistic in how
    much nearer it is (a near tie close to a coin flip), one time in ten a pick at random."""
    head = index_of(question["head"])
    a, b = (index_of(c) for c in question["candidates"])
    if rng.random() < LAPSE:
        return rng.choice((a, b))
    gap = abs(b - head) - abs(a - head)
    return a if rng.random() < 1 / (1 + math.exp(-SHARPNESS * gap)) else b


def at_random(question: dict, rng: random.Random) -> int:
    return index_of(rng.choice(question["candidates"]))


def catch_answers(conn, study_id: str, rater: str | None = None) -> list[Answer]:
    entries = conn.xrange(keys.answers(study_id))
    return [a for a in (Answer.from_stream(i, f) for i, f in entries)
            if a.algorithm == CATCH_ALGORITHM and (rater is None or a.rater == rater)]


def close(conn, study_id: str) -> None:
    """What the dashboard's Close button does: the status, then an update (its last look judges the rest)."""
    set_status(conn, study_id, "closed")
    schedule_update(conn, study_id)
    run_worker(conn)


def test_careful_raters_keep_their_code_and_random_raters_are_flagged_by_the_crowd(app, conn, researcher_client,
                                                                                 seeded):
    # flagged at p < 0.001 (half the false_flag_rate): a careful rater is flagged about one time in a thousand,
    # and 27 of them none with room to spare
    study_id = labels_study(conn, "words-crowd", crowd_raters=10, false_flag_rate=0.002)
    raters = []
    for n in range(36):
        bot = n % 4 == 3  # a quarter of the crowd answers at random, spread through the study
        name = f"{'bot' if bot else 'person'}-{n}"
        run_rater(app, study_id, name, at_random if bot else careful, seed=n)
        run_worker(conn)
        raters.append(name)
    study = get_study(conn, study_id)
    assert study.config.crowd_catch_every == 2  # 20 catch trials of 40 questions (the crowd-judged plan)
    # every catch trial asked a label comparison, kept in the log with it
    logged = catch_answers(conn, study_id)
    assert logged and all(a.claim for a in logged)
    retired = {m.decode() for m in conn.smembers(keys.catch_retired(study_id))}
    assert retired and retired < {a.claim for a in logged}

    # the comparisons retired are no longer asked: a rater joining now is shown none of them
    catches.forget(study_id)
    run_rater(app, study_id, "person-late", careful, seed=99)
    late = catch_answers(conn, study_id, "person-late")
    assert late and not {a.claim for a in late} & retired

    close(conn, study_id)
    rows = {r["rater"]: r for r in rater_table(conn, study_id)}
    people = [r for r in rows if r.startswith("person")]
    bots = [r for r in rows if r.startswith("bot")]
    # careful raters missed label comparisons (the stated-rate rule counted each miss as failed), and kept
    # their codes
    assert sum(int(conn.hget(keys.rater_stats(study_id), keys.rater_field(r, CATCH_PENDING)) or 0) for r in people)
    assert not any(rows[r]["flagged"] for r in people), [(r, rows[r]["crowd_p"]) for r in people if rows[r]["flagged"]]
    assert all(rows[r]["flagged"] and rows[r]["crowd_flagged"] for r in bots), [(r, rows[r]["crowd_p"]) for r in bots]
    assert all(rows[r]["crowd_p"] is not None and rows[r]["catch_pending"] == 0 for r in rows)  # all judged
    assert all(rows[r]["catch_failed"] == 0 for r in rows)  # misses wait for the crowd, none fail at once

    # the Raters tab lists the comparisons' standing
    page = researcher_client.get(f"/studies/{study_id}?tab=raters").get_data(as_text=True)
    assert 'id="crowd-claims"' in page
    claims = {k.decode(): v.decode() for k, v in conn.hgetall(keys.catch_claims(study_id)).items()}
    assert int(claims["retired"]) >= 1 and int(claims["confirmed"]) + int(claims["pending"]) >= 1
    assert f'<span id="crowd-retired">{claims["retired"]}</span>' in page


def test_a_missed_label_catch_trial_waits_for_the_crowd_and_the_code_comes_unconfirmed(app, conn, seeded):
    study_id = labels_study(conn, "words-pending", crowd_raters=30, false_flag_rate=0.002)
    client = run_rater(app, study_id, "person-0", careful, seed=1)
    missed = [a for a in catch_answers(conn, study_id, "person-0") if "catch_fail" in a.flags.split(",")]
    assert missed  # a label comparison the careful rater saw otherwise
    run_worker(conn)  # the crowd has no one else yet: the verdict waits for 30 more raters
    row = next(r for r in rater_table(conn, study_id) if r["rater"] == "person-0")
    assert row["catch_pending"] == len(missed) and row["catch_failed"] == 0 and not row["flagged"]
    page = client.get(f"/s/{study_id}/done")
    assert 'id="checking"' in page.get_data(as_text=True) and page.headers["Refresh"]
    # the wait runs out: the code is shown, marked unconfirmed, and the Raters table says so
    last = float(conn.hget(keys.rater_stats(study_id), keys.rater_field("person-0", "last_answer_at")))
    conn.hset(keys.rater_stats(study_id), keys.rater_field("person-0", "last_answer_at"),
              last - ANSWER_CHECK_WAIT_SECONDS - 1)
    page = client.get(f"/s/{study_id}/done").get_data(as_text=True)
    assert 'id="completion-code"' in page and 'id="code-unconfirmed"' in page
    assert conn.hget(keys.rater_stats(study_id), keys.rater_field("person-0", CODE_BEFORE_CHECK_FIELD)) == b"1"

    # a rater answering at random after them: once the study closes the crowd judges both; the bot, not yet
    # paid, gets no code
    bot = run_rater(app, study_id, "bot-0", at_random, seed=2)
    assert 'id="checking"' in bot.get(f"/s/{study_id}/done").get_data(as_text=True)
    for n in range(1, 12):
        run_rater(app, study_id, f"person-{n}", careful, seed=10 + n)
    close(conn, study_id)
    rows = {r["rater"]: r for r in rater_table(conn, study_id)}
    assert rows["bot-0"]["flagged"] and rows["bot-0"]["crowd_p"] < 0.001
    assert not any(rows[f"person-{n}"]["flagged"] for n in range(12))
    assert 'id="completion-code"' not in bot.get(f"/s/{study_id}/done").get_data(as_text=True)
    assert 'id="completion-code"' in client.get(f"/s/{study_id}/done").get_data(as_text=True)


def test_a_crowd_judged_catch_question_carries_its_comparison_and_skips_retired_ones(conn, seeded):
    study_id = labels_study(conn, "words-draw")
    study = get_study(conn, study_id)
    found = catches.comparisons(conn, study)
    assert catches.judged_by_crowd(conn, study) and found
    keys_all = {catches.claim_key(c, None) for c in found}
    retired = frozenset(sorted(keys_all)[: len(keys_all) - 2])
    asked = {crowd_catch_question(study, found, retired)["claim"] for _ in range(200)}
    assert asked == keys_all - retired
    assert rater_checks.crowd_judged(conn, study_id)  # what the worker reads


def test_catch_trials_by_positions_keep_the_stated_rate_rule(conn, seeded):
    items = [Item(id=f"p{i}", kind="text", text=f"word {i}", label=f"bin {i * BINS // N_ITEMS}", position=(float(i),))
             for i in range(N_ITEMS)]
    create_study(conn, StudyConfig.from_dict({"name": "Line", "algorithms": [{"algorithm": "random_triplets"}],
                                              "limits": {"max_questions_per_rater": QUESTIONS}}), items,
                 study_id="line")
    study = get_study(conn, "line")
    found = catches.comparisons(conn, study)
    assert found and not catches.judged_by_crowd(conn, study) and not rater_checks.crowd_judged(conn, "line")
    question = catch_question(study, found)
    assert question["catch"] and "claim" not in question


def farther(question: dict, rng: random.Random) -> int:
    """A rule of its own: always the candidate farther from the head on the line (a crowd agreeing among itself
    on what no careful rater answers)."""
    head = index_of(question["head"])
    a, b = (index_of(c) for c in question["candidates"])
    return a if abs(a - head) > abs(b - head) else b


def test_the_overview_warns_when_the_raters_contradict_most_label_comparisons(app, conn, researcher_client, seeded):
    study_id = labels_study(conn, "words-rule", crowd_raters=30)
    for n in range(12):
        run_rater(app, study_id, f"rule-{n}", farther, seed=n)
        run_worker(conn)
    claims = {k.decode(): v.decode() for k, v in conn.hgetall(keys.catch_claims(study_id)).items()}
    assert int(claims["contradicted"]) > int(claims["answered"]) / 2, claims
    page = researcher_client.get(f"/studies/{study_id}").get_data(as_text=True)
    assert 'id="catch-warning"' in page and "contradict" in page
    assert 'id="glance-crowd"' in page


def test_a_restored_log_counts_label_catch_misses_as_pending(app, conn, seeded):
    from workers.store.raters import replay_rater_stats

    study_id = labels_study(conn, "words-restored")
    run_rater(app, study_id, "person-0", careful, seed=1)
    study = get_study(conn, study_id)
    log = [Answer.from_stream(i, f) for i, f in conn.xrange(keys.answers(study_id))]
    flags, fields = replay_rater_stats(log, study.config, [{"label": f"bin {i * BINS // N_ITEMS}"}
                                                          for i in range(N_ITEMS)])
    live = {k.decode(): v.decode() for k, v in conn.hgetall(keys.rater_stats(study_id)).items()}
    for name in ("catch", CATCH_PENDING, "catch_block"):
        field = keys.rater_field("person-0", name)
        assert fields.get(field) == live.get(field), name
    assert keys.rater_field("person-0", "catch_failed") not in fields


def _missed_at(conn, study_id: str, rater: str) -> list[float]:
    return [a.answered_at for a in catch_answers(conn, study_id, rater) if "catch_fail" in a.flags.split(",")]


def test_health_metrics_and_studies_show_the_crowds_state(app, conn, researcher_client, cli, seeded):
    study_id = labels_study(conn, "words-visible", crowd_raters=30)
    catches.comparisons(conn, get_study(conn, labels_study(conn, "words-other")))  # crowd-judged, no rater yet
    run_rater(app, study_id, "person-0", careful, seed=1, conn=conn)
    run_rater(app, study_id, "person-1", careful, seed=2, conn=conn)
    missed = _missed_at(conn, study_id, "person-0") + _missed_at(conn, study_id, "person-1")
    assert missed  # careful raters missed label comparisons: their verdicts wait for 30 more raters
    study = get_study(conn, study_id)
    waiting = sum(1 for r in ("person-0", "person-1") if _missed_at(conn, study_id, r))
    status = rater_checks.crowd_status(conn, study, now=min(missed) + 100.0)
    claims = {k.decode(): v.decode() for k, v in conn.hgetall(keys.catch_claims(study_id)).items()}
    assert status == {"state": "ok", "confirmed": int(claims["confirmed"]), "pending": int(claims["pending"]),
                      "retired": int(claims["retired"]), "awaiting": waiting, "oldest_pending_age": 100.0,
                      "last_look_age": status["last_look_age"]}
    assert status["pending"] > 0 and status["last_look_age"] is not None  # 2 raters decide no comparison
    # the crowd's last look saw every catch answer: old answers are no failure, however long ago they came
    later = time.time() + 10 * rater_checks.CROWD_BEHIND_SECONDS
    assert rater_checks.crowd_status(conn, study, now=later)["state"] == "ok"

    body = researcher_client.get("/api/health").get_json()
    assert body["status"] == "ok" and set(body["crowd"]) == {study_id, "words-other"}
    shown = body["crowd"][study_id]
    assert (shown["confirmed"], shown["pending"], shown["retired"], shown["awaiting"]) == (
        status["confirmed"], status["pending"], status["retired"], waiting)
    assert shown["oldest_pending_age"] >= 0 and shown["state"] == "ok"
    assert body["crowd"]["words-other"]["awaiting"] == 0 and body["crowd"]["words-other"]["oldest_pending_age"] is None

    scraped = researcher_client.get("/metrics").get_data(as_text=True)
    assert f'proxima_crowd_raters_awaiting{{study="{study_id}"}} {float(waiting)}' in scraped
    assert f'proxima_crowd_comparisons{{status="pending",study="{study_id}"}} {float(status["pending"])}' in scraped
    assert f'proxima_crowd_behind{{study="{study_id}"}} 0.0' in scraped
    assert f'proxima_crowd_oldest_pending_seconds{{study="{study_id}"}}' in scraped

    listed = cli("studies").output
    assert (f"  crowd: {status['confirmed']} comparisons confirmed, {status['pending']} pending, "
            f"{status['retired']} retired; {waiting} rater(s) awaiting a verdict (the oldest for ") in listed
    assert "behind" not in listed


def test_a_crowd_whose_looks_fail_is_reported_behind(app, conn, researcher_client, cli, monkeypatch, seeded):
    study_id = labels_study(conn, "words-behind", crowd_raters=30)

    def broken(*args, **kwargs):
        raise RuntimeError("the crowd's look failed")

    works = rater_checks.judge_by_crowd
    monkeypatch.setattr(rater_checks, "judge_by_crowd", broken)
    run_rater(app, study_id, "person-0", careful, seed=1, conn=conn)
    assert _missed_at(conn, study_id, "person-0")
    body = researcher_client.get("/api/health").get_json()
    # the crowd never looked: the wait is counted from the rater's last answer, and a fresh one is no failure yet
    assert body["status"] == "ok" and body["crowd"][study_id]["state"] == "ok"
    assert body["crowd"][study_id]["awaiting"] == 1 and body["crowd"][study_id]["last_look_age"] is None
    # minutes later (the catch answers are older than the wait allowed), still no look: said out loud
    first_catch = min(a.answered_at for a in catch_answers(conn, study_id, "person-0"))
    monkeypatch.setattr(rater_checks, "CROWD_BEHIND_SECONDS", time.time() - first_catch - 0.5)
    body = researcher_client.get("/api/health").get_json()
    assert body["status"] == "degraded" and body["crowd"][study_id]["state"] == "behind"
    assert body["crowd"][study_id]["oldest_pending_age"] > 0
    assert f'proxima_crowd_behind{{study="{study_id}"}} 1.0' in researcher_client.get("/metrics").get_data(as_text=True)
    assert "The crowd is behind" in cli("studies").output
    # the look works again: the next check catches up and the report clears
    monkeypatch.setattr(rater_checks, "judge_by_crowd", works)
    rater_checks.check_raters(conn, study_id)
    body = researcher_client.get("/api/health").get_json()
    assert body["crowd"][study_id]["state"] == "ok" and body["crowd"][study_id]["last_look_age"] is not None
