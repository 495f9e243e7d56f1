"""Forget means gone (issue 40, part 5): a forgotten rater's browser session is refused (no question, no
answer stored, no fresh allowance); forget and delete rewrite Redis's AOF and RDB so the files hold no copy
(read on disk, with a control showing they held copies before); models trained with the rater are marked;
forget-rater names the backups that still hold the rater, and a restore of one leaves them out and says so."""
from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import answer, colour_items, fetch_question, require, run_worker
from test_deletion import make_study
from test_models import clustered_items, crowd_study

from webapp.cli import main
from workers.jobs.rebuild import rebuild_study
from workers.results.models import model_export, train, trained_models
from workers.store import keys
from workers.store.answers import accept_answer
from workers.store.backup import backup_lines, restore_study
from workers.store.config import StudyConfig
from workers.store.deletion import audit_lines, delete_study, forget_rater, rater_digest, rater_forgotten
from workers.store.persistence import count_copies, replace_snapshot, rewrite_aof
from workers.store.questions import issue_question
from workers.store.queue import enqueue_update, get_queue
from workers.store.studies import create_study, get_study

GONE = "withdrawn-participant-7f3a"


def invoke(redis_url, *args, **kwargs):
    return CliRunner().invoke(main, [str(a) for a in args], env={"REDIS_URL": redis_url}, catch_exceptions=False,
                              **kwargs)


def answers_by(conn, study_id: str, rater: str) -> list[tuple[str, dict]]:
    return [(i.decode(), {k.decode(): v.decode() for k, v in f.items()})
            for i, f in conn.xrange(keys.answers(study_id)) if f[b"rater"] == rater.encode()]


def crowd(conn, study_id: str, raters: list[str], per_rater: int, seed: int = 0) -> None:
    """Each rater answers ``per_rater`` questions through the web app's issue/accept path, interleaved, picking
    the candidate nearer the head (colour_items: item i sits at i) but for one lapse in ten."""
    rng = random.Random(seed)
    study = get_study(conn, study_id)
    for _ in range(per_rater):
        for n, rater in enumerate(raters):
            now = time.time()
            question, _, _ = issue_question(conn, study_id, study.config, study.n_items, rater, now=now,
                                            expires_at=now + 600)
            head, (a, b) = question["head"], question["candidates"]
            pick = a if abs(a - head) < abs(b - head) else b
            if rng.random() < 0.1:
                pick = b if pick == a else a
            accept_answer(conn, study_id, question, rater, pick, issued_at=now, response_ms=800 + n, used_ttl=3600)


def learn(conn, study_id: str) -> None:
    """A real update pass (an RQ worker running the update job) applies every answer in the log."""
    enqueue_update(conn, study_id)
    run_worker(conn)
    last = conn.xrevrange(keys.answers(study_id), count=1)[0][0]
    assert conn.get(keys.cursor(study_id)) == last  # every answer, theirs too, was applied


def redis_folder(conn) -> Path:
    return Path(conn.config_get("dir")["dir"])


def copies_on_disk(conn, needles: list[str]) -> dict[str, int]:
    """Copies of any of ``needles`` in every file of Redis's folder (its AOF, RDB and whatever else is there)."""
    folder = redis_folder(conn)
    found = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        n = count_copies(path, [x.encode() for x in needles])
        if n:
            found[str(path.relative_to(folder))] = n
    return found


def wait_for_copies(conn, needles: list[str], timeout: float = 10.0) -> dict[str, int]:
    """The copies on disk once Redis has written the commands it acknowledged (appendfsync everysec may hold
    a write back while an fsync runs)."""
    deadline = time.monotonic() + timeout
    while True:
        found = copies_on_disk(conn, needles)
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def snapshot_uncompressed(conn) -> None:
    """An RDB file of what Redis holds now, its strings stored as they are (so a control can read them)."""
    conn.config_set("rdbcompression", "no")
    try:
        replace_snapshot(conn)
    finally:
        conn.config_set("rdbcompression", "yes")


