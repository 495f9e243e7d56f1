"""The one nearest-neighbour graph type every learner returns, and the planner contract.

Every algorithm of the table in :mod:`engine.registry` yields a :class:`NeighborGraph` from
``planner.neighbor_graph(k)``, and follows :class:`Planner`. Numpy only; must never import
Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike

#: ``neighbors`` entry of an item with no neighbour yet (no evidence at all).
NO_NEIGHBOR = -1

#: Keys every planner's ``progress()`` has (learners add their own beside them):
#: ``answers`` answers applied, ``questions_issued`` questions handed out so far,
#: ``done`` nothing left to ask, ``items_certified`` items whose neighbour is certain
#: (confidence bounds; 0 for learners without a certificate).
PROGRESS_KEYS = ("answers", "questions_issued", "done", "items_certified")


@dataclass(frozen=True)
class NeighborGraph:
    """A k-NN graph with its certainty. All arrays have shape (n_items, k) unless noted.

    ``neighbors`` int item indices (closest first), :data:`NO_NEIGHBOR` where an item has none
    yet; ``certified`` bool of shape (n_items,); ``estimates`` the learner's distance-like score
    of each edge (smaller = closer; NaN where the learner has none); ``lower``/``upper`` its
    confidence bounds (NaN where none); ``samples`` the number of answers behind each edge.
    """

    neighbors: np.ndarray
    certified: np.ndarray
    estimates: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    samples: np.ndarray

    @classmethod
    def from_neighbors(cls, neighbors: ArrayLike, estimates: ArrayLike | None = None, samples: ArrayLike | None = None,
                       certified: ArrayLike | None = None) -> NeighborGraph:
        """A graph with only what a learner without bounds knows (NaN bounds)."""
        nb = np.asarray(neighbors, dtype=np.int64)
        if nb.ndim == 1:
            nb = nb[:, None]
        nan = np.full(nb.shape, np.nan)
        est = nan.copy() if estimates is None else np.asarray(estimates, dtype=np.float64).reshape(nb.shape)
        est = np.where(nb == NO_NEIGHBOR, np.nan, est)
        cnt = np.zeros(nb.shape, np.int64) if samples is None else np.asarray(samples, np.int64).reshape(nb.shape)
        cert = np.zeros(len(nb), bool) if certified is None else np.asarray(certified, bool)
        return cls(nb, cert, est, nan, nan.copy(), cnt)


@runtime_checkable
class Planner(Protocol):
    """The life cycle of every question planner (the shape the worker and the benchmarks drive).

    ``next_questions(budget)`` returns at most ``budget`` questions (tuples of item indices: a
    triplet ``(head, a, b)`` "is head more like a or b?", or a pair ``(i, j)`` for pair-asking
    planners) and counts them as pending; ``observe(rows)`` applies answers in any order and
    batch size; ``forget(questions)`` releases questions that will never be answered;
    ``to_state()`` / ``from_state(state)`` round-trip through plain arrays + JSON scalars.
    """

    n_items: int

    def next_questions(self, budget: int) -> list[tuple[int, ...]]: ...

    def observe(self, answers: Sequence[Sequence[Any]]) -> None: ...

    def forget(self, questions: Sequence[Sequence[int]]) -> Any: ...

    def progress(self) -> dict: ...

    def to_state(self) -> dict: ...
