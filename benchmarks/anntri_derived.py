"""Benchmark 5 — ANNTri settings for triplet-derived distance samples (picks ``DERIVED_DEFAULTS``).

Alien eggs (real NEXT data, 1-D ground truth); simulated people answer triplets with the
human noise model fitted to the 17,611 recorded answers (logistic + lapse, see
``simulation.noise.fit_human_noise``), and Q(i, j) is "is j or a uniformly random k more
similar to i?" (1 if k wins). Prints the nearest-neighbour error (ties count as correct) at
several budgets in queries per item, mean over seeds, for the study's old default (window 1,
symmetric, triangle, LIL) and head-based ANN with the LIL / Bernstein / KL bounds.
    python benchmarks/anntri_derived.py [--data DIR] [--seeds 2] [--quick]
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from anntri_common import PLANNERS, error_curve, fmt, table

from engine.anntri import DERIVED_DEFAULTS
from simulation.datasets import load_alien_eggs
from simulation.noise import fit_human_noise
from simulation.oracles import PointsOracle, TripletDerivedOracle, circle_clusters


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[1].parent / "shared" / "data")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--stride", type=int, default=5,
                    help="keep every stride-th egg (default 5: 60 eggs; 1 = all 300, hopeless below ~1000/item)")
    ap.add_argument("--circle", action="store_true",
                    help="the paper's 10 x 10 circle clusters instead of the eggs (the fitted human "
                         "noise transferred by median triplet gap)")
    ap.add_argument("--quick", action="store_true", help="budgets up to 200 per item, one seed")
    a = ap.parse_args()
    per_item = [5, 20, 50, 200] if a.quick else [5, 20, 50, 200, 500, 1000, 2000]
    seeds = 1 if a.quick else a.seeds
    eggs = load_alien_eggs(a.data)
    people = fit_human_noise(eggs.distances, eggs.triplets)  # fitted on all eggs and answers
    unit = "range"
    if a.circle:
        X, _ = circle_clusters(random_state=0, diameter=2.0, radial="linear")
        D = PointsOracle(X).distances
        unit = "median_gap"
        print(f"circle clusters: n={len(D)}", end="; ")
    else:
        keep = np.arange(0, len(eggs.distances), a.stride)
        D = eggs.distances[np.ix_(keep, keep)]
        print(f"alien eggs: n={len(D)} (every {a.stride}th)", end="; ")
    n = len(D)
    print(f"human noise model: scale {people.scale:.4f}, lapse {people.lapse:.3f}")
    d = {"symmetric": False, "triangle": False}
    configs = [
        ("old study default: ANNTri lil w=1 (symmetric)", "ANNTri", {"bound": "lil", "window": 1}),
        ("head-based lil w=n stagger", "ANNTri", {**d, "bound": "lil", "window": n, "stagger": True}),
        ("head-based bernstein w=n stagger", "ANNTri", {**d, "bound": "bernstein", "window": n, "stagger": True}),
        ("head-based kl w=n stagger", "ANNTri", {**d, "bound": "kl", "window": n, "stagger": True}),
        ("head-based kl w=n", "ANNTri", {**d, "bound": "kl", "window": n}),
        ("DERIVED_DEFAULTS", "ANNTri", dict(DERIVED_DEFAULTS)),
        ("Random head-based kl", "Random", {"symmetric": False, "bound": "kl"}),
    ]
    rows = []
    for label, name, params in configs:
        errs = []
        for seed in range(seeds):
            rater = people.oracle(D, unit=unit, random_state=seed)
            oracle = TripletDerivedOracle(rater, n, random_state=seed)
            planner = PLANNERS[name](n, random_state=seed, **params)
            errs.append(error_curve(planner, oracle, D, [m * n for m in per_item], repeat=True))
        rows.append([label] + [fmt(float(e)) for e in np.mean(errs, axis=0)])
    print(f"\nNearest-neighbour error at a budget of queries per item ({seeds} seed(s))")
    table(["planner"] + [f"{m}/item" for m in per_item], rows)


if __name__ == "__main__":
    main()
