"""Durability with real processes: RQ workers killed mid-batch, a Redis server killed mid-stream of
answers, a web process killed between storing an answer and answering, poisoned answers.

Every process is started in its own process group and killed with its group when the test ends,
pass or fail.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import redis
import requests
from helpers import colour_items, healthy, wait_for
from test_backup import N_ITEMS, give_answers, make_study, poison

from webapp import ROOT
from webapp.cli.embedded import EmbeddedRedis, free_port
from webapp.cli.serve import gunicorn_command
from workers.jobs.rebuild import replay_log
from workers.store import engine_state, keys
from workers.store.answers import ACCEPT
from workers.store.backup import set_aside_answers
from workers.store.config import StudyConfig
from workers.store.queue import enqueue_update
from workers.store.studies import create_study, get_study

WAIT = 60.0

#: the issuing script draws each question's algorithm from Python's global random (conftest's ``seeded``)
pytestmark = pytest.mark.usefixtures("seeded")


@pytest.fixture
def processes(tmp_path):
    """Start commands in their own sessions, output to a log file (``stderr_of``); every process
    started and all its descendants are SIGKILLed at teardown."""
    started: list[subprocess.Popen] = []

    def start(args, env) -> subprocess.Popen:
        log = tmp_path / f"process-{len(started)}.log"
        with log.open("w") as out:
            proc = subprocess.Popen(args, env=env, cwd=str(ROOT), start_new_session=True, stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT)
        proc.log_path = log
        started.append(proc)
        return proc

    yield start
    for proc in started:
        kill_tree(proc)


def stderr_of(proc: subprocess.Popen) -> str:
    return proc.log_path.read_text(errors="replace")


def kill_tree(proc: subprocess.Popen) -> None:
    """kill -9 a process and every descendant (an RQ work horse runs in a session of its own)."""
    try:
        victims = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        victims = []
    for victim in victims:
        try:
            victim.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(victims, timeout=30)
    proc.wait(timeout=30)


def worker_env(redis_url: str, tmp_path: Path, fault: str | None = None) -> dict:
    env = dict(os.environ, REDIS_URL=redis_url, PROXIMA_INSTANCE_PATH=str(tmp_path / "instance"))
    env.pop("PROXIMA_FAULT", None)
    if fault:
        env.update(PROXIMA_FAULT=fault, PROXIMA_FAULT_FILE=str(tmp_path / "paused"))
    return env


def run_burst_worker(processes, redis_url, tmp_path, fault=None) -> subprocess.CompletedProcess:
    proc = processes([sys.executable, "-m", "webapp", "worker", "--burst"], worker_env(redis_url, tmp_path, fault))
    proc.wait(timeout=WAIT)
    return proc


def answer_and_schedule(conn, study_id, n, seed, raters=("r1", "r2", "r3")) -> list[str]:
    """Answers as the web app takes them, with an update job queued for them."""
    ids = give_answers(conn, study_id, n, raters=raters, seed=seed)
    enqueue_update(conn, study_id)
    return ids


def learned(entries, algorithm: bytes | None = None) -> int:
    """How many answer-log ``entries`` (xrange rows) a learner learns from: all but the held-out ones
    (``heldout_share``: asked to score the model, never learned from), of ``algorithm`` if given."""
    return sum(1 for _, f in entries if f.get(b"heldout") != b"1" and algorithm in (None, f.get(b"algorithm")))


def assert_engines_equal_a_replay_of_the_log(conn, study_id):
    """The saved engine states equal fresh learners fed the whole log; every answer applied once."""
    study = get_study(conn, study_id)
    log = conn.xrange(keys.answers(study_id))
    last_id = log[-1][0].decode()
    assert engine_state.load_cursor(conn, study_id) == last_id
    assert int(conn.hget(keys.engine_stats(study_id), "answers_applied")) == len(log)
    replay = replay_log(conn, study)
    assert replay.cursor == last_id
    saved = {a.label: engine_state.load(conn, study_id, a.label) for a in study.config.algorithms}
    fresh = {label: learner.to_state() for label, learner in replay.learners.items()}
    for name in ("count", "mean"):
        np.testing.assert_allclose(saved["anntri"][name], fresh["anntri"][name], rtol=1e-12, atol=0)
    anntri_answers = learned(log, b"anntri")
    assert saved["anntri"]["n_samples"] == fresh["anntri"]["n_samples"] == anntri_answers
    per_answer = 2 if saved["anntri"]["params"].get("symmetric", True) else 1  # symmetric: (i, j) and (j, i)
    assert int(saved["anntri"]["count"].sum()) == per_answer * anntri_answers
    for name in ("wins", "shown"):
        np.testing.assert_array_equal(saved["rt"][name], fresh["rt"][name])
    assert saved["rt"]["n_answers"] == fresh["rt"]["n_answers"]
    rt_answers = {i.decode() for i, f in log if f.get(b"algorithm") == b"rt" and f.get(b"heldout") != b"1"} \
        - set(replay.set_aside)
    assert saved["rt"]["n_answers"] == len(rt_answers)


# ---------------------------------------------------------------------------- workers killed mid-batch
@pytest.mark.parametrize("point", ["after_read", "after_observe", "before_exec", "after_exec"])
def test_a_worker_killed_mid_batch_loses_no_answer_and_applies_none_twice(conn, redis_url, tmp_path, processes,
                                                                           point):
    study_id = make_study(conn, with_media=False)
    first = answer_and_schedule(conn, study_id, 20, seed=1)
    worker = processes([sys.executable, "-m", "webapp", "worker"], worker_env(redis_url, tmp_path, f"{point}:pause"))
    marker = tmp_path / "paused"
    wait_for(lambda: marker.exists() and marker.read_text().strip(), what="the worker pausing")
    answer_and_schedule(conn, study_id, 10, seed=2)  # answers keep arriving while the worker hangs
    kill_tree(worker)  # kill -9, exactly at the crash point

    if point == "after_exec":
        assert engine_state.load_cursor(conn, study_id) == first[-1]  # the first batch was saved whole
    else:
        assert not conn.exists(keys.cursor(study_id))  # nothing of the batch was saved
        assert engine_state.load(conn, study_id, "anntri") is None
    assert conn.exists(keys.update_lock(study_id))  # the dead worker still "holds" the study

    restarted = run_burst_worker(processes, redis_url, tmp_path)
    assert restarted.returncode == 0, stderr_of(restarted)
    assert not conn.exists(keys.update_lock(study_id))
    assert_engines_equal_a_replay_of_the_log(conn, study_id)


@pytest.mark.parametrize("point", ["after_observe", "before_exec", "after_exec"])
def test_a_worker_killed_mid_pass_of_a_journaled_state_loses_nothing_and_applies_nothing_twice(
        conn, redis_url, tmp_path, processes, point):
    study_id = make_study(conn, with_media=False)
    answer_and_schedule(conn, study_id, 12, seed=1)
    assert run_burst_worker(processes, redis_url, tmp_path).returncode == 0  # saved whole, then journaled
    second = answer_and_schedule(conn, study_id, 9, seed=2)
    # the issue script draws each question's algorithm: the batch must hold an answer anntri learns from
    # (else its state is unchanged and its pass writes no journal entry at all; ~0.3% of runs)
    for extra in range(20):
        batch = {i.decode(): f for i, f in conn.xrange(keys.answers(study_id), min=second[0])}
        if learned([(i, batch[i]) for i in second], b"anntri"):
            break
        second += answer_and_schedule(conn, study_id, 3, seed=100 + extra)
    before = engine_state.load_stored(conn, study_id, "anntri")
    worker = processes([sys.executable, "-m", "webapp", "worker"], worker_env(redis_url, tmp_path, f"{point}:pause"))
    marker = tmp_path / "paused"
    wait_for(lambda: marker.exists() and marker.read_text().strip(), what="the worker pausing")
    answer_and_schedule(conn, study_id, 6, seed=3)
    kill_tree(worker)
    after = engine_state.load_stored(conn, study_id, "anntri")
    if point == "after_exec":
        assert engine_state.load_cursor(conn, study_id) == second[-1]
        assert after.seq == before.seq + 1  # one journal entry for the batch
    else:
        assert after.seq == before.seq and after.version == before.version  # nothing of the batch
    restarted = run_burst_worker(processes, redis_url, tmp_path)
    assert restarted.returncode == 0, stderr_of(restarted)
    assert_engines_equal_a_replay_of_the_log(conn, study_id)


def test_a_worker_killed_before_putting_a_checkpoint_in_place_loses_nothing(conn, redis_url, tmp_path, processes):
    study_id = make_study(conn, with_media=False)
    answer_and_schedule(conn, study_id, 12, seed=1)
    assert run_burst_worker(processes, redis_url, tmp_path).returncode == 0
    # passes add journal entries until the journal is as big as this small state and a checkpoint
    # falls due (how many passes that takes depends on the state's layout): that pass crashes
    for attempt in range(20):
        answer_and_schedule(conn, study_id, 9, seed=2 + attempt)
        crashed = run_burst_worker(processes, redis_url, tmp_path, fault="before_swap:crash")
        if crashed.returncode != 0:
            break
    assert "PROXIMA_FAULT: crash at before_swap" in stderr_of(crashed)
    written = conn.hmget(keys.engine_checkpoint(study_id, "anntri"), engine_state.SEQ_FIELD)[0] or \
        conn.hmget(keys.engine_checkpoint(study_id, "rt"), engine_state.SEQ_FIELD)[0]
    assert written is not None  # written, never put in place
    stored = engine_state.load_stored(conn, study_id, "anntri")
    assert stored.seq > stored.checkpoint_seq  # the journal still holds the pass
    answer_and_schedule(conn, study_id, 5, seed=40)
    recovered = run_burst_worker(processes, redis_url, tmp_path)
    assert recovered.returncode == 0, stderr_of(recovered)
    assert_engines_equal_a_replay_of_the_log(conn, study_id)
    assert int(conn.hget(keys.engine_stats(study_id), "checkpoints")) >= 1


def test_a_worker_that_crashes_itself_mid_batch_is_recovered_by_the_next_one(conn, redis_url, tmp_path, processes):
    study_id = make_study(conn, with_media=False)
    answer_and_schedule(conn, study_id, 15, seed=3)
    crashed = run_burst_worker(processes, redis_url, tmp_path, fault="after_observe:crash")
    assert "PROXIMA_FAULT: crash at after_observe" in stderr_of(crashed)
    assert not conn.exists(keys.cursor(study_id))
    answer_and_schedule(conn, study_id, 5, seed=40)
    recovered = run_burst_worker(processes, redis_url, tmp_path)
    assert recovered.returncode == 0, stderr_of(recovered)
    assert_engines_equal_a_replay_of_the_log(conn, study_id)


def test_one_worker_process_keeps_a_studys_learners_in_memory_from_one_job_to_the_next(conn, redis_url, tmp_path,
                                                                                       processes):
    study_id = make_study(conn, with_media=False)
    answer_and_schedule(conn, study_id, 10, seed=5)
    answer_and_schedule(conn, study_id, 0, seed=6)  # a second job: its pass starts from the kept learners
    done = run_burst_worker(processes, redis_url, tmp_path)
    assert done.returncode == 0, stderr_of(done)
    assert int(conn.hget(keys.engine_stats(study_id), "updates")) == 2
    assert int(conn.hget(keys.engine_stats(study_id), "passes_from_memory")) == 1  # no fork per job
    assert_engines_equal_a_replay_of_the_log(conn, study_id)


def test_a_malformed_fault_setting_stops_the_worker_with_a_clear_message(redis_url, tmp_path, processes):
    proc = run_burst_worker(processes, redis_url, tmp_path, fault="halfway:explode")
    assert proc.returncode != 0
    assert "PROXIMA_FAULT='halfway:explode'" in stderr_of(proc)


# ---------------------------------------------------------------------------- poisoned answers
def test_poisoned_answers_are_set_aside_with_their_reason_and_the_rest_are_applied(conn, redis_url, tmp_path,
                                                                                    processes):
    study_id = make_study(conn, with_media=False)
    answer_and_schedule(conn, study_id, 12, seed=5)
    poisoned = poison(conn, study_id)
    unreadable = conn.xadd(keys.answers(study_id), {"qid": "q-half", "rater": "r9", "kind": "triplet"}).decode()
    answer_and_schedule(conn, study_id, 12, seed=6)
    worker = run_burst_worker(processes, redis_url, tmp_path)
    assert worker.returncode == 0, stderr_of(worker)

    aside = {a["answer_id"]: a for a in set_aside_answers(conn, study_id)}
    assert aside.keys() == {poisoned, unreadable}
    assert aside[poisoned]["reason"].startswith("rt: ") and f"0..{N_ITEMS - 1}" in aside[poisoned]["reason"]
    assert aside[poisoned]["rater"] == "mallory" and aside[poisoned]["algorithm"] == "rt"
    assert "unreadable log entry" in aside[unreadable]["reason"] and aside[unreadable]["fields"]["qid"] == "q-half"
    assert_engines_equal_a_replay_of_the_log(conn, study_id)

    answer_and_schedule(conn, study_id, 6, seed=7)  # the study is not blocked: later answers are applied
    assert run_burst_worker(processes, redis_url, tmp_path).returncode == 0
    assert_engines_equal_a_replay_of_the_log(conn, study_id)
    assert len(set_aside_answers(conn, study_id)) == 2


# ---------------------------------------------------------------------------- web processes and Redis
def start_web(processes, redis_url, tmp_path, web_workers=1) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = dict(os.environ, REDIS_URL=redis_url, PROXIMA_INSTANCE_PATH=str(tmp_path / "instance"),
               PROXIMA_SECRET_KEY="durability-test-secret", PROXIMA_RATE_LIMIT_EXEMPT_ADDRESSES="127.0.0.1")
    proc = processes(gunicorn_command(f"127.0.0.1:{port}", web_workers, "--timeout", "120"), env)
    base = f"http://127.0.0.1:{port}"

    wait_for(lambda: healthy(base) or proc.poll() is not None, what="the web server answering")
    assert proc.poll() is None, f"gunicorn exited: {stderr_of(proc)}"
    return proc, base


def simple_study(conn, study_id="stream") -> str:
    config = StudyConfig.from_dict({"name": "Stream", "algorithm": "random_triplets", "random_state": 0})
    return create_study(conn, config, colour_items(10), study_id=study_id)


def is_error_shape(response) -> bool:
    try:
        body = response.json()
    except ValueError:
        return False
    return set(body) == {"error"} and {"code", "message"} <= set(body["error"])


class Rater(threading.Thread):
    """One rater answering as fast as it can; after a failed POST it retries the same token until the
    server says either "stored" (201) or "already stored" (409 with the kept answer's id)."""

    def __init__(self, base: str, study_id: str, stop: threading.Event):
        super().__init__(daemon=True)
        self.base, self.study_id, self.stop = base, study_id, stop
        self.created: list[str] = []  # ids acknowledged with 201
        self.kept_on_retry: list[str] = []  # ids the server reported as already stored (409)
        self.failures: list[tuple[int, bool]] = []  # (status, JSON error shape?) of other answers
        self.connection_errors = 0
        self.problem: str | None = None

    def run(self):
        try:
            self._run()
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.problem = repr(exc)

    def _run(self):
        session = requests.Session()
        api = f"{self.base}/api/studies/{self.study_id}"
        question = None
        while True:
            if question is None:
                if self.stop.is_set():
                    return
                try:
                    response = session.get(f"{api}/questions/next", timeout=20)
                except requests.RequestException:
                    self.connection_errors += 1
                    time.sleep(0.02)
                    continue
                if response.status_code != 200:
                    self.failures.append((response.status_code, is_error_shape(response)))
                    time.sleep(0.02)
                    continue
                question = response.json()["question"]
            try:
                response = session.post(f"{api}/answers", timeout=20, json={
                    "token": question["token"], "choice": question["candidates"][0]["handle"]})
            except requests.RequestException:
                self.connection_errors += 1
                time.sleep(0.02)
                continue  # the same token again: stored at most once
            if response.status_code == 201:
                body = response.json()
                self.created.append(body["answer"]["id"])
                question = None if self.stop.is_set() else body.get("next")
            elif response.status_code == 409 and response.json()["error"]["code"] == "already_answered":
                self.kept_on_retry.append(response.json()["error"]["answer_id"])
                question = None
            else:
                self.failures.append((response.status_code, is_error_shape(response)))
                if response.status_code == 410:
                    question = None
                time.sleep(0.02)

    @property
    def acknowledged(self) -> list[str]:
        return self.created + self.kept_on_retry


def test_answers_acknowledged_before_redis_is_killed_survive_its_restart(tmp_path, processes):
    server = EmbeddedRedis(tmp_path / "instance")  # the platform's default: AOF, appendfsync always
    url = server.start()
    assert server.appendfsync == "always"
    conn = redis.Redis.from_url(url)
    raters: list[Rater] = []
    stop = threading.Event()
    try:
        study_id = simple_study(conn)
        _, base = start_web(processes, url, tmp_path, web_workers=2)
        raters = [Rater(base, study_id, stop) for _ in range(3)]
        for rater in raters:
            rater.start()

        def acknowledged():
            return sum(len(r.acknowledged) for r in raters)

        wait_for(lambda: acknowledged() >= 40, what="40 answers acknowledged")
        server.process.kill()  # kill -9 mid-stream
        server.process.wait()
        before = acknowledged()
        wait_for(lambda: sum(len(r.failures) + r.connection_errors for r in raters) >= 6,
                 what="clients seeing the outage")
        conn.close()
        server.start()  # the same files, port and password: the web processes reconnect
        conn = redis.Redis.from_url(url)
        wait_for(lambda: acknowledged() >= before + 40, what="40 more answers after the restart")
    finally:
        stop.set()
        for rater in raters:
            rater.join(timeout=WAIT)
    try:
        assert not any(r.is_alive() for r in raters), "a client is stuck"
        assert [r.problem for r in raters] == [None] * len(raters)
        logged = [entry_id.decode() for entry_id, _ in conn.xrange(keys.answers(study_id))]
        acked = [answer_id for r in raters for answer_id in r.acknowledged]
        # every 2xx answer is in the log; no answer is logged twice or without its rater hearing of it
        assert set(r_id for r in raters for r_id in r.created) <= set(logged)
        assert sorted(acked) == sorted(logged) and len(set(logged)) == len(logged)
        qids = [f[b"qid"] for _, f in conn.xrange(keys.answers(study_id))]
        assert len(set(qids)) == len(qids)
        failures = [f for r in raters for f in r.failures]
        assert failures, "the outage was not seen by any client"
        # while Redis was down: 503 storage_unavailable in the JSON error shape, never a 2xx
        assert all(status == 503 and shaped for status, shaped in failures), failures
    finally:
        conn.close()
        server.stop()


class ReplyHoldingProxy:
    """A TCP proxy in front of Redis that, once armed, withholds Redis's reply to the script that
    accepts an answer: the answer is stored (and fsynced), the web process waits for the reply."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.accept_sha = ACCEPT.sha.encode()
        self.armed = threading.Event()
        self.held = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target_port))
            self.sockets += [client, server]
            pending = threading.Event()  # this connection sent the accept script, reply not yet seen
            threading.Thread(target=self._pump, args=(client, server, pending, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, pending, False), daemon=True).start()

    def _pump(self, src, dst, pending, upstream):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if upstream and self.armed.is_set() and b"EVALSHA" in data and self.accept_sha in data:
                    pending.set()
                elif not upstream and pending.is_set():
                    pending.clear()
                    if not data.startswith(b"-"):  # the script ran: the answer is stored; its reply is lost
                        self.armed.clear()
                        self.held.set()
                        continue
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.listener.close()
        for s in self.sockets:
            s.close()


def test_a_web_process_killed_after_storing_an_answer_keeps_it_once_when_the_rater_retries(
        conn, redis_url, tmp_path, processes):
    study_id = simple_study(conn)
    conn.script_load(ACCEPT.text)
    proxy = ReplyHoldingProxy(redis.Redis.from_url(redis_url).connection_pool.connection_kwargs["port"])
    url = redis_url.rsplit(":", 1)[0] + f":{proxy.port}/0"
    try:
        web, base = start_web(processes, url, tmp_path, web_workers=1)
        rater = requests.Session()
        api = f"{base}/api/studies/{study_id}"
        question = rater.get(f"{api}/questions/next", timeout=10).json()["question"]
        body = {"token": question["token"], "choice": question["candidates"][1]["handle"]}
        proxy.armed.set()
        outcome = {}

        def post():
            try:
                outcome["response"] = rater.post(f"{api}/answers", json=body, timeout=WAIT)
            except requests.RequestException as exc:
                outcome["error"] = exc

        poster = threading.Thread(target=post, daemon=True)
        poster.start()
        assert proxy.held.wait(WAIT), "the answer was never stored"
        [stored] = conn.xrange(keys.answers(study_id))  # in the log, and the rater has no reply yet
        assert poster.is_alive()
        [worker] = psutil.Process(web.pid).children()
        worker.send_signal(signal.SIGKILL)  # kill -9 the web process mid-request
        poster.join(WAIT)
        assert "error" in outcome, outcome  # the response was lost with the process

        retry = rater.post(f"{api}/answers", json=body, timeout=WAIT)  # gunicorn has started a new worker
        assert retry.status_code == 409
        error = retry.json()["error"]
        assert error["code"] == "already_answered" and error["answer_id"] == stored[0].decode()
        assert len(conn.xrange(keys.answers(study_id))) == 1  # stored once
        again = rater.post(f"{api}/answers", json=body, timeout=WAIT)
        assert again.status_code == 409 and len(conn.xrange(keys.answers(study_id))) == 1
        # the rater carries on with a fresh question
        fresh = rater.get(f"{api}/questions/next", timeout=10).json()["question"]
        assert rater.post(f"{api}/answers", timeout=10, json={
            "token": fresh["token"], "choice": fresh["candidates"][0]["handle"]}).status_code == 201
        assert len(conn.xrange(keys.answers(study_id))) == 2
    finally:
        proxy.close()


# ---------------------------------------------------------------------------- refits beside the passes
def test_a_worker_killed_while_a_refit_runs_beside_it_loses_nothing_and_the_refit_is_done_again(
        conn, redis_url, tmp_path, processes):
    """A duels study's refit runs in the worker's fit process. While it runs (here: hangs) the passes go
    on applying answers; a kill -9 of the worker and its fit process then leaves the saved state with
    the refit described but not applied (no half-applied fit) and every answer applied once; the next
    worker does the refit again and puts it in place."""
    config = StudyConfig.from_dict({"name": "Refits", "random_state": 5, "pool_size": 20,
                                    "algorithms": [{"algorithm": "duels", "params": {"warmup": 2}}]})
    study_id = create_study(conn, config, colour_items(), study_id="refits")
    n = get_study(conn, study_id).n_items
    answer_and_schedule(conn, study_id, 3 * n, seed=1)
    worker = processes([sys.executable, "-m", "webapp", "worker"], worker_env(redis_url, tmp_path, "in_fit:pause"))
    marker = tmp_path / "paused"
    wait_for(lambda: marker.exists() and marker.read_text().strip(), what="the fit process hanging in a refit")

    def state():
        return engine_state.load(conn, study_id, "duels")

    wait_for(lambda: state() is not None and state()["fit_job"] is not None, what="a saved state with its refit")
    fits_before = state()["n_fits"]
    # passes go on while the refit runs: later answers are applied without waiting for it
    answer_and_schedule(conn, study_id, 25, seed=2)
    log_length = conn.xlen(keys.answers(study_id))
    wait_for(lambda: int(conn.hget(keys.engine_stats(study_id), "answers_applied") or 0) == log_length,
             what="the answers given during the refit applied")
    kill_tree(worker)  # the worker and its hanging fit process
    saved = state()
    assert saved["fit_job"] is not None and saved["n_fits"] == fits_before  # described, not applied
    assert log_length == int(conn.hget(keys.engine_stats(study_id), "answers_applied"))
    assert saved["n_answers"] == learned(conn.xrange(keys.answers(study_id)))  # all but the held-out ones

    # the next worker (refits inside its passes) takes the refit up from the saved state and finishes it
    answer_and_schedule(conn, study_id, 5, seed=3)
    env = worker_env(redis_url, tmp_path)
    restarted = processes([sys.executable, "-m", "webapp", "worker", "--burst", "--fit-processes", "0"], env)
    restarted.wait(timeout=WAIT)
    assert restarted.returncode == 0, stderr_of(restarted)
    after = state()
    assert after["n_fits"] > fits_before and after["fit_job"] is None
    log_length = conn.xlen(keys.answers(study_id))
    assert log_length == int(conn.hget(keys.engine_stats(study_id), "answers_applied"))
    assert after["n_answers"] == learned(conn.xrange(keys.answers(study_id)))
    assert engine_state.load_cursor(conn, study_id) == conn.xrevrange(keys.answers(study_id), count=1)[0][0].decode()


def test_a_study_whose_raters_stopped_still_gets_its_refit_from_the_fit_process(conn, redis_url, tmp_path, processes):
    """The last answers call for a refit; it runs beside the passes and, with no answer coming after it,
    the worker still puts it in place and saves it."""
    config = StudyConfig.from_dict({"name": "Idle", "random_state": 2, "pool_size": 5,
                                    "algorithms": [{"algorithm": "duels", "params": {"warmup": 2}}]})
    study_id = create_study(conn, config, colour_items(), study_id="idle")
    n = get_study(conn, study_id).n_items
    worker = processes([sys.executable, "-m", "webapp", "worker"], worker_env(redis_url, tmp_path))
    answer_and_schedule(conn, study_id, 3 * n, seed=4)  # past the warm-up: the first refit is due

    def state():
        return engine_state.load(conn, study_id, "duels") or {}

    wait_for(lambda: state().get("n_answers") == learned(conn.xrange(keys.answers(study_id))),
             what="the answers applied")
    wait_for(lambda: state().get("n_fits", 0) >= 1 and state().get("fit_job") is None,
             what="the refit put in place and saved with no further answer")
    assert state()["fitted_on"] == learned(conn.xrange(keys.answers(study_id)))
    assert worker.poll() is None
