"""Benchmark — the ``same_different`` kind end to end: every learner of the table that takes it, against triplets.

A ``same_different`` question shows two items and asks "the same or different?"; its simulated rater
(``engine.kinds``' entry: ``SameDifferentOracle``) says "same" under a threshold on the true distance (the
closest tenth of pairs, the entry's stated assumption) with the human noise model around it. Each learner the
table lets a same_different study use is driven as a live study's worker drives it (pool refills, rounds
widened as the worker widens them: ``engine.planning.simulate_curve``, what ``proxima plan`` runs per line; the
plan itself offers only kinds that imply triplets), beside the default triplet learner asking triplets, at equal
rater time (the kinds' seconds per screen). hit@3: the pick is among the item's 3 truly nearest; mean over runs.

    python benchmarks/same_different.py
    python benchmarks/same_different.py --items 100 --runs 4 --budgets 10,20,40,80
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from harness import clustered_points, print_table  # noqa: E402

from engine import planning  # noqa: E402
from engine.kinds import get_kind  # noqa: E402
from engine.registry import ALGORITHMS  # noqa: E402
from simulation.oracles import HUMAN_LAPSE  # noqa: E402

#: the human noise model's logistic scale, as a share of the world's median nearest-neighbour gap (the alien
#: eggs' ratio, as ``proxima plan`` assumes for a world it is given)
SCALE_GAPS = 0.36


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--items", type=int, default=60)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--budgets", default="10,20,40,80", help="rater seconds per item")
    args = ap.parse_args(argv)
    X = clustered_points(args.items, seed=0, cluster=10, dim=3)
    D = np.sqrt(((X[:, None] - X[None]) ** 2).sum(axis=2))
    D /= D.max()
    gaps = np.sort(np.where(np.eye(len(D), dtype=bool), np.inf, D), axis=1)[:, 0]
    scenario = planning.Scenario(D, SCALE_GAPS * float(np.median(gaps)), HUMAN_LAPSE)
    seconds = [float(b) for b in args.budgets.split(",")]
    rows = []
    lines = [("same_different", name) for name, entry in ALGORITHMS.items()
             if "same_different" in entry.question_kinds and entry.yields_graph] + [("triplet", "duels")]
    for kind, name in lines:
        per_screen = get_kind(kind).screen_seconds(get_kind(kind).check_settings(None))
        screens = [s / per_screen for s in seconds]
        started = time.process_time()
        hit3 = [planning.simulate_curve(name, scenario, screens, seed=r, kind=kind)[1] for r in range(args.runs)]
        cpu = (time.process_time() - started) / args.runs
        rows.append([kind, name, f"{per_screen:.1f}"] + [f"{v:.2f}" for v in np.nanmean(hit3, axis=0)]
                    + [f"{cpu:.1f}"])
    print_table(f"{args.items} clustered items (3-D, clusters of 10), human noise ({SCALE_GAPS} median gaps, lapse "
                f"{HUMAN_LAPSE}), {args.runs} runs — hit@3 by rater seconds per item",
                ["kind", "learner", "s/screen"] + [f"{s:g} s/item" for s in seconds] + ["CPU s/run"], rows)


if __name__ == "__main__":
    main()
