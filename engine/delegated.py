"""Triplets chosen by another learner of the same study: a planner that asks, as its own questions, the triplets
the study's pooled rating learner proposes (``PooledRatings.next_triplets``), so that in a study asking ratings
and triplets of the same items the one model learning from both also chooses both.

It learns nothing itself: its answers teach the learner that chose them (the platform passes every other
learner's answers to a learner that takes triplets, ``Algorithm.takes_triplets``), whose graph is the study's
result; its own graph has no neighbour (:data:`engine.graph.NO_NEIGHBOR` throughout). The platform links it to
that learner before each planning (``source``); unlinked it asks nothing. Must never import Flask or Redis.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Self

import numpy as np

from .graph import NO_NEIGHBOR, NeighborGraph
from .utils import RandomState, check_n_items, check_state


class DelegatedTriplets:
    """Asks the triplets ``source.next_triplets(budget)`` proposes (``source``: the learner that chooses them,
    set by the platform before each planning; None: nothing to ask). Counts the questions handed out and the
    answers it was given; holds no model."""

    VERSION = 1

    def __init__(self, n_items: int, random_state: RandomState = None) -> None:
        self.n_items = check_n_items(n_items)
        self.random_state = random_state  # (unused: the source draws the triplets from its own stream)
        #: the learner choosing the triplets (``next_triplets(budget)``), linked by the platform
        self.source: Any = None
        self.n_issued_ = 0
        self.n_answers_ = 0

    @property
    def done(self) -> bool:
        return False

    def next_questions(self, budget: int) -> list[tuple[int, int, int]]:
        """Up to ``budget`` triplets ``(head, a, b)`` of the linked learner's choosing ([] while unlinked)."""
        budget = int(budget)
        if budget <= 0 or self.source is None:
            return []
        out = [(int(h), int(a), int(b)) for h, a, b in self.source.next_triplets(budget)][:budget]
        self.n_issued_ += len(out)
        return out

    def observe(self, answers: Sequence[Sequence[Any]]) -> None:
        """Count ``(head, a, b, winner)`` answers (the learner that chose them learns from them)."""
        for row in answers:
            if len(row) != 4 or int(row[3]) not in (int(row[1]), int(row[2])):
                raise ValueError(f"a triplet answer is (head, a, b, winner), got {row!r}")
            if not all(0 <= int(x) < self.n_items for x in row[:3]):
                raise ValueError(f"a triplet answer needs items in [0, {self.n_items}), got {row!r}")
        self.n_answers_ += len(answers)

    def forget(self, questions: Sequence[Sequence[Any]]) -> int:
        return 0

    def progress(self) -> dict:
        return {"answers": int(self.n_answers_), "questions_issued": int(self.n_issued_), "done": False,
                "items_certified": 0, "n_items": self.n_items}

    def neighbor_graph(self, k: int = 1) -> NeighborGraph:
        """No neighbour for any item: the graph is the learner's that chose the triplets."""
        return NeighborGraph.from_neighbors(np.full((self.n_items, int(k)), NO_NEIGHBOR, np.int64))

    def result(self) -> NeighborGraph:
        return self.neighbor_graph(1)

    def to_state(self) -> dict:
        return {"class": type(self).__name__, "version": self.VERSION, "n_items": self.n_items,
                "n_issued": int(self.n_issued_), "n_answers": int(self.n_answers_)}

    @classmethod
    def from_state(cls, state: dict) -> Self:
        check_state(state, cls.__name__, (cls.VERSION,))
        planner = cls(int(state["n_items"]))
        planner.n_issued_, planner.n_answers_ = int(state["n_issued"]), int(state["n_answers"])
        return planner