# ---------------------------------------------------------------------------- the session is refused
def test_a_forgotten_raters_open_page_gets_no_question_stores_no_answer_and_no_new_allowance(app, conn, study_id):
    page = app.test_client()
    assert page.get(f"/s/{study_id}?PROLIFIC_PID={GONE}").status_code == 200
    first = fetch_question(page)
    assert answer(page, first).status_code == 201
    held = fetch_question(page)  # a question on their open page when they are forgotten
    other = app.test_client()
    other.get(f"/s/{study_id}?PROLIFIC_PID=stays-1")
    assert answer(other, fetch_question(other)).status_code == 201
    assert conn.xlen(keys.answers(study_id)) == 2

    forget_rater(conn, study_id, GONE, by="alice", rebuild=False)

    refused = page.get(f"/api/studies/{study_id}/questions/next")
    assert refused.status_code == 403 and refused.get_json()["error"]["code"] == "rater_forgotten"
    posted = answer(page, held)
    assert posted.status_code == 403 and posted.get_json()["error"]["code"] == "rater_forgotten"
    # nothing was stored for them: no answer, no statistics (a fresh allowance), no key
    assert conn.xlen(keys.answers(study_id)) == 1 and answers_by(conn, study_id, GONE) == []
    assert not [f for f in conn.hkeys(keys.rater_stats(study_id)) if f.startswith(GONE.encode())]
    assert not [k for k in conn.scan_iter(match=keys.study_pattern(study_id)) if GONE.encode() in k]
    assert not conn.sismember(keys.raters(study_id), GONE)
    # the study page, and the same id opened in another browser, are refused too
    reopened = page.get(f"/s/{study_id}")
    assert reopened.status_code == 403 and 'id="forgotten"' in reopened.get_data(as_text=True)
    elsewhere = app.test_client()
    assert elsewhere.get(f"/s/{study_id}?PROLIFIC_PID={GONE}").status_code == 403
    assert elsewhere.get(f"/api/studies/{study_id}/questions/next").status_code == 403
    assert not conn.hexists(keys.rater_sessions(study_id), GONE)
    # every other rater goes on as before
    assert answer(other, fetch_question(other)).status_code == 201


def test_a_forgotten_anonymous_rater_is_refused_too(app, conn, study_id):
    page = app.test_client()
    page.get(f"/s/{study_id}")
    assert answer(page, fetch_question(page)).status_code == 201
    with page.session_transaction() as session:
        anonymous = session["rater_id"]
    assert anonymous.startswith("anon-")
    forget_rater(conn, study_id, anonymous, by="alice", rebuild=False)
    assert page.get(f"/api/studies/{study_id}/questions/next").get_json()["error"]["code"] == "rater_forgotten"
    assert conn.xlen(keys.answers(study_id)) == 0


# ---------------------------------------------------------------------------- Redis's files
def test_forget_rater_leaves_no_copy_of_the_rater_in_redis_aof_or_rdb(conn, redis_url, tmp_path):
    make_study(conn, "files")
    raters = [f"participant-{n:03d}" for n in range(12)] + [GONE]
    crowd(conn, "files", raters, per_rater=6)
    learn(conn, "files")  # the engine learns from every answer, theirs too
    qids = [fields["qid"] for _, fields in answers_by(conn, "files", GONE)]
    assert len(qids) == 6
    snapshot_uncompressed(conn)  # an RDB file holding them, beside the AOF
    # the control: on disk, the AOF and the RDB hold the rater and each of their answers
    before = wait_for_copies(conn, [GONE])
    assert {"proxima.aof", "proxima.rdb"} <= set(before), before
    assert all(copies_on_disk(conn, [qid]) for qid in qids)

    result = invoke(redis_url, "forget-rater", "files", GONE, "--yes", "--backups", tmp_path / "none")
    assert result.exit_code == 0, result.output
    # read on disk again, by the test itself: not one copy of the rater or of any of their answers
    assert copies_on_disk(conn, [GONE, *qids]) == {}
    assert "BGREWRITEAOF" in result.output and "BGSAVE" in result.output
    assert "no copy left" in result.output, result.output
    assert copies_on_disk(conn, ["participant-003"])  # what remains is still there (the check can see it)
    assert conn.config_get("rdbcompression")["rdbcompression"] == "yes"  # the setting was put back
    # run again (say the first was interrupted before its rewrite): it finishes what is left, not an error
    again = invoke(redis_url, "forget-rater", "files", GONE, "--yes", "--backups", tmp_path / "none")
    assert again.exit_code == 0, again.output
    assert "was already forgotten" in again.output and "no copy left" in again.output, again.output
    assert "No backup file in" in again.output


