"""Benchmark 6 — anytime error of ANNTri with every round open (window = n) on the paper's data.

10 clusters × 10 points around a circle (discs of diameter 2, "linear" radial spread, as in
the paper's experiment code), distance samples with σ = 0.1. All planners get the same
budgets; prints the nearest-neighbour error of ``current_neighbors`` against queries per
item (mean over seeds), then for several error levels the queries per item each planner
first needs to reach it (error curves are interpolated on a log grid) and Random's / ANNTri's.
    python benchmarks/anntri_anytime.py [--seeds 3] [--max-per-item 10000]
"""
from __future__ import annotations

import argparse

import numpy as np
from anntri_common import PLANNERS, error_curve, fmt, table

from simulation.oracles import PointsOracle, circle_clusters


def needed(grid, err, level):
    """Queries per item at which the (monotone envelope of the) error first reaches ``level``."""
    env = np.minimum.accumulate(err)
    hit = np.flatnonzero(env <= level + 1e-12)
    if not len(hit):
        return float("nan")
    h = hit[0]
    if h == 0:
        return float(grid[0])
    # log-linear interpolation between the two grid points around the crossing
    x0, x1, e0, e1 = np.log(grid[h - 1]), np.log(grid[h]), env[h - 1], env[h]
    t = 1.0 if e0 == e1 else (e0 - level) / (e0 - e1)
    return float(np.exp(x0 + t * (x1 - x0)))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--sigma", type=float, default=0.1)
    ap.add_argument("--max-per-item", type=int, default=10000)
    ap.add_argument("--diameter", type=float, default=2.0, help="cluster disc diameter")
    ap.add_argument("--radial", choices=("linear", "uniform"), default="linear",
                    help="'uniform' with --diameter 1: the earlier, harder data")
    a = ap.parse_args()
    grid = [g for g in (10, 30, 100, 300, 1000, 3000, 10000, 30000) if g <= a.max_per_item]
    configs = [
        ("ANNTri w=n", "ANNTri", {"window": 100}),
        ("ANNTri w=n stagger", "ANNTri", {"window": 100, "stagger": True}),
        ("ANN w=n", "ANN", {"window": 100}),
        ("Random", "Random", {}),
    ]
    curves = {}
    for label, name, params in configs:
        errs = []
        for seed in range(a.seeds):
            X, _ = circle_clusters(random_state=seed, diameter=a.diameter, radial=a.radial)
            n = len(X)
            oracle = PointsOracle(X, noise=a.sigma, random_state=1000 + seed)
            planner = PLANNERS[name](n, sigma=a.sigma, random_state=seed, **params)
            errs.append(error_curve(planner, oracle, oracle.distances, [g * n for g in grid]))
        curves[label] = np.mean(errs, axis=0)
    print(f"Nearest-neighbour error against queries per item ({a.seeds} seeds, σ = {a.sigma}, "
          f"discs of diameter {a.diameter}, {a.radial})")
    table(["planner"] + [str(g) for g in grid], [[k] + [fmt(float(e)) for e in v] for k, v in curves.items()])
    levels = [lv for lv in (0.5, 0.3, 0.2, 0.1, 0.05) if lv >= curves["Random"].min() - 1e-12]
    rows = []
    for label in curves:
        if label == "Random":
            continue
        r = [label]
        for lv in levels:
            ours, rand = needed(grid, curves[label], lv), needed(grid, curves["Random"], lv)
            r.append(f"{fmt(ours)} vs {fmt(rand)} = {fmt(rand / ours)}x" if ours == ours else "—")
        rows.append(r)
    print("\nQueries per item to reach an error level: planner vs Random = Random's / planner's")
    table(["planner"] + [f"error {lv}" for lv in levels], rows)


if __name__ == "__main__":
    main()
