"""RQ jobs: apply a study's new answers to its engines and refill its question pools.

``update_study`` is the only writer of a study's engine states. It takes the study's
lock, reads every answer after the saved cursor, applies them as one batch to each
algorithm's learner, releases expired questions back to the planners, takes questions of
closed rounds out of the pools, tops the pools up, and writes states + cursor + pools +
stats in one MULTI guarded by WATCH, so a worker killed at any instant neither loses nor
double-applies an answer.
"""
from __future__ import annotations

import json
import math
import time

import redis
from rq import get_current_job

from . import answers as answer_log
from . import engine_state, keys, questions
from .engines import Learner
from .studies import Study, get_items, get_study, initial_item_count

# an issued question is reclaimed this long after its token expired (clock skew between hosts)
EXPIRY_GRACE_SECONDS = 30
MAX_ANSWERS_PER_PASS = 20000
LOCK_TIMEOUT_SECONDS = 600
#: A rater who was handed a question this recently counts as active (pool sizing).
ACTIVE_RATER_SECONDS = 120
LATENCIES_KEPT = 500


def update_study(study_id: str) -> dict:
    """RQ entry point: drain new answers of one study. Returns a summary of the pass."""
    conn = get_current_job().connection
    # Clear the flag first: answers accepted from now on schedule a fresh job.
    conn.delete(keys.update_scheduled(study_id))
    lock = conn.lock(keys.update_lock(study_id), timeout=LOCK_TIMEOUT_SECONDS,
                     blocking_timeout=LOCK_TIMEOUT_SECONDS)
    with lock:
        return apply_new_answers(conn, study_id)


def load_learners(conn, study: Study) -> dict[str, Learner]:
    """Every algorithm's learner from its saved state, or fresh where none is saved yet."""
    learners, labels = {}, None
    for alg in study.config.algorithms:
        state = engine_state.load(conn, study.id, alg.label)
        if state is not None:
            learners[alg.label] = Learner.from_state(alg, study.config, state)
            continue
        n = initial_item_count(conn, study.id, study.n_items)
        if labels is None:
            labels = [item.label for item in get_items(conn, study.id)][:n]
        learners[alg.label] = Learner.new(alg, study.config, n, labels)
    return learners


def observe_batch(learners: dict[str, Learner], batch: list) -> dict[str, str]:
    """Apply a batch to every learner; an answer a learner refuses is set aside, not retried forever.

    Returns {answer id: reason} of the answers set aside. Engines validate a whole batch before
    changing anything, so on a refusal the batch is applied again one answer at a time.
    """
    poisoned: dict[str, str] = {}
    for learner in learners.values():
        try:
            learner.observe(batch)
        except ValueError:
            for answer in batch:
                try:
                    learner.observe([answer])
                except ValueError as exc:
                    poisoned[answer.id] = f"{learner.label}: {exc}"
    return poisoned


def apply_new_answers(conn, study_id: str, now: float | None = None) -> dict:
    """Apply every answer after the cursor, then refill the pools; retried if another writer raced us."""
    total = {"applied": 0, "released": 0, "planned": 0, "pruned": 0, "passes": 0}
    while True:
        summary = _one_pass(conn, study_id, time.time() if now is None else now)
        for name in ("applied", "released", "planned", "pruned"):
            total[name] += summary[name]
        total["passes"] += 1
        if not summary["more"]:
            return total


def _budget_reached(learner: Learner, counters: dict) -> bool:
    budget = learner.algorithm.budget
    return budget is not None and int(counters.get(f"questions_served:{learner.label}", 0)) >= budget


