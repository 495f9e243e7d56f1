"""The shared engine helpers: sorted code tables, the state envelope, forest documents."""
import json

import numpy as np
import pytest

from engine.utils import (
    CodeTable,
    StateMixin,
    check_state,
    check_triplets,
    child_keys,
    find_sorted,
    lowest_per_code,
    mix64,
    node_keys,
    read_forest_doc,
    unit_floats,
)


class _Table(CodeTable):
    COLUMNS = {"votes": (np.int64, (2,), 0), "asked": (bool, (), False)}
    WHAT = "test"


def test_find_sorted_reports_positions_and_hits():
    pos, found = find_sorted(np.array([2, 5, 9]), np.array([5, 1, 9, 10]))
    assert pos.tolist() == [1, 0, 2, 3]
    assert found.tolist() == [True, False, True, False]
    _, found = find_sorted(np.empty(0, np.int64), np.array([3]))
    assert found.tolist() == [False]


def test_lowest_per_code_keeps_the_lowest_priority_of_each_code():
    codes, priority = lowest_per_code(np.array([7, 3, 7, 3, 5]), np.array([4, 2, 1, 9, 0]))
    assert codes.tolist() == [3, 5, 7]
    assert priority.tolist() == [2, 0, 1]


def test_code_table_inserts_in_order_and_numbers_rows_by_arrival():
    table = _Table()
    table.insert(np.array([10, 30]), np.array([5, 1]))
    table.insert(np.array([20]))
    assert table.codes.tolist() == [10, 20, 30]
    assert table.seq.tolist() == [0, 2, 1]
    assert table.priority.tolist() == [5, 0, 1]
    assert table.votes.shape == (3, 2) and not table.votes.any() and not table.asked.any()
    assert table.rows_of(np.array([20, 40])).tolist() == [1, 3]
    assert table.by_urgency(np.arange(4)).tolist() == [1, 3, 2, 0]  # priority 0, 0 (older first), 1, 5
    table.drop(np.array([0, 2]))
    assert table.codes.tolist() == [20, 40] and table.votes.shape == (2, 2)


def test_code_table_state_round_trips_and_rejects_ragged_columns():
    table = _Table()
    table.insert(np.array([4, 8, 15]), np.array([3, 2, 1]))
    table.votes[1] = [2, 1]
    state = json.loads(json.dumps({k: v.tolist() if isinstance(v, np.ndarray) else v
                                   for k, v in table.to_state("t_", "live_").items()}))
    assert set(state) == {"t_live_codes", "t_live_votes", "t_live_asked", "t_live_priority", "t_live_seq", "t_next_seq"}
    copy = _Table.from_state(state, "t_", "live_")
    for name in ("codes", "votes", "asked", "priority", "seq"):
        assert np.array_equal(getattr(copy, name), getattr(table, name))
        assert getattr(copy, name).dtype == getattr(table, name).dtype
    assert copy.next_seq == 3
    with pytest.raises(ValueError, match="inconsistent test table"):
        _Table.from_state({**state, "t_live_seq": [0, 1]}, "t_", "live_")


def test_check_state_names_the_class_or_the_version_and_reads_older_versions():
    assert check_state({"class": "A", "version": 1}, "A", (1, 2)) == 1
    with pytest.raises(ValueError, match="^state is of B v1, not A v1$"):
        check_state({"class": "B", "version": 1}, "A", (1,))
    with pytest.raises(ValueError, match="^state is of A v3, not A v1 or v2$"):
        check_state({"class": "A", "version": 3}, "A", (1, 2))
    with pytest.raises(ValueError, match="^state is of list, not A v1$"):
        check_state([1], "A", (1,))


@pytest.mark.parametrize("name,kind", [("duels", "triplet"), ("random_triplets", "triplet"), ("embedding", "triplet"),
                                       ("active_embedding", "triplet"), ("anntri", "triplet"), ("duels", "rank"),
                                       ("duels", "odd_one_out"), ("comparison_forest", "triplet")])
def test_every_planner_refuses_another_class_or_version_in_the_same_words(name, kind):
    """Planners, their wrappers (pair adapter, screens) and the forest check a saved state with check_state."""
    from engine.planners import make_planner

    planner = make_planner(name, 12, question_kind=kind, random_state=0)
    planner = getattr(planner, "forest", planner)  # a forest study's forest carries the version
    cls, state = type(planner), planner.to_state()
    want = f"not {cls.__name__} v{state['version']}$"
    with pytest.raises(ValueError, match=rf"^state is of {cls.__name__} v{state['version'] + 1}, {want}"):
        cls.from_state({**state, "version": state["version"] + 1})
    with pytest.raises(ValueError, match=rf"^state is of ANNTri v{state['version']}, {want}"):
        cls.from_state({**state, "class": "ANNTri"})
    assert type(cls.from_state(state)) is cls


class _Estimator(StateMixin):
    STATE_VERSIONS = (1, 2)
    _FITTED_ATTRIBUTE = "weights_"

    def __init__(self, size=2):
        self.size = size

    def _params(self):
        return {"size": int(self.size)}

    def _check_params(self):
        if self.size < 1:
            raise ValueError("size must be >= 1")

    def _fitted_state(self):
        return {"weights": self.weights_.tolist()}

    def _load_fitted(self, state):
        self.weights_ = np.asarray(state["weights"], np.float64)


