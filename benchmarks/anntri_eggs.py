"""Benchmark 4 — triplet-derived ANNTri on the real alien-egg data (NEXT, 1-D ground truth).

A logistic noise model is fitted to the 17,611 human triplets; Q(i, j) is then a simulated
triplet "is j or a random k more similar to i?" (1 if k wins). Reports queries per item to
reach 90% and 100% correct nearest neighbours (either of two tied neighbours is correct).
    python benchmarks/anntri_eggs.py [--data DIR] [--quick]
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from anntri_common import PLANNERS, fmt, table

from engine.datasets import load_alien_eggs
from engine.oracles import TripletDerivedOracle, TripletOracle, fit_logistic_noise, run


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[1].parent / "shared" / "data")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--per-item", type=int, default=400, help="budget in queries per item")
    ap.add_argument("--cap", type=int, default=1000)
    ap.add_argument("--bound", default="lil")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.seeds, a.per_item = 1, 100
    eggs = load_alien_eggs(a.data)
    D = eggs.distances
    n = len(eggs.items)
    scale = fit_logistic_noise(D, eggs.triplets)
    t = eggs.triplets
    human = float(np.mean(D[t[:, 0], t[:, 1]] <= D[t[:, 0], t[:, 2]]))
    diff = np.abs(D[t[:, 0], t[:, 1]] - D[t[:, 0], t[:, 2]])
    model = float(np.mean(1 / (1 + np.exp(-diff / scale))))
    print(f"alien eggs: n={n}, {len(t)} human triplets; fitted logistic scale {scale:.4f} "
          f"(distances scaled to [0, 1]); agreement with ground truth: human {human:.3f}, model {model:.3f}")
    rows = []
    for name in ("ANNTri", "Random"):
        r90, r100, fin = [], [], []
        for seed in range(a.seeds):
            rater = TripletOracle(D, noise=scale, model="logistic", random_state=seed)
            oracle = TripletDerivedOracle(rater, n, random_state=seed)
            planner = PLANNERS[name](n, sigma=0.5, bound=a.bound, max_samples_per_round=a.cap,
                                     random_state=seed)
            res = run(planner, oracle, a.per_item * n, distances=D, checkpoint_growth=1.02)
            r90.append(res.queries_to_reach(0.10) / n)
            r100.append(res.queries_to_reach(0.0) / n)
            fin.append(res.error[-1])
        rows.append([name, fmt(float(np.mean(r90))), fmt(float(np.mean(r100))), fmt(1 - float(np.mean(fin)))])
    print(f"\nQueries per item to reach 90% / 100% correct NN ({a.seeds} seeds, budget {a.per_item}/item, "
          f"round cap {a.cap}, bound {a.bound}; — = not reached within budget)")
    table(["planner", "to 90% correct", "to 100% correct", "correct at budget"], rows)


if __name__ == "__main__":
    main()