def test_forgetting_from_the_dashboard_rewrites_redis_files_once_the_rebuild_has_run(researcher_client, conn):
    make_study(conn, "web-files")
    crowd(conn, "web-files", ["participant-001", GONE], per_rater=4)
    learn(conn, "web-files")
    qids = [fields["qid"] for _, fields in answers_by(conn, "web-files", GONE)]
    assert wait_for_copies(conn, [GONE])
    page = researcher_client.post("/studies/web-files/raters/forget", data={"rater": GONE, "confirm": "yes"},
                                  follow_redirects=True).get_data(as_text=True)
    assert "files are rewritten without them" in page
    jobs = [j.func_name for j in get_queue(conn).get_jobs()]
    assert jobs == ["workers.jobs.deletion.forget_rater_job"]  # the log is read and copied in a job
    run_worker(conn)  # it queues the rebuild, and the rewrite after it (deferred): the burst worker runs all
    assert json.loads(conn.hget(keys.engine_stats("web-files"), "rebuild"))["state"] == "finished"
    assert copies_on_disk(conn, [GONE, *qids]) == {}


@pytest.fixture
def redis7(tmp_path):
    """Debian's Redis 7 with its multi-part AOF (a folder of base and incremental files and a manifest), as
    a shared Redis is run: AOF on, no snapshots; stopped at teardown."""
    import subprocess

    import redis
    from test_multi_machine import REDIS7

    from webapp.cli.embedded import free_port

    require(REDIS7 is not None, "Debian's Redis 7 server (redis-server >= 7)",
            "apt-get install redis-server (.ci/run installs it)")
    port, folder = free_port(), tmp_path / "redis7"
    folder.mkdir()
    proc = subprocess.Popen([REDIS7, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder),
                             "--appendonly", "yes", "--appendfsync", "always", "--save", "",
                             "--logfile", str(folder / "redis.log")], stdout=subprocess.DEVNULL)
    client = redis.Redis(port=port)
    deadline = time.monotonic() + 20
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            assert proc.poll() is None and time.monotonic() < deadline, "Redis 7 did not start"
            time.sleep(0.05)
    yield client
    client.shutdown(nosave=True)
    proc.wait(10)


def test_forget_rater_leaves_no_copy_in_redis_7s_multi_part_aof(redis7):
    conn = redis7
    assert int(conn.info("server")["redis_version"].split(".")[0]) >= 7
    make_study(conn, "seven")
    crowd(conn, "seven", [f"participant-{n:03d}" for n in range(6)] + [GONE], per_rater=5)
    learn(conn, "seven")
    rewrite_aof(conn)  # a base file of their answers beside the incremental one, as after any rewrite
    qids = [fields["qid"] for _, fields in answers_by(conn, "seven", GONE)]
    before = wait_for_copies(conn, [GONE])
    assert any(name.startswith("appendonlydir/") and ".base." in name for name in before), before
    url = f"redis://127.0.0.1:{conn.connection_pool.connection_kwargs['port']}/0"
    result = invoke(url, "forget-rater", "seven", GONE, "--yes", "--backups", redis_folder(conn) / "none")
    assert result.exit_code == 0, result.output
    assert copies_on_disk(conn, [GONE, *qids]) == {}
    assert "no copy left" in result.output and "appendonlydir/" in result.output


def test_delete_leaves_no_key_of_the_study_in_redis_files(conn, redis_url):
    make_study(conn, "doomed-files")
    make_study(conn, "kept-files")
    crowd(conn, "doomed-files", ["r-1", "r-2"], per_rater=3)
    learn(conn, "doomed-files")
    prefix = keys.study_pattern("doomed-files").rstrip("*")
    assert wait_for_copies(conn, [prefix])
    result = invoke(redis_url, "delete", "doomed-files", "--yes")
    assert result.exit_code == 0, result.output
    assert "no copy left" in result.output, result.output
    run_worker(conn)  # the purge job sweeps once more and rewrites again
    assert copies_on_disk(conn, [prefix]) == {}
    assert copies_on_disk(conn, [keys.study_pattern("kept-files").rstrip("*")])


