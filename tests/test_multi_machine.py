"""Several machines sharing one Redis (issue 16): Debian's Redis 7 server (not the bundled 6.2),
two gunicorn instances and two ``proxima worker`` processes, each with an instance folder of its
own as on separate machines, all pointed at it by ``REDIS_URL``.

Raters send their requests to both web instances in turn (as behind a load balancer). Checked:
every acknowledged answer is in the log once and applied once (acknowledged = logged = applied),
the studies are updated by both workers, and a worker killed with SIGKILL in the middle of a pass
(after applying a batch, before its EXEC) leaves the study to the other worker, which takes the
study's lock over and applies every answer exactly once.
"""
from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import redis
import requests
from helpers import healthy, require, wait_for
from rq.registry import FinishedJobRegistry, StartedJobRegistry

from webapp import ROOT
from webapp.cli.embedded import free_port
from webapp.cli.serve import gunicorn_command
from workers.store import keys
from workers.store.queue import get_queue

STUDIES = [f"machines-{i}" for i in range(4)]
RATERS_PER_STUDY = 2
THINK_SECONDS = 0.02


def debian_redis_server() -> str | None:
    """The path of a Redis >= 7 server binary from the system (Debian's ``redis-server``), or None."""
    for candidate in ("/usr/bin/redis-server", shutil.which("redis-server")):
        if candidate and os.access(candidate, os.X_OK):
            out = subprocess.run([candidate, "--version"], capture_output=True, text=True).stdout
            match = re.search(r"v=(\d+)\.", out)
            if match and int(match.group(1)) >= 7:
                return candidate
    return None


REDIS7 = debian_redis_server()


@pytest.fixture(autouse=True)
def _redis7():
    require(REDIS7 is not None, "Debian's Redis 7 server (redis-server >= 7)",
            "apt-get install redis-server (.ci/run installs it)")


