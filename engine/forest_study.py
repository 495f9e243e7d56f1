"""A comparison forest as a study runs it: the forest, and the searches routing the items added to
the study after the forest was built down its trees (:class:`engine.comparison_tree.ForestRoute`).

The table entry of an algorithm that takes items added later (``Algorithm.grows``) gets its planner
wrapped in a :class:`ForestStudy` by :func:`engine.planners.make_planner`, so the worker drives it
as any other planner. Numpy only; must never import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from .comparison_tree import ComparisonForest, ForestRoute, forest_to_json
from .graph import NO_NEIGHBOR, NeighborGraph, Progress


class ForestStudy:
    """A built (or growing) :class:`ComparisonForest` plus one :class:`ForestRoute` per item added
    after it was built.

    Items ``0 .. forest.n_items - 1`` are the forest's; an item added later is routed once the forest
    is done (:meth:`add_items`), and counts among ``n_items`` from then on. ``next_questions`` asks
    the forest's questions first, then the searches'; ``observe``, ``forget`` and ``asked`` take
    ``(head, a, b[, winner])`` rows of either and hand each to the forest or the search of its head.
    """

    def __init__(self, forest: ComparisonForest, routes: Mapping[int, ForestRoute] | None = None) -> None:
        self.forest = forest
        #: item added after the forest was built -> its search down the trees
        self.routes: dict[int, ForestRoute] = dict(routes or {})

    @property
    def n_items(self) -> int:
        """The forest's items and the added items being routed."""
        return int(self.forest.n_items) + len(self.routes)

    def add_items(self, n_items: int) -> int:
        """Start routing the items up to ``n_items`` (the study's count) that have no search yet, once
        the forest is built (before that an added item waits). Returns how many searches started."""
        if not self.forest.done:
            return 0
        started = 0
        for item in range(int(self.forest.n_items), int(n_items)):
            if item not in self.routes:
                self.routes[item] = self.forest.route(item)
                started += 1
        return started

    # ------------------------------------------------------------------ the life cycle
    @property
    def done(self) -> bool:
        return bool(self.forest.done) and all(route.done for route in self.routes.values())

    def next_questions(self, budget: int) -> list[tuple[int, int, int]]:
        planned = list(self.forest.next_questions(budget))
        for route in self.routes.values():
            if len(planned) < budget and not route.done:
                planned.extend(route.next_questions(budget - len(planned)))
        return planned

    def _split(self, rows: Sequence[Sequence[Any]]) -> tuple[list, dict[int, list]]:
        n = int(self.forest.n_items)
        own, routed = [], {}
        for r in rows:
            head = int(r[0])
            if head < n:
                own.append(r)
            elif head in self.routes:
                routed.setdefault(head, []).append(r)
        return own, routed

    def asked(self, questions: Iterable[Sequence[int]]) -> np.ndarray:
        """Bool per ``(head, a, b)``: whether the forest or the search of its head asked it (answers to
        other triplets are no use: a rebuild grows other trees)."""
        rows = [tuple(int(x) for x in q[:3]) for q in questions]
        out = np.zeros(len(rows), bool)
        n = int(self.forest.n_items)
        own = [i for i, r in enumerate(rows) if r[0] < n]
        if own:
            out[own] = self.forest.asked([rows[i] for i in own])
        for head, route in self.routes.items():
            mine = [i for i, r in enumerate(rows) if r[0] == head]
            if mine:
                out[mine] = route.asked([rows[i] for i in mine])
        return out

    def observe(self, answers: Iterable[Sequence[int]]) -> None:
        """``(head, a, b, winner)`` rows the forest or a search asked (see :meth:`asked`)."""
        own, routed = self._split(list(answers))
        if own:
            self.forest.observe(own)
        for head, rows in routed.items():
            self.routes[head].observe(rows)

    def forget(self, questions: Iterable[Sequence[int]]) -> int:
        own, routed = self._split(list(questions))
        released = int(self.forest.forget(own)) if own else 0
        for head, rows in routed.items():
            released += int(self.routes[head].forget(rows))
        return released

    def progress(self) -> Progress:
        progress: Any = self.forest.progress()
        if self.routes:
            # answers, questions and done count the searches of the added items too (the contract's
            # meaning: every answer applied, nothing left to ask)
            routed = [route.progress() for route in self.routes.values()]
            progress = {**progress, "done": self.done,
                        "answers": progress["answers"] + sum(r["answers"] for r in routed),
                        "questions_issued": progress["questions_issued"] + sum(r["questions_issued"] for r in routed),
                        "added_items": len(self.routes),
                        "added_items_routed": sum(route.done for route in self.routes.values())}
        return progress

    def neighbor_graph(self, k: int = 1) -> NeighborGraph:
        """Most frequent leaf-mates; an added item's are the candidates its search ranked."""
        ng = self.forest.neighbor_graph(k=k)
        if not self.routes:
            return NeighborGraph.from_neighbors(ng.neighbors)
        neighbors = np.full((self.n_items, int(k)), NO_NEIGHBOR, np.int64)
        neighbors[: int(self.forest.n_items)] = ng.neighbors
        for item, route in self.routes.items():
            found = route.result().neighbors[:k]
            neighbors[item, : len(found)] = found
        return NeighborGraph.from_neighbors(neighbors)

    def result(self) -> Any:
        return self.forest.result()

    def to_json(self) -> dict:
        """The forest's JSON document (``engine.comparison_tree.forest_to_json``)."""
        return forest_to_json(self.forest)

    # ------------------------------------------------------------------ state
    def to_state(self) -> dict:
        return {"class": type(self).__name__, "forest": self.forest.to_state(),
                "routes": [route.to_state() for _, route in sorted(self.routes.items())]}

    @classmethod
    def from_state(cls, state: dict) -> ForestStudy:
        """A :class:`ForestStudy` state, or a bare :class:`ComparisonForest` state (no routes)."""
        if state.get("class") != cls.__name__:
            return cls(ComparisonForest.from_state(state))
        forest = ComparisonForest.from_state(state["forest"])
        return cls(forest, {int(r["item"]): ForestRoute.from_state(r, forest) for r in state["routes"]})
