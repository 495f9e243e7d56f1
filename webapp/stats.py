"""Numbers the dashboard shows about a study, read from Redis in one round trip, and the raters table.

Pure Python on purpose: the stats route is polled every few seconds by every open dashboard.
For studies whose items have known positions (demo and simulated studies), it also keeps, per
algorithm, how many items' learned nearest neighbour is wrong against the answers applied so far.
Must never import the engine.
"""
from __future__ import annotations

import json
import time
from collections.abc import Sequence
from statistics import median

from rq.exceptions import NoSuchJobError
from rq.job import Job

from workers.store import keys
from workers.store.config import ALGORITHM_TABLE
from workers.store.queue import REBUILD_STATUS_FIELD
from workers.store.studies import Study, get_items

#: The response-time histogram covers this many of the latest answers.
RECENT_ANSWERS = 2000
#: A rater counts as active when they were given a question this recently.
ACTIVE_SECONDS = 300
LATENCY_POINTS = 200
#: Fields of ``keys.engine_stats`` kept here: each item's true nearest neighbours (JSON, computed once
#: from the items' positions) and, per algorithm, the error curve ``[[answers applied, share wrong], ...]``.
TRUTH_FIELD = "truth:neighbors"
TRUTH_ERROR_PREFIX = "truth-error:"
#: An error curve keeps at most this many points; past it every other point is dropped (the curve
#: keeps its whole span, at a coarser step).
TRUTH_ERROR_POINTS = 400
#: Distances within this of an item's smallest distance are all true nearest neighbours (ties).
TIE_TOLERANCE = 1e-9
#: Studies with more items than this get no error curve (finding the true neighbours is quadratic).
MAX_TRUTH_ITEMS = 5000
#: Rows of the distance matrix computed at once when finding the true neighbours (bounds memory).
_TRUTH_CHUNK = 256

