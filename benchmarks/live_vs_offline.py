"""Benchmark — does a learner learn as much live as offline from the same number of answers?

Offline: the learner as it comes from the registry (``make_planner``), asked ``n`` questions at a
time (one per head for duels), the answers observed before it is asked again, refits finished.
Live: what a study's worker does (``drive_as_pool``), asked ``--batches`` questions per pass, its
refits handed to a fitter that stands for the worker's fit process: a refit starts when the learner
asks for it and is ready once the crowd (``--rate`` answers per second) has given as many answers as
arrive in the CPU time the fit took, so a slow fit lags as many answers as it would in a real study.
Truth: clustered points (4-D, clusters of 20), answered by the human noise model (logistic 0.1 of the
clusters' unit spread, lapse 0.1). hit@3 by answers per item, mean over seeds::

    python benchmarks/live_vs_offline.py                       # duels, n = 1000, batches 100,200,500
    python benchmarks/live_vs_offline.py --items 300,1000 --algorithms duels,embedding,active_embedding,random_triplets
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from scipy.spatial.distance import cdist

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from real_crowds import nn_metrics, print_table  # noqa: E402

from engine import oracles  # noqa: E402
from engine.registry import drive_as_pool, make_planner  # noqa: E402

NOISE, LAPSE = 0.1, 0.1


def clustered(n: int, seed: int, cluster: int = 20, dim: int = 4) -> np.ndarray:
    """Distances of n points in clusters of ``cluster`` (centres uniform in [0, 10]^dim, unit spread)."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0, 10, size=(-(-n // cluster), dim))
    X = np.repeat(centres, cluster, axis=0)[:n] + rng.normal(size=(n, dim))
    return cdist(X, X)


class CrowdClock:
    """Simulated time: answers given so far over the crowd's rate."""

    def __init__(self, rate: float) -> None:
        self.rate, self.answers = float(rate), 0

    @property
    def now(self) -> float:
        return self.answers / self.rate


class TimedFitter:
    """A fit process beside the passes: the fit is computed at once (its CPU time measured) and is
    ready when the crowd's clock has moved on by that time."""

    def __init__(self, clock: CrowdClock) -> None:
        self.clock, self.fits, self.seconds = clock, 0, 0.0

    def fit(self, task):
        t0 = time.process_time()
        result = task.run()
        took = time.process_time() - t0
        self.fits += 1
        self.seconds += took
        return _Ready(self.clock, self.clock.now + took, result)


class _Ready:
    def __init__(self, clock, at, result):
        self.clock, self.at, self._result = clock, at, result

    def done(self) -> bool:
        return self.clock.now >= self.at

    def result(self):
        return self._result


def run(algorithm: str, n: int, batch: int | None, budgets: list[int], seed: int, rate: float) -> list[float]:
    """hit@3 at each budget; ``batch`` None: offline."""
    D = clustered(n, seed)
    oracle = oracles.TripletOracle(D, noise=NOISE, model="human", lapse=LAPSE, random_state=seed + 7)
    planner = make_planner(algorithm, n, question_kind="triplet", random_state=seed)
    clock = CrowdClock(rate)
    if batch is not None:
        drive_as_pool(planner, TimedFitter(clock))
    step = n if batch is None else batch
    total, out = 0, []
    for b in budgets:
        while total < b * n:
            qs = planner.next_questions(min(step, b * n - total))
            if not qs:
                break
            planner.observe(oracle.answer(qs))
            total += len(qs)
            clock.answers = total
        picks = np.asarray(planner.neighbor_graph(k=1).neighbors)[:, 0]
        out.append(nn_metrics(picks, D)[1])
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algorithms", default="duels")
    ap.add_argument("--items", default="1000")
    ap.add_argument("--batches", default="100,200,500")
    ap.add_argument("--budgets", default="20,60,100", help="answers per item")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--rate", type=float, default=500.0, help="the crowd's answers per second")
    args = ap.parse_args(argv)
    budgets = [int(x) for x in args.budgets.split(",")]
    for algorithm in args.algorithms.split(","):
        for n in (int(x) for x in args.items.split(",")):
            rows = []
            for batch in [None, *(int(x) for x in args.batches.split(","))]:
                hits = [run(algorithm, n, batch, budgets, s, args.rate) for s in range(args.seeds)]
                mean = np.mean(hits, axis=0)
                rows.append(["offline (n per call)" if batch is None else f"live, batches of {batch}",
                             *[f"{v:.2f}" for v in mean]])
                print(f"  {algorithm} n={n} {rows[-1][0]}: hit@3 {' / '.join(rows[-1][1:])}", file=sys.stderr,
                      flush=True)
            print_table(f"{algorithm}, {n} clustered items, human noise (lapse {LAPSE}), crowd {args.rate:.0f} "
                        f"answers/s — hit@3 by answers per item (mean of {args.seeds} seeds)",
                        ["mode", *[f"{b}/item" for b in budgets]], rows)


if __name__ == "__main__":
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        main()
