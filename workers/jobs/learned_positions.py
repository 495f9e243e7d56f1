"""Positions learned from the answers, for the catch trials of a study whose items have neither positions nor labels
(a folder of images, sounds or videos). Its catch trials show an item with a copy of itself: careful people pass
them, random answers fail them, but a program comparing the files finds the copy without a look at the items
(``benchmarks/bots.py``'s "media bytes" bot was paid in every such study). Once the study's learner has placed
the items in a space (``LEARNED_AT`` answers per item and a fit), the places it gave them serve as the items'
positions: the catch trials become comparisons with a margin in that space (an item, its nearest there, one of
its farthest quarter), judged by the crowd as comparisons by labels alone are, since a learned space is not a
known one (``webapp/catches.py``, ``rater_checks.judge_by_crowd``): a comparison the raters do not agree with
is retired, a miss waits for their verdict. Placed once: a rater's misses wait for the crowd's verdict on the
comparisons they missed, which new places would stop asking. Must never import Flask.
"""
from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

import numpy as np

from engine.registry import fitted_coordinates
from workers.jobs.learner_cache import cached_study, load_learners
from workers.store import keys
from workers.store.studies import get_study

if TYPE_CHECKING:
    from redis import Redis

#: The catch trials' source (``webapp.catches.source_of``) of the studies whose positions are learned.
COPIES = "copies"
#: Answers per item the learner has applied before its places are taken.
LEARNED_AT = 10
#: The fields of ``keys.catch_learned``: the answers applied when the places were taken (read by every web process
#: each time its copy of the comparisons expires) and the places (JSON, read when the comparisons are chosen).
ANSWERS_FIELD, POSITIONS_FIELD = "answers", "positions"


def _source(conn: Redis, study_id: str) -> str | None:
    raw = conn.get(keys.catch_comparisons(study_id))
    try:
        return json.loads(raw).get("source") if raw else None
    except (ValueError, AttributeError):
        return None


def learned_positions(conn: Redis, study_id: str) -> dict | None:
    """The study's learned places as stored (``positions``, ``answers``, ``learner``, ``at``), or None."""
    raw = conn.hgetall(keys.catch_learned(study_id))
    if not raw:
        return None
    record = {k.decode(): v.decode() for k, v in raw.items()}
    record[POSITIONS_FIELD] = json.loads(record[POSITIONS_FIELD])
    record[ANSWERS_FIELD] = int(record[ANSWERS_FIELD])
    return record


def learn_positions(conn: Redis, study_id: str, now: float | None = None) -> dict | None:
    """Take the places a study's learner gave its items as their positions for its catch trials, once it has applied
    LEARNED_AT answers per item, where the catch trials are copies; returns the record stored, None when nothing was
    (another study, too few answers, no learner with a fitted space yet, placed already)."""
    if _source(conn, study_id) != COPIES:
        return None
    study = get_study(conn, study_id)
    n = study.n_items
    applied = int(conn.hget(keys.engine_stats(study_id), "answers_applied") or 0)
    if applied < LEARNED_AT * n or conn.exists(keys.catch_learned(study_id)):
        return None
    cached = cached_study(study_id)
    learners = cached.learners if cached is not None else load_learners(conn, study)
    placed = [(label, fitted_coordinates(learner.planner)) for label, learner in learners.items()]
    placed = [(label, coords) for label, coords in placed if coords is not None and len(coords) == n]
    if not placed:
        return None
    label, coords = placed[0]
    positions = np.round(np.asarray(coords, dtype=np.float64), 6).tolist()
    record = {ANSWERS_FIELD: applied, POSITIONS_FIELD: json.dumps(positions), "learner": label,
              "at": repr(time.time() if now is None else now)}
    conn.hset(keys.catch_learned(study_id), mapping=record)
    return {**record, POSITIONS_FIELD: positions}