class Machines:
    """The processes of the test: one Redis, web instances and workers, each logging to a file."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.password = secrets.token_hex(8)
        self.port = free_port()
        self.url = f"redis://:{self.password}@127.0.0.1:{self.port}/0"
        self.secret = secrets.token_hex(16)
        self.procs: list[subprocess.Popen] = []
        self.logs: dict[int, Path] = {}

    def start(self, name: str, cmd: list[str], env: dict | None = None) -> subprocess.Popen:
        log = self.folder / f"{name}.log"
        environment = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "PROXIMA_FAULT")}
        environment.update(REDIS_URL=self.url, PROXIMA_SECRET_KEY=self.secret,
                           PROXIMA_INSTANCE_PATH=str(self.folder / f"{name}-instance"),
                           PROXIMA_RATE_LIMIT_EXEMPT_ADDRESSES="127.0.0.1", **(env or {}))
        with log.open("w") as out:
            proc = subprocess.Popen(cmd, env=environment, cwd=str(ROOT), stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT)
        self.procs.append(proc)
        self.logs[proc.pid] = log
        return proc

    def start_redis(self) -> redis.Redis:
        data = self.folder / "redis"
        data.mkdir()
        # the persistence docs/operations/several-machines.md asks of a shared Redis: AOF, fsync before every reply
        self.start("redis", [REDIS7, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(data),
                             "--requirepass", self.password, "--appendonly", "yes", "--appendfsync", "always",
                             "--save", ""])
        conn = redis.Redis.from_url(self.url)

        def up():
            try:
                return conn.ping()
            except redis.ConnectionError:
                return False

        wait_for(up, 20, what="Redis 7 answering")
        assert conn.info("server")["redis_version"].startswith(("7.", "8.")), conn.info("server")["redis_version"]
        return conn

    def start_web(self, name: str) -> str:
        port = free_port()
        self.start(name, gunicorn_command(f"127.0.0.1:{port}", 1))
        return f"http://127.0.0.1:{port}"

    def start_worker(self, name: str, env: dict | None = None) -> subprocess.Popen:
        return self.start(name, [sys.executable, "-m", "webapp", "worker"], env=env)

    def output(self, proc: subprocess.Popen) -> str:
        return self.logs[proc.pid].read_text(errors="replace")[-3000:]

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class Raters:
    """Raters answering the studies until stopped, each request to the next web instance in turn."""

    def __init__(self, bases: list[str]):
        self.bases = bases
        self.acked: dict[str, list[str]] = {s: [] for s in STUDIES}
        self.by_base: dict[str, int] = dict.fromkeys(bases, 0)
        self.errors: list[str] = []
        self.halt = threading.Event()
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []

    def start(self, tag: str) -> None:
        self.halt.clear()
        self.threads = [threading.Thread(target=self._rater, args=(study, f"{tag}-{study}-{i}", i), daemon=True)
                        for study in STUDIES for i in range(RATERS_PER_STUDY)]
        for t in self.threads:
            t.start()

    def stop(self) -> None:
        self.halt.set()
        for t in self.threads:
            t.join(30)

    def _rater(self, study: str, name: str, turn: int) -> None:
        http = requests.Session()

        def base() -> str:
            nonlocal turn
            turn += 1
            return self.bases[turn % len(self.bases)]

        try:
            assert http.get(f"{base()}/s/{study}", params={"rater": name}, timeout=10).status_code == 200
            question = None
            while not self.halt.is_set():
                if question is None:
                    r = http.get(f"{base()}/api/studies/{study}/questions/next", timeout=10)
                    if r.status_code != 200:
                        self.errors.append(f"question {r.status_code} {r.text[:200]}")
                        time.sleep(0.2)
                        continue
                    question = r.json()["question"]
                time.sleep(THINK_SECONDS)
                where = base()
                r = http.post(f"{where}/api/studies/{study}/answers", timeout=10,
                              json={"token": question["token"], "choice": question["candidates"][0]["handle"]})
                if r.status_code != 201:
                    self.errors.append(f"answer {r.status_code} {r.text[:200]}")
                    question = None
                    continue
                body = r.json()
                with self.lock:
                    self.acked[study].append(body["answer"]["id"])
                    self.by_base[where] += 1
                question = body.get("next")
        except requests.RequestException as exc:
            self.errors.append(f"{type(exc).__name__}: {exc}")


def applied(conn, study: str) -> int:
    return int(conn.hget(keys.engine_stats(study), "answers_applied") or 0)


def assert_exactly_once(conn, raters: Raters) -> None:
    """acknowledged = logged = applied, for every study, no answer and no question twice."""
    for study in STUDIES:
        wait_for(lambda s=study: applied(conn, s) >= conn.xlen(keys.answers(s)), 60,
                 what=f"the workers applying every answer of {study}")
        log = conn.xrange(keys.answers(study))
        logged = [entry.decode() for entry, _ in log]
        questions = [fields[b"qid"] for _, fields in log]
        acked = raters.acked[study]
        assert len(set(acked)) == len(acked), f"{study}: an answer acknowledged twice"
        assert set(acked) == set(logged), (f"{study}: {len(set(acked) - set(logged))} acknowledged answers missing "
                                           f"from the log, {len(set(logged) - set(acked))} logged unacknowledged")
        assert len(set(questions)) == len(questions), f"{study}: a question answered twice in the log"
        assert applied(conn, study) == len(logged), f"{study}: {applied(conn, study)} applied of {len(logged)} logged"


def study_workers(conn) -> dict[str, set[str]]:
    """Which worker ran update jobs of which study (finished and running jobs)."""
    queue = get_queue(conn)
    ran: dict[str, set[str]] = {}
    for registry in (FinishedJobRegistry(queue=queue), StartedJobRegistry(queue=queue)):
        for job in queue.job_class.fetch_many(registry.get_job_ids(), connection=conn):
            if job is not None and job.worker_name and job.args:
                ran.setdefault(job.worker_name, set()).add(job.args[0])
    return ran


def test_two_web_instances_and_two_workers_share_one_redis7(tmp_path):
    from helpers import colour_items

    from workers.store.config import StudyConfig
    from workers.store.queue import schedule_update
    from workers.store.studies import create_study

    machines = Machines(tmp_path)
    try:
        conn = machines.start_redis()
        for study in STUDIES:
            create_study(conn, StudyConfig(name=study, pool_size=20, random_state=0), colour_items(), study_id=study)
            schedule_update(conn, study)
        bases = [machines.start_web("web-a"), machines.start_web("web-b")]
        worker_a = machines.start_worker("worker-a")
        worker_b = machines.start_worker("worker-b")
        wait_for(lambda: all(healthy(b) for b in bases), 60, what="both web instances healthy")
        wait_for(lambda: all(conn.exists(keys.cursor(s)) for s in STUDIES), 60,
                 what="the first pool fill of every study")

        # phase 1: answers through both web instances, both workers updating (raters answer until each
        # web instance has acknowledged answers and both workers have run updates of the studies)
        raters = Raters(bases)
        raters.start("one")

        def both_served():
            ran = study_workers(conn)
            return (min(raters.by_base.values()) >= 20 and len(ran) >= 2 and all(ran.values())
                    and set().union(*ran.values()) == set(STUDIES))

        wait_for(lambda: both_served() or raters.errors, 120,
                 what="answers through both web instances and updates by both workers")
        raters.stop()
        assert not raters.errors, raters.errors[:5]
        assert_exactly_once(conn, raters)
        ran = study_workers(conn)

        # phase 2: worker B is replaced by one that stops in the middle of its first pass with answers
        # (batch read and applied in memory, EXEC not sent) and is then killed with SIGKILL
        worker_b.send_signal(signal.SIGTERM)
        worker_b.wait(30)
        marker = tmp_path / "paused.pid"
        worker_c = machines.start_worker("worker-c", env={"PROXIMA_FAULT": "before_exec:pause",
                                                          "PROXIMA_FAULT_FILE": str(marker)})
        raters.start("two")
        wait_for(lambda: marker.exists() and marker.read_text().strip(), 40,
                 what="the second worker pausing in the middle of a pass")
        before = {s: applied(conn, s) for s in STUDIES}
        os.kill(worker_c.pid, signal.SIGKILL)
        worker_c.wait(10)
        killed_at = time.monotonic()
        # answers keep coming to every study after the kill, the one the killed worker held locked too
        at_kill = {s: len(raters.acked[s]) for s in STUDIES}
        wait_for(lambda: all(len(raters.acked[s]) >= at_kill[s] + 10 for s in STUDIES) or raters.errors, 60,
                 what="ten more answers to every study after the kill")
        raters.stop()
        assert not raters.errors, raters.errors[:5]
        assert_exactly_once(conn, raters)
        took_over = time.monotonic() - killed_at
        # every study, the one whose pass was killed too, has answers applied since the kill
        assert all(applied(conn, s) > before[s] for s in STUDIES), ({s: applied(conn, s) for s in STUDIES}, before)
        assert worker_a.poll() is None, machines.output(worker_a)
        print(f"\nanswers: {sum(len(v) for v in raters.acked.values())} acknowledged through "
              f"{raters.by_base} = logged = applied; update jobs by worker {ran}; after the kill every "
              f"answer was applied within {took_over:.1f} s")
    finally:
        machines.stop_all()
