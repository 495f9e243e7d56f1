"""Benchmark 1 — the ANNTri paper's Fig. 2: 10 clusters × 10 points around a circle, σ = 0.1.

Error rate (share of items whose current best is not the true NN) against queries per
item for ANNTri, ANN and Random, mean over seeds; and total queries to finish.
    python benchmarks/anntri_fig2.py            # 20 seeds, rounds capped at 1e5 (paper)
    python benchmarks/anntri_fig2.py --quick    # 3 seeds, cap 1e4
"""
from __future__ import annotations

import argparse

import numpy as np
from anntri_common import PLANNERS, fmt, table

from engine.oracles import PointsOracle, circle_clusters, run

GRID = [0, 3, 10, 30, 100, 300, 1000, 3000, 10000]


def error_at(res, n, q):
    idx = np.searchsorted(res.queries, q * n, side="right") - 1
    return res.error[max(idx, 0)]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--cap", type=int, default=100_000)
    ap.add_argument("--sigma", type=float, default=0.1)
    ap.add_argument("--random-budget", type=float, default=None,
                    help="Random's queries per item (default: the largest grid point)")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.seeds, a.cap = 3, 10_000
    grid = [g for g in GRID]
    rb = a.random_budget or grid[-1]
    curves = {name: [] for name in PLANNERS}
    totals = {name: [] for name in PLANNERS}
    finished = {name: 0 for name in PLANNERS}
    secs = {name: 0.0 for name in PLANNERS}
    for seed in range(a.seeds):
        X, _ = circle_clusters(random_state=seed)
        n = len(X)
        for name, cls in PLANNERS.items():
            oracle = PointsOracle(X, noise=a.sigma, random_state=1000 + seed)
            planner = cls(n, sigma=a.sigma, delta=0.1, max_samples_per_round=a.cap, random_state=seed)
            budget = int(rb * n) if name == "Random" else 10**9
            res = run(planner, oracle, budget)
            curves[name].append([error_at(res, n, q) for q in grid])
            totals[name].append(res.total_queries)
            finished[name] += res.finished
            secs[name] += res.engine_seconds
    print(f"Fig. 2 setting: 10 clusters x 10 points, gap 10% of diameter, sigma={a.sigma}, "
          f"delta=0.1, round cap {a.cap}, {a.seeds} seeds; Random stopped at {rb:g} queries/item")
    print("\nMean error rate at q queries per item")
    rows = [[q] + [fmt(float(np.mean([c[i] for c in curves[nm]]))) for nm in PLANNERS]
            for i, q in enumerate(grid)]
    table(["queries/item"] + list(PLANNERS), rows)
    print("\nTotal queries to finish (mean over seeds)")
    rows = [[nm, fmt(float(np.mean(totals[nm]))), fmt(float(np.mean(totals[nm])) / 100),
             f"{finished[nm]}/{a.seeds}", fmt(secs[nm] / a.seeds)] for nm in PLANNERS]
    table(["planner", "queries", "queries/item", "finished", "engine s/run"], rows)


if __name__ == "__main__":
    main()
