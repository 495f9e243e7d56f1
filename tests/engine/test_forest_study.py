"""engine.forest_study: a comparison forest with the searches routing items added after it was built, as
a study's worker drives it (one planner: questions of the forest and of the searches, answers handed to
the one that asked, one state)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from engine.comparison_tree import ComparisonForest
from engine.forest_study import ForestStudy
from engine.graph import NO_NEIGHBOR, NeighborGraph, Planner
from engine.planners import make_planner, restore_planner

# a line of 12 points in pairs: 0-1, 2-3, ...; items 10 and 11 are added after the forest is built
POSITIONS = np.array([0.0, 0.1, 1.0, 1.1, 2.0, 2.1, 3.0, 3.1, 4.0, 4.1, 0.05, 3.05])


def answer(questions):
    out = []
    for h, a, b in questions:
        closer = a if abs(POSITIONS[h] - POSITIONS[a]) <= abs(POSITIONS[h] - POSITIONS[b]) else b
        out.append((h, a, b, closer))
    return out


def run(study: ForestStudy, rounds: int = 200) -> int:
    given = 0
    for _ in range(rounds):
        questions = study.next_questions(50)
        if not questions:
            break
        study.observe(answer(questions))
        given += len(questions)
    return given


def built(n_trees: int = 4) -> ForestStudy:
    study = ForestStudy(ComparisonForest(10, n_trees=n_trees, random_state=0))
    run(study)
    assert study.forest.done and study.done
    return study


def test_the_table_wraps_a_forest_that_takes_added_items():
    study = make_planner("comparison_forest", 10, random_state=0, n_trees=3)
    assert isinstance(study, ForestStudy) and isinstance(study, Planner)
    assert type(restore_planner(study.to_state())) is ForestStudy
    # a bare forest state (no routes) restores as a study too
    assert type(restore_planner(study.forest.to_state())) is ForestStudy


def test_added_items_wait_for_the_built_forest_then_are_routed_to_their_neighbours():
    study = ForestStudy(ComparisonForest(10, n_trees=4, random_state=0))
    assert study.add_items(12) == 0 and study.n_items == 10  # nothing is routed down unbuilt trees
    run(study)
    assert study.add_items(12) == 2 and study.add_items(12) == 0 and study.n_items == 12
    assert not study.done and study.progress()["done"] is False  # the searches still ask
    run(study)
    assert study.done
    progress = study.progress()
    assert progress["added_items"] == progress["added_items_routed"] == 2 and progress["done"] is True
    graph = study.neighbor_graph(1)
    assert isinstance(graph, NeighborGraph) and graph.neighbors.shape == (12, 1)
    assert graph.neighbors[10, 0] in (0, 1) and graph.neighbors[11, 0] in (6, 7)


def test_answers_go_to_whoever_asked_and_others_are_refused():
    study = built()
    study.add_items(12)
    questions = study.next_questions(50)
    heads = {q[0] for q in questions}
    assert heads <= {10, 11}  # the forest is done: only the searches ask
    asked = study.asked(questions + [(10, 2, 3), (11, 0, 1)])
    assert asked[: len(questions)].all() and not asked[len(questions):].any()
    assert study.forget(questions[:1]) == 1  # released to be asked again
    before = study.progress()["answers"]
    study.observe(answer(questions[1:]))
    assert study.progress()["answers"] == before + len(questions) - 1


def test_a_study_with_routes_round_trips_through_its_state():
    study = built()
    study.add_items(12)
    study.observe(answer(study.next_questions(3)))
    state = study.to_state()
    assert state["class"] == "ForestStudy" and len(state["routes"]) == 2
    again = ForestStudy.from_state(json.loads(json.dumps(state, default=lambda a: np.asarray(a).tolist())))
    assert again.n_items == study.n_items
    assert json.dumps(again.progress(), sort_keys=True) == json.dumps(study.progress(), sort_keys=True)
    assert again.next_questions(20) == study.next_questions(20)
    np.testing.assert_array_equal(again.neighbor_graph(2).neighbors, study.neighbor_graph(2).neighbors)


@pytest.mark.parametrize("k", [1, 3])
def test_an_unbuilt_forest_has_no_neighbours_yet(k):
    study = ForestStudy(ComparisonForest(10, n_trees=2, random_state=1))
    graph = study.neighbor_graph(k)
    assert graph.neighbors.shape == (10, k) and (graph.neighbors == NO_NEIGHBOR).all()
