"""Replay a study's answer log into fresh engine state, optionally without some raters.

The log is the source of truth: excluding a rater (say one who failed attention checks)
keeps their answers in the log but stops them reaching the engine, now and in every later
update. The report says how the learned nearest-neighbour graph changed.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from . import answers as answer_log
from . import engine_state, engines, keys, questions
from .jobs import LOCK_TIMEOUT_SECONDS
from .queue import schedule_update
from .studies import get_items, get_study


@dataclass
class RebuildReport:
    answers_replayed: int = 0
    answers_excluded: int = 0
    excluded_raters: list[str] = field(default_factory=list)
    changed: list[tuple[str, str | None, str | None]] = field(default_factory=list)  # item, old NN, new NN
    seconds: float = 0.0


def rebuild_study(conn, study_id: str, exclude_raters=(), chunk: int = 20000) -> RebuildReport:
    started = time.perf_counter()
    study = get_study(conn, study_id)
    item_ids = [item.id for item in get_items(conn, study_id)]
    report = RebuildReport()
    lock = conn.lock(keys.update_lock(study_id), timeout=LOCK_TIMEOUT_SECONDS, blocking_timeout=LOCK_TIMEOUT_SECONDS)
    with lock:
        excluded = {r.decode() for r in conn.smembers(keys.excluded_raters(study_id))} | set(exclude_raters)
        report.excluded_raters = sorted(excluded)
        old_state, _ = engine_state.load(conn, study_id)
        old = engines.summary(engines.planner_from_state(old_state))["neighbors"] if old_state else None

        planner = engines.new_planner(study.config, study.n_items)
        cursor = "0-0"
        while True:
            batch = answer_log.read_answers(conn, study_id, after=cursor, count=chunk)
            kept = [a for a in batch if a.rater not in excluded]
            planner.observe(engines.engine_answers(kept))
            report.answers_replayed += len(kept)
            report.answers_excluded += len(batch) - len(kept)
            if batch:
                cursor = batch[-1].id
            if len(batch) < chunk:
                break
        planned = engines.pool_questions(study.config, planner.next_questions(
            study.config.pool_size if study.status == "running" else 0))
        with conn.pipeline(transaction=True) as pipe:
            if excluded:
                pipe.sadd(keys.excluded_raters(study_id), *excluded)
            # pooled questions were planned by the old state; outstanding ones may still be answered
            pipe.delete(keys.pool(study_id))
            questions.push_questions(conn, study_id, planned, pipeline=pipe)
            engine_state.save(pipe, study_id, planner.to_state(), cursor)
            pipe.execute()
        new = engines.summary(planner)["neighbors"]
    schedule_update(conn, study_id)  # applies answers that arrived during the replay
    name = lambda i: None if i is None or i < 0 else item_ids[i]  # noqa: E731
    for index, after in enumerate(new):
        before = old[index] if old else None
        if before != after:
            report.changed.append((item_ids[index], name(before), name(after)))
    report.seconds = time.perf_counter() - started
    return report