def test_state_mixin_round_trips_unfitted_and_fitted_estimators():
    state = _Estimator(3).to_state()
    assert state == {"class": "_Estimator", "version": 2, "params": {"size": 3}, "fitted": False}
    assert not hasattr(_Estimator.from_state(state), "weights_")
    model = _Estimator(3)
    model.weights_ = np.array([0.5, 1.5, 2.5])
    copy = _Estimator.from_state(json.loads(json.dumps(model.to_state())))
    assert copy.size == 3 and np.array_equal(copy.weights_, model.weights_)
    older = {**model.to_state(), "version": 1}
    assert np.array_equal(_Estimator.from_state(older).weights_, model.weights_)
    with pytest.raises(ValueError, match="size"):
        _Estimator.from_state({**state, "params": {"size": 0}})


def test_read_forest_doc_numbers_roots_first_and_recomputes_keys():
    trees = [
        {"seed": "11", "nodes": [
            {"id": 0, "parent": None, "depth": 0, "status": "split", "children": [1, 2]},
            {"id": 1, "parent": 0, "depth": 1, "status": "leaf", "members": [0, 2]},
            {"id": 2, "parent": 0, "depth": 1, "status": "leaf", "children": None, "members": [1]},
        ]},
        {"seed": "12", "nodes": [{"id": 0, "parent": None, "depth": 0, "status": "leaf", "members": [0, 1, 2]}]},
    ]
    nodes, arrays = read_forest_doc(trees, 3, ("split", "leaf"))
    assert [g for g, _ in nodes] == [0, 2, 3, 1]
    assert arrays["node_tree"].tolist() == [0, 1, 0, 0]
    assert arrays["node_parent"].tolist() == [-1, -1, 0, 0]
    assert arrays["node_children"].tolist() == [[2, 3], [-1, -1], [-1, -1], [-1, -1]]
    assert arrays["item_node"].tolist() == [[2, 3, 2], [1, 1, 1]]
    root = mix64(np.array([11, 12], np.uint64))
    assert arrays["node_key"][:2].tolist() == root.tolist()
    assert arrays["node_key"][2] == child_keys(root[:1], 0)[0]
    assert arrays["node_key"][3] == child_keys(root[:1], 1)[0]
    assert np.array_equal(node_keys(arrays["tree_seeds"], arrays["node_depth"], arrays["node_children"]),
                          arrays["node_key"])
    with pytest.raises(ValueError, match="one node per tree"):
        read_forest_doc([{**trees[1], "nodes": [{**trees[1]["nodes"][0], "members": [0, 1]}]}], 3, ("split", "leaf"))


def test_unit_floats_lie_in_the_unit_interval():
    u = unit_floats(np.array([0, 2**64 - 1, 2**63], np.uint64))
    assert u.tolist() == [0.0, 1.0 - 2.0**-53, 0.5]


@pytest.mark.parametrize("rows,kwargs,words", [
    ([(0, 1)], {}, r"triplets must be rows \(head, a, b\) of item indices, got shape \(1, 2\)"),
    ([(0, 1, 2)], {"width": 4}, r"rows \(head, a, b, winner\)"),
    ([(0, 1), (0, 1, 2)], {}, "must be rows"),
    ([(0, 1, 2.5)], {}, r"triplet \(0.0, 1.0, 2.5\): item indices must be whole numbers"),
    ([("a", "b", "c")], {}, "whole numbers"),
    ([(0, 1, 2), (0, 1, 10)], {}, r"triplet \(0, 1, 10\): item indices must lie in 0..9"),
    ([(-1, 1, 2)], {}, "must lie in 0..9"),
    ([(0, 1, 2), (3, 3, 4)], {}, r"triplet \(3, 3, 4\) needs three different items"),
    ([(3, 4, 4)], {}, "three different items"),
    ([(0, 1, 2, 3)], {"width": 4}, r"\(0, 1, 2, 3\): the winner must be one of its two candidates"),
    ([(0, 1, 2, 1)], {"width": 4, "head_range": (5, 6)}, "the head 5..5"),
])
def test_check_triplets_names_the_first_bad_row(rows, kwargs, words):
    with pytest.raises(ValueError, match=words):
        check_triplets(rows, 10, **kwargs)


def test_check_triplets_gives_int64_rows_of_good_input():
    got = check_triplets([(0, 1, 2, 2), (np.int32(5), 4, 3, 4)], 10, "answer", width=4)
    assert got.dtype == np.int64 and got.tolist() == [[0, 1, 2, 2], [5, 4, 3, 4]]
    assert check_triplets(np.array([[0.0, 1.0, 2.0]]), 3).tolist() == [[0, 1, 2]]
    assert check_triplets([], 3, width=4).shape == (0, 4)
    assert check_triplets(iter([(7, 1, 2)]), 10, head_range=(7, 8)).tolist() == [[7, 1, 2]]
