"""How close the lapse rate ``proxima plan`` fits to a pilot comes to the raters' true one, with and
without careless raters (issue 28): a pilot of N items, 10 answers per item from raters of 20 answers
each, the first CARELESS share of the raters answering at random, the others people-like (logistic noise
of scale 0.075 of the largest distance, lapse .03). Prints one row per (careless share, seed).

    nice -n 5 python benchmarks/pilot_lapse.py [--items 100] [--seeds 5 7 9] [--careless 0 0.1 0.2]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from engine.planning import Scenario, triplets_from_answers
from simulation.noise import fit_pilot


def pilot(n: int, careless_share: float, seed: int, per_item: int = 10, per_rater: int = 20):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    D = np.linalg.norm(X[:, None] - X[None], axis=-1)
    world = Scenario(D / D.max(), 0.075, 0.03)
    questions = np.array([rng.choice(n, 3, replace=False) for _ in range(n * per_item)])
    answers = np.asarray(world.oracle(np.random.default_rng(seed + 1)).answer([tuple(q) for q in questions]))
    raters = np.arange(len(questions)) // per_rater
    careless = raters < careless_share * (raters.max() + 1)
    answers[careless, 3] = np.where(rng.random(int(careless.sum())) < .5, questions[careless, 1],
                                    questions[careless, 2])
    return triplets_from_answers(answers), careless.mean() + (1 - careless.mean()) * 0.03


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100)
    parser.add_argument("--seeds", type=int, nargs="+", default=[5, 7, 9])
    parser.add_argument("--careless", type=float, nargs="+", default=[0.0, 0.1, 0.2])
    args = parser.parse_args()
    print(f"{'careless':>8} {'seed':>4} {'true lapse':>10} {'fitted':>7} {'error':>7} {'seconds':>7}")
    for share in args.careless:
        for seed in args.seeds:
            t, truth = pilot(args.items, share, seed)
            started = time.perf_counter()
            fitted = fit_pilot(t, args.items, replicates=1).lapses[0]
            print(f"{share:8.2f} {seed:4d} {truth:10.3f} {fitted:7.3f} {fitted - truth:+7.3f} "
                  f"{time.perf_counter() - started:7.0f}", flush=True)


if __name__ == "__main__":
    main()
