"""What the web-load benchmarks share (``load.py``, ``web_cpu.py``, ``engine_scale.py``): the load study
(1,000 colour items at hidden 2-D positions), the servers as ``proxima serve`` starts them (the embedded
Redis, gunicorn with serve's command line) and a copy of this tree with the hot-path files of an earlier
revision for before/after runs. Project code is imported inside the functions, so the load generators'
processes stay light.
"""
from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import requests
from load_common import ACCESS_LOG_FORMAT

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

STUDY = "load-anntri"
LABEL = "anntri"  # the study's one algorithm
ANSWER_NOISE = 0.05  # sd of the simulated raters' distance noise (unit square)


def item_positions(n: int, seed: int) -> list[tuple[float, float]]:
    rng = random.Random(seed)
    return [(rng.random(), rng.random()) for _ in range(n)]


def study_config(pool_size: int, seed: int, n_items: int = 1000, algorithm: str = "anntri",
                 kind: str | None = None, settings: dict | None = None) -> dict:
    """The load study: ANNTri on triplet-derived questions with the parameters the older load figures were
    measured with, or ``algorithm`` with its study defaults asking ``kind`` (the default kind: None) with
    that kind's ``settings`` (``rank: {n_reference, n_select}``)."""
    if kind is not None:
        config = {"name": f"Load test ({algorithm}, {kind}, n = {n_items})", "algorithm": algorithm,
                  "question_kind": kind, "pool_size": pool_size, "random_state": seed}
        if settings:
            config[kind] = settings
        return config
    if algorithm != "anntri":
        return {"name": f"Load test ({algorithm}, n = {n_items})", "algorithm": algorithm,
                "pool_size": pool_size, "random_state": seed}
    return {"name": f"Load test (ANNTri, n = {n_items})", "algorithm": "anntri",
            "params": {"k": 1, "delta": 0.1, "sigma": 0.5, "bound": "lil", "max_samples_per_round": 400,
                       "window": 1},
            "pool_size": pool_size, "random_state": seed}


def create_load_study(conn, n_items: int, pool_size: int, seed: int, algorithm: str = "anntri",
                      kind: str | None = None, settings: dict | None = None) -> None:
    from webapp import catches
    from workers.store.config import StudyConfig
    from workers.store.queue import schedule_update
    from workers.store.studies import Item, create_study, get_study

    items = [Item(id=f"c{i:04d}", kind="color", color=f"#{int(x * 255):02x}{int(y * 255):02x}80",
                  position=(x, y)) for i, (x, y) in enumerate(item_positions(n_items, seed))]
    create_study(conn, StudyConfig.from_dict(study_config(pool_size, seed, n_items, algorithm, kind, settings)),
                 items, study_id=STUDY)
    schedule_update(conn, STUDY)
    catches.prepare(conn, get_study(conn, STUDY))  # as `proxima create` and the New study form do


