"""Benchmark 4 — triplet-derived ANNTri on the real alien-egg data (NEXT, 1-D ground truth).

A logistic noise model is fitted to the 17,611 human triplets; Q(i, j) is then a simulated
triplet "is j or a uniformly random k more similar to i?" (1 if k wins), as the paper's shoe
experiment did. The 300 eggs sit evenly spaced on a line, so every inner egg has two
exactly tied nearest neighbours (either counts as correct) and no round can be certified
without a tie rule: rounds end at the cap. Reports queries per item before the share of
correct nearest neighbours (the paper's error metric) first reaches 90% and 100%, the
share correct at the budget, and — a looser, secondary metric, not the issue's — the share
of eggs whose chosen neighbour lies within ``--near`` positions on the line.

It also prints how far apart the triplet-derived means of an egg's nearest and next-nearest
neighbours are under the fitted model, and the samples per arm that gap needs, since this
decides what any planner can reach.
    python benchmarks/anntri_eggs.py [--data DIR] [--quick]
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from anntri_common import PLANNERS, ask_and_answer, fmt, quick_defaults, table

from engine.truth import neighbor_error
from simulation.datasets import load_alien_eggs
from simulation.noise import fit_logistic_noise
from simulation.oracles import TripletDerivedOracle, TripletOracle


def derived_mean(D, scale, i, j):
    """Exact mean of the triplet-derived sample Q(i, j) under the logistic model."""
    n = len(D)
    ks = np.array([k for k in range(n) if k not in (i, j)])
    return float(np.mean(1 / (1 + np.exp(-(D[i, j] - D[i, ks]) / scale))))


def drive(planner, oracle, budget, D, spacing, near):
    """run()-like loop recording the exact and the ±near-position error at checkpoints."""
    n = planner.n_items
    marks, exact, loose = [], [], []
    total, next_mark = 0, n

    def record():
        nb = planner.current_neighbors()
        marks.append(total)
        exact.append(neighbor_error(nb, D))
        loose.append(float(np.mean(D[np.arange(n), nb[:, 0]] > near * spacing + 1e-12)))

    record()
    while total < budget:
        asked = ask_and_answer(planner, oracle, min(n, budget - total))
        if not asked:
            break
        total += asked
        if total >= next_mark:
            record()
            next_mark = max(total * 1.02, total + n)
    if marks[-1] != total:
        record()
    return np.array(marks), np.array(exact), np.array(loose)


def first(marks, err, level):
    hit = np.flatnonzero(err <= level + 1e-12)
    return float(marks[hit[0]]) if len(hit) else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[1].parent / "shared" / "data")
    ap.add_argument("--seeds", type=int, default=None, help="default 2 (1 with --quick)")
    ap.add_argument("--per-item", type=int, default=None, help="budget in queries per item (default 3000; 300 quick)")
    ap.add_argument("--cap", type=int, default=3000, help="questions per round")
    ap.add_argument("--window", type=int, default=20)
    ap.add_argument("--near", type=int, default=3, help="positions for the secondary metric")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    quick_defaults(a, seeds=(1, 2), per_item=(300, 3000))
    eggs = load_alien_eggs(a.data)
    D = eggs.distances
    n = len(eggs.items)
    spacing = float(np.min(D[D > 0]))
    scale = fit_logistic_noise(D, eggs.triplets)
    t = eggs.triplets
    human = float(np.mean(D[t[:, 0], t[:, 1]] <= D[t[:, 0], t[:, 2]]))
    diff = np.abs(D[t[:, 0], t[:, 1]] - D[t[:, 0], t[:, 2]])
    model = float(np.mean(1 / (1 + np.exp(-diff / scale))))
    mid = n // 2
    m1, m2 = derived_mean(D, scale, mid, mid + 1), derived_mean(D, scale, mid, mid + 2)
    var = m1 * (1 - m1)
    need = 2 * var * (1.645 / (m2 - m1)) ** 2  # one-sided 95% test of the difference of two means
    print(f"alien eggs: n={n}, {len(t)} human triplets; fitted logistic scale {scale:.4f} "
          f"= {scale / spacing:.1f} egg spacings (distances scaled to [0, 1]); agreement with ground truth: "
          f"human {human:.3f}, model {model:.3f}")
    print(f"triplet-derived means for egg {mid}: nearest {m1:.4f}, next-nearest {m2:.4f} (gap {m2 - m1:.4f}); "
          f"telling them apart at 95% needs ~{need:,.0f} samples per arm")
    configs = [("ANNTri", "lil", a.window), ("ANNTri", "kl", a.window), ("ANNTri", "kl", 1), ("Random", "kl", 1)]
    rows = []
    for name, bound, window in configs:
        r90, r100, fin, fin_near = [], [], [], []
        for seed in range(a.seeds):
            rater = TripletOracle(D, noise=scale, model="logistic", random_state=seed)
            oracle = TripletDerivedOracle(rater, n, random_state=seed)
            kw = {} if name == "Random" else {"window": window}
            planner = PLANNERS[name](n, sigma=0.5, bound=bound, max_samples_per_round=a.cap,
                                     random_state=seed, **kw)
            marks, exact, loose = drive(planner, oracle, a.per_item * n, D, spacing, a.near)
            r90.append(first(marks, exact, 0.10) / n)
            r100.append(first(marks, exact, 0.0) / n)
            fin.append(1 - exact[-1])
            fin_near.append(1 - loose[-1])
        label = name if name == "Random" else f"{name} {bound} w={window}"
        rows.append([label, fmt(float(np.mean(r90))), fmt(float(np.mean(r100))),
                     fmt(float(np.mean(fin))), fmt(float(np.mean(fin_near)))])
    print(f"\nQueries per item to reach 90% / 100% correct nearest neighbours ({a.seeds} seed(s), budget "
          f"{a.per_item}/item, round cap {a.cap}; — = not reached within the budget; ties count as correct)")
    table(["planner", "to 90% correct", "to 100% correct", "correct at budget",
           f"within ±{a.near} positions at budget"], rows)


if __name__ == "__main__":
    main()
