"""How a pilot's plan sees careless raters (issues 28, 43): a pilot of N items, 10 answers per item from raters
of 20 answers each (``--per-item``, ``--per-rater``), the first CARELESS share of the raters answering at random,
the others people-like (logistic noise of scale 0.075 of the largest distance, lapse .03). Prints one row per
(careless share, seed): the lapse ``fit_pilot`` takes (the human model's .03 unless the pilot is far less
predictable than pilots simulated in its fitted world), and the check of its raters one by one
(``simulation.noise.check_raters``: each rater's answers against a world fitted without them; caught when p is
under ``CARELESS_P``).

    nice -n 10 python benchmarks/pilot_lapse.py [--items 100] [--seeds 5 7 9] [--careless 0 0.1 0.2 0.4]
        [--per-item 10] [--per-rater 20]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parent.parent)]

from engine.planning import Scenario, triplets_from_answers  # noqa: E402
from simulation.noise import fit_pilot  # noqa: E402


def pilot(n: int, careless_share: float, seed: int, per_item: int = 10, per_rater: int = 20
          ) -> tuple[np.ndarray, float, np.ndarray]:
    """(triplets, the raters' true lapse, the rater of each triplet)."""
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
    return triplets_from_answers(answers), careless.mean() + (1 - careless.mean()) * 0.03, raters


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100)
    parser.add_argument("--seeds", type=int, nargs="+", default=[5, 7, 9])
    parser.add_argument("--careless", type=float, nargs="+", default=[0.0, 0.1, 0.2])
    parser.add_argument("--per-item", type=int, default=10, help="pilot answers per item")
    parser.add_argument("--per-rater", type=int, default=20, help="answers per rater")
    args = parser.parse_args()
    print(f"{'careless':>8} {'seed':>4} {'true lapse':>10} {'fitted':>7} {'rater p':>7} {'caught':>6} {'seconds':>7}")
    for share in args.careless:
        for seed in args.seeds:
            t, truth, raters = pilot(args.items, share, seed, args.per_item, args.per_rater)
            started = time.perf_counter()
            fit = fit_pilot(t, args.items, replicates=1, raters=raters)
            check = fit.raters
            print(f"{share:8.2f} {seed:4d} {truth:10.3f} {fit.lapses[0]:7.3f} {check.p_value:7.3f} "
                  f"{'yes' if check.caught else 'no':>6} {time.perf_counter() - started:7.0f}", flush=True)


if __name__ == "__main__":
    main()
