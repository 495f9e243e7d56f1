"""Run a pair-asking planner (ANNTri, ANN, Random) as a triplet planner.

A pair (i, j) is asked as the triplet (i, j, k) "is i more like j or k?" with a uniformly random
third item k, and the answer is the distance sample 1.0 if k won else 0.0 for (i, j): its mean
is P(k closer to i than j), which grows with d(i, j), so the pair planners' bounds apply as is.
Numpy only; must never import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from .registry import restore_bare_planner
from .utils import (
    RandomState,
    check_random_state,
    check_state,
    check_triplets,
    generator_from_state,
    generator_state,
    take_one,
)

if TYPE_CHECKING:
    from typing import Any

    from numpy.typing import ArrayLike

    from .graph import NeighborGraph, Planner, Progress


#: A third item drawn from a distinct stream of the study seed (not the planner's own stream).
_THIRD_STREAM = 0x7A1


def draw_third(i: int, j: int, n_items: int, rng: np.random.Generator) -> int:
    """A uniformly random item other than ``i`` and ``j``."""
    k = int(rng.integers(n_items - 2))
    lo, hi = min(i, j), max(i, j)
    k += k >= lo
    k += k >= hi
    return k


def pair_sample(head: int, probe: int, winner: int) -> tuple[int, int, float]:
    """The distance sample of (head, probe) from a triplet asked with a random third item:
    1.0 (far) when the third item won, 0.0 (near) when ``probe`` won."""
    return (int(head), int(probe), 0.0 if winner == probe else 1.0)


def triplet_samples(head: int, a: int, b: int, winner: int) -> list[tuple[int, int, float]]:
    """Both distance samples of a triplet answer the adapter never issued: (head, a) with 1.0 if
    b won, and (head, b) with 1.0 if a won. Each is a "random third item" sample exactly when the
    triplets were themselves drawn uniformly (e.g. a log of random triplets); from a log of
    adaptively chosen triplets they are biased towards that planner's choices."""
    return [pair_sample(head, a, winner), pair_sample(head, b, winner)]


class PairTripletAdapter:
    """A pair planner asking triplets; see the module docstring.

    Parameters
    ----------
    planner : a pair planner (``next_questions`` -> ``(i, j)``, ``observe`` of ``(i, j, value)``).
    random_state : None, int or numpy Generator; draws the third items (saved in the state).

    ``observe`` takes ``(head, a, b, winner)`` rows in any order and batch size: an issued
    question ``(i, j, k)`` gives one sample of (i, j) (also when asked with the candidates
    swapped); any other triplet gives the two samples of :func:`triplet_samples`.
    """

    VERSION = 1

    def __init__(self, planner: Planner, random_state: RandomState = None) -> None:
        self.planner = planner
        self.n_items = int(planner.n_items)
        if isinstance(random_state, numbers.Integral):
            random_state = np.random.default_rng([int(random_state), _THIRD_STREAM])
        self.random_state = random_state
        self.rng_ = check_random_state(random_state)
        self.issued_: dict[tuple[int, int, int], int] = {}
        self.n_issued_ = 0
        self.n_answers_ = 0

    @property
    def k(self) -> int:
        return int(self.planner.k)

    @property
    def done(self) -> bool:
        return bool(self.planner.done)

    def next_questions(self, budget: int) -> list[tuple[int, int, int]]:
        return self._asked_with_thirds(self.planner.next_questions(budget))

    def _take(self, h: int, a: int, b: int) -> int | None:
        """The probe of an issued (h, a, b) or (h, b, a), releasing it; None if never issued."""
        for q, probe in (((h, a, b), a), ((h, b, a), b)):
            if take_one(self.issued_, q):
                return probe
        return None

    def observe(self, answers: Iterable[Sequence[int]]) -> None:
        rows = check_triplets(answers, self.n_items, "triplet answer", width=4).tolist()
        samples = []
        for h, a, b, w in rows:
            probe = self._take(h, a, b)
            samples.extend([pair_sample(h, probe, w)] if probe is not None else triplet_samples(h, a, b, w))
        if samples:
            self.planner.observe(samples)
        self.n_answers_ += len(rows)

    def forget(self, questions: Iterable[Sequence[int]]) -> None:
        """Release issued triplets that will never be answered (unknown ones are ignored)."""
        pairs = []
        for q in questions:
            h, a, b = (int(x) for x in q)
            probe = self._take(h, a, b)
            if probe is not None:
                pairs.append((h, probe))
        if pairs:
            self.planner.forget(pairs)

    def result(self) -> Any:
        return self.planner.result()

    def neighbor_graph(self, k: int = 1) -> NeighborGraph:
        return self.planner.neighbor_graph(k)

    def progress(self) -> Progress:
        inner = self.planner.progress()
        return {**inner, "answers": int(self.n_answers_), "questions_issued": int(self.n_issued_),
                "done": self.done, "samples": int(inner["answers"])}

    # -- the rounds of a pair planner that works in rounds (engine.graph.RoundPlanner), in triplets
    @property
    def window(self) -> int:
        return int(self.planner.window)

    @window.setter
    def window(self, value: int) -> None:
        self.planner.window = value

    def settle(self) -> None:
        self.planner.settle()

    def stale(self, heads: ArrayLike) -> np.ndarray:
        return self.planner.stale(heads)

    def closed(self, heads: ArrayLike) -> np.ndarray:
        return self.planner.closed(heads)

    def repeat_questions(self, budget: int) -> list[tuple[int, int, int]]:
        """The pair planner's repeats, each asked with a third item drawn as for a new question."""
        return self._asked_with_thirds(self.planner.repeat_questions(budget))

    def _asked_with_thirds(self, pairs) -> list[tuple[int, int, int]]:
        """The pair planner's pairs (i, j) as triplets (i, j, k), k drawn for each, counted as issued."""
        out = []
        for i, j in pairs:
            q = (int(i), int(j), draw_third(int(i), int(j), self.n_items, self.rng_))
            self.issued_[q] = self.issued_.get(q, 0) + 1
            out.append(q)
        self.n_issued_ += len(out)
        return out

    def to_state(self) -> dict:
        issued = np.array([(*q, c) for q, c in sorted(self.issued_.items())], dtype=np.int64).reshape(-1, 4)
        return {"class": type(self).__name__, "version": self.VERSION, "planner": self.planner.to_state(),
                "rng": generator_state(self.rng_), "issued": issued,
                "n_issued": int(self.n_issued_), "n_answers": int(self.n_answers_)}

    @classmethod
    def from_state(cls, state: dict) -> PairTripletAdapter:
        check_state(state, cls.__name__, (cls.VERSION,))
        adapter = cls(restore_bare_planner(state["planner"]))
        adapter.rng_ = generator_from_state(state["rng"])
        issued = np.asarray(state["issued"], dtype=np.int64).reshape(-1, 4)
        adapter.issued_ = {(int(h), int(a), int(b)): int(c) for h, a, b, c in issued.tolist()}
        adapter.n_issued_ = int(state["n_issued"])
        adapter.n_answers_ = int(state["n_answers"])
        return adapter
