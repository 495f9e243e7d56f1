"""Engine time of the screen planners in a live pool: duels asking odd-one-out or rank screens.

A study's worker drives the learner as a pool (``drive_as_pool``) with its refits in a fit process
beside the passes; this script does the same (a one-process ``ProcessPoolExecutor`` as the fitter)
on hierarchical clusters answered by the simulated rater of each kind, and prints the time of
``next_questions(batch)`` and ``observe`` per call (median, p99, max) over the run. The simulated crowd
waits for each refit to finish, so every call plans from the newest fit (the refits' own time is
not in the figures: it is spent in the fit process).

    python benchmarks/screens_speed.py [--items 1000] [--kinds rank,odd_one_out] [--batch 200]
        [--screens-per-item 10] [--quick]
"""
from __future__ import annotations

import argparse
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np
from scipy.spatial.distance import cdist

from engine.planners import make_planner
from engine.registry import drive_as_pool, run_fit_task
from simulation.oracles import HUMAN_LAPSE, OddOneOutOracle, RankOracle, hierarchical_clusters


class ProcessFitter:
    """The worker's fit process in miniature: ``fit(task)`` returns a future of ``task.run()``."""

    def __init__(self, pool: ProcessPoolExecutor) -> None:
        self.pool = pool

    def fit(self, task):
        return self.pool.submit(run_fit_task, task)


def run(kind: str, n: int, batch: int, per_item: float, pool: ProcessPoolExecutor) -> list[str]:
    X, _ = hierarchical_clusters(n, random_state=1)
    D = cdist(X, X)
    noise = 0.02 * float(np.median(D))
    oracle = (RankOracle(D, scale=noise, lapse=HUMAN_LAPSE, random_state=0) if kind == "rank"
              else OddOneOutOracle(D, scale=noise, lapse=HUMAN_LAPSE, random_state=0))
    planner = drive_as_pool(make_planner("duels", n, question_kind=kind, random_state=0), ProcessFitter(pool))
    plan, obs = [], []
    while planner.progress()["answers"] < per_item * n:
        t0 = time.perf_counter()
        qs = planner.next_questions(batch)
        plan.append(time.perf_counter() - t0)
        answers = oracle.answer(qs)
        t0 = time.perf_counter()
        planner.observe(answers)
        obs.append(time.perf_counter() - t0)
        while planner.fit_ready() is False:  # a crowd slower than the refits: each call plans from the newest fit
            time.sleep(0.02)
    plan_ms, obs_ms = 1000 * np.array(plan), 1000 * np.array(obs)
    fits = planner.progress()["embedding_fits"]
    return [kind, f"{n:,}", str(batch), f"{planner.progress()['answers'] / n:.0f}", str(fits),
            f"{np.median(plan_ms):.0f} / {np.percentile(plan_ms, 99):.0f} / {plan_ms.max():.0f}",
            f"{np.median(obs_ms):.0f} / {np.percentile(obs_ms, 99):.0f} / {obs_ms.max():.0f}"]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=1000)
    ap.add_argument("--kinds", default="rank,odd_one_out")
    ap.add_argument("--batch", type=int, default=200, help="screens per next_questions call")
    ap.add_argument("--screens-per-item", type=float, default=10.0)
    ap.add_argument("--quick", action="store_true", help="300 items, 3 screens per item")
    args = ap.parse_args(argv)
    if args.quick:
        args.items, args.screens_per_item = 300, 3.0
    header = ["kind", "items", "batch", "screens/item", "fits", "next_questions ms (median / p99 / max)",
              "observe ms (median / p99 / max)"]
    with ProcessPoolExecutor(1) as pool:
        rows = [run(kind, args.items, args.batch, args.screens_per_item, pool) for kind in args.kinds.split(",")]
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    for r in [header, ["-" * w for w in widths]] + rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))


if __name__ == "__main__":
    main()
