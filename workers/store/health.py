"""Whether each study is learning, and what failed: the record every process reads and writes so that a
study whose passes fail, or whose answers wait with nobody applying them, is said out loud (the Overview,
``/api/health``, ``/metrics``, ``proxima studies``) instead of silently serving stale questions.

Per study (``keys.learning``): when the last update pass succeeded, since when passes fail, how many in a row
and the last error. For the whole Redis (``keys.incidents``): a capped list of processes that died or failed
and what was done about it (a fit process replaced, a worker restarted, Redis restarted). Must never import
Flask or numpy.
"""
from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from workers.store import keys

if TYPE_CHECKING:
    from redis import Redis
    from redis.client import Pipeline

#: Incidents kept (newest first).
INCIDENTS_KEPT = 200
#: Characters of an error kept (the first line of a traceback's last line is what a researcher reads).
ERROR_CHARS = 500
#: A study whose oldest answer not yet applied is older than this is "behind": nothing is applying its answers
#: (no worker, or a worker stuck), though no pass has failed. A pass spaced by its pools applies within ~1 s.
BEHIND_SECONDS = 30.0


def pass_succeeded(conn: Redis, study_id: str, now: float | None = None, pipeline: Pipeline | None = None) -> None:
    """Record a successful update pass (clears the failing state; the last error stays, with its time)."""
    pipe = conn if pipeline is None else pipeline
    pipe.hset(keys.learning(study_id), "last_good_pass", repr(time.time() if now is None else now))
    pipe.hdel(keys.learning(study_id), "failing_since", "failures")


def pass_failed(conn: Redis, study_id: str, error: BaseException | str, now: float | None = None) -> int:
    """Record a failed update pass; returns how many failed in a row. The first of a run is an incident too."""
    now = time.time() if now is None else now
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    text = text.strip()[:ERROR_CHARS]
    key = keys.learning(study_id)
    with conn.pipeline() as pipe:
        pipe.hsetnx(key, "failing_since", repr(now))
        pipe.hincrby(key, "failures", 1)
        pipe.hset(key, mapping={"last_error": text, "last_error_at": repr(now)})
        _, failures, _ = pipe.execute()
    if failures == 1:
        record_incident(conn, "update passes failing", text, study_id=study_id, now=now)
    return int(failures)


def record_incident(conn: Redis, what: str, detail: str = "", study_id: str | None = None,
                    now: float | None = None) -> None:
    """Add one incident (``what`` failed or died, ``detail`` what happened and what was done)."""
    entry = {"at": time.time() if now is None else now, "what": what, "detail": detail[:ERROR_CHARS]}
    if study_id is not None:
        entry["study"] = study_id
    with conn.pipeline() as pipe:
        pipe.lpush(keys.incidents(), json.dumps(entry))
        pipe.ltrim(keys.incidents(), 0, INCIDENTS_KEPT - 1)
        pipe.execute()


def incidents(conn: Redis, since: float = 0.0, study_id: str | None = None) -> list[dict[str, Any]]:
    """Incidents at or after ``since`` (unix s), newest first; with ``study_id``, those of that study and
    those of no study (a process serves every study)."""
    out = []
    for raw in conn.lrange(keys.incidents(), 0, -1):
        try:
            entry = json.loads(raw)
        except ValueError:
            continue
        if float(entry.get("at", 0)) < since:
            break
        if study_id is None or entry.get("study") in (None, study_id):
            entry["when"] = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(entry.get("at", 0))))
            out.append(entry)
    return out


def _float(raw: Any) -> float | None:
    try:
        return float(raw) if raw is not None else None
    except ValueError:
        return None


def learning_status(conn: Redis, study_id: str, now: float | None = None) -> dict[str, Any]:
    """Whether ``study_id`` is learning: ``state`` is ``"failing"`` (its last passes failed), ``"behind"``
    (an answer has waited over ``BEHIND_SECONDS`` with no pass applying it), or ``"ok"``; with
    ``last_good_pass_age`` (s, None before the first pass), ``failing_since`` (unix s), ``failures`` (in a
    row), ``last_error``, ``last_error_at``, ``waiting_answers_age`` (s, the oldest answer not yet applied:
    0 when none waits), all from two round trips."""
    now = time.time() if now is None else now
    with conn.pipeline(transaction=False) as pipe:
        pipe.hgetall(keys.learning(study_id))
        pipe.get(keys.cursor(study_id))
        record, cursor = pipe.execute()
    record = {k.decode(): v.decode() for k, v in record.items()}
    start = "(" + cursor.decode() if cursor else "-"
    oldest = conn.xrange(keys.answers(study_id), min=start, count=1)
    waiting = max(0.0, now - int(oldest[0][0].decode().split("-")[0]) / 1000.0) if oldest else 0.0
    last_good = _float(record.get("last_good_pass"))
    failing_since = _float(record.get("failing_since"))
    state = "failing" if failing_since is not None else "behind" if waiting > BEHIND_SECONDS else "ok"
    return {"state": state,
            "last_good_pass_age": None if last_good is None else max(0.0, now - last_good),
            "failing_since": failing_since, "failures": int(record.get("failures") or 0),
            "last_error": record.get("last_error"), "last_error_at": _float(record.get("last_error_at")),
            "waiting_answers_age": waiting}


def describe(status: dict[str, Any], now: float | None = None) -> str:
    """One sentence for a researcher: what fails and since when, or "" for a study that is learning."""
    now = time.time() if now is None else now
    if status["state"] == "failing":
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(status["failing_since"]))
        good = status["last_good_pass_age"]
        last = "never" if good is None else f"{_ago(good)} ago"
        return (f"Learning has stopped: {status['failures']} update passes in a row failed since {since} "
                f"(last good pass {last}). Last error: {status['last_error']}")
    if status["state"] == "behind":
        waited = _ago(status["waiting_answers_age"])
        return (f"Learning is behind: the oldest answer not yet applied has waited {waited} (is a worker running? "
                f"'proxima worker', or the log of 'proxima serve').")
    return ""


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def overall(conn: Redis, now: float | None = None) -> dict[str, Any]:
    """What ``/api/health`` says: ``status`` ``"ok"`` or ``"degraded"`` (a running study is failing or behind),
    the number of RQ workers alive, and per study not learning its state, failures in a row, since when, the
    age of its last good pass and of its oldest answer waiting; plus the incidents of the last hour."""
    from rq import Worker

    from workers.store.studies import list_studies

    now = time.time() if now is None else now
    troubled = {}
    for study in list_studies(conn):
        status = learning_status(conn, study.id, now)
        if status["state"] != "ok":
            troubled[study.id] = {"state": status["state"], "failures": status["failures"],
                                  "failing_since": status["failing_since"],
                                  "last_good_pass_age_seconds": status["last_good_pass_age"],
                                  "waiting_answers_age_seconds": round(status["waiting_answers_age"], 3)}
    return {"status": "degraded" if troubled else "ok", "workers": Worker.count(connection=conn),
            "learning": troubled, "incidents_last_hour": len(incidents(conn, since=now - 3600))}
