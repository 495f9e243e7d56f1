"""Prometheus ``/metrics`` for operators: request latency, answers, fallbacks, pools, engine lag.

Many web processes serve one study (gunicorn workers, several hosts), so nothing here is a
per-process counter a scrape of one process would half-see. Request durations are counted per
process and added to one Redis hash about once a second by a background thread of that process
(one pipelined round trip; no request waits for it); everything else (answers, fallbacks, pool depths, engine
lag) already lives in Redis and is read at scrape time. ``prometheus_client`` writes the
exposition format. Not public: a logged-in researcher, a bearer token (``METRICS_TOKEN``) or an
allowed address (``METRICS_ALLOWED_ADDRESSES``).
"""
from __future__ import annotations

import bisect
import hmac
import ipaddress
import os
import threading
import time
from typing import TYPE_CHECKING

import redis
from flask import Blueprint, Response, current_app, g, request
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.exposition import generate_latest

from workers.store import health, keys
from workers.store.questions import pool_depths
from workers.store.queue import get_queue
from workers.store.studies import list_studies

from .storage import get_redis

if TYPE_CHECKING:
    from collections.abc import Iterator

    from flask import Flask
    from flask.typing import ResponseReturnValue
    from prometheus_client.metrics_core import Metric
    from redis import Redis

    from workers.store.studies import Study


bp = Blueprint("metrics", __name__)

#: Upper bounds (seconds) of the request-duration histogram's buckets (+Inf is added).
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: A process adds its request durations to Redis at most this often.
FLUSH_SECONDS = 1.0
#: The unapplied answers of a study are counted up to this many (a backlog's size, not its length).
LAG_COUNT_CAP = 1000


class _Durations:
    """This process's request durations since its last flush: per endpoint, counts per bucket and sum."""

    def __init__(self):
        self.lock = threading.Lock()
        self.pending: dict[str, list[float]] = {}
        self.flushed_at = time.monotonic()
        self.pid = os.getpid()
        self.flusher = False

    def add(self, endpoint: str, seconds: float) -> bool:
        """Count one request; True the first time in this process (its flusher must be started)."""
        with self.lock:
            first = self.pid != os.getpid() or not self.flusher
            if self.pid != os.getpid():  # a forked worker neither flushes its parent's counts nor has its thread
                self.pending, self.pid = {}, os.getpid()
            self.flusher = True
            row = self.pending.setdefault(endpoint, [0.0] * (len(LATENCY_BUCKETS) + 2))
            row[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
            row[-1] += seconds
            return first

    def take(self, force: bool = False) -> dict[str, list[float]] | None:
        now = time.monotonic()
        with self.lock:
            if not self.pending or (not force and now - self.flushed_at < FLUSH_SECONDS):
                return None
            pending, self.pending, self.flushed_at = self.pending, {}, now
            return pending

    def put_back(self, pending: dict[str, list[float]]) -> None:
        with self.lock:
            for endpoint, row in pending.items():
                mine = self.pending.setdefault(endpoint, [0.0] * len(row))
                for i, value in enumerate(row):
                    mine[i] += value


_durations = _Durations()


def flush(conn: Redis, force: bool = False) -> None:
    """Add this process's pending durations to Redis (if a second has passed, or ``force``)."""
    pending = _durations.take(force)
    if not pending:
        return
    try:
        with conn.pipeline(transaction=False) as pipe:
            for endpoint, row in pending.items():
                for i, count in enumerate(row[:-1]):
                    if count:
                        pipe.hincrby(keys.request_durations(), f"{endpoint}|{i}", int(count))
                pipe.hincrbyfloat(keys.request_durations(), f"{endpoint}|sum", row[-1])
            pipe.execute()
    except redis.RedisError:
        _durations.put_back(pending)  # counted at the next flush instead


def _start_timer():
    g.metrics_started = time.perf_counter()


def _flush_forever(conn: Redis) -> None:
    while True:
        time.sleep(FLUSH_SECONDS)
        flush(conn, force=True)


def _record(response):
    started = g.pop("metrics_started", None)
    if started is not None and request.endpoint != "metrics.metrics":
        first = _durations.add(request.endpoint or "unmatched", time.perf_counter() - started)
        if current_app.testing:
            flush(get_redis())  # no thread outliving a test's Redis; at most once a second still
        elif first:
            threading.Thread(target=_flush_forever, args=(get_redis(),), name="proxima-metrics",
                             daemon=True).start()
    return response


def init_app(app: Flask) -> None:
    app.register_blueprint(bp)
    app.before_request(_start_timer)
    app.after_request(_record)


# ------------------------------------------------------------------------------- access
def _allowed_networks(setting) -> list:
    if not setting:
        return []
    parts = setting.split(",") if isinstance(setting, str) else list(setting)
    return [ipaddress.ip_network(p.strip(), strict=False) for p in parts if p.strip()]


def scrape_allowed() -> bool:
    """A logged-in researcher, the bearer token of ``METRICS_TOKEN``, or an address within
    ``METRICS_ALLOWED_ADDRESSES`` (addresses or networks, comma-separated). Nothing else: by
    default not even this machine, since a reverse proxy on it would make every client local."""
    from .auth import client_address, current_researcher

    token = current_app.config.get("METRICS_TOKEN")
    given = request.headers.get("Authorization", "")
    if token and given.startswith("Bearer ") and hmac.compare_digest(given[7:].strip().encode(), str(token).encode()):
        return True
    try:
        address = ipaddress.ip_address(client_address())
        if any(address in net for net in _allowed_networks(current_app.config.get("METRICS_ALLOWED_ADDRESSES"))):
            return True
    except ValueError:
        pass
    return current_researcher() is not None


@bp.get("/metrics")
def metrics() -> ResponseReturnValue:
    if not scrape_allowed():
        response = Response("metrics need a researcher login, the bearer token of PROXIMA_METRICS_TOKEN or an "
                            "address in PROXIMA_METRICS_ALLOWED_ADDRESSES\n", status=401, mimetype="text/plain")
        response.headers["WWW-Authenticate"] = 'Bearer realm="proxima metrics"'
        return response
    conn = get_redis()
    flush(conn, force=True)  # this process's latest requests, at least
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RedisCollector(conn))
    return Response(generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})


