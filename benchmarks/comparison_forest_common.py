"""Shared helpers for the comparison-forest benchmarks: build a forest and route held-out items
with a simulated rater (simulation.oracles.TripletOracle), counting the triplets used."""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from engine.comparison_tree import ComparisonForest, run_with_oracle  # noqa: E402
from simulation.oracles import TripletOracle  # noqa: E402


def parse_args(doc: str, **int_options: int) -> argparse.Namespace:
    """The command line of a benchmark: ``--quick`` and one integer option per keyword (its default),
    described by the first line of the benchmark's docstring ``doc``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    for name, default in int_options.items():
        parser.add_argument(f"--{name}", type=int, default=default)
    return parser.parse_args()


def build(n_train, oracle, batch=200_000, **kwargs):
    """A fully built forest over items 0..n_train-1 and the number of triplets it used."""
    forest = ComparisonForest(n_train, **kwargs)
    asked = run_with_oracle(forest, oracle, batch=batch)
    return forest, asked


def route_all(forest, oracle, queries, refine=0):
    """Route every held-out item; returns (results, triplets per query)."""
    results, asked = [], 0
    for q in queries:
        search = forest.route(int(q), refine=refine)
        asked += run_with_oracle(search, oracle, batch=10_000)
        results.append(search.result())
    return results, asked / max(len(queries), 1)


def standardised_oracle(X_train, X_test, noise=0.0, seed=0):
    """Noise-free (or flip-noise) triplets on Euclidean distances of features standardised with
    the training mean and std; items 0..n_train-1 are training items, the rest held out."""
    mean, std = X_train.mean(axis=0), X_train.std(axis=0)
    std[std == 0] = 1.0
    Z = (np.r_[X_train, X_test] - mean) / std
    return TripletOracle.from_points(Z, noise=noise, model="flip", random_state=seed)


def mean_std(values, scale=1.0, digits=2):
    v = np.asarray(values, dtype=float) * scale
    return f"{v.mean():.{digits}f} ± {v.std():.{digits}f}"


class Timer:
    def __enter__(self):
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.start
