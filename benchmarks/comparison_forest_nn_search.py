"""Benchmark 4: nearest-neighbour search for held-out items with a comparison forest.

Data: a mixture of 10 Gaussians in R^10 (noise-free triplets on Euclidean distances). For each
n, 100 held-out items are routed; we report how often the true nearest training item is the
top-ranked answer (recall@1) and whether it is among the candidates at all, with triplets per
query, for the frequency ranking alone (refine = 0) and with a knock-out tournament between
the 8 most frequent candidates (refine = 8).

Usage: python benchmarks/comparison_forest_nn_search.py [--quick]
"""
from __future__ import annotations

import argparse

import numpy as np
from comparison_forest_common import build, route_all
from scipy.spatial.distance import cdist

from simulation.oracles import TripletOracle


def mixture(n, d=10, k=10, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=3.0, size=(k, d))
    return centres[rng.integers(k, size=n)] + rng.normal(size=(n, d))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--queries", type=int, default=100)
    args = parser.parse_args()
    sizes = [200, 500] if args.quick else [200, 500, 1000, 2000]
    trees = [10] if args.quick else [10, 50]
    n_queries = 30 if args.quick else args.queries
    print(f"10-D Gaussian mixture, {n_queries} held-out queries, n0 = 1, noise-free triplets")
    print(f"{'n':>5s} {'M':>4s} {'refine':>6s} {'recall@1':>9s} {'NN in candidates':>17s} "
          f"{'candidates':>10s} {'triplets/query':>15s} {'build triplets':>15s}")
    for n in sizes:
        X = mixture(n + n_queries, seed=n)
        oracle = TripletOracle.from_points(X)
        true_nn = cdist(X[n:], X[:n]).argmin(axis=1)
        for m in trees:
            forest, asked = build(n, oracle, n_trees=m, random_state=n + m)
            for refine in (0, 8):
                results, per_query = route_all(forest, oracle, np.arange(n, n + n_queries), refine=refine)
                top = np.mean([r.neighbors[0] == nn for r, nn in zip(results, true_nn, strict=True)])
                found = np.mean([nn in r.neighbors for r, nn in zip(results, true_nn, strict=True)])
                cands = np.mean([len(r.neighbors) for r in results])
                print(f"{n:5d} {m:4d} {refine:6d} {top:9.2f} {found:17.2f} {cands:10.1f} {per_query:15.1f} {asked:15d}")


if __name__ == "__main__":
    main()
