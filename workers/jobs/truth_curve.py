"""Each learner's error curve against a known truth: for a study whose items have positions (a
simulated study), the share of items whose learned nearest neighbour is wrong, against the answers
applied. Written with every dashboard summary (``workers.jobs.summary``); stored by
``workers.store.truth``. Must never import Flask.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine import oracles
from workers.store import keys
from workers.store import truth as known_truth
from workers.store.studies import Study, get_items

if TYPE_CHECKING:
    import redis
    from redis import Redis

    from workers.jobs.learners import Learner


@dataclass(frozen=True)
class KnownTruth:
    """The items' positions and each one's distance to its true nearest neighbour (both None: not
    every item has a position), and whether they were computed in this pass (then it saves them)."""

    points: list | None
    nearest: list | None
    computed: bool


def known_truth_of(conn: Redis, study: Study) -> KnownTruth:
    """The study's known truth as stored, computed from the items' positions when none is stored for
    its current number of items."""
    fresh, points, nearest = known_truth.stored_truth(conn.hget(keys.engine_stats(study.id), known_truth.TRUTH_FIELD),
                                                      study.n_items)
    if fresh:
        return KnownTruth(points, nearest, computed=False)
    items = get_items(conn, study.id)
    dims = {len(item.position) if item.position else 0 for item in items}
    if not (2 <= len(items) <= known_truth.MAX_TRUTH_ITEMS and len(dims) == 1 and 0 not in dims):
        return KnownTruth(None, None, computed=True)
    points = [list(item.position) for item in items]
    return KnownTruth(points, oracles.true_kth_distances(points=points).tolist(), computed=True)


def _answers_applied(progress: dict | None, fallback: int) -> int:
    """Answers the learner has applied (what its current neighbours rest on), from its progress
    (``answers``, :class:`engine.graph.Progress`); ``fallback`` for a summary without one."""
    return int(progress["answers"]) if progress else fallback


def record_truth_error(pipe: redis.client.Pipeline, study: Study, learners: dict[str, Learner],
                       summaries: dict[str, dict], counters: dict, truth: KnownTruth) -> None:
    """Queue on ``pipe`` (a MULTI) the truth if it was computed, and for each learner that yields a graph
    the point (answers applied, share of items whose neighbour in ``summaries`` is wrong) of its error
    curve. Written with every summary, whether or not a dashboard is open. ``counters``: ``keys.counters``."""
    if truth.computed:
        known_truth.save_truth(pipe, study.id, study.n_items, truth.points, truth.nearest)
    if truth.points is None:
        return
    for label, learner in learners.items():
        summary = summaries.get(label) or {}
        if summary.get("neighbors") is None or not learner.entry.yields_graph:
            continue
        applied = _answers_applied(summary.get("progress"), int(counters.get(keys.counter_field("answers", label), 0)))
        n = len(truth.points)  # a learner not yet grown to the study's items: the others have no neighbour
        neighbors = list(summary["neighbors"][:n]) + [oracles.NO_NEIGHBOR] * (n - len(summary["neighbors"]))
        wrong = oracles.neighbor_error(neighbors, points=truth.points, kth=truth.nearest)
        known_truth.append_error_point(pipe, study.id, label, applied, wrong)
