"""The dashboard's summary of a study's learners (each one's progress and each item's current neighbour,
with the memory the study takes, a point of each error curve against a known truth and of each held-out
curve) and how often
an update job writes it: a summary of a large study is a pass over the n x n estimates, so while passes
go on it is written at most every ``SUMMARY_SECONDS`` and at most ``SUMMARY_SHARE`` of the worker's time;
a pass that leaves it out has it written when the job ends (``write_summary``). Must never import Flask.
"""
from __future__ import annotations

import json
import math
import time
from typing import TYPE_CHECKING

from workers.jobs.heldout import record_heldout
from workers.jobs.learner_cache import cached_study
from workers.jobs.predicted import add_predicted
from workers.jobs.truth_curve import known_truth_of, record_truth_error
from workers.store import keys
from workers.store.studies import Study, get_study

if TYPE_CHECKING:
    from redis import Redis
    from redis.client import Pipeline

    from workers.jobs.heldout import Kept as HeldOutRead
    from workers.jobs.learner_cache import Kept
    from workers.jobs.learners import Learner
    from workers.jobs.truth_curve import KnownTruth


#: While a job goes on with pass after pass, the dashboard's summary of the learners (each item's
#: neighbour: a pass over the n x n estimates) is written at most this often ...
SUMMARY_SECONDS = 1.0
#: ... and at most as often as keeps its cost below this share of the worker's time (at 50,000 items
#: a summary of duels takes seconds: written every few seconds it would leave the passes no time)
SUMMARY_SHARE = 0.1

#: study id -> time.monotonic() of the last summary written by this process
_summarised: dict[str, float] = {}
#: studies whose latest pass left the summary out (written when the job ends: ``write_summary``)
_unsummarised: set[str] = set()
#: study id -> seconds the last summary written by this process took
_summary_cost: dict[str, float] = {}


def summary_due(study_id: str, every: float) -> bool:
    """Whether this pass writes the summary: ``every`` seconds after the last one, and no sooner than
    its cost over ``SUMMARY_SHARE`` (``every`` 0: always, as when a job settles)."""
    if every <= 0:
        return True
    wait = max(every, _summary_cost.get(study_id, 0.0) / SUMMARY_SHARE)
    return time.monotonic() - _summarised.get(study_id, -math.inf) >= wait


def note_pass(study_id: str, summarised: bool) -> None:
    """After a pass's EXEC: whether it wrote the summary (one that did not has it written when the job ends)."""
    if summarised:
        _summarised[study_id] = time.monotonic()
        _unsummarised.discard(study_id)
    else:
        _unsummarised.add(study_id)


def study_memory(conn: Redis, study: Study, kept: dict[str, Kept]) -> dict[str, int]:
    """What the study takes: ``memory_redis_bytes``, its keys in Redis (MEMORY USAGE: answers, items,
    pools, engine states and journals, statistics), and ``memory_engine_bytes``, its learners' states
    as a worker holds them (arrays + skeleton). Read in one round trip; written with the summary."""
    sid = study.id
    names = [keys.study(sid), keys.items(sid), keys.media(sid), keys.answers(sid), keys.issued(sid),
             keys.issued_questions(sid), keys.raters(sid), keys.counters(sid), keys.rater_stats(sid),
             keys.engine_stats(sid), keys.answers_per_minute(sid), keys.active_raters(sid), keys.heldout(sid)]
    for alg in study.config.algorithms:
        names += [keys.pool(sid, alg.label), keys.engine(sid, alg.label), keys.engine_journal(sid, alg.label),
                  keys.engine_checkpoint(sid, alg.label)]
    with conn.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.memory_usage(name)
        sizes = pipe.execute(raise_on_error=False)
    redis_bytes = sum(int(size) for size in sizes if isinstance(size, int))
    engine_bytes = sum(k.lifted.nbytes for k in kept.values() if k is not None and k.lifted is not None)
    return {"memory_redis_bytes": redis_bytes, "memory_engine_bytes": engine_bytes}


def queue_summary(conn: Redis, pipe: Pipeline, study: Study, learners: dict[str, Learner], kept: dict[str, Kept],
                  counters: dict, truth: KnownTruth, read: HeldOutRead | None = None) -> dict:
    """Inside a pass's MULTI: queue each learner's point of its error curve and of its held-out curve on
    ``pipe`` and return the fields the pass writes into the study's engine statistics (the summary and
    ``study_memory``). Its cost is remembered for ``summary_due``. ``counters``: ``keys.counters``, names
    decoded; ``read``: what the pass keeps of the answers it read, written in the same MULTI."""
    began = time.perf_counter()
    summaries = {label: learner.summary() for label, learner in learners.items()}
    features = add_predicted(conn, study, learners, summaries)
    fields = {"summary": json.dumps(summaries)}
    if features is not None:
        fields[keys.FEATURES_FIELD] = json.dumps(features)
    fields.update(study_memory(conn, study, kept))
    record_truth_error(pipe, study, learners, summaries, counters, truth)
    record_heldout(conn, pipe, study, learners, summaries, read)
    _summary_cost[study.id] = time.perf_counter() - began
    return fields


def write_summary(conn: Redis, study_id: str) -> None:
    """Write the dashboard's summary of the study's kept learners if the latest pass left it out
    (with the point of each learner's error curve against a known truth, see ``record_truth_error``)."""
    cached = cached_study(study_id)
    if study_id not in _unsummarised or cached is None:
        return
    study = get_study(conn, study_id)
    truth = known_truth_of(conn, study)
    counters = {k.decode(): v for k, v in conn.hgetall(keys.counters(study_id)).items()}
    summaries = {label: learner.summary() for label, learner in cached.learners.items()}
    features = add_predicted(conn, study, cached.learners, summaries)
    with conn.pipeline(transaction=True) as pipe:
        pipe.hset(keys.engine_stats(study_id), "summary", json.dumps(summaries))
        if features is not None:
            pipe.hset(keys.engine_stats(study_id), keys.FEATURES_FIELD, json.dumps(features))
        record_truth_error(pipe, study, cached.learners, summaries, counters, truth)
        record_heldout(conn, pipe, study, cached.learners, summaries)
        pipe.execute()
    note_pass(study_id, summarised=True)
