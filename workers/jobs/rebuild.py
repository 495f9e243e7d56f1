"""Replay a study's answer log into fresh engine state, optionally without some raters.

The log is the source of truth: excluding a rater (say one who failed attention checks)
keeps their answers in the log but stops them reaching the engines, now and in every later
update. The report says how each algorithm's learned nearest-neighbour graph changed.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import redis
from rq import get_current_job

from workers.jobs import heldout
from workers.jobs.learner_cache import load_learners
from workers.jobs.learners import Learner, fresh_learners, observe_batch
from workers.jobs.lock import study_lock
from workers.store import engine_state, keys
from workers.store.answers import read_batch
from workers.store.queue import REBUILD_STATUS_FIELD, schedule_update
from workers.store.studies import Study, get_items, get_study

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable

    from redis import Redis



@dataclass
class RebuildReport:
    answers_replayed: int = 0
    answers_excluded: int = 0
    answers_set_aside: int = 0
    excluded_raters: list[str] = field(default_factory=list)
    # (algorithm, item, old nearest neighbour, new nearest neighbour) for every item whose neighbour changed
    changed: list[tuple[str, str, str | None, str | None]] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class Replay:
    """Fresh learners fed the whole log: what the update job's saved state must equal."""

    learners: dict[str, Learner]
    cursor: str  # id of the last log entry read ("0-0" for an empty log)
    set_aside: dict[str, str]  # answer id -> why no engine could use it
    replayed: int = 0  # answers given to the engines (set-aside ones included)
    excluded: int = 0  # answers of excluded raters
    kept: heldout.Kept = field(default_factory=heldout.Kept)  # held-out answers and validation repeats read


def replay_log(conn: Redis, study: Study, excluded: Collection[str] = frozenset(), chunk: int = 20000) -> Replay:
    """Replay the study's answer log, oldest first, into fresh learners, without writing anything."""
    learners = fresh_learners(conn, study)
    replay = Replay(learners, "0-0", {})
    while True:
        batch, unreadable, last = read_batch(conn, study.id, replay.cursor, chunk)
        kept = [a for a in batch if a.rater not in excluded]
        for learner in learners.values():
            learner.sync_items(study.n_items)
        replay.set_aside.update(unreadable)
        replay.set_aside.update(observe_batch(learners, kept))
        replay.kept.read(kept)
        replay.replayed += len(kept) + len(unreadable)
        replay.excluded += len(batch) - len(kept)
        replay.cursor = last
        if len(batch) + len(unreadable) < chunk:
            break
    for learner in learners.values():
        learner.sync_items(study.n_items)
    return replay


def rebuild_study(conn: Redis, study_id: str, exclude_raters: Iterable[str] = (), chunk: int = 20000) -> RebuildReport:
    """Replace the study's engine states by a replay of its log (without ``exclude_raters``, remembered)."""
    started = time.perf_counter()
    study = get_study(conn, study_id)
    item_ids = [item.id for item in get_items(conn, study_id)]
    report = RebuildReport()
    with study_lock(conn, study_id):
        excluded = {r.decode() for r in conn.smembers(keys.excluded_raters(study_id))} | set(exclude_raters)
        report.excluded_raters = sorted(excluded)
        had_state = conn.exists(keys.cursor(study_id))
        old = {label: learner.graph().neighbors[:, 0].tolist()
               for label, learner in load_learners(conn, study).items()} if had_state else {}

        replay = replay_log(conn, study, excluded, chunk)
        learners = replay.learners
        report.answers_replayed = replay.replayed
        report.answers_excluded = replay.excluded
        report.answers_set_aside = len(replay.set_aside)
        with conn.pipeline(transaction=True) as pipe:
            if excluded:
                pipe.sadd(keys.excluded_raters(study_id), *excluded)
            # pooled questions were planned by the old state; the next update plans fresh ones
            # (outstanding questions may still be answered: their answers are used as usual)
            for label, learner in learners.items():
                pipe.delete(keys.pool(study_id, label))
                engine_state.save(pipe, study_id, label, learner.to_state())
            engine_state.save_cursor(pipe, study_id, replay.cursor)
            replay.kept.replace(pipe, study)
            pipe.delete(keys.poisoned(study_id))
            if replay.set_aside:
                pipe.hset(keys.poisoned(study_id), mapping=replay.set_aside)
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


def rebuild_job(study_id: str) -> dict:
    """RQ entry point (``queue.enqueue_rebuild``): rebuild the study without its excluded raters and
    record the outcome where the dashboard reads it, unless a newer rebuild was queued meanwhile."""
    job = get_current_job()
    conn = job.connection
    report = rebuild_study(conn, study_id)
    status = {"state": "finished", "job_id": job.id, "finished_at": time.time(),
              "excluded_raters": report.excluded_raters, "answers_replayed": report.answers_replayed,
              "answers_excluded": report.answers_excluded, "answers_set_aside": report.answers_set_aside,
              "neighbours_changed": len(report.changed), "seconds": round(report.seconds, 3)}
    key = keys.engine_stats(study_id)
    with conn.pipeline(transaction=True) as pipe:
        while True:
            try:
                pipe.watch(key)
                current = json.loads(pipe.hget(key, REBUILD_STATUS_FIELD) or "{}")
                pipe.multi()
                if current.get("job_id") in (None, job.id):
                    pipe.hset(key, REBUILD_STATUS_FIELD, json.dumps({**current, **status}))
                pipe.execute()
                break
            except redis.WatchError:
                continue
    return status