def test_the_files_report_says_what_it_could_not_check_on_a_redis_elsewhere(conn, monkeypatch):
    from workers.store import persistence

    monkeypatch.setattr(persistence, "LOOPBACK", frozenset())  # as if Redis ran on another machine
    report = persistence.rewrite_files(conn, [GONE])
    assert report.unverified is not None and not report.clean
    text = " ".join(report.lines())
    assert "BGREWRITEAOF" in text and "Could not check Redis's files" in text and "on that machine" in text


# ---------------------------------------------------------------------------- learned state and models
def test_the_learned_state_no_longer_reflects_a_forgotten_rater_the_engine_learned_from(conn, redis_url):
    make_study(conn, "learned")
    crowd(conn, "learned", [f"participant-{n:03d}" for n in range(10)] + [GONE], per_rater=8, seed=3)
    learn(conn, "learned")
    # the same log replayed with and without their answers: the update pass learned the first
    for copy, keep in (("with", lambda rater: True), ("never", lambda rater: rater != GONE.encode())):
        make_study(conn, copy)
        for entry_id, fields in conn.xrange(keys.answers("learned")):
            if keep(fields[b"rater"]):
                conn.xadd(keys.answers(copy), fields, id=entry_id)
        rebuild_study(conn, copy)
    assert graph_state(conn, "learned") == graph_state(conn, "with") != graph_state(conn, "never")
    assert invoke(redis_url, "forget-rater", "learned", GONE, "--yes").exit_code == 0
    assert graph_state(conn, "learned") == graph_state(conn, "never")


def graph_state(conn, study_id: str) -> str:
    """What the duels learner learned from the answers (the triplets it holds, answers per item, how many),
    leaving out what a live pass and a replay plan differently (questions asked, fit timing)."""
    from workers.jobs.learner_cache import load_learners

    state = load_learners(conn, get_study(conn, study_id))["duels"].to_state()
    learned = {name: state[name] for name in ("triplets", "answered", "n_answers")}
    return json.dumps(learned, sort_keys=True, default=lambda a: a.tolist())


def test_models_trained_with_a_forgotten_rater_are_marked_where_they_are_listed(conn, redis_url, researcher_client):
    sid = crowd_study(conn, clustered_items(24))
    train(conn, sid, "smerf", params={"n_trees": 3})
    study = get_study(conn, sid)
    now = time.time()
    question, _, _ = issue_question(conn, sid, study.config, study.n_items, GONE, now=now, expires_at=now + 600)
    accept_answer(conn, sid, question, GONE, None, issued_at=now, response_ms=900, used_ttl=3600, value=3.0)
    assert "forgotten_raters" not in trained_models(conn, sid)["smerf"]
    result = invoke(redis_url, "forget-rater", sid, GONE, "--yes")
    assert result.exit_code == 0, result.output
    assert "Model smerf was trained with this rater's answers" in result.output
    assert f"proxima train {sid} --model smerf" in result.output
    assert trained_models(conn, sid)["smerf"]["forgotten_raters"] == 1
    assert model_export(conn, sid, "smerf")["forgotten_raters"] == 1
    page = researcher_client.get(f"/studies/{sid}?tab=downloads").get_data(as_text=True)
    assert 'id="model-smerf-forgotten"' in page and "1 rater(s) forgotten since" in page


