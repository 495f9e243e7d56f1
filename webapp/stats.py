"""Numbers the dashboard shows about a study, read from Redis in one round trip."""
from __future__ import annotations

import json

from workers import keys
from workers.studies import Study


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


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
        for label in labels:
            pipe.llen(keys.pool(study.id, label))
        replies = pipe.execute()
    n_answers, n_raters, counters, issued, per_minute, engine, latencies, finished, n_poisoned = replies[:9]
    depths = dict(zip(labels, replies[9:], strict=True))
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
        algorithms.append({
            "label": label, "algorithm": alg.algorithm, "question_kind": alg.question_kind, "share": alg.share,
            "budget": alg.budget, "answers": counters.get(f"answers:{label}", 0), "questions_served": a_served,
            "fallback_served": a_fallback, "fallback_rate": a_fallback / a_served if a_served else 0.0,
            "pool_depth": int(depths[label]), "finished": label in finished,
            "progress": (summaries.get(label) or {}).get("progress"),
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
        "answers_per_minute": sorted([int(m) * 60, int(c)] for m, c in per_minute.items()),
        "algorithms": algorithms,
        "engine": {
            "updates": int(engine.get("updates", 0)),
            "answers_applied": int(engine.get("answers_applied", 0)),
            "active_raters": int(engine.get("active_raters", 0)),
            "last_latency_ms": float(engine["last_latency_ms"]) if "last_latency_ms" in engine else None,
            "latency_ms_p50": _percentile(latencies, 0.5),
            "latency_ms_p95": _percentile(latencies, 0.95),
            "last_batch": int(engine.get("last_batch", 0)),
            "last_update_at": float(engine["last_update_at"]) if "last_update_at" in engine else None,
        },
    }