def wait_until(check, timeout: float, what: str, every: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(every)
    raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")


def healthy(base: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/api/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def serve_gunicorn_options() -> dict:
    """The workers, worker class, threads and keep-alive ``proxima serve`` gives gunicorn (``webapp.cli.serve``)."""
    from webapp.cli.serve import GUNICORN_THREADS, SERVE_WEB_WORKERS

    given = dict(zip(GUNICORN_THREADS[::2], GUNICORN_THREADS[1::2], strict=True))
    keep_alive = given.get("--keep-alive")
    return {"web_workers": SERVE_WEB_WORKERS, "worker_class": given.get("--worker-class", "sync"),
            "threads": int(given.get("--threads", 1)),
            "keep_alive": None if keep_alive is None else int(keep_alive)}


def gunicorn_command(a: argparse.Namespace, port: int, access_log: Path | None) -> list[str]:
    """``proxima serve``'s gunicorn command line (``webapp.cli.serve.gunicorn_command``: its hooks and
    limits), the worker options from the command line, plus the access log (none when ``access_log``
    is None, as under ``proxima serve``)."""
    from webapp.cli import serve

    options = ["--worker-class", a.worker_class, "--threads", str(a.threads)]
    if a.keep_alive is not None:
        options += ["--keep-alive", str(a.keep_alive)]
    if access_log is not None:
        options += ["--access-logfile", str(access_log), "--access-logformat", ACCESS_LOG_FORMAT]
    return serve.gunicorn_command(f"127.0.0.1:{port}", a.web_workers, *options)


def stop_process(proc: subprocess.Popen, timeout: float = 20.0) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


#: The files of the request and update hot paths (``proxima worker`` included): ``--baseline REF`` runs
#: this tree with these as they were at REF. A file's earlier and later names are both listed (e.g.
#: webapp/rating.py, now webapp/questions_answers.py): one missing at REF is left out of the copy.
HOT_PATH_FILES = ("webapp/questions_answers.py", "webapp/rating.py", "webapp/api.py", "webapp/raters.py",
                  "webapp/limits.py", "webapp/tokens.py", "workers/store/studies.py", "workers/store/questions.py",
                  "workers/store/answers.py", "workers/store/queue.py", "workers/jobs/update.py",
                  "workers/jobs/update_pass.py", "workers/jobs/learner_cache.py", "workers/jobs/checkpoints.py",
                  "workers/jobs/summary.py", "workers/jobs/truth_curve.py", "workers/jobs/lock.py",
                  "workers/store/engine_state.py", "workers/jobs/learners.py", "webapp/cli/serve.py",
                  "webapp/__init__.py", "webapp/metrics.py", "webapp/errors.py", "webapp/storage.py",
                  "webapp/auth.py", "workers/store/raters.py", "workers/store/lua/accept.lua",
                  "workers/store/lua/issue.lua", "workers/store/lua/next.lua", "workers/store/lua/next_question.lua",
                  "workers/store/lua/take.lua")


def code_copy(ref: str, folder: Path) -> Path:
    """This working tree copied into ``folder``, with the hot-path files as they were at git revision
    ``ref`` (read with ``git show``; the repository is not touched), so only those files differ."""
    folder.mkdir(parents=True, exist_ok=True)
    tar = subprocess.run(["tar", "-c", "--exclude=./.venv", "--exclude=./.git", "--exclude=./instance",
                          "--exclude=__pycache__", "-C", str(ROOT), "."], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=tar, check=True)
    subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", f"{ref}^{{commit}}"], check=True,
                   capture_output=True)
    for path in HOT_PATH_FILES:
        old = subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:{path}"], capture_output=True)
        if old.returncode == 0:
            (folder / path).write_bytes(old.stdout)
        else:
            (folder / path).unlink(missing_ok=True)  # not there at REF (a later name)
    return folder


class Setup:
    """A fresh embedded Redis with load.py's study, and the environment the servers get."""

    def __init__(self, a: argparse.Namespace, code_root: Path, prefix: str, pool_size: int) -> None:
        import redis

        from webapp.cli.embedded import EmbeddedRedis

        self.scratch = Path(tempfile.mkdtemp(prefix=prefix))
        self.instance = self.scratch / "instance"
        self.server = EmbeddedRedis(self.instance, appendfsync=a.appendfsync)
        self.url = self.server.start()
        self.procs: list[subprocess.Popen] = []
        self.conn = redis.Redis.from_url(self.url)
        create_load_study(self.conn, a.items, pool_size, a.seed, a.algorithm, a.kind, a.kind_settings)
        # the load generators run on this machine: exempt loopback from the rate limits (none is by default)
        self.env = dict(os.environ, REDIS_URL=self.url, PROXIMA_INSTANCE_PATH=str(self.instance),
                        PYTHONPATH=str(code_root), PROXIMA_RATE_LIMIT_EXEMPT_ADDRESSES="127.0.0.1,::1")
        self.log = (self.scratch / "servers.log").open("w")
        self.code_root = code_root

    def start(self, command: list[str]) -> subprocess.Popen:
        """A server process in the code under test, logging to servers.log; stopped by ``stop``."""
        proc = subprocess.Popen(command, cwd=str(self.code_root), env=self.env, stdout=self.log,
                                stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in reversed(self.procs):
            stop_process(proc)
        self.server.stop()


def start_server(instance: Path, web_workers: int, workers: int):
    """A whole ``proxima serve`` (its embedded Redis, RQ workers, gunicorn) in ``instance``, healthy:
    (process, base URL, Redis URL). Stopped by :func:`stop_server` (Ctrl-C, as a researcher stops it)."""
    from webapp.cli.embedded import free_port, running_url

    port = free_port()
    # the simulated crowd answers from this machine: exempt loopback from the rate limits (none is by default)
    env = dict(os.environ, PROXIMA_INSTANCE_PATH=str(instance), PROXIMA_RATE_LIMIT_EXEMPT_ADDRESSES="127.0.0.1,::1")
    env.pop("REDIS_URL", None)
    log = (instance / "serve.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "webapp", "serve", "--port", str(port), "--web-workers",
                             str(web_workers), "--workers", str(workers)], env=env, cwd=str(ROOT),
                            stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"proxima serve exited; see {instance / 'serve.log'}")
        try:
            if requests.get(f"{base}/api/health", timeout=2).status_code == 200:
                return proc, base, running_url(instance)
        except requests.RequestException:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("proxima serve did not become healthy in 90 s")


def stop_server(proc) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
