"""Deletion that leaves the rest intact (issue 28, item 4): forgetting a rater takes their answers and
records out and nothing else (the rebuilt graph equals that of a study that never had them), with an
audit line the backup keeps; deleting a study removes its keys and queued jobs and no other study's."""
from __future__ import annotations

import json
import random
import time

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import colour_items, run_worker
from rq import SimpleWorker
from rq.job import Job

from webapp.cli import main
from workers.jobs.learner_cache import load_learners
from workers.jobs.rebuild import rebuild_study
from workers.results.exports import nn_graph
from workers.store import keys
from workers.store.answers import accept_answer
from workers.store.backup import backup_lines, read_backup, restore_study
from workers.store.config import StudyConfig
from workers.store.deletion import audit_lines, deleted_studies, forget_rater, rater_digest, rater_forgotten
from workers.store.questions import issue_question
from workers.store.queue import enqueue_update, get_queue, schedule_update
from workers.store.studies import StudyNotFound, create_study, get_items, get_study

N_ITEMS = 20
N_RATERS = 80
CONFIG = {"name": "Colours", "algorithm": "duels", "pool_size": 12, "random_state": 7, "attention": {"rate": 0}}


def make_study(conn, study_id: str) -> str:
    return create_study(conn, StudyConfig.from_dict(CONFIG), colour_items(N_ITEMS), study_id=study_id)


def crowd(conn, study_id: str, raters: int = N_RATERS, per_rater: int = 12, seed: int = 0) -> None:
    """``raters`` raters answering through the web app's issue/accept path, interleaved, each picking the
    candidate nearer the head (colour_items: item i sits at i) but for one lapse in ten."""
    rng = random.Random(seed)
    study = get_study(conn, study_id)
    for _ in range(per_rater):
        for r in range(raters):
            rater = f"p-{r:02d}"
            now = time.time()
            question, _, _ = issue_question(conn, study_id, study.config, study.n_items, rater, now=now,
                                            expires_at=now + 600)
            head, (a, b) = question["head"], question["candidates"]
            pick = a if abs(a - head) < abs(b - head) else b
            if rng.random() < 0.1:
                pick = b if pick == a else a
            accept_answer(conn, study_id, question, rater, pick, issued_at=now, response_ms=800 + r, used_ttl=3600)


def log(conn, study_id: str) -> list[tuple[bytes, dict]]:
    return conn.xrange(keys.answers(study_id))


def text_hash(conn, key: str) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in conn.hgetall(key).items()}


def state_equal(a, b) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(state_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return (isinstance(b, list | tuple) and len(a) == len(b)
                and all(state_equal(x, y) for x, y in zip(a, b, strict=True)))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=True))
    return a == b


def graph(conn, study_id: str) -> dict:
    doc = nn_graph(conn, study_id)
    doc.pop("created_at")
    doc.pop("study")
    return doc


