"""A uniformly random triplet planner: the non-adaptive baseline every study can run.

It asks "is h more similar to a or to b?" for uniformly random distinct (h, a, b) and
learns, for every head h, how often each candidate won — a similarity estimate whose
row-wise argmax is an (uncertified) nearest-neighbour guess. Must never import Flask or Redis.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from .graph import NO_NEIGHBOR, NeighborGraph
from .utils import (
    RandomState,
    check_n_items,
    check_random_state,
    check_triplets,
    generator_state,
    planner_from_state,
)


def candidate_pairs(rng: np.random.Generator, n_items: int, head: int | np.ndarray,
                    size: int) -> tuple[np.ndarray, np.ndarray]:
    """``size`` uniformly random candidate pairs for ``head`` (one item, or an array of shape
    (size,), one head per row): arrays a, b of shape (size,) with a, b and the head distinct in
    every row (pairs may repeat). Draws a, then b, from ``rng``."""
    a = rng.integers(n_items - 1, size=size)
    a = a + (a >= head)
    b = rng.integers(n_items - 2, size=size)
    lo, hi = np.minimum(head, a), np.maximum(head, a)
    b = b + (b >= lo)
    b = b + (b >= hi)
    return a, b


@dataclass(frozen=True)
class TripletWinRates:
    """What random triplets learn.

    wins : ndarray of shape (n_items, n_items) — wins[h, x] = times x was judged closer to h.
    shown : ndarray of shape (n_items, n_items) — shown[h, x] = times x was a candidate for h.
    neighbors : ndarray of shape (n_items,) — argmax of the smoothed win rate, NO_NEIGHBOR if none.
    """

    wins: np.ndarray
    shown: np.ndarray
    neighbors: np.ndarray

    @property
    def win_rate(self) -> np.ndarray:
        """Win rate with a uniform prior (1 win in 2 showings), so unseen pairs sit at 0.5."""
        return (self.wins + 1.0) / (self.shown + 2.0)


class RandomTriplets:
    """Question planner asking uniformly random triplets.

    Parameters
    ----------
    n_items : int
    random_state : None, int or numpy Generator
    """

    VERSION = 1

    def __init__(self, n_items: int, random_state: RandomState = None) -> None:
        self.n_items = check_n_items(n_items)
        self.random_state = random_state
        self.rng_ = check_random_state(random_state)
        self.wins_ = np.zeros((self.n_items, self.n_items), dtype=np.int64)
        self.shown_ = np.zeros((self.n_items, self.n_items), dtype=np.int64)
        self.n_answers_ = 0
        self.n_planned_ = 0

    def next_questions(self, budget: int) -> list[tuple[int, int, int]]:
        budget = int(budget)
        if budget <= 0:
            return []
        # head uniform; candidates a uniformly random ordered pair of the other items
        heads = self.rng_.integers(self.n_items, size=budget)
        a, b = candidate_pairs(self.rng_, self.n_items, heads, budget)
        self.n_planned_ += budget
        return [(int(h), int(x), int(y)) for h, x, y in zip(heads, a, b, strict=True)]

    def observe(self, answers: Iterable[Sequence[int]]) -> None:
        arr = check_triplets(answers, self.n_items, "triplet answer", width=4)
        if not len(arr):
            return
        h, a, b, w = arr.T
        np.add.at(self.shown_, (h, a), 1)
        np.add.at(self.shown_, (h, b), 1)
        np.add.at(self.wins_, (h, w), 1)
        self.n_answers_ += len(arr)

    def forget(self, questions: Iterable[Sequence[int]]) -> None:
        """Questions that expired unanswered: nothing to release, every question is fresh."""

    @property
    def done(self) -> bool:
        """Never: random triplets have no stopping rule (the study's budget stops them)."""
        return False

    def neighbor_graph(self, k: int = 1) -> NeighborGraph:
        """Each head's k candidates of highest smoothed win rate among those it was shown with
        (-1 where fewer were shown); ``estimates`` 1 - win rate, ``samples`` times shown."""
        k = int(k)
        if k < 1:
            raise ValueError(f"k must be a positive integer, got {k}")
        rate = (self.wins_ + 1.0) / (self.shown_ + 2.0)
        rate[self.shown_ == 0] = -np.inf
        np.fill_diagonal(rate, -np.inf)
        # stable order by rate, ties to the smaller index (as argmax in result())
        order = np.argsort(-rate, axis=1, kind="stable")[:, :k]
        rows = np.arange(self.n_items)[:, None]
        seen = np.isfinite(rate[rows, order])
        neighbors = np.where(seen, order, NO_NEIGHBOR).astype(np.int64)
        if neighbors.shape[1] < k:
            pad = np.full((self.n_items, k - neighbors.shape[1]), NO_NEIGHBOR, np.int64)
            neighbors = np.concatenate([neighbors, pad], axis=1)
        safe = np.maximum(neighbors, 0)
        est = np.where(neighbors >= 0, 1.0 - rate[rows, safe], np.nan)
        samples = np.where(neighbors >= 0, self.shown_[rows, safe], 0)
        return NeighborGraph.from_neighbors(neighbors, estimates=est, samples=samples)

    def result(self) -> TripletWinRates:
        rate = (self.wins_ + 1.0) / (self.shown_ + 2.0)
        np.fill_diagonal(rate, -np.inf)
        neighbors = np.argmax(rate, axis=1).astype(np.int64)
        neighbors[self.shown_.sum(axis=1) == 0] = NO_NEIGHBOR
        return TripletWinRates(self.wins_.copy(), self.shown_.copy(), neighbors)

    def progress(self) -> dict:
        return {
            "answers": int(self.n_answers_),
            "questions_planned": int(self.n_planned_),
            "questions_issued": int(self.n_planned_),
            "done": False,
            "items_certified": 0,
            "items_with_answers": int(np.count_nonzero(self.shown_.sum(axis=1))),
        }

    def to_state(self) -> dict:
        return {
            "class": type(self).__name__,
            "version": self.VERSION,
            "n_items": self.n_items,
            "n_answers": int(self.n_answers_),
            "n_planned": int(self.n_planned_),
            "rng": generator_state(self.rng_),
            "wins": self.wins_.copy(),
            "shown": self.shown_.copy(),
        }

    @classmethod
    def from_state(cls, state: dict) -> RandomTriplets:
        planner = planner_from_state(cls, state, params=False)
        planner.wins_ = np.array(state["wins"], dtype=np.int64)
        planner.shown_ = np.array(state["shown"], dtype=np.int64)
        planner.n_answers_ = int(state["n_answers"])
        planner.n_planned_ = int(state["n_planned"])
        return planner
