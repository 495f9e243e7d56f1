"""``proxima serve``, ``demo``, ``worker`` and ``sweep``: the processes that run the platform.

``serve`` starts Redis (unless REDIS_URL is set), RQ workers and gunicorn and supervises them;
``worker`` and ``sweep`` run alone beside processes started another way. Never imports Flask.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from typing import TYPE_CHECKING

import click
import redis

from .. import ROOT
from .connection import WEB_URL_FILE, describe_url, instance_path, redis_url_of_serve
from .embedded import EmbeddedRedis, EmbeddedRedisError

if TYPE_CHECKING:
    from redis import Redis


#: Threaded gunicorn workers that keep connections alive across a rater's think time: a sync worker
#: holds each connection until the client closes it. Measured (benchmarks/load.py, n = 1000, 1000
#: raters, 2 workers): 218 answers/s with sync workers, 449 with these.
#: The worker class is gthread's, answering gunicorn's own refusals (a request line over the limit below)
#: in the JSON error shape (webapp/gunicorn_worker.py).
GUNICORN_THREADS = ("--worker-class", "webapp.gunicorn_worker.JsonErrorWorker", "--threads", "8", "--keep-alive", "75")
#: gunicorn worker processes ``proxima serve`` starts. On a 2-core machine, once a rater request cost
#: one Redis round trip, 2 x 8 threads took ~11% less web CPU per request than 3 x 8 at 1,000 raters
#: with no worse latency (``benchmarks/load.py --steps 1000 --step-seconds 25 --compare 2x8,3x8,2x8,3x8``:
#: 1.66 / 1.67 against 1.86 / 1.88 ms per request, answers/s and p99 within the machine's noise); when a
#: request cost two round trips and 2.2-3.2 ms, 3 x 8 had served 15-55% more answers/s than 2 x 8.
SERVE_WEB_WORKERS = 2
#: BLAS threads of a `proxima worker` (see its help).
WORKER_BLAS_THREADS = 1
#: gunicorn's longest request line (its default is 4094): the app answers URLs over ``errors.MAX_URL_LENGTH``
#: with the JSON error shape on /api/, and the worker answers lines over this one in that shape too.
GUNICORN_LIMITS = ("--limit-request-line", "8190")
#: gunicorn's hooks (webapp/gunicorn_conf.py): the master records a web worker that died as an incident.
GUNICORN_HOOKS = ("--config", "python:webapp.gunicorn_conf")
#: Seconds ``proxima serve`` waits for the web server's first healthy answer.
STARTUP_TIMEOUT_S = 60.0


def gunicorn_command(bind: str, web_workers: int = SERVE_WEB_WORKERS, *options: str) -> list[str]:
    """The web server ``proxima serve`` runs, bound to ``bind`` (``host:port``) with ``web_workers``
    processes: threaded workers answering in the JSON error shape, the request-line limit, the hooks that
    record a worker's death, a 10 s graceful stop. ``options`` are more of gunicorn's, after serve's (a
    later option wins). Tests and benchmarks that need the web server alone start exactly this."""
    return [sys.executable, "-m", "gunicorn", "--bind", bind, "--workers", str(web_workers), *GUNICORN_THREADS,
            *GUNICORN_LIMITS, *GUNICORN_HOOKS, "--graceful-timeout", "10", "--log-level", "warning", *options,
            "webapp:create_app()"]


def _create_first_account(conn: Redis) -> None:
    """On an instance without accounts, create 'admin' and print its one-time password once."""
    from ..accounts import FIRST_ACCOUNT, ensure_first_account

    password = ensure_first_account(conn)
    if password:
        click.echo(f"Created the first researcher account: {FIRST_ACCOUNT}\n"
                   f"  one-time password: {password}\n"
                   f"  (shown only now; change it with: proxima user passwd {FIRST_ACCOUNT})")


def _port_free(host: str, port: int) -> bool:
    """True when a server could listen on ``host:port`` now (bound and released at once)."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gunicorn does
        try:
            sock.bind((host or "0.0.0.0", port))
        except OSError:
            return False
    return True


@click.command()
@click.option("--demo", is_flag=True, help="Create the demo colour study (once) and print its links.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address the web server listens on.")
@click.option("--port", default=5000, show_default=True, type=click.IntRange(0, 65535),
              help="Port of the web server (0: any free port).")
@click.option("--web-workers", default=SERVE_WEB_WORKERS, show_default=True, type=click.IntRange(1, 64),
              help="gunicorn worker processes.")
@click.option("--workers", "n_workers", default=1, show_default=True, type=click.IntRange(0, 64),
              help="RQ worker processes that update the engines.")
@click.option("--max-restarts", default=5, show_default=True, type=click.IntRange(0, 1000),
              help="Restarts of one process within 60 s before serve gives up on it (a crash loop).")
@click.option("--sweep-interval", default=10.0, show_default=True, type=click.FloatRange(0.1, 3600),
              help="Seconds between checks for studies whose answers wait for an update nobody queued.")
