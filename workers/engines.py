"""Which engine planner a study runs, and the translation between log rows and engine tuples.

This is the one place that knows both the platform's question/answer documents and the
engine's index tuples. Must never import Flask.
"""
from __future__ import annotations

from engine.random_triplets import RandomTriplets

from .answers import Answer
from .config import StudyConfig
from .questions import triplet_question

PLANNERS = {"random": RandomTriplets}


def new_planner(config: StudyConfig, n_items: int):
    return PLANNERS[config.algorithm](n_items, random_state=config.random_state)


def planner_from_state(state: dict):
    for cls in PLANNERS.values():
        if state.get("class") == cls.__name__:
            return cls.from_state(state)
    raise ValueError(f"no planner can restore a state of class {state.get('class')!r}")


def engine_answers(answers: list[Answer]) -> list[tuple[int, int, int, int]]:
    return [(a.head, a.a, a.b, a.choice) for a in answers if a.kind == "triplet"]


def engine_questions(questions: list[dict]) -> list[tuple[int, int, int]]:
    return [(q["head"], *q["candidates"]) for q in questions if q.get("kind") == "triplet" and "head" in q]


def pool_questions(config: StudyConfig, planned) -> list[dict]:
    return [triplet_question(h, a, b, algorithm=config.algorithm) for h, a, b in planned]


def summary(planner) -> dict:
    """What the dashboard shows of a planner: its progress and each item's current nearest neighbour."""
    neighbors = planner.result().neighbors
    first = neighbors.reshape(len(neighbors), -1)[:, 0]
    return {"progress": planner.progress(), "neighbors": [int(x) for x in first]}
