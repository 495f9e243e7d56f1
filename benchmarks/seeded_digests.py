"""Seeded digests of every learner of the table: for a refactoring that must change no behaviour.

Each learner asking each of its question kinds is driven the same seeded way (40 items of random
3-D points, 15 calls of 40 questions answered by the kind's simulated rater); the table prints a
digest of its neighbour graph (neighbours and estimates, k = 2), of its state and of the graph of
the planner restored from that state. Run it on two checkouts (``PYTHONPATH=<checkout>``) and
compare the two tables: equal digests, same behaviour::

    python benchmarks/seeded_digests.py
"""
from __future__ import annotations

import hashlib
import json

import numpy as np

from engine.kinds import get_kind
from engine.planners import make_planner, restore_planner
from simulation.oracles import TripletOracle

CASES = (("duels", "triplet"), ("random_triplets", "triplet"), ("embedding", "triplet"),
         ("active_embedding", "triplet"), ("comparison_forest", "triplet"), ("anntri", "triplet"),
         ("ann", "triplet"), ("duels", "rank"), ("duels", "odd_one_out"))


def digest(value: object) -> str:
    """16 hex digits of a SHA-256 over nested dicts, lists and arrays (dtype included)."""
    h = hashlib.sha256()

    def walk(o: object) -> None:
        if isinstance(o, dict):
            for key in sorted(o):
                h.update(str(key).encode())
                walk(o[key])
        elif isinstance(o, (list, tuple)):
            for x in o:
                walk(x)
        elif isinstance(o, np.ndarray):
            h.update(np.ascontiguousarray(o).tobytes())
            h.update(str(o.dtype).encode())
        else:
            h.update(repr(o).encode())

    walk(value)
    return h.hexdigest()[:16]


def _jsonable(a: object) -> object:
    return a.tolist() if isinstance(a, np.ndarray) else a.item() if isinstance(a, np.generic) else str(a)


def main() -> None:
    n = 40
    X = np.random.default_rng(0).random((n, 3))
    D = np.linalg.norm(X[:, None] - X[None], axis=2)
    print(f"{'learner':18s} {'kind':12s} {'graph':16s} {'estimates':16s} {'state':16s} {'restored graph':16s}")
    for name, kind in CASES:
        planner = make_planner(name, n, question_kind=kind, random_state=1)
        oracle = (TripletOracle.from_points(X, random_state=2) if kind == "triplet" else
                  get_kind(kind).simulated_rater(D, 0.05, 0.05, {"n_reference": 8, "n_select": 2}, 2))
        for _ in range(15):
            questions = planner.next_questions(40)
            if not questions:
                break
            planner.observe(oracle.answer(questions))
        state = planner.to_state()
        again = restore_planner(json.loads(json.dumps(state, default=_jsonable)))
        graph = planner.neighbor_graph(2)
        print(f"{name:18s} {kind:12s} {digest(graph.neighbors)} {digest(np.nan_to_num(graph.estimates, nan=-9))} "
              f"{digest(state)} {digest(again.neighbor_graph(2).neighbors)}")


if __name__ == "__main__":
    main()