def serve(demo: bool, host: str, port: int, web_workers: int, n_workers: int, max_restarts: int,
          sweep_interval: float) -> None:
    """Start Redis (unless REDIS_URL is set), RQ workers and the web app under gunicorn, and keep
    them running: a crashed child is restarted with backoff (a crash loop stops serve, saying why),
    children die with serve, and only one serve runs per instance folder."""
    from .embedded import free_port
    from .supervise import Child, CrashLoop, InstanceBusy, InstanceLock, Sweeper, popen

    inst = instance_path()
    inst.mkdir(parents=True, exist_ok=True)
    lock = InstanceLock(inst)
    try:
        leftovers = lock.acquire()
    except InstanceBusy as exc:
        raise click.ClickException(str(exc)) from None
    if leftovers:
        click.echo(f"Took over from a serve that died: stopped its leftover processes {leftovers}")
    if port and not _port_free(host, port):
        # before any link or password is printed: they would open whatever else owns the port
        lock.release()
        raise click.ClickException(f"port {port} on {host} is in use by another program; "
                                   f"try --port {port + 1}, or --port 0 for any free port")
    server = None
    url = os.environ.get("REDIS_URL")
    children: list[Child] = []
    if not url:
        server = EmbeddedRedis(inst)
        try:
            url = server.start()
        except EmbeddedRedisError as exc:
            lock.release()
            raise click.ClickException(str(exc)) from None
        click.echo(f"Redis: embedded redis-server, data in {inst / 'redis'} (AOF, appendfsync always); instance folder "
                   f"{inst}")

        def start_redis():
            server.start()
            return server.process

        redis_child = Child("embedded Redis", start_redis, max_restarts)
        redis_child.process = server.process
        children.append(redis_child)
    else:
        click.echo(f"Redis: {describe_url(url)} (REDIS_URL); instance folder {inst}")
    stopping = False

    def stop(*_):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        conn = redis.Redis.from_url(url)
        _create_first_account(conn)
        study_id = None
        if demo:
            from workers.store.queue import schedule_update

            from .demo_study import ensure_demo_study

            study_id = ensure_demo_study(conn)
            schedule_update(conn, study_id)
        if port == 0:
            port = free_port()
        env = dict(os.environ, REDIS_URL=url, PROXIMA_INSTANCE_PATH=str(inst))
        for n in range(n_workers):
            children.append(Child(f"RQ worker {n + 1}", lambda: popen([sys.executable, "-m", "webapp", "worker"],
                                                                      env=env, start_new_session=True),
                                  max_restarts))
        children.append(Child("web server", lambda: popen(gunicorn_command(f"{host}:{port}", web_workers),
                                                          env=env, cwd=str(ROOT), start_new_session=True),
                              max_restarts))
        for child in children:
            if child.process is None:
                child.start()
        lock.record([c.pid for c in children if c.pid])
        shown_host = "127.0.0.1" if host in ("0.0.0.0", "") else host
        base = f"http://{shown_host}:{port}"
        (inst / WEB_URL_FILE).write_text(base + "\n")  # 'proxima simulate' of this folder goes there
        sweeper = Sweeper(url, sweep_interval)
        started, announced = time.monotonic(), False
        # what serve saw die, for the Overview and /api/health (workers.store.health): written once Redis takes
        # it (a Redis that died is told about its own restart once it is back)
        incidents = [f"took over from a serve (pid {lock.took_over_from}) that died; stopped its leftover "
                     f"processes: {leftovers or 'none were left'}"] if lock.took_over_from is not None else []

        def crashed(message: str) -> None:
            click.echo(message, err=True)
            incidents.append(message)

        while not stopping:
            now = time.monotonic()
            pids = [c.pid for c in children]
            for child in children:
                try:
                    child.check(now, crashed)
                except CrashLoop as exc:
                    _record_incidents(conn, [str(exc)])
                    raise click.ClickException(str(exc)) from None
            incidents[:] = _record_incidents(conn, incidents)
            if [c.pid for c in children] != pids:
                lock.record([c.pid for c in children if c.pid])
            if not announced:
                # a child crashing while the others start is restarted like any other crash
                if _healthy(f"{base}/api/health"):
                    announced = True
                    click.echo(f"Dashboard:  {base}/")
                    if study_id:
                        click.echo(f"Rater link: {base}/s/{study_id}")
                        click.echo(f"Study dashboard: {base}/studies/{study_id}")
                    click.echo("Press Ctrl-C to stop.", err=False)
                elif now - started > STARTUP_TIMEOUT_S:
                    raise click.ClickException(f"the web server did not answer {base}/api/health within "
                                               f"{STARTUP_TIMEOUT_S:.0f} s; see the messages above")
            for queued in sweeper.maybe_sweep(now):
                click.echo(f"study {queued}: answers were waiting for an update; queued one", err=True)
            time.sleep(0.2)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        # the embedded Redis is stopped last, by its own object (it flushes the AOF)
        _stop_children([c.process for c in children
                        if isinstance(c.process, subprocess.Popen) and c.name != "embedded Redis"])
        if server is not None:
            server.stop()
        lock.release()
        click.echo("Proxima stopped.")


