"""The learner's split of rater time in a study of ``split: learner``: after each update pass that applied answers,
the study's pooled rating learner says which share of the raters' time ratings and triplets should get next
(``PooledRatings.time_shares``), given each kind's seconds per answer as measured on the study's own answers;
the shares of the questions that follow are stored where the issuing script reads them
(``questions.store_shares``). Must never import Flask.

A kind's share of the questions is its share of the time over its seconds per answer (normalised): at 62% of
the time on ratings, 4.1 s per rating and 6.0 s per triplet, ratings are .62 / 4.1 against .38 / 6.0, 70% of
the questions. The configured ``share`` of each algorithm divides its kind's side among the algorithms
asking that kind.
"""
from __future__ import annotations

import json
import statistics
import time
from typing import TYPE_CHECKING

from engine.kinds import KINDS
from engine.registry import wrapped_learner
from workers.jobs.learner_cache import cached_study, load_learners
from workers.store import keys, questions
from workers.store.answers import read_batch
from workers.store.config import split_kinds, split_learner
from workers.store.studies import get_study

if TYPE_CHECKING:
    from redis import Redis

    from workers.store.config import StudyConfig


#: A kind's seconds per answer are the median response time of the study's answers of that kind once this many
#: were timed (before: the kinds table's, ``engine.kinds``) ...
MIN_TIMED = 20
#: ... over the latest this many of them.
TIMES_KEPT = 500
#: The pool-targets hash's field of the response times kept (JSON: the log's id read up to, the times by kind).
TIMES_FIELD = "split:times"
#: Log entries read per call (a study switched on with a long log catches up over a few passes).
READ_CHUNK = 20000


def question_shares(config: StudyConfig, time_shares: dict[str, float], seconds: dict[str, float]) -> dict[str, float]:
    """Each algorithm's share of the questions (summing to 1) for the kinds' ``time_shares`` at ``seconds`` per
    answer: a kind's questions are its time over its seconds, divided among its algorithms by their ``share``."""
    kinds = split_kinds(config.algorithms)
    per_question = {kind: time_shares[kind] / seconds[kind] for kind in kinds}
    total = sum(per_question.values())
    shares = {}
    for kind in kinds:
        asking = [a for a in config.algorithms if a.question_kind == kind]
        configured = sum(a.share for a in asking)
        for a in asking:
            shares[a.label] = per_question[kind] / total * a.share / configured
    return shares


def _measured_seconds(conn: Redis, study_id: str, kinds: tuple[str, ...]) -> tuple[dict[str, float], dict[str, int]]:
    """(each kind's seconds per answer, how many answers of each kind were timed): the median response time of
    the latest ``TIMES_KEPT`` answers of the kind (skipped ones left out), or the kinds table's below
    ``MIN_TIMED``. Reads only the log entries after those read last time."""
    raw = conn.hget(keys.pool_targets(study_id), TIMES_FIELD)
    kept = json.loads(raw) if raw else {"after": "0-0", "counts": {}, "times": {}}
    batch = read_batch(conn, study_id, kept["after"], READ_CHUNK)
    for answer in batch.answers:
        if answer.kind in kinds and answer.response_ms is not None and not answer.skipped:
            kept["times"].setdefault(answer.kind, []).append(int(answer.response_ms))
            kept["counts"][answer.kind] = kept["counts"].get(answer.kind, 0) + 1
    kept["times"] = {kind: times[-TIMES_KEPT:] for kind, times in kept["times"].items()}
    kept["after"] = batch.last_id
    conn.hset(keys.pool_targets(study_id), TIMES_FIELD, json.dumps(kept))
    seconds, counts = {}, {}
    for kind in kinds:
        times, counts[kind] = kept["times"].get(kind, []), int(kept["counts"].get(kind, 0))
        seconds[kind] = (statistics.median(times) / 1000.0 if len(times) >= MIN_TIMED and statistics.median(times) > 0
                         else float(KINDS[kind].seconds))
    return seconds, counts


def set_split(conn: Redis, study_id: str, now: float | None = None) -> dict | None:
    """Let the pooled learner of a ``split: learner`` study set the question shares (``questions.store_shares``);
    returns the record stored (None: the study's shares are fixed)."""
    study = get_study(conn, study_id)
    config = study.config
    if config.split != "learner":
        return None
    label = split_learner(config.algorithms).label
    kinds = split_kinds(config.algorithms)
    cached = cached_study(study_id)
    learners = cached.learners if cached is not None and label in cached.learners else load_learners(conn, study)
    learner = wrapped_learner(learners[label].planner)
    seconds, timed = _measured_seconds(conn, study_id, kinds)
    said = learner.time_shares(seconds)
    time_shares = {k: float(said[k]) for k in kinds}  # the learner's own kind first
    evidence = learner.split_evidence(seconds)
    now = time.time() if now is None else now
    before = questions.split_in_force(conn, study_id, config)
    since = now
    if before is not None and round(100 * before["time_shares"][kinds[0]]) == round(100 * time_shares[kinds[0]]):
        since = before["since"]  # the share shown (whole percent) has not changed
    record = {"time_shares": time_shares, "seconds": seconds, "timed": timed, "measured": {
                  k: timed[k] >= MIN_TIMED for k in kinds},
              "phase": str(evidence["phase"]), "ratings": int(evidence["ratings"]),
              "triplets": int(evidence["triplets"]), "learner": label, "since": since, "at": now,
              "passes": 1 + (before or {}).get("passes", 0)}
    questions.store_shares(conn, study_id, question_shares(config, time_shares, seconds), record)
    return record
