"""Numbers the dashboard shows about a study, read from Redis in one round trip, and the raters table.

Pure Python on purpose: the stats route is polled every few seconds by every open dashboard.
"""
from __future__ import annotations

import json
import time
from statistics import median

from workers import keys
from workers.answers import Answer
from workers.studies import Study

#: The response-time histogram covers this many of the latest answers.
RECENT_ANSWERS = 2000
#: A rater counts as active when they were given a question this recently.
ACTIVE_SECONDS = 300
#: The raters table is computed from at most this many answers when no per-rater counters exist.
RATER_TABLE_ANSWERS = 50000
LATENCY_POINTS = 200


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
    latencies = [float(x) for x in latencies]
    finished = {f.decode() for f in finished}
    algorithms = []
    for alg in study.config.algorithms:
        label = alg.label
        a_served = counters.get(f"questions_served:{label}", 0)
        a_fallback = counters.get(f"fallback_served:{label}", 0)
        progress = (summaries.get(label) or {}).get("progress")
        certified = None
        if progress and "rounds_certified" in progress and progress.get("n_items"):
            certified = progress["rounds_certified"] / progress["n_items"]
        algorithms.append({
            "label": label, "algorithm": alg.algorithm, "question_kind": alg.question_kind, "share": alg.share,
            "budget": alg.budget, "answers": counters.get(f"answers:{label}", 0), "questions_served": a_served,
            "fallback_served": a_fallback, "fallback_rate": a_fallback / a_served if a_served else 0.0,
            "pool_depth": int(depths[label]), "finished": label in finished,
            "progress": progress, "share_certified": certified,
            "neighbors": (summaries.get(label) or {}).get("neighbors"),
        })
    return {
        "study": {"id": study.id, "name": study.config.name, "status": study.status,
                  "algorithm": study.config.algorithm, "n_items": study.n_items,
                  "complete": bool(labels) and finished >= set(labels)},
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
            "last_update_at": float(engine["last_update_at"]) if "last_update_at" in engine else None,
        },
    }


def _int(value) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def rater_table(conn, study_id: str, limit: int = RATER_TABLE_ANSWERS) -> list[dict]:
    """One row per rater: answers, median response time, catch-trial failures, too-fast share, flags.

    Counts come from the per-rater counters when the platform keeps them (``keys.rater_stats``);
    answers and response times are always taken from the latest ``limit`` answers of the log.
    """
    entries = conn.xrevrange(keys.answers(study_id), count=limit)
    times: dict[str, list[float]] = {}
    counts: dict[str, int] = {}
    last: dict[str, float] = {}
    for entry_id, fields in entries:
        answer = Answer.from_stream(entry_id, fields)
        counts[answer.rater] = counts.get(answer.rater, 0) + 1
        last.setdefault(answer.rater, answer.answered_at)
        if answer.response_ms is not None:
            times.setdefault(answer.rater, []).append(answer.response_ms)
    stats_key = getattr(keys, "rater_stats", None)
    counters: dict[str, dict[str, str]] = {}
    if stats_key is not None:
        for field, value in conn.hgetall(stats_key(study_id)).items():
            rater, _, name = field.decode().rpartition(":")
            if rater:
                counters.setdefault(rater, {})[name] = value.decode(errors="replace")
    excluded = {r.decode() for r in conn.smembers(keys.excluded_raters(study_id))}
    rows = []
    for rater in sorted(set(counts) | set(counters) | excluded):
        c = counters.get(rater, {})
        answers = max(counts.get(rater, 0), _int(c.get("answers")))
        too_fast = _int(c.get("too_fast"))
        rows.append({
            "rater": rater, "answers": answers,
            "median_response_ms": median(times[rater]) if times.get(rater) else None,
            "catch": _int(c.get("catch")), "catch_failed": _int(c.get("catch_failed")),
            "too_fast_share": too_fast / answers if answers else 0.0,
            "flagged": c.get("flagged") not in (None, "", "0"),
            "completed": c.get("completed") not in (None, "", "0"),
            "excluded": rater in excluded, "last_answer_at": last.get(rater),
        })
    rows.sort(key=lambda r: (-r["flagged"], -r["answers"], r["rater"]))
    return rows