def test_forgetting_one_rater_of_80_gives_the_graph_of_a_study_that_never_had_them(conn):
    make_study(conn, "full")
    crowd(conn, "full")
    gone = "p-37"
    enqueue_update(conn, "full")  # a real update pass applies every answer, theirs too, before they are forgotten
    assert run_worker(conn) == 1
    assert conn.get(keys.cursor("full")) == conn.xrevrange(keys.answers("full"), count=1)[0][0]
    learned = load_learners(conn, get_study(conn, "full"))["duels"].to_state()
    assert learned["n_answers"] == N_RATERS * 12
    before = log(conn, "full")
    stats_before = text_hash(conn, keys.rater_stats("full"))
    counters_before = text_hash(conn, keys.counters("full"))
    minutes_before = text_hash(conn, keys.answers_per_minute("full"))
    theirs = [(i, f) for i, f in before if f[b"rater"] == gone.encode()]
    assert len(theirs) == 12 and len(before) == N_RATERS * 12

    # the study that never had them: the same config and items, the other raters' answers with their ids
    make_study(conn, "never")
    for entry_id, fields in before:
        if fields[b"rater"] != gone.encode():
            conn.xadd(keys.answers("never"), fields, id=entry_id)

    report = forget_rater(conn, "full", gone, by="alice")
    assert report.answers_removed == 12
    # nothing but their answers left the log: every other entry keeps its id and fields
    assert log(conn, "full") == [(i, f) for i, f in before if f[b"rater"] != gone.encode()]
    # nothing but their records left the statistics
    assert text_hash(conn, keys.rater_stats("full")) == {
        k: v for k, v in stats_before.items() if keys.split_rater_field(k)[0] != gone}
    assert gone.encode() not in conn.smembers(keys.raters("full")) and conn.scard(keys.raters("full")) == 79
    assert text_hash(conn, keys.counters("full")) == {**counters_before, "answers:duels": str(79 * 12)}
    removed_minutes: dict[str, int] = {}
    for _, fields in theirs:
        minute = str(int(float(fields[b"answered_at"]) // 60))
        removed_minutes[minute] = removed_minutes.get(minute, 0) + 1
    expected_minutes = {m: str(int(v) - removed_minutes.get(m, 0)) for m, v in minutes_before.items()}
    assert text_hash(conn, keys.answers_per_minute("full")) == {m: v for m, v in expected_minutes.items() if v != "0"}
    assert not [k for k in conn.scan_iter(match=keys.study_pattern("full")) if gone.encode() in k]

    # the audit line: when, by whom, which rater (hashed), how many answers; no recruitment id
    [(_, line)] = audit_lines(conn, "full")
    assert (line.action, line.by, line.rater_sha256, line.answers) == ("forget_rater", "alice", rater_digest(gone), 12)
    assert abs(line.at - time.time()) < 60
    assert gone.encode() not in b"".join(v for _, f in conn.xrange(keys.audit("full")) for v in f.values())

    # the queued rebuild (a real RQ worker) gives the very state a study that never had them learns
    # the rebuild alone (a real RQ worker), before the update pass it schedules plans new questions
    assert [j.func_name for j in get_queue(conn).get_jobs()] == ["workers.jobs.rebuild.rebuild_job"]
    SimpleWorker([get_queue(conn)], connection=conn).work(burst=True, max_jobs=1, logging_level="WARNING")
    rebuild_study(conn, "never")
    full = load_learners(conn, get_study(conn, "full"))
    never = load_learners(conn, get_study(conn, "never"))
    assert state_equal(full["duels"].to_state(), never["duels"].to_state())
    assert full["duels"].to_state()["n_answers"] == (N_RATERS - 1) * 12
    assert graph(conn, "full") == graph(conn, "never")
    assert len({e["target"] for e in graph(conn, "full")["edges"]}) > 1  # a graph was learned, not an empty one


def test_the_backup_says_what_was_removed_and_a_restore_keeps_it(conn):
    make_study(conn, "small")
    crowd(conn, "small", raters=5, per_rater=4)
    forget_rater(conn, "small", "p-02", by="alice", rebuild=False)
    lines = list(backup_lines(conn, "small"))
    header = json.loads(lines[0])
    assert header["version"] == 2 and header["counts"]["removed"] == 1 and header["counts"]["answers"] == 16
    [removed] = [json.loads(line) for line in lines if json.loads(line).get("type") == "removed"]
    assert removed["fields"]["rater_sha256"] == rater_digest("p-02") and removed["fields"]["answers"] == "4"
    assert read_backup(lines).removed == [(removed["id"], removed["fields"])]
    restore_study(conn, lines, as_id="small-copy")
    assert audit_lines(conn, "small-copy") == audit_lines(conn, "small")


def test_a_version_1_backup_without_removed_records_is_still_read(conn):
    make_study(conn, "old")
    crowd(conn, "old", raters=3, per_rater=2)
    lines = list(backup_lines(conn, "old"))
    header = json.loads(lines[0])
    header["version"] = 1
    del header["counts"]["removed"]
    backup = read_backup([json.dumps(header) + "\n", *lines[1:]])
    assert backup.removed == [] and len(backup.answers) == 6


def test_an_unknown_rater_is_refused_and_nothing_changes(conn):
    make_study(conn, "s")
    crowd(conn, "s", raters=3, per_rater=2)
    before = {k: conn.dump(k) for k in conn.scan_iter(match=keys.study_pattern("s"))}
    with pytest.raises(ValueError, match="has no rater 'nobody'"):
        forget_rater(conn, "s", "nobody", by="alice")
    assert {k: conn.dump(k) for k in conn.scan_iter(match=keys.study_pattern("s"))} == before


def invoke(redis_url, *args, **kwargs):
    return CliRunner().invoke(main, list(args), env={"REDIS_URL": redis_url}, catch_exceptions=False, **kwargs)


def test_the_cli_forgets_a_rater_and_rebuilds(conn, redis_url):
    make_study(conn, "cli")
    crowd(conn, "cli", raters=6, per_rater=5)
    refused = invoke(redis_url, "forget-rater", "cli", "p-01", input="n\n")
    assert refused.exit_code != 0 and conn.xlen(keys.answers("cli")) == 30
    result = invoke(redis_url, "forget-rater", "cli", "p-01", "--yes")
    assert result.exit_code == 0, result.output
    assert "5 answer(s) removed" in result.output and "Rebuilt the engines from the 25 remaining" in result.output
    assert conn.xlen(keys.answers("cli")) == 25
    [(_, line)] = audit_lines(conn, "cli")
    assert line.by.startswith("cli")
    # nothing of them is left to forget: a second run says so and only finishes the files and the backups
    again = invoke(redis_url, "forget-rater", "cli", "p-01", "--yes")
    assert again.exit_code == 0 and "was already forgotten" in again.output, again.output
    assert "Rebuilt" not in again.output and conn.xlen(keys.answers("cli")) == 25
    assert len(audit_lines(conn, "cli")) == 1  # no second audit line: nothing was forgotten again


def study_keys(conn, study_id: str) -> dict[bytes, bytes]:
    return {k: conn.dump(k) for k in conn.scan_iter(match=keys.study_pattern(study_id))}


def test_deleting_a_study_removes_its_keys_and_queued_jobs_and_leaves_another_study_as_it_was(conn, redis_url):
    make_study(conn, "doomed")
    make_study(conn, "kept")
    crowd(conn, "doomed", raters=4, per_rater=3)
    crowd(conn, "kept", raters=4, per_rater=3)
    run_worker(conn)  # engine states, pools, summaries for both
    conn.delete(keys.update_scheduled("doomed"))
    assert schedule_update(conn, "doomed")  # a queued job of the doomed study
    kept_before = study_keys(conn, "kept")
    assert len(study_keys(conn, "doomed")) > 10
    refused = invoke(redis_url, "delete", "doomed", input="n\n")
    assert refused.exit_code != 0 and conn.exists(keys.study("doomed"))
    result = invoke(redis_url, "delete", "doomed", "--yes")
    assert result.exit_code == 0, result.output
    assert "12 answers of 4 raters" in result.output and "1 queued job(s)" in result.output
    assert [j.args[0] for j in get_queue(conn).get_jobs() if j.func_name.endswith("update_study")] == []
    run_worker(conn)  # the purge job, after any pass of the study
    assert study_keys(conn, "doomed") == {}
    assert b"doomed" not in conn.smembers(keys.studies())
    with pytest.raises(StudyNotFound):
        get_study(conn, "doomed")
    assert study_keys(conn, "kept") == kept_before and len(get_items(conn, "kept")) == N_ITEMS
    [line] = deleted_studies(conn)
    assert (line["study"], line["answers"], line["raters"], line["by"][:3]) == ("doomed", "12", "4", "cli")
    assert invoke(redis_url, "delete", "doomed", "--yes").exit_code != 0


def test_the_dashboard_forgets_a_rater_only_once_confirmed_in_a_job_and_shows_its_progress_and_audit_line(
        researcher_client, client, conn):
    """The request refuses the rater's session at once and queues the rest (reading and copying the whole
    log) as an RQ job, whose progress and result the Raters tab shows; the job's arguments and result hold
    no rater id, and its request record goes once it ran."""
    make_study(conn, "web")
    crowd(conn, "web", raters=4, per_rater=3)
    unconfirmed = researcher_client.post("/studies/web/raters/forget", data={"rater": "p-03"}, follow_redirects=True)
    assert "was not forgotten" in unconfirmed.get_data(as_text=True) and conn.xlen(keys.answers("web")) == 12
    page = researcher_client.post("/studies/web/raters/forget", data={"rater": "p-03", "confirm": "yes"},
                                  follow_redirects=True).get_data(as_text=True)
    assert "Forgetting rater p-03" in page and "Forgetting a rater: queued" in page
    assert conn.xlen(keys.answers("web")) == 12  # not in the request: the job removes them
    assert rater_forgotten(conn, "web", "p-03")  # but refused at once
    [job] = get_queue(conn).get_jobs()
    assert job.func_name == "workers.jobs.deletion.forget_rater_job" and "p-03" not in repr(job.args)
    assert researcher_client.get("/api/studies/web/stats").get_json()["rebuild"]["state"] == "queued"
    # a real worker runs it, then the rebuild it queues, then the rewrite of Redis's files
    run_worker(conn)
    assert conn.xlen(keys.answers("web")) == 9 and not conn.exists(keys.forget_requests("web"))
    assert "p-03" not in repr(Job.fetch(job.id, connection=conn).return_value())
    stats = researcher_client.get("/api/studies/web/stats").get_json()["rebuild"]
    assert stats["state"] == "finished" and stats["forgotten_answers"] == 3, stats
    assert stats["message"].startswith("Rater forgotten: 3 answer(s) taken out of the log. Rebuild finished")
    page = researcher_client.get("/studies/web?tab=raters").get_data(as_text=True)
    assert 'id="audit-table"' in page and rater_digest("p-03")[:16] in page and "researcher" in page
    assert "Rater forgotten: 3 answer(s)" in page
    # asked again: the rater is unknown now, and nothing is queued
    again = researcher_client.post("/studies/web/raters/forget", data={"rater": "p-03", "confirm": "yes"},
                                   follow_redirects=True).get_data(as_text=True)
    assert "already forgotten" in again and not get_queue(conn).get_jobs()


def test_the_dashboard_deletes_a_study_once_its_id_is_typed(researcher_client, client, conn):
    make_study(conn, "web")
    crowd(conn, "web", raters=2, per_rater=2)
    page = researcher_client.get("/studies/web?tab=settings").get_data(as_text=True)
    assert 'id="delete-form"' in page and "data-confirm" in page
    wrong = researcher_client.post("/studies/web/delete", data={"confirm_id": "web2"}, follow_redirects=True)
    assert "was not deleted" in wrong.get_data(as_text=True) and conn.exists(keys.study("web"))
    index = researcher_client.post("/studies/web/delete", data={"confirm_id": "web"}, follow_redirects=True)
    assert "Deleted study web" in index.get_data(as_text=True)
    assert researcher_client.get("/studies/web").status_code == 404
    # a rater arriving afterwards finds nothing and leaves nothing behind
    assert client.get("/s/web?rater=late").status_code == 404
    assert client.get("/api/studies/web/questions/next").status_code == 404
    run_worker(conn)
    assert study_keys(conn, "web") == {}
