"""The fault table: kill -9 of every process kind of `proxima serve`, idle and with raters answering, several
times each; for each kill, whether every acknowledged answer is in the log once, how long until learning (the
engine's cursor) has caught up with the answers given, and whether the Overview's incidents say what died.

    python benchmarks/faults.py [--times 3] [--raters 20] [--kinds web-worker,gunicorn-master,...]

Process kinds: ``web-worker`` (a gunicorn worker: its master starts another), ``gunicorn-master``,
``rq-worker``, ``fit-process`` and ``check-process`` (the RQ worker's own children: it replaces them),
``redis`` (the embedded redis-server), ``serve`` (serve itself: its children die with it, and a new serve is
started as a service manager would). Serve runs with ``--max-restarts 1000``: six kills of one kind within
a minute are this benchmark's doing, not a crash loop; and a child serve restarts (Redis, the gunicorn master, the
RQ worker) is killed only once it has run ``STAYED_UP_S``: serve restarts one that ran that long after its
first backoff (0.5 s), one killed sooner after a backoff doubling up to 8 s, as it would a crash at start.
One serve and one study for the whole run (duels on
40 colours, so a refit and an answer check run beside the passes). Raters are threads answering as fast as
the server lets them, each answer sent again with its token until the server gives a definite reply (so an answer is
acknowledged once). "caught up" is the time from the kill until the engine's cursor reached the last answer
acknowledged at that moment plus one probe answer given after the process came back. Each kill's JSON line also
has ``healthy_s`` (``/api/health`` answering again), ``probed_s`` (the probe answer taken) and ``checked_s`` (the
answer check ran again, beside the passes), all from the kill. The fit and check processes are found by the names the
worker gives them (``proxima fit``, ``proxima check``);
``--keep`` keeps serve's log to read what happened in between.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import redis
import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from webapp.cli.embedded import free_port  # noqa: E402
from webapp.cli.supervise import STAYED_UP_S  # noqa: E402
from workers.jobs.fits import CHECK_PROCESS_NAME, FIT_PROCESS_NAME, FIT_RETRY_DELAY_S  # noqa: E402
from workers.store import health, keys  # noqa: E402
from workers.store.raters import CHECKED_AT_FIELD  # noqa: E402

STUDY = "faults"
#: The process kinds serve restarts itself (after its backoff: webapp.cli.supervise).
SUPERVISED = ("gunicorn-master", "rq-worker", "redis")
KINDS = ("web-worker", "gunicorn-master", "rq-worker", "fit-process", "check-process", "redis", "serve")
#: what an incident names for each kind (None: nothing records it; see the notes printed under the table)
INCIDENT = {"gunicorn-master": "web server exited", "rq-worker": "RQ worker 1 exited", "redis": "embedded Redis exited",
            "fit-process": "process died", "check-process": "process died", "serve": "took over from a serve",
            "web-worker": "a web worker died"}
WAIT = 60.0


class Serve:
    def __init__(self, instance: Path, port: int):
        self.instance, self.port, self.base = instance, port, f"http://127.0.0.1:{port}"
        self.log = instance.parent / "serve.log"
        self.start()

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "PROXIMA_FAULT")}
        env.update(PROXIMA_INSTANCE_PATH=str(self.instance), PROXIMA_RATE_LIMIT_EXEMPT_ADDRESSES="127.0.0.1")
        with self.log.open("a") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "webapp", "serve", "--port", str(self.port),
                                          "--web-workers", "2", "--workers", "1",
                                          "--max-restarts", "1000"], env=env, cwd=str(ROOT),
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        wait(lambda: self.healthy(), WAIT, "serve answering /api/health")

    def healthy(self) -> bool:
        try:
            return requests.get(f"{self.base}/api/health", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def redis(self) -> redis.Redis:
        # the file is written again when Redis restarts: read it once it is whole
        path = self.instance / "redis" / "redis.url"
        wait(lambda: path.exists() and path.read_text().strip().startswith("redis://"), WAIT, "Redis's address")
        return redis.Redis.from_url(path.read_text().strip(), socket_timeout=5)

    def victim(self, kind: str) -> int:
        me = psutil.Process(self.proc.pid)

        def cmd(p):
            try:
                return " ".join(p.cmdline())
            except psutil.Error:
                return ""
        if kind == "serve":
            return self.proc.pid
        if kind == "redis":
            return next(p.pid for p in me.children() if "redis-server" in cmd(p))
        if kind == "gunicorn-master":
            return next(p.pid for p in me.children() if "gunicorn" in cmd(p))
        if kind == "web-worker":
            master = next(p for p in me.children() if "gunicorn" in cmd(p))
            return master.children()[0].pid
        worker = next(p for p in me.children() if "webapp worker" in cmd(p))
        if kind == "rq-worker":
            return worker.pid
        # the worker names its children by what they do (workers/jobs/fits.py); each starts with its first work
        name = {"fit-process": FIT_PROCESS_NAME, "check-process": CHECK_PROCESS_NAME}[kind]
        found = [p for p in worker.children() if _name(p) == name]
        if not found:
            raise LookupError(f"the worker has no {kind} now")
        return found[0].pid

    def stop(self) -> None:
        family = [p.pid for p in psutil.Process(self.proc.pid).children(recursive=True)] if self.proc.poll() is None \
            else []
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        for pid in family:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def wait(condition, timeout: float, what: str, interval: float = 0.05) -> float:
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(interval)
    return time.monotonic() - start


class Raters:
    """``n`` raters answering in threads; every answer acknowledged once (retried with its token)."""

    def __init__(self, base: str, prefix: str, n: int):
        self.base, self.acknowledged, self.lock = base, [], threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(f"{prefix}-{i}",), daemon=True) for i in range(n)]
        for t in self.threads:
            t.start()

    def run(self, rater: str) -> None:
        session, question = requests.Session(), None
        while not self.stop.is_set():
            try:
                if question is None:
                    session.get(f"{self.base}/s/{STUDY}", params={"rater": rater}, timeout=5)
                    got = session.get(f"{self.base}/api/studies/{STUDY}/questions/next", timeout=5)
                    question = got.json().get("question") if got.status_code == 200 else None
                    if question is None:
                        time.sleep(0.2)
                        continue
                sent = session.post(f"{self.base}/api/studies/{STUDY}/answers", timeout=5,
                                    json={"token": question["token"], "choice": question["candidates"][0]["handle"]})
            except (requests.RequestException, ValueError):
                time.sleep(0.2)  # the server is down: send the same answer again
                continue
            body = sent.json() if sent.headers.get("content-type", "").startswith("application/json") else {}
            if sent.status_code == 201:
                with self.lock:
                    self.acknowledged.append(body["answer"]["id"])
                question = body.get("next")
            elif sent.status_code == 409 and body.get("error", {}).get("code") == "already_answered":
                question = None
            elif sent.status_code in (400, 404, 409, 410):
                question = None  # an expired or dropped question: fetch another
            else:
                time.sleep(0.2)

    def finish(self) -> list[str]:
        self.stop.set()
        for t in self.threads:
            t.join(30)
        return self.acknowledged


def applied(conn: redis.Redis, answer_id: str) -> bool:
    try:
        cursor = conn.get(keys.cursor(STUDY))
    except redis.RedisError:
        return False
    if cursor is None:
        return False
    key = tuple(int(x) for x in cursor.decode().split("-"))
    return key >= tuple(int(x) for x in answer_id.split("-"))


def last_logged(conn: redis.Redis) -> str | None:
    last = conn.xrevrange(keys.answers(STUDY), count=1)
    return last[0][0].decode() if last else None


def one_kill(serve: Serve, kind: str, busy: int) -> dict:
    if not _has(serve, kind):  # the fit and check processes start with the work they do: give some
        warm = Raters(serve.base, f"warm-{kind}-{time.monotonic_ns()}", 5)
        try:
            wait(lambda: _has(serve, kind), _wait_for(kind), f"a {kind} to kill")
        finally:
            warm.finish()
    raters = Raters(serve.base, f"r-{kind}-{time.monotonic_ns()}", busy) if busy else None
    if raters:
        wait(lambda: len(raters.acknowledged) >= 20, WAIT, "raters answering")
    wait(lambda: _has(serve, kind), _wait_for(kind), f"a {kind} to kill")
    if kind in SUPERVISED:
        # a child serve restarts: killed once it has run STAYED_UP_S, as a fault of a running process (one
        # killed sooner is a crash at start to serve, restarted after a growing backoff)
        # (a process's start time is known to a second: the boot time it counts from is whole seconds)
        wait(lambda: _running_for(serve, kind) > STAYED_UP_S + 2, WAIT, f"the {kind} running {STAYED_UP_S:.0f} s")
    pid = serve.victim(kind)
    since = time.time()
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    if kind == "serve":
        serve.proc.wait(30)
        time.sleep(0.5)
        serve.start()  # as systemd's Restart=always would
    wait(serve.healthy, WAIT, "healthy again")
    healthy_s = time.monotonic() - killed
    conn = serve.redis()
    wait(lambda: _ping(conn), WAIT, "Redis back")
    target = last_logged(conn)
    try:
        probe = _probe(serve.base, kind)
    except RuntimeError:
        probe = None
    probed_s = time.monotonic() - killed
    target = probe or target
    wait(lambda: target is None or applied(conn, target), WAIT, "learning caught up", 0.02)
    caught_up = time.monotonic() - killed
    acknowledged = raters.finish() if raters else []
    if probe:
        acknowledged = [*acknowledged, probe]
    wait(lambda: applied(conn, last_logged(conn)), WAIT, "the engine applying every answer")
    # the answer check ran again (beside the passes, in the check process) after the kill
    wait(lambda: _checked_since(conn, since), WAIT, "the answer check running again")
    checked = time.monotonic() - killed
    logged = [i.decode() for i, _ in conn.xrange(keys.answers(STUDY))]
    applied_count = int(conn.hget(keys.engine_stats(STUDY), "answers_applied") or 0)
    word = INCIDENT[kind]
    shown = None if word is None else _wait_incident(conn, word, since)
    return {"kind": kind, "busy": busy, "caught_up_s": caught_up, "healthy_s": healthy_s, "probed_s": probed_s,
            "checked_s": checked,
            "lost": len(set(acknowledged) - set(logged)), "doubled": len(logged) - len(set(logged)),
            "applied_once": applied_count == len(logged), "shown": shown}


def _wait_for(kind: str) -> float:
    """How long a process of ``kind`` may take to be there to kill: a fit that lost its process FIT_RETRIES times
    starts again only after FIT_RETRY_DELAY_S, doubling (workers/jobs/fits.py; the worker logs it), and until
    then the worker has no fit process (the fourth kill of one fit waits 60 s)."""
    return WAIT + (4 * FIT_RETRY_DELAY_S if kind == "fit-process" else 0.0)


def _name(process: psutil.Process) -> str:
    try:
        return process.name()
    except psutil.Error:
        return ""


def _running_for(serve: Serve, kind: str) -> float:
    try:
        return time.time() - psutil.Process(serve.victim(kind)).create_time()
    except (LookupError, StopIteration, IndexError, psutil.Error):
        return 0.0


def _has(serve: Serve, kind: str) -> bool:
    try:
        serve.victim(kind)
        return True
    except (LookupError, StopIteration, IndexError, psutil.Error):
        return False


def _checked_since(conn, since: float) -> bool:
    try:
        return float(conn.hget(keys.engine_stats(STUDY), CHECKED_AT_FIELD) or 0) > since
    except redis.RedisError:
        return False


def _ping(conn) -> bool:
    try:
        return conn.ping()
    except redis.RedisError:
        return False


def _wait_incident(conn, word: str, since: float) -> bool:
    try:
        wait(lambda: any(word in f"{i['what']} {i.get('detail', '')}" for i in health.incidents(conn, since=since - 1)),
             20, "the incident recorded")
        return True
    except TimeoutError:
        return False


def _probe(base: str, kind: str) -> str:
    session = requests.Session()
    for _ in range(100):
        try:
            session.get(f"{base}/s/{STUDY}", params={"rater": f"probe-{kind}-{time.monotonic_ns()}"}, timeout=5)
            got = session.get(f"{base}/api/studies/{STUDY}/questions/next", timeout=5).json()["question"]
            sent = session.post(f"{base}/api/studies/{STUDY}/answers", timeout=5,
                                json={"token": got["token"], "choice": got["candidates"][0]["handle"]})
            if sent.status_code == 201:
                return sent.json()["answer"]["id"]
        except (requests.RequestException, ValueError, KeyError, TypeError):
            pass
        time.sleep(0.1)
    raise RuntimeError("no probe answer taken")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--times", type=int, default=3)
    parser.add_argument("--raters", type=int, default=20)
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--keep", action="store_true", help="keep serve's log and instance folder (to read why)")
    args = parser.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    if unknown := set(kinds) - set(KINDS):
        parser.error(f"unknown process kinds {sorted(unknown)}; choose from {', '.join(KINDS)}")
    folder = Path(tempfile.mkdtemp(prefix="proxima-faults-"))
    serve = Serve(folder / "instance", free_port())
    _add_study(serve)
    rows = []
    try:
        for kind in kinds:
            for busy in (0, args.raters):
                for _ in range(args.times):
                    row = one_kill(serve, kind, busy)
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
    finally:
        serve.stop()
        if args.keep:
            print(f"serve's log and instance kept in {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)
    print(f"\nkill -9 of each process kind, {args.times} times idle and {args.times} times under {args.raters} raters "
          f"(one serve, duels on 40 items)\n")
    print(f"{'process':16s} {'raters':>6s} {'caught up (s) max / mean':>26s} {'lost':>5s} {'doubled':>7s} "
          f"{'applied once':>12s} {'on the Overview':>15s} {'checks again (s) max':>20s}")
    for kind in kinds:
        for busy in (0, args.raters):
            mine = [r for r in rows if r["kind"] == kind and r["busy"] == busy]
            times = [r["caught_up_s"] for r in mine]
            shown = "n/a" if INCIDENT[kind] is None else f"{sum(bool(r['shown']) for r in mine)}/{len(mine)}"
            print(f"{kind:16s} {busy:6d} {max(times):12.2f} / {sum(times) / len(times):5.2f}"
                  f"{sum(r['lost'] for r in mine):13d} {sum(r['doubled'] for r in mine):7d} "
                  f"{sum(r['applied_once'] for r in mine):>9d}/{len(mine)} {shown:>15s}"
                  f"{max(r['checked_s'] for r in mine):21.2f}")


def _add_study(serve: Serve) -> None:
    from workers.store.config import StudyConfig
    from workers.store.queue import schedule_update
    from workers.store.studies import Item, create_study

    conn = serve.redis()
    items = [Item(id=f"c{i}", kind="color", color=f"#{(6 * i) % 256:02x}3050", position=(float(i),)) for i in range(40)]
    create_study(conn, StudyConfig.from_dict({"name": "Faults", "pool_size": 40, "random_state": 0,
                                              }), items, study_id=STUDY)
    schedule_update(conn, STUDY)


if __name__ == "__main__":
    main()
