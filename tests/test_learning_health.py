"""A study that stops learning says so, and the processes heal: a worker whose update jobs keep failing
exits to be replaced, the failure is on the Overview, in ``/api/health``, ``/metrics`` and ``proxima studies``
with since when and the last error, and a fresh worker applies every waiting answer once."""
from __future__ import annotations

import sys
import time

from helpers import wait_for
from test_backup import make_study
from test_durability import WAIT, answer_and_schedule, assert_engines_equal_a_replay_of_the_log, processes, stderr_of
from test_durability import worker_env as _worker_env

from webapp.cli.supervise import REPLACE_ME
from workers.jobs import update
from workers.store import health, keys
from workers.store.queue import enqueue_update

__all__ = ["processes"]  # the fixture, shared with test_durability


def test_a_study_is_failing_from_its_first_failed_pass_until_a_pass_succeeds(conn, study_id):
    assert health.learning_status(conn, study_id)["state"] == "ok"
    assert health.pass_failed(conn, study_id, RuntimeError("numpy exploded"), now=1000.0) == 1
    assert health.pass_failed(conn, study_id, "ValueError: again", now=1010.0) == 2
    status = health.learning_status(conn, study_id, now=1020.0)
    assert (status["state"], status["failures"], status["failing_since"]) == ("failing", 2, 1000.0)
    assert status["last_error"] == "ValueError: again" and status["last_good_pass_age"] is None
    said = health.describe(status, now=1020.0)
    assert "Learning has stopped: 2 update passes in a row failed since" in said and "ValueError: again" in said
    # the first failure of a run is an incident; the second is not another one
    assert [i["what"] for i in health.incidents(conn, study_id=study_id)] == ["update passes failing"]
    health.pass_succeeded(conn, study_id, now=1030.0)
    status = health.learning_status(conn, study_id, now=1040.0)
    assert (status["state"], status["failures"], status["last_good_pass_age"]) == ("ok", 0, 10.0)
    assert health.describe(status) == ""


def test_answers_waiting_with_no_pass_applying_them_make_a_study_behind(conn):
    study_id = make_study(conn, with_media=False)
    answer_and_schedule(conn, study_id, 3, seed=1)
    assert health.learning_status(conn, study_id)["state"] == "ok"  # just given: a worker has time
    later = health.learning_status(conn, study_id, now=time.time() + health.BEHIND_SECONDS + 5)
    assert later["state"] == "behind" and later["waiting_answers_age"] > health.BEHIND_SECONDS
    assert "Learning is behind" in health.describe(later)


def test_a_worker_whose_passes_keep_failing_exits_to_be_replaced_and_the_failure_is_said_everywhere(
        conn, redis_url, tmp_path, processes, client, researcher_client, cli):
    study_id = make_study(conn, with_media=False)
    answer_and_schedule(conn, study_id, 12, seed=1)
    worker = processes([sys.executable, "-m", "webapp", "worker"], _worker_env(redis_url, tmp_path, "after_read:raise"))
    deadline = time.monotonic() + WAIT
    while worker.poll() is None:  # new answers keep queueing jobs; each fails
        assert time.monotonic() < deadline, stderr_of(worker)
        enqueue_update(conn, study_id)
        time.sleep(0.3)
    assert worker.returncode == REPLACE_ME, stderr_of(worker)
    assert f"{update.MAX_FAILING_JOBS} update jobs in a row failed in this worker" in stderr_of(worker)
    status = health.learning_status(conn, study_id)
    assert status["state"] == "failing" and status["failures"] >= update.MAX_FAILING_JOBS
    assert "PROXIMA_FAULT: a failure injected at after_read" in status["last_error"]
    assert not conn.exists(keys.cursor(study_id))  # nothing applied

    # said on the Overview, in /api/health, /metrics and `proxima studies`
    page = researcher_client.get(f"/studies/{study_id}").get_data(as_text=True)
    assert 'id="learning-failure"' in page and "Learning has stopped" in page and "after_read" in page
    assert "a worker exited: its update jobs kept failing" in page
    said = client.get("/api/health").get_json()
    assert said["status"] == "degraded" and said["learning"][study_id]["state"] == "failing"
    assert said["learning"][study_id]["last_good_pass_age_seconds"] is None
    metrics = researcher_client.get("/metrics").get_data(as_text=True)
    assert f'proxima_update_passes_failing{{study="{study_id}"}}' in metrics
    listed = cli("studies").output
    assert "learning: failing" in listed and "Learning has stopped" in listed

    # a fresh worker (the fault gone) applies every waiting answer once, and the study is learning again
    healed = processes([sys.executable, "-m", "webapp", "worker", "--burst"], _worker_env(redis_url, tmp_path))
    healed.wait(WAIT)
    assert healed.returncode == 0, stderr_of(healed)
    assert_engines_equal_a_replay_of_the_log(conn, study_id)
    status = health.learning_status(conn, study_id)
    assert status["state"] == "ok" and status["last_good_pass_age"] is not None
    assert client.get("/api/health").get_json()["status"] == "ok"
    page = researcher_client.get(f"/studies/{study_id}").get_data(as_text=True)
    assert "Learning has stopped" not in page


def test_one_failed_job_does_not_end_a_worker(conn, redis_url, tmp_path, processes):
    study_id = make_study(conn, with_media=False)
    answer_and_schedule(conn, study_id, 5, seed=2)
    proc = processes([sys.executable, "-m", "webapp", "worker", "--burst"],
                     _worker_env(redis_url, tmp_path, "after_read:raise"))
    proc.wait(WAIT)
    assert proc.returncode == 0, stderr_of(proc)  # burst: the queue is empty, it ends as usual
    wait_for(lambda: health.learning_status(conn, study_id)["failures"] == 1, 10, what="the failure recorded")
