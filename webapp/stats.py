"""Numbers the dashboard shows about a study, read from Redis in one round trip."""
from __future__ import annotations

import json

from workers import keys
from workers.studies import Study


def study_stats(conn, study: Study) -> dict:
    with conn.pipeline(transaction=False) as pipe:
        pipe.xlen(keys.answers(study.id))
        pipe.scard(keys.raters(study.id))
        pipe.hgetall(keys.counters(study.id))
        pipe.llen(keys.pool(study.id))
        pipe.zcard(keys.issued(study.id))
        pipe.hgetall(keys.answers_per_minute(study.id))
        pipe.hgetall(keys.engine_stats(study.id))
        n_answers, n_raters, counters, pool, issued, per_minute, engine = pipe.execute()
    counters = {k.decode(): int(v) for k, v in counters.items()}
    served = counters.get("questions_served", 0)
    fallback = counters.get("fallback_served", 0)
    engine = {k.decode(): v.decode() for k, v in engine.items()}
    summary = json.loads(engine.pop("summary")) if "summary" in engine else None
    return {
        "study": {"id": study.id, "name": study.config.name, "status": study.status,
                  "algorithm": study.config.algorithm, "n_items": study.n_items},
        "answers": int(n_answers),
        "raters": int(n_raters),
        "questions_served": served,
        "fallback_served": fallback,
        "fallback_rate": fallback / served if served else 0.0,
        "pool_depth": int(pool),
        "questions_outstanding": int(issued),
        "answers_per_minute": sorted([int(m) * 60, int(c)] for m, c in per_minute.items()),
        "engine": {
            "updates": int(engine.get("updates", 0)),
            "answers_applied": int(engine.get("answers_applied", 0)),
            "last_latency_ms": float(engine["last_latency_ms"]) if "last_latency_ms" in engine else None,
            "last_batch": int(engine.get("last_batch", 0)),
            "last_update_at": float(engine["last_update_at"]) if "last_update_at" in engine else None,
            "summary": summary,
        },
    }