# ------------------------------------------------------------------------------ collect
class RedisCollector:
    """Every metric, read from Redis at scrape time (``collect`` is what prometheus_client calls)."""

    def __init__(self, conn: Redis) -> None:
        self.conn = conn

    def collect(self) -> Iterator[Metric]:
        yield self._durations()
        yield from self._studies()
        queued = GaugeMetricFamily("proxima_update_jobs_queued", "Engine update jobs waiting for a worker.")
        queued.add_metric([], get_queue(self.conn).count)
        yield queued

    def _durations(self):
        family = HistogramMetricFamily("proxima_request_duration_seconds",
                                       "Time to answer an HTTP request, by Flask endpoint (all web processes).",
                                       labels=["endpoint"])
        raw = self.conn.hgetall(keys.request_durations())
        rows: dict[str, list[float]] = {}
        for field, value in raw.items():
            endpoint, _, slot = field.decode().rpartition("|")
            row = rows.setdefault(endpoint, [0.0] * (len(LATENCY_BUCKETS) + 2))
            row[-1 if slot == "sum" else int(slot)] = float(value)
        for endpoint, row in sorted(rows.items()):
            cumulative, buckets = 0.0, []
            for bound, count in zip((*LATENCY_BUCKETS, float("inf")), row[:-1], strict=True):
                cumulative += count
                buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
            family.add_metric([endpoint], buckets, sum_value=row[-1])
        return family

    def _studies(self):
        conn = self.conn
        answers = CounterMetricFamily("proxima_answers_accepted", "Answers accepted into the log.", labels=["study"])
        served = CounterMetricFamily("proxima_questions_served", "Questions handed to raters.", labels=["study"])
        fallback = CounterMetricFamily("proxima_fallback_questions_served",
                                       "Random questions served because the pool was empty.", labels=["study"])
        ratio = GaugeMetricFamily("proxima_fallback_ratio", "Share of all served questions that were fallbacks.",
                                  labels=["study"])
        depth = GaugeMetricFamily("proxima_pool_depth", "Questions waiting in an algorithm's pool.",
                                  labels=["study", "algorithm"])
        lag_seconds = GaugeMetricFamily("proxima_engine_lag_seconds",
                                        "Age of the oldest answer the engines have not applied yet (0: none).",
                                        labels=["study"])
        lag_answers = GaugeMetricFamily("proxima_engine_lag_answers",
                                        f"Answers not applied yet (counted up to {LAG_COUNT_CAP}).", labels=["study"])
        raters = GaugeMetricFamily("proxima_raters", "Raters who gave at least one answer.", labels=["study"])
        running = GaugeMetricFamily("proxima_study_running", "1 while the study takes answers.", labels=["study"])
        failing = GaugeMetricFamily("proxima_update_passes_failing",
                                    "Update passes in a row that failed (0: the last one succeeded).", labels=["study"])
        good_age = GaugeMetricFamily("proxima_last_good_pass_age_seconds",
                                     "Seconds since the study's last successful update pass (absent before the first).",
                                     labels=["study"])
        crowd = CrowdGauges()
        now = time.time()
        for study in list_studies(conn):
            crowd.add(conn, study, now)
            sid = study.id
            with conn.pipeline(transaction=False) as pipe:
                pipe.xlen(keys.answers(sid))
                pipe.hmget(keys.counters(sid), "questions_served", "fallback_served")
                pipe.get(keys.cursor(sid))
                pipe.scard(keys.raters(sid))
                n_answers, (n_served, n_fallback), cursor, n_raters = pipe.execute()
            n_served, n_fallback = int(n_served or 0), int(n_fallback or 0)
            unapplied = conn.xrange(keys.answers(sid), min=f"({cursor.decode()}" if cursor else "-", max="+",
                                    count=LAG_COUNT_CAP)
            answers.add_metric([sid], int(n_answers))
            served.add_metric([sid], n_served)
            fallback.add_metric([sid], n_fallback)
            ratio.add_metric([sid], n_fallback / n_served if n_served else 0.0)
            for label, n in pool_depths(conn, sid, study.config).items():
                depth.add_metric([sid, label], n)
            oldest = int(unapplied[0][0].split(b"-")[0]) / 1000 if unapplied else now
            lag_seconds.add_metric([sid], max(0.0, now - oldest))
            lag_answers.add_metric([sid], len(unapplied))
            raters.add_metric([sid], int(n_raters))
            running.add_metric([sid], 1 if study.status == "running" else 0)
            learning = health.learning_status(conn, sid, now)
            failing.add_metric([sid], learning["failures"])
            if learning["last_good_pass_age"] is not None:
                good_age.add_metric([sid], learning["last_good_pass_age"])
        yield from (answers, served, fallback, ratio, depth, lag_seconds, lag_answers, raters, running, failing,
                    good_age)
        yield from crowd.families()


