"""Benchmark 5: engine speed. Seconds to plan + observe a full forest (default 100 trees,
n = 2000, noise-free triplets on random points in R^5), excluding the simulated rater's own
time, for several question batch sizes; also the time of neighbor_graph() and of to_state().

Usage: python benchmarks/comparison_forest_speed.py [--quick] [--n 2000] [--trees 100]
"""
from __future__ import annotations

import time

import numpy as np
from comparison_forest_common import Timer, parse_args

from engine.comparison_tree import ComparisonForest
from simulation.oracles import TripletOracle


def main():
    args = parse_args(__doc__, n=2000, trees=100)
    n, m = (500, 20) if args.quick else (args.n, args.trees)
    X = np.random.default_rng(0).normal(size=(n, 5))
    oracle = TripletOracle.from_points(X)
    print(f"n = {n}, M = {m} trees, n0 = 1, redundancy 1")
    print(f"{'batch':>8s} {'rounds':>7s} {'triplets':>9s} {'plan s':>7s} {'observe s':>9s} {'engine s':>9s} "
          f"{'rater s':>8s} {'graph s':>8s} {'state s':>8s}")
    for batch in (1_000_000, 50_000, 5_000):
        forest = ComparisonForest(n, n_trees=m, random_state=0)
        plan = observe = rater = 0.0
        rounds = triplets = 0
        while not forest.done:
            t0 = time.perf_counter()
            qs = forest.next_questions(batch)
            t1 = time.perf_counter()
            answers = oracle.answer(qs)
            t2 = time.perf_counter()
            forest.observe(answers)
            t3 = time.perf_counter()
            plan, rater, observe = plan + t1 - t0, rater + t2 - t1, observe + t3 - t2
            rounds += 1
            triplets += len(qs)
        with Timer() as graph:
            forest.neighbor_graph()
        with Timer() as state:
            forest.to_state()
        print(f"{batch:8d} {rounds:7d} {triplets:9d} {plan:7.2f} {observe:9.2f} {plan + observe:9.2f} "
              f"{rater:8.2f} {graph.seconds:8.2f} {state.seconds:8.2f}")


if __name__ == "__main__":
    main()
