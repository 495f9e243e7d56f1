"""Benchmark 2 — query efficiency at scale on hierarchical clusters (the paper's Thm 4.6).

Queries to reach 10%, 5% and 0% error for ANNTri, ANN and Random, and ANNTri's ratios.
Random is stopped at ``--random-factor`` × ANN's total (— = not reached).
    python benchmarks/anntri_scale.py                 # n = 100, 200, 500, 1000
    python benchmarks/anntri_scale.py --quick         # n = 100, 200
"""
from __future__ import annotations

import argparse

import numpy as np
from anntri_common import PLANNERS, fmt, table

from engine.oracles import PointsOracle, hierarchical_clusters, run


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 200, 500, 1000])
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--noise-rel", type=float, default=0.25,
                    help="noise sigma as a share of the median nearest-neighbour distance")
    ap.add_argument("--cap", type=int, default=5000)
    ap.add_argument("--random-factor", type=float, default=3.0)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.sizes = [100, 200]
    rows = []
    for n in a.sizes:
        reach = {nm: {0.1: [], 0.05: [], 0.0: []} for nm in PLANNERS}
        for seed in range(a.seeds):
            X, _ = hierarchical_clusters(n, shrink=0.35, random_state=seed)
            D = np.sqrt(((X[:, None] - X[None]) ** 2).sum(-1)) + np.diag(np.full(n, np.inf))
            noise = a.noise_rel * float(np.median(D.min(axis=1)))
            ann_total = None
            for name in ("ANNTri", "ANN", "Random"):
                oracle = PointsOracle(X, noise=noise, random_state=100 + seed)
                planner = PLANNERS[name](n, sigma=noise, max_samples_per_round=a.cap,
                                         window=1, random_state=seed)
                budget = int(a.random_factor * ann_total) if name == "Random" else 10**10
                res = run(planner, oracle, budget, checkpoint_growth=1.02)
                if name == "ANN":
                    ann_total = res.total_queries
                for e in reach[name]:
                    reach[name][e].append(res.queries_to_reach(e))
        for e in (0.1, 0.05, 0.0):
            m = {nm: float(np.mean(reach[nm][e])) for nm in PLANNERS}
            rows.append([n, f"{e:.0%}", fmt(m["ANNTri"] / n), fmt(m["ANN"] / n), fmt(m["Random"] / n),
                         fmt(m["Random"] / m["ANNTri"]), fmt(m["ANN"] / m["ANNTri"])])
        print(f"n={n} done", flush=True)
    print("\nQueries per item to reach an error rate "
          f"(hierarchical clusters, noise sigma={a.noise_rel:g} x median NN distance, "
          f"round cap {a.cap}, {a.seeds} seed(s); Random stopped at {a.random_factor:g}x ANN's total)")
    table(["n", "error", "ANNTri", "ANN", "Random", "Random/ANNTri", "ANN/ANNTri"], rows)


if __name__ == "__main__":
    main()
