"""RQ jobs: apply a study's new answers to its engine and refill its question pool.

``update_study`` is the only writer of a study's engine state. It takes the study's
lock, reads every answer after the saved cursor, applies them as one batch, releases
expired questions back to the planner, tops the pool up, and writes state + cursor +
pool + stats in one MULTI guarded by WATCH, so a worker killed at any instant neither
loses nor double-applies an answer.
"""
from __future__ import annotations

import json
import time

import redis
from rq import get_current_job

from . import answers as answer_log
from . import engine_state, engines, keys, questions
from .studies import get_study

# an issued question is reclaimed this long after its token expired (clock skew between hosts)
EXPIRY_GRACE_SECONDS = 30
MAX_ANSWERS_PER_PASS = 20000
LOCK_TIMEOUT_SECONDS = 600


def update_study(study_id: str) -> dict:
    """RQ entry point: drain new answers of one study. Returns a summary of the pass."""
    conn = get_current_job().connection
    # Clear the flag first: answers accepted from now on schedule a fresh job.
    conn.delete(keys.update_scheduled(study_id))
    lock = conn.lock(keys.update_lock(study_id), timeout=LOCK_TIMEOUT_SECONDS,
                     blocking_timeout=LOCK_TIMEOUT_SECONDS)
    with lock:
        return apply_new_answers(conn, study_id)


def apply_new_answers(conn, study_id: str, now: float | None = None) -> dict:
    """Apply every answer after the cursor, then refill the pool; retried if another writer raced us."""
    total = {"applied": 0, "released": 0, "planned": 0, "passes": 0}
    while True:
        summary = _one_pass(conn, study_id, time.time() if now is None else now)
        for name in ("applied", "released", "planned"):
            total[name] += summary[name]
        total["passes"] += 1
        if not summary["more"]:
            return total


def _one_pass(conn, study_id: str, now: float) -> dict:
    study = get_study(conn, study_id)
    with conn.pipeline(transaction=True) as pipe:
        while True:
            started = time.perf_counter()
            try:
                pipe.watch(keys.engine(study_id))
                state, cursor = engine_state.load(pipe, study_id)
                planner = (engines.planner_from_state(state) if state is not None
                           else engines.new_planner(study.config, study.n_items))
                batch = answer_log.read_answers(pipe, study_id, after=cursor, count=MAX_ANSWERS_PER_PASS)
                excluded = {r.decode() for r in pipe.smembers(keys.excluded_raters(study_id))}
                planner.observe(engines.engine_answers([a for a in batch if a.rater not in excluded]))
                expired = questions.expired_questions(pipe, study_id, before=now - EXPIRY_GRACE_SECONDS)
                planner.forget(engines.engine_questions(expired))
                depth = questions.pool_depth(pipe, study_id)
                wanted = max(0, study.config.pool_size - depth) if study.status == "running" else 0
                planned = engines.pool_questions(study.config, planner.next_questions(wanted))
                new_cursor = batch[-1].id if batch else cursor
                latency_ms = (time.perf_counter() - started) * 1000.0

                pipe.multi()
                engine_state.save(pipe, study_id, planner.to_state(), new_cursor)
                questions.release_questions(pipe, study_id, [q["qid"] for q in expired])
                questions.push_questions(conn, study_id, planned, pipeline=pipe)
                pipe.hset(keys.engine_stats(study_id), mapping={
                    "last_update_at": repr(now), "last_latency_ms": f"{latency_ms:.3f}",
                    "last_batch": len(batch), "cursor": new_cursor,
                    "summary": json.dumps(engines.summary(planner)),
                })
                pipe.hincrby(keys.engine_stats(study_id), "updates", 1)
                pipe.hincrby(keys.engine_stats(study_id), "answers_applied", len(batch))
                pipe.execute()
                return {"applied": len(batch), "released": len(expired), "planned": len(planned),
                        "more": len(batch) == MAX_ANSWERS_PER_PASS}
            except redis.WatchError:
                continue
