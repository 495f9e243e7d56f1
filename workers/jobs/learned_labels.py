"""Labels learned from the answers, for the catch trials of a study whose items have neither positions nor labels
(a folder of images, sounds or videos). Its catch trials show an item with a copy of itself: careful people pass
them, random answers fail them, but a program comparing the files finds the copy without a look at the items
(``benchmarks/bots.py``'s "media bytes" bot was paid in every such study). Once the study's learner has placed
the items in a space (``LEARNED_AT`` answers per item and a fit), they are grouped by where it placed them
(k-means, at most ``LEARNED_GROUPS`` groups) and the groups serve as the items' labels: the catch trials become
label comparisons (an item of a group against items of others), judged by the crowd as those of labelled items
are (``webapp/catches.py``, ``rater_checks.judge_by_crowd``): a comparison the raters do not agree with is
retired, a miss waits for their verdict. Grouped once: a rater's misses wait for the crowd's verdict on the
comparisons they missed, which a new grouping would stop asking. Must never import Flask.
"""
from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

import numpy as np
from scipy.cluster.vq import kmeans2

from engine.registry import fitted_coordinates
from workers.jobs.learner_cache import cached_study, load_learners
from workers.store import keys
from workers.store.studies import get_study

if TYPE_CHECKING:
    from redis import Redis

#: The catch trials' source (``webapp.catches.source_of``) of the studies whose labels are learned.
COPIES = "copies"
#: Answers per item the learner has applied before its items are grouped ...
LEARNED_AT = 10
#: ... into at most this many groups (the label studies of benchmarks/catch_fairness.py had 3 and 10), of at
#: least GROUP_ITEMS items on average.
LEARNED_GROUPS = 10
GROUP_ITEMS = 3


def _source(conn: Redis, study_id: str) -> str | None:
    raw = conn.get(keys.catch_comparisons(study_id))
    try:
        return json.loads(raw).get("source") if raw else None
    except (ValueError, AttributeError):
        return None


def learned_labels(conn: Redis, study_id: str) -> dict | None:
    """The study's learned labels as stored (``labels``, ``answers``, ``learner``, ``groups``, ``at``), or None."""
    raw = conn.get(keys.catch_learned(study_id))
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


def group_items(coords: np.ndarray, groups: int, seed: int) -> np.ndarray:
    """Each item's group (0 .. groups - 1) by where a learner placed it (k-means++, seeded)."""
    X = np.asarray(coords, dtype=np.float64)
    X = X - X.mean(axis=0)
    spread = X.std(axis=0)
    X = X / np.where(spread > 0, spread, 1.0)
    _, labels = kmeans2(X, groups, minit="++", seed=np.random.default_rng(seed))
    return labels.astype(np.int64)


def learn_labels(conn: Redis, study_id: str, now: float | None = None) -> dict | None:
    """Group the items of a study whose catch trials are copies by where its learner placed them, once it has
    applied LEARNED_AT answers per item; returns the record stored, None when nothing was (another study, too
    few answers, no learner with a fitted space yet, grouped already)."""
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
    groups = max(2, min(LEARNED_GROUPS, n // GROUP_ITEMS))
    labels = group_items(coords, groups, (study.config.random_state or 0) + applied)
    record = {"labels": labels.tolist(), "answers": applied, "learner": label, "groups": int(len(set(labels.tolist()))),
              "at": time.time() if now is None else now}
    conn.set(keys.catch_learned(study_id), json.dumps(record))
    return record