def _record_incidents(conn: redis.Redis, messages: list[str]) -> list[str]:
    """Record each of serve's ``messages`` as an incident; returns those Redis did not take (it is down)."""
    from workers.store import health

    for n, message in enumerate(messages):
        try:
            health.record_incident(conn, "a process of 'proxima serve' failed", message)
        except (redis.RedisError, OSError):
            return messages[n:]
    return []


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _stop_children(children: list[subprocess.Popen], timeout: float = 15.0) -> None:
    # web first (stop taking answers), then workers (finish the batch in hand)
    for child in reversed(children):
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for child in reversed(children):
        try:
            child.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


@click.command()
@click.option("--interval", default=10.0, show_default=True, type=click.FloatRange(0.1, 3600),
              help="Seconds between checks.")
def sweep(interval: float) -> None:
    """Queue an update for every study whose answers wait for one nobody queued (a web process died
    between storing an answer and queueing its update). 'proxima serve' does this itself; run this
    beside web and worker processes started another way (systemd units, a Procfile runner)."""
    from .supervise import Sweeper

    url = redis_url_of_serve("sweep")
    sweeper = Sweeper(url, interval)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    click.echo(f"Sweeping every {interval:g} s for studies whose answers wait for an update.")
    try:
        while not stopping:
            for queued in sweeper.maybe_sweep(time.monotonic()):
                click.echo(f"study {queued}: answers were waiting for an update; queued one", err=True)
            time.sleep(min(1.0, interval / 2))
    except KeyboardInterrupt:
        pass


@click.command()
def demo() -> None:
    """Same as 'serve --demo'."""
    ctx = click.get_current_context()
    ctx.invoke(serve, demo=True)


@click.command()
@click.option("--burst", is_flag=True, help="Process the queued jobs, then exit.")
@click.option("--blas-threads", default=WORKER_BLAS_THREADS, show_default=True, type=click.IntRange(0, 256),
              help="Threads numpy's linear algebra (BLAS) may use in this worker; 0 = the library's default "
                   "(one per core).")
@click.option("--fit-processes", default=1, show_default=True, type=click.IntRange(0, 64),
              help="Processes that refit learners' models beside the update passes (0: refits run inside "
                   "the passes, which then take as long as a refit).")
def worker(burst: bool, blas_threads: int, fit_processes: int = 1) -> None:
    """Run an RQ worker that applies answers to the engines (needs REDIS_URL).

    Jobs run in the worker's own process (RQ's SimpleWorker, no fork per job), so a busy study's
    learners and their journal state stay in memory from one job to the next instead of being read
    back from Redis by every job. Its linear algebra runs on one thread by default: an update pass's
    matrices are small, and BLAS threads spinning beside the web processes, Redis and other workers
    cost more than they give (on a 2-core machine about twice the CPU per answer)."""
    from rq import SimpleWorker
    from threadpoolctl import threadpool_limits

    try:
        import workers.jobs.update  # noqa: F401  (import numpy and the engine once)
    except ValueError as exc:  # a malformed PROXIMA_FAULT (crash testing)
        raise click.ClickException(str(exc)) from None
    from workers.store.queue import get_queue, schedule_stale_studies

    url = redis_url_of_serve("work for")
    conn = redis.Redis.from_url(url)
    try:
        conn.ping()
    except (redis.RedisError, OSError) as exc:
        raise click.ClickException(f"cannot reach Redis: {exc}") from None
    schedule_stale_studies(conn)
    from workers.jobs import fits, update
    from workers.store import health

    from .supervise import REPLACE_ME

    fits.use_fit_processes(fit_processes, blas_threads, url)
    rq_worker = SimpleWorker([get_queue(conn)], connection=conn)

    def exit_when_failing(job, *exc_info) -> bool:
        # jobs failing again and again in this process: stop after this job, and exit non-zero below
        if update.worker_should_exit():
            rq_worker._stop_requested = True
        return True  # RQ's own handling (the job marked failed, its traceback logged) goes on

    rq_worker.push_exc_handler(exit_when_failing)
    try:
        with threadpool_limits(limits=blas_threads or None, user_api="blas"):
            rq_worker.work(burst=burst, logging_level="WARNING")
    finally:
        fits.shutdown()
    if update.worker_should_exit():
        message = (f"{update.failing_jobs} update jobs in a row failed in this worker (pid {os.getpid()}); "
                   "it exits so that a fresh one is started ('proxima serve' or the service manager restarts it)")
        try:
            health.record_incident(conn, "a worker exited: its update jobs kept failing", message)
        except redis.RedisError:
            pass
        click.echo(f"proxima worker: {message}", err=True)
        sys.exit(REPLACE_ME)