# KEYS[1] = keys.engine_stats(study); ARGV = field, answers applied, share wrong, most points kept.
# Appends the point unless it equals the last one; a point with fewer answers than the last one
# (a rebuild without some raters) starts the curve again. Atomic, so dashboards polling at once
# neither lose nor double a point.
_APPEND_POINT = """
local raw = redis.call('HGET', KEYS[1], ARGV[1])
local points = {}
if raw then points = cjson.decode(raw) end
local x, y = tonumber(ARGV[2]), tonumber(ARGV[3])
local last = points[#points]
if last and last[1] == x and last[2] == y then return 0 end
if last and x < last[1] then points = {} end
table.insert(points, {x, y})
if #points > tonumber(ARGV[4]) then
  local kept = {}
  for i = 1, #points - 1, 2 do table.insert(kept, points[i]) end
  table.insert(kept, points[#points])
  points = kept
end
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(points))
return 1
"""


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def histogram(values: list[float], bins: int = 20, top: float | None = None) -> dict:
    """Equal-width bins from 0 to ``top`` (default: the 99th percentile), the last bin also
    counting everything above. ``{"edges": [bins + 1 floats], "counts": [bins ints]}``."""
    if not values:
        return {"edges": [], "counts": []}
    top = top or _percentile(values, 0.99) or max(values) or 1.0
    width = top / bins
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, max(0, int(v // width)))] += 1
    return {"edges": [round(i * width, 3) for i in range(bins + 1)], "counts": counts}


def true_neighbours(positions: Sequence[Sequence[float]]) -> list[list[int]]:
    """Each item's true nearest neighbours from its known position: every other item at the smallest
    Euclidean distance (ties within TIE_TOLERANCE all count). ``positions``: n_items rows of coordinates."""
    import numpy as np  # the web app has it loaded already; this runs once per study, then it is kept

    points = np.asarray(positions, dtype=np.float64)
    n = len(points)
    out: list[list[int]] = []
    for start in range(0, n, _TRUTH_CHUNK):
        block = points[start:start + _TRUTH_CHUNK]
        d = np.sqrt(((block[:, None, :] - points[None, :, :]) ** 2).sum(axis=-1))
        d[np.arange(len(block)), np.arange(start, start + len(block))] = np.inf
        best = d.min(axis=1, keepdims=True)
        out.extend(np.flatnonzero(row).tolist() for row in d <= best + TIE_TOLERANCE * np.maximum(best, 1.0))
    return out


def share_wrong(neighbors: list[int], truth: list[list[int]]) -> float:
    """Share of items whose learned nearest neighbour is not a true one (no neighbour yet counts as wrong)."""
    if not truth:
        return 0.0
    wrong = sum(1 for i, right in enumerate(truth) if i >= len(neighbors) or neighbors[i] not in right)
    return wrong / len(truth)


def _truth(conn, study: Study, cached: str | None) -> list[list[int]] | None:
    """The items' true nearest neighbours, or None unless every item has a position; kept in
    ``keys.engine_stats`` and computed again only when the study's item count changes."""
    if cached:
        doc = json.loads(cached)
        if doc.get("n_items") == study.n_items:
            return doc.get("neighbors")
    items = get_items(conn, study.id)
    dims = {len(item.position) if item.position else 0 for item in items}
    neighbors = None
    if 2 <= len(items) <= MAX_TRUTH_ITEMS and len(dims) == 1 and 0 not in dims:
        neighbors = true_neighbours([item.position for item in items])
    conn.hset(keys.engine_stats(study.id), TRUTH_FIELD, json.dumps({"n_items": study.n_items, "neighbors": neighbors}))
    return neighbors


def _answers_applied(progress: dict | None, fallback: int) -> int:
    """Answers the learner has applied (what its current neighbours rest on), from its progress."""
    for name in ("samples", "answers", "answers_counted"):
        value = (progress or {}).get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return fallback


def _error_curve(conn, study_id: str, label: str, curve: list, applied: int, wrong: float) -> list:
    """``curve`` with the point (applied, wrong) appended (and stored) if it is new."""
    point = [applied, round(wrong, 4)]
    if curve and curve[-1] == point:
        return curve
    conn.eval(_APPEND_POINT, 1, keys.engine_stats(study_id), TRUTH_ERROR_PREFIX + label, point[0], point[1],
              TRUTH_ERROR_POINTS)
    raw = conn.hget(keys.engine_stats(study_id), TRUTH_ERROR_PREFIX + label)
    return json.loads(raw) if raw else [point]


#: RQ job states as the dashboard words them.
_REBUILD_STATES = {"queued": "queued", "deferred": "queued", "scheduled": "queued", "started": "running",
                   "finished": "finished", "failed": "failed", "stopped": "failed", "canceled": "failed"}


def _rebuild_status(conn, raw: str | None) -> dict | None:
    """The latest rebuild (queued, running, finished with its figures, or failed), or None if none was asked for."""
    if not raw:
        return None
    status = json.loads(raw)
    if status.get("state") == "queued":  # the job writes "finished" itself; ask RQ how far it got
        try:
            state = Job.fetch(status["job_id"], connection=conn).get_status()
            status["state"] = _REBUILD_STATES.get(getattr(state, "value", str(state)), "queued")
        except NoSuchJobError:
            status["state"] = "lost"  # the job expired unrun (no worker?) or was deleted
    status["message"] = rebuild_message(status)
    return status


def rebuild_message(status: dict) -> str:
    """What the dashboard says about a rebuild."""
    raters = ", ".join(status.get("raters") or []) or "the excluded raters"
    state = status.get("state")
    if state == "queued":
        return f"Rebuild queued (excluding {raters}): waiting for a worker."
    if state == "running":
        return f"Rebuild running (excluding {raters}): replaying the answer log."
    if state == "failed":
        return "The rebuild failed; see the worker's log. Excluding the rater again queues a new one."
    if state == "lost":
        return "The rebuild was queued but no worker ran it; is a worker running ('proxima worker')?"
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(status.get("finished_at") or 0))
    return (f"Rebuild finished at {when}: {status.get('answers_replayed', 0)} answers replayed, "
            f"{status.get('answers_excluded', 0)} excluded (raters: "
            f"{', '.join(status.get('excluded_raters') or []) or 'none'}); "
            f"{status.get('neighbours_changed', 0)} nearest neighbours changed.")


def study_stats(conn, study: Study) -> dict:
    labels = [a.label for a in study.config.algorithms]
    with conn.pipeline(transaction=False) as pipe:
        pipe.xlen(keys.answers(study.id))
        pipe.scard(keys.raters(study.id))
        pipe.hgetall(keys.counters(study.id))
        pipe.zcard(keys.issued(study.id))
        pipe.hgetall(keys.answers_per_minute(study.id))
        pipe.hgetall(keys.engine_stats(study.id))
        pipe.lrange(keys.refresh_latencies(study.id), 0, -1)
        pipe.smembers(keys.finished(study.id))
        pipe.hlen(keys.poisoned(study.id))
        pipe.zcount(keys.active_raters(study.id), time.time() - ACTIVE_SECONDS, "+inf")
        pipe.xrevrange(keys.answers(study.id), count=RECENT_ANSWERS)
        for label in labels:
            pipe.llen(keys.pool(study.id, label))
        replies = pipe.execute()
    n_answers, n_raters, counters, issued, per_minute, engine, latencies, finished, n_poisoned = replies[:9]
    n_active, recent = replies[9:11]
    depths = dict(zip(labels, replies[11:], strict=True))
    response_ms = [float(f[b"response_ms"]) for _, f in recent if f.get(b"response_ms")]
    counters = {k.decode(): int(v) for k, v in counters.items()}
    served = counters.get("questions_served", 0)
    fallback = counters.get("fallback_served", 0)
    engine = {k.decode(): v.decode() for k, v in engine.items()}
    summaries = json.loads(engine.pop("summary")) if "summary" in engine else {}
    rebuild = _rebuild_status(conn, engine.pop(REBUILD_STATUS_FIELD, None))
    truth = _truth(conn, study, engine.pop(TRUTH_FIELD, None))
    curves = {name[len(TRUTH_ERROR_PREFIX):]: json.loads(engine.pop(name))
              for name in [k for k in engine if k.startswith(TRUTH_ERROR_PREFIX)]}
    latencies = [float(x) for x in latencies]
    finished = {f.decode() for f in finished}
    algorithms = []
    for alg in study.config.algorithms:
        label = alg.label
        a_served = counters.get(f"questions_served:{label}", 0)
        a_fallback = counters.get(f"fallback_served:{label}", 0)
        progress = (summaries.get(label) or {}).get("progress")
        neighbors = (summaries.get(label) or {}).get("neighbors")
        error = None
        if truth is not None and neighbors is not None and ALGORITHM_TABLE[alg.algorithm].yields_graph:
            applied = _answers_applied(progress, counters.get(f"answers:{label}", 0))
            wrong = share_wrong(neighbors, truth)
            error = {"share_wrong": wrong, "answers_applied": applied,
                     "curve": _error_curve(conn, study.id, label, curves.get(label) or [], applied, wrong)}
        certified = None
        if progress and "rounds_certified" in progress and progress.get("n_items"):
            certified = progress["rounds_certified"] / progress["n_items"]
        algorithms.append({
            "label": label, "algorithm": alg.algorithm, "question_kind": alg.question_kind, "share": alg.share,
            "budget": alg.budget, "answers": counters.get(f"answers:{label}", 0), "questions_served": a_served,
            "fallback_served": a_fallback, "fallback_rate": a_fallback / a_served if a_served else 0.0,
            "pool_depth": int(depths[label]), "finished": label in finished,
            "progress": progress, "share_certified": certified,
            "neighbors": neighbors, "truth_error": error,
        })
    return {
        "study": {"id": study.id, "name": study.config.name, "status": study.status,
                  "algorithm": study.config.algorithm, "n_items": study.n_items,
                  "complete": bool(labels) and finished >= set(labels), "truth_known": truth is not None},
        "rebuild": rebuild,
        "answers": int(n_answers),
        "raters": int(n_raters),
        "questions_served": served,
        "fallback_served": fallback,
        "fallback_rate": fallback / served if served else 0.0,
        "pool_depth": sum(int(d) for d in depths.values()),
        "questions_outstanding": int(issued),
        "answers_set_aside": int(n_poisoned),
        "active_raters": int(n_active),
        "response_ms": {"recent_answers": len(response_ms),
                        "median": median(response_ms) if response_ms else None,
                        "histogram": histogram(response_ms)},
        "answers_per_minute": sorted([int(m) * 60, int(c)] for m, c in per_minute.items()),
        "algorithms": algorithms,
        "engine": {
            "updates": int(engine.get("updates", 0)),
            "answers_applied": int(engine.get("answers_applied", 0)),
            "active_raters": int(engine.get("active_raters", 0)),
            "last_latency_ms": float(engine["last_latency_ms"]) if "last_latency_ms" in engine else None,
            "latency_ms_p50": _percentile(latencies, 0.5),
            "latency_ms_p95": _percentile(latencies, 0.95),
            "latencies_ms": latencies[:LATENCY_POINTS][::-1],  # oldest first
            "last_batch": int(engine.get("last_batch", 0)),
            # the study's keys in Redis and its learners' states in a worker (written with the summary)
            "memory_redis_bytes": _int(engine.get("memory_redis_bytes")),
            "memory_engine_bytes": _int(engine.get("memory_engine_bytes")),
            "last_update_at": float(engine["last_update_at"]) if "last_update_at" in engine else None,
        },
    }


def _int(value) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
