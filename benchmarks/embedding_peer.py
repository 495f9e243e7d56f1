"""Ordinal embeddings (STE / t-STE), the human noise model and the embedding learners.

Prints four tables: held-out triplet accuracy by kernel and dimension on the alien eggs and the
material triplets; fit seconds (cold / warm start); the human noise fit on the alien eggs; and
the nearest-neighbour error of the embedding learners against random-triplet win rates on
simulated people (the human model) answering from the eggs' 1-D truth.
Run from the repository root: ``python benchmarks/embedding_peer.py [--quick]``.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from anntri_common import timed_answers  # noqa: E402

from engine.embedding import (  # noqa: E402
    ActiveEmbedding,
    EmbeddingLearner,
    fit_embedding,
    triplet_accuracy,
)
from engine.random_triplets import RandomTriplets  # noqa: E402
from engine.truth import neighbor_error  # noqa: E402
from simulation.datasets import load_alien_eggs, load_material  # noqa: E402
from simulation.noise import alien_egg_noise, fit_human_noise  # noqa: E402


def heldout_table(dims, seeds):
    eggs = load_alien_eggs()
    mat = load_material()
    print("## Held-out triplet accuracy (mean over seeds)")
    print("| data | kernel | " + " | ".join(f"d={d}" for d in dims) + " |")
    print("|---|---|" + "---|" * len(dims))
    rng = np.random.default_rng(0)
    order = rng.permutation(len(eggs.triplets))
    cut = int(0.8 * len(order))
    splits = {"alien eggs (80/20)": (eggs.triplets[order[:cut]], eggs.triplets[order[cut:]], 300),
              "material (train/test)": (mat.train, mat.test, 100)}
    for name, (train, test, n) in splits.items():
        for kernel in ("ste", "tste"):
            accs = [np.mean([triplet_accuracy(fit_embedding(train, n, dim=d, kernel=kernel, random_state=s), test)
                             for s in range(seeds)]) for d in dims]
            print(f"| {name} | {kernel} | " + " | ".join(f"{a:.3f}" for a in accs) + " |")
    print()


def speed_table():
    rng = np.random.default_rng(1)
    n, m = 300, 30_000
    pts = rng.random((n, 2))
    t = np.stack([rng.choice(n, 3, replace=False) for _ in range(m + 3000)])
    d1 = np.linalg.norm(pts[t[:, 0]] - pts[t[:, 1]], axis=1)
    d2 = np.linalg.norm(pts[t[:, 0]] - pts[t[:, 2]], axis=1)
    swap = d1 > d2
    t[swap, 1], t[swap, 2] = t[swap, 2], t[swap, 1].copy()
    print("## Fit seconds, n = 300, noise-free triplets (CPU time)")
    print("| kernel | cold 30,000 | warm 33,000 from the 30,000 fit | iterations cold / warm |")
    print("|---|---|---|---|")
    for kernel in ("ste", "tste"):
        c0 = time.process_time()
        X, it_c = fit_embedding(t[:m], n, kernel=kernel, random_state=0, return_n_iter=True)
        c1 = time.process_time()
        _, it_w = fit_embedding(t, n, kernel=kernel, init=X, return_n_iter=True)
        c2 = time.process_time()
        print(f"| {kernel} | {c1 - c0:.2f} | {c2 - c1:.2f} | {it_c} / {it_w} |")
    print()


def noise_table():
    eggs = load_alien_eggs()
    fit = alien_egg_noise()
    sq = fit_human_noise(eggs.distances ** 2, eggs.triplets)
    D, t = eggs.distances, eggs.triplets
    d1, d2 = D[t[:, 0], t[:, 1]], D[t[:, 0], t[:, 2]]
    sims = []
    for seed in range(5):
        wins = fit.oracle(D, random_state=seed).p1_wins(t)
        sims.append(np.mean(np.where(d1 == d2, 0.5, wins == (d1 < d2))))
    print("## Human noise, alien eggs (17,611 answers; distances scaled to [0, 1])")
    print("| gap on | scale s | lapse λ | log-lik | gain over plain logistic |")
    print("|---|---|---|---|---|")
    for name, f in (("distance", fit), ("squared distance", sq)):
        print(f"| {name} | {f.scale:.4f} | {f.lapse:.3f} | {f.log_likelihood:.1f} | {f.lapse_gain:+.1f} |")
    print(f"\nPeople agree with the truth on {fit.agreement:.1%}; the fitted model answering the same "
          f"questions: {np.mean(sims):.1%} (5 seeds).\n")
    return fit


def learner_table(fit, budgets, seeds):
    eggs = load_alien_eggs()
    D = eggs.distances
    n = len(D)
    print("## 1-NN error, alien-egg truth, simulated people (fitted human model), n = 300")
    print("| learner | " + " | ".join(f"{b // n} q/item" for b in budgets) + " | engine s |")
    print("|---|" + "---|" * (len(budgets) + 1))
    makers = {"random triplets (win rates)": lambda s: RandomTriplets(n, random_state=s),
              "embedding (t-STE, d=2)": lambda s: EmbeddingLearner(n, random_state=s),
              "embedding (STE, d=2)": lambda s: EmbeddingLearner(n, random_state=s, kernel="ste"),
              "active_embedding (t-STE, d=2)": lambda s: ActiveEmbedding(n, random_state=s)}
    for name, make in makers.items():
        errs = np.zeros(len(budgets))
        secs = 0.0
        for s in range(seeds):
            planner, oracle = make(s), fit.oracle(D, random_state=100 + s)
            total = 0
            for bi, b in enumerate(budgets):
                total, spent = timed_answers(planner, oracle, total, b, n)
                secs += spent
                c0 = time.process_time()
                nb = planner.neighbor_graph(1).neighbors
                secs += time.process_time() - c0
                nb = np.where(nb < 0, (np.arange(n)[:, None] + 1) % n, nb)
                errs[bi] += neighbor_error(nb, D) / seeds
        print(f"| {name} | " + " | ".join(f"{e:.3f}" for e in errs) + f" | {secs / seeds:.1f} |")
    print()


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    dims = (1, 2, 3) if args.quick else (1, 2, 3, 5, 8)
    seeds = 1
    heldout_table(dims, seeds)
    speed_table()
    fit = noise_table()
    budgets = (10 * 300, 30 * 300) if args.quick else (10 * 300, 30 * 300, 60 * 300)
    learner_table(fit, budgets, 1)


if __name__ == "__main__":
    main()