class CrowdGauges:
    """The crowd's state of each study whose catch trials it judges (``workers.jobs.rater_checks.crowd_status``)."""

    def __init__(self) -> None:
        self.comparisons = GaugeMetricFamily(
            "proxima_crowd_comparisons", "Label comparisons by the crowd's standing at its last look (confirmed, "
            "pending, retired).", labels=["study", "status"])
        self.awaiting = GaugeMetricFamily("proxima_crowd_raters_awaiting",
                                          "Raters whose missed catch trials wait for the crowd's verdict.",
                                          labels=["study"])
        self.oldest = GaugeMetricFamily("proxima_crowd_oldest_pending_seconds",
                                        "Age of the oldest missed catch trial waiting for the crowd's verdict "
                                        "(0: none waits).", labels=["study"])
        self.behind = GaugeMetricFamily("proxima_crowd_behind",
                                        "1 when catch answers came minutes ago that the crowd has not looked at.",
                                        labels=["study"])

    def add(self, conn: Redis, study: Study, now: float) -> None:
        """Add one study's gauges (none for a study whose catch trials the crowd does not judge)."""
        from workers.jobs.rater_checks import crowd_status

        status = crowd_status(conn, study, now)
        if status is None:
            return
        for name in ("confirmed", "pending", "retired"):
            self.comparisons.add_metric([study.id, name], status[name])
        self.awaiting.add_metric([study.id], status["awaiting"])
        self.oldest.add_metric([study.id], status["oldest_pending_age"] or 0.0)
        self.behind.add_metric([study.id], 1 if status["state"] == "behind" else 0)

    def families(self) -> tuple[GaugeMetricFamily, ...]:
        """The four families, to yield."""
        return self.comparisons, self.awaiting, self.oldest, self.behind