def _one_pass(conn, study_id: str, now: float) -> dict:
    study = get_study(conn, study_id)
    config = study.config
    shares = config.shares()
    pruned_earlier: dict[str, list[dict]] = {}
    with conn.pipeline(transaction=True) as pipe:
        while True:
            started = time.perf_counter()
            try:
                pipe.watch(keys.cursor(study_id))
                cursor = engine_state.load_cursor(pipe, study_id)
                learners = load_learners(pipe, study)
                for learner in learners.values():
                    learner.sync_items(study.n_items)
                batch = answer_log.read_answers(pipe, study_id, after=cursor, count=MAX_ANSWERS_PER_PASS)
                excluded = {r.decode() for r in pipe.smembers(keys.excluded_raters(study_id))}
                poisoned = observe_batch(learners, [a for a in batch if a.rater not in excluded])
                for learner in learners.values():
                    learner.sync_items(study.n_items)  # a forest finished by this batch starts routing added items
                expired = questions.expired_questions(pipe, study_id, before=now - EXPIRY_GRACE_SECONDS)
                counters = {k.decode(): v for k, v in pipe.hgetall(keys.counters(study_id)).items()}
                active = int(pipe.zcount(keys.active_raters(study_id), now - ACTIVE_RATER_SECONDS, "+inf"))
                running = study.status == "running"
                planned, targets, finished, pruned_now = {}, {}, [], 0
                for label, learner in learners.items():
                    learner.forget(expired)
                    # questions pruned in a pass whose transaction was retried are forgotten again
                    learner.forget(pruned_earlier.get(label, []))
                    done = learner.finished or _budget_reached(learner, counters)
                    if done:
                        finished.append(label)
                    target = max(math.ceil(config.pool_size * shares[label]), math.ceil(active * shares[label]))
                    targets[label] = target
                    pooled = questions.pooled_questions(pipe, study_id, label)
                    stale = pooled if done or not running else learner.stale(pooled)
                    removed = questions.prune_questions(conn, study_id, label, stale)
                    learner.forget(removed)
                    pruned_earlier.setdefault(label, []).extend(removed)
                    pruned_now += len(removed)
                    depth = len(pooled) - len(removed)
                    wanted = max(0, target - depth) if running and not done else 0
                    if learner.algorithm.budget is not None:
                        served = int(counters.get(f"questions_served:{label}", 0))
                        wanted = min(wanted, max(0, learner.algorithm.budget - served - depth))
                    window = learner.algorithm.params.get("window", 1)
                    planned[label] = learner.plan(wanted, study.n_items, window=window)
                new_cursor = batch[-1].id if batch else cursor
                latency_ms = (time.perf_counter() - started) * 1000.0

                pipe.multi()
                for label, learner in learners.items():
                    engine_state.save(pipe, study_id, label, learner.to_state())
                    questions.push_questions(conn, study_id, label, planned[label], pipeline=pipe)
                engine_state.save_cursor(pipe, study_id, new_cursor)
                questions.release_questions(pipe, study_id, [q["qid"] for q in expired])
                pipe.hset(keys.pool_targets(study_id), mapping=targets)
                pipe.delete(keys.finished(study_id))
                if finished:
                    pipe.sadd(keys.finished(study_id), *finished)
                if poisoned:
                    pipe.hset(keys.poisoned(study_id), mapping=poisoned)
                pipe.zremrangebyscore(keys.active_raters(study_id), "-inf", now - 86400)
                pipe.lpush(keys.refresh_latencies(study_id), f"{latency_ms:.3f}")
                pipe.ltrim(keys.refresh_latencies(study_id), 0, LATENCIES_KEPT - 1)
                pipe.hset(keys.engine_stats(study_id), mapping={
                    "last_update_at": repr(now), "last_latency_ms": f"{latency_ms:.3f}",
                    "last_batch": len(batch), "cursor": new_cursor, "active_raters": active,
                    "summary": json.dumps({label: learner.summary() for label, learner in learners.items()}),
                })
                pipe.hincrby(keys.engine_stats(study_id), "updates", 1)
                pipe.hincrby(keys.engine_stats(study_id), "answers_applied", len(batch))
                pipe.execute()
                return {"applied": len(batch), "released": len(expired), "pruned": pruned_now,
                        "planned": sum(len(q) for q in planned.values()), "poisoned": len(poisoned),
                        "more": len(batch) == MAX_ANSWERS_PER_PASS}
            except redis.WatchError:
                continue