# ---------------------------------------------------------------------------- backups
def test_forget_rater_names_the_backups_holding_them_and_restore_keeps_them_forgotten(conn, redis_url, tmp_path):
    make_study(conn, "kept")
    make_study(conn, "other")
    crowd(conn, "kept", ["p-1", GONE, "p-3"], per_rater=4)
    crowd(conn, "other", ["p-1", GONE], per_rater=2)
    folder = tmp_path / "backups"
    folder.mkdir()
    old = folder / "kept-2026-01-01.ndjson"
    old.write_text("".join(backup_lines(conn, "kept")), encoding="utf-8")
    (folder / "other-2026-01-01.ndjson").write_text("".join(backup_lines(conn, "other")), encoding="utf-8")
    (folder / "notes.ndjson").write_text("not a backup\n", encoding="utf-8")

    result = invoke(redis_url, "forget-rater", "kept", GONE, "--yes", "--backups", folder)
    assert result.exit_code == 0, result.output
    assert "1 backup file(s) still hold this rater" in result.output
    assert f"{old} (4 answer(s))" in result.output and "other-2026" not in result.output

    # a restore of the backup from before the forget: warned, left out, still forgotten in the copy
    restored = invoke(redis_url, "restore", old, "--as", "kept-copy", "--no-rebuild")
    assert restored.exit_code == 0, restored.output
    assert "Warning: this backup holds 1 rater(s) forgotten on this instance" in restored.output
    assert "(4 answer(s))" in restored.output and "stay forgotten" in restored.output
    assert conn.xlen(keys.answers("kept-copy")) == 8 and answers_by(conn, "kept-copy", GONE) == []
    assert not [f for f in conn.hkeys(keys.rater_stats("kept-copy")) if f.startswith(GONE.encode())]
    assert rater_forgotten(conn, "kept-copy", GONE)
    assert [(line.by, line.rater_sha256, line.answers) for _, line in audit_lines(conn, "kept-copy")] == [
        ("restore", rater_digest(GONE), 4)]
    # the study deleted since: a restore of the old backup under its own id still knows they were forgotten
    delete_study(conn, "kept", by="alice")
    report = restore_study(conn, old.read_text(encoding="utf-8").splitlines(keepends=True))
    assert report.forgotten_left_out == {GONE: 4} and answers_by(conn, "kept", GONE) == []
    # the other study never forgot them
    assert len(answers_by(conn, "other", GONE)) == 2 and not rater_forgotten(conn, "other", GONE)


def test_a_backup_made_after_the_forget_restores_the_refusal_into_a_fresh_instance(conn, fresh_redis):
    import redis

    make_study(conn, "after")
    crowd(conn, "after", ["p-1", GONE], per_rater=2)
    forget_rater(conn, "after", GONE, by="alice", rebuild=False)
    lines = list(backup_lines(conn, "after"))
    fresh = redis.Redis.from_url(fresh_redis)
    report = restore_study(fresh, lines)
    assert report.forgotten_left_out == {}  # nothing of them is in it
    assert rater_forgotten(fresh, "after", GONE)  # and their session is refused there too
    fresh.close()


def test_forgetting_a_rater_twice_says_they_were_already_forgotten(conn):
    create_study(conn, StudyConfig.from_dict({"name": "Twice", "algorithm": "random_triplets"}), colour_items(6),
                 study_id="twice")
    crowd(conn, "twice", [GONE], per_rater=1)
    forget_rater(conn, "twice", GONE, by="alice", rebuild=False)
    with pytest.raises(ValueError, match="was already forgotten"):
        forget_rater(conn, "twice", GONE, by="alice", rebuild=False)


def test_the_compacted_log_keeps_every_other_answer_its_ids_and_the_last_id(conn):
    from workers.store.deletion import compact_log

    make_study(conn, "compact")
    crowd(conn, "compact", ["p-1", "p-2", GONE], per_rater=5)
    log = keys.answers("compact")
    last_before = conn.xinfo_stream(log)["last-generated-id"]
    theirs = [entry_id for entry_id, _ in answers_by(conn, "compact", GONE)]
    conn.xdel(log, *theirs)  # the last answer of the log is theirs: its id must not be handed out again
    kept = conn.xrange(log)
    assert compact_log(conn, "compact", chunk=3) == len(kept) == 10
    assert conn.xrange(log) == kept and not conn.exists(keys.answers_compacting("compact"))
    assert conn.xinfo_stream(log)["last-generated-id"] == last_before
    assert conn.xadd(log, {"probe": "1"}) > last_before
