"""duels asked many questions at once: the API's default against a live pool's fill.

A caller of ``make_planner("duels", ...)`` that asks for a large batch (``next_questions(1000)``
on 85 items), answers it and observes, gets by default (``pool = False``) one question per head,
with the embedding refit finished inside the call, and comes back for more after observing;
in pool mode (``pool = True``, what a live study and ``proxima plan`` set) the whole batch is
planned from one fit (refits finished in the call here, as no fitter is given; a live worker runs them
beside its passes: ``live_vs_offline.py``). Recorded answers of 85
items (``real_crowds.recorded_oracle``; plain points and item-specific similarities), hit@3 by
answers per item, mean over seeds::

    python benchmarks/duels_batches.py [--seeds 6] [--batches 50,425,1000] [--budgets 10,25,50,100]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import nn_metrics, print_table, recorded_oracle  # noqa: E402

from engine.planners import make_planner  # noqa: E402
from engine.registry import DEFAULT_NN_ALGORITHM  # noqa: E402
from simulation.noise import alien_egg_noise  # noqa: E402


def run(oracle, n: int, batch: int, pool: bool, budgets: list[int], seed: int) -> tuple[list[float], int]:
    """hit@3 at every budget and the number of next_questions calls, driving the learner like a
    harness: ask ``batch`` (or what is left to the next budget), answer, observe."""
    planner = make_planner(DEFAULT_NN_ALGORITHM, n, question_kind="triplet", random_state=seed)
    planner.pool = pool
    truth = oracle.loss_share()
    total, calls, hits = 0, 0, []
    for b in budgets:
        while total < b * n:
            qs = planner.next_questions(min(batch, b * n - total))
            calls += 1
            if not qs:
                break
            planner.observe(oracle.answer(qs))
            total += len(qs)
        hits.append(nn_metrics(np.asarray(planner.neighbor_graph(k=1).neighbors)[:, 0], truth)[1])
    return hits, calls


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--batches", default="50,425,1000")
    ap.add_argument("--budgets", default="10,25,50,100", help="answers per item")
    args = ap.parse_args(argv)
    batches = [int(x) for x in args.batches.split(",")]
    budgets = [int(x) for x in args.budgets.split(",")]
    fit = alien_egg_noise()
    n = 85
    for idio, label in ((0.0, "plain points"), (0.1, "item-specific similarities 0.1")):
        rows = []
        for batch in batches:
            for pool in (False, True):
                hits, calls = [], []
                for s in range(args.seeds):
                    h, c = run(recorded_oracle(1000 + s, fit, fit.lapse, idio, n), n, batch, pool, budgets, s)
                    hits.append(h)
                    calls.append(c)
                mean = np.mean(hits, axis=0)
                rows.append([str(batch), "pool (live)" if pool else "default",
                             *[f"{v:.2f}" for v in mean], f"{np.mean(calls):.0f}"])
                print(f"  {label}: batch {batch}, pool {pool} done", file=sys.stderr)
        print_table(f"duels, recorded answers of {n} items, {label}, lapse {fit.lapse:.2f} — hit@3 by answers "
                    f"per item (mean of {args.seeds} seeds)",
                    ["batch", "mode", *[f"{b}/item" for b in budgets], "calls"], rows)


if __name__ == "__main__":
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        main()
