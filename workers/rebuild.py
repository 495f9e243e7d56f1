"""Replay a study's answer log into fresh engine state, optionally without some raters.

The log is the source of truth: excluding a rater (say one who failed attention checks)
keeps their answers in the log but stops them reaching the engines, now and in every later
update. The report says how each algorithm's learned nearest-neighbour graph changed.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from . import answers as answer_log
from . import engine_state, keys
from .engines import new_learners
from .jobs import LOCK_TIMEOUT_SECONDS, load_learners, observe_batch
from .queue import schedule_update
from .studies import get_items, get_study, initial_item_count


@dataclass
class RebuildReport:
    answers_replayed: int = 0
    answers_excluded: int = 0
    answers_set_aside: int = 0
    excluded_raters: list[str] = field(default_factory=list)
    # (algorithm, item, old nearest neighbour, new nearest neighbour) for every item whose neighbour changed
    changed: list[tuple[str, str, str | None, str | None]] = field(default_factory=list)
    seconds: float = 0.0


def rebuild_study(conn, study_id: str, exclude_raters=(), chunk: int = 20000) -> RebuildReport:
    started = time.perf_counter()
    study = get_study(conn, study_id)
    items = get_items(conn, study_id)
    item_ids = [item.id for item in items]
    report = RebuildReport()
    lock = conn.lock(keys.update_lock(study_id), timeout=LOCK_TIMEOUT_SECONDS, blocking_timeout=LOCK_TIMEOUT_SECONDS)
    with lock:
        excluded = {r.decode() for r in conn.smembers(keys.excluded_raters(study_id))} | set(exclude_raters)
        report.excluded_raters = sorted(excluded)
        had_state = conn.exists(keys.cursor(study_id))
        old = {label: learner.graph().neighbors[:, 0].tolist()
               for label, learner in load_learners(conn, study).items()} if had_state else {}

        n_initial = initial_item_count(conn, study_id, study.n_items)
        learners = new_learners(study.config, n_initial, [item.label for item in items[:n_initial]])
        poisoned: dict[str, str] = {}
        cursor = "0-0"
        while True:
            batch = answer_log.read_answers(conn, study_id, after=cursor, count=chunk)
            kept = [a for a in batch if a.rater not in excluded]
            for learner in learners.values():
                learner.sync_items(study.n_items)
            poisoned.update(observe_batch(learners, kept))
            report.answers_replayed += len(kept)
            report.answers_excluded += len(batch) - len(kept)
            if batch:
                cursor = batch[-1].id
            if len(batch) < chunk:
                break
        for learner in learners.values():
            learner.sync_items(study.n_items)
        report.answers_set_aside = len(poisoned)
        with conn.pipeline(transaction=True) as pipe:
            if excluded:
                pipe.sadd(keys.excluded_raters(study_id), *excluded)
            # pooled questions were planned by the old state; the next update plans fresh ones
            # (outstanding questions may still be answered: their answers are used as usual)
            for label, learner in learners.items():
                pipe.delete(keys.pool(study_id, label))
                engine_state.save(pipe, study_id, label, learner.to_state())
            engine_state.save_cursor(pipe, study_id, cursor)
            pipe.delete(keys.poisoned(study_id))
            if poisoned:
                pipe.hset(keys.poisoned(study_id), mapping=poisoned)
            pipe.execute()
        new = {label: learner.graph().neighbors[:, 0].tolist() for label, learner in learners.items()}
    schedule_update(conn, study_id)  # plans questions and applies answers that arrived during the replay

    def name(i):
        return None if i is None or i < 0 else item_ids[i]

    for label, after in new.items():
        before = old.get(label)
        for index, nn in enumerate(after):
            prior = before[index] if before else None
            if prior != nn:
                report.changed.append((label, item_ids[index], name(prior), name(nn)))
    report.seconds = time.perf_counter() - started
    return report
