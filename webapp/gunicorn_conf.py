"""gunicorn settings read by ``proxima serve`` and deploy/proxima-web.service (``--config
python:webapp.gunicorn_conf``): the master records a web worker that died as an incident, so the Overview
and ``/api/health`` say that a web process failed and when, as they do for every other process kind.

gunicorn starts a new worker by itself; what was missing is a word about it. A worker leaving while the
master still listens was not asked to go (a stop or a restart of the server closes the listeners first):
it was killed (the OOM killer, ``kill -9``), crashed, or timed out on a request. Runs in the master, which
loads neither Flask nor the engine: redis-py and ``workers.store.health`` only.
"""
from __future__ import annotations

import os
from typing import Any

#: Seconds the master waits for Redis when recording (it must not stall the master's loop on a Redis that
#: is down: the incident is then only in gunicorn's log, which already names the signal).
REDIS_TIMEOUT = 2.0


def child_exit(server: Any, worker: Any) -> None:
    """gunicorn's hook, called in the master after a worker exited and was reaped."""
    if not server.LISTENERS:  # the server is stopping: workers were told to leave
        return
    url = os.environ.get("REDIS_URL")
    if not url:
        return
    record_web_worker_exit(url, worker.pid, server.log)


def record_web_worker_exit(url: str, pid: int, log: Any) -> None:
    import redis

    from workers.store import health

    try:
        conn = redis.Redis.from_url(url, socket_timeout=REDIS_TIMEOUT, socket_connect_timeout=REDIS_TIMEOUT)
        try:
            health.record_incident(conn, "a web worker died", f"gunicorn web worker (pid {pid}) exited while the "
                                   "server was running (killed, out of memory, crashed or timed out); gunicorn "
                                   "started a new one. Requests it was serving failed; answers it had "
                                   "acknowledged are kept.")
        finally:
            conn.close()
    except redis.RedisError as exc:
        log.error("could not record the exit of web worker %s in Redis: %s", pid, exc)
