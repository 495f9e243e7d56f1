"""Benchmark — what each learner holds in memory, against the model the table of algorithms states.

Every algorithm of ``engine/registry.py`` that asks triplets runs as a live pool (``drive_as_pool``,
refits inside the calls), on ``--items`` random points in 3-D, answered exactly, to ``--per-item``
answers per item, in a process of its own; the peak resident memory it added over the bare
interpreter (ru_maxrss) is printed next to what its ``Memory`` entry predicts (the numbers
``proxima create`` refuses a study by). The per-pair figure of an n x n learner is the growth
between the two sizes over the growth of n^2.

    python benchmarks/engine_memory.py                     # n = 2000, 4000; 5 answers per item
    python benchmarks/engine_memory.py --items 4000,8000 --algorithms duels,anntri
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]


def measure(algorithm: str, n: int, per_item: float, seconds: float) -> dict:
    import numpy as np

    from engine.planners import make_planner
    from engine.registry import drive_as_pool

    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 3))
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    planner = drive_as_pool(make_planner(algorithm, n, question_kind="triplet", random_state=0))
    total, started = 0, time.monotonic()
    while total < per_item * n and time.monotonic() - started < seconds:
        qs = planner.next_questions(500)
        if not qs:
            break
        q = np.asarray(qs)
        d1 = ((X[q[:, 0]] - X[q[:, 1]]) ** 2).sum(1)
        d2 = ((X[q[:, 0]] - X[q[:, 2]]) ** 2).sum(1)
        first = (d1 <= d2).tolist()
        planner.observe([(h, a, b, a if f else b) for (h, a, b), f in zip(q.tolist(), first, strict=True)])
        total += len(qs)
    planner.to_state()
    planner.neighbor_graph(1)
    return {"answers": total, "peak": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024.0}


def main(argv=None) -> None:
    from engine.registry import ALGORITHMS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", default="2000,4000")
    ap.add_argument("--per-item", type=float, default=5.0)
    ap.add_argument("--algorithms", default=",".join(n for n, e in ALGORITHMS.items() if "triplet" in e.question_kinds))
    ap.add_argument("--seconds", type=float, default=240.0, help="most time one run may take")
    ap.add_argument("--one", nargs=2, metavar=("ALGORITHM", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.one[0], int(args.one[1]), args.per_item, args.seconds)))
        return
    sizes = [int(x) for x in args.items.split(",")]
    print(f"{'algorithm':<18} {'items':>7} {'answers':>9} {'peak MB':>8} {'model MB':>9}")
    for name in args.algorithms.split(","):
        peaks = []
        for n in sizes:
            out = subprocess.run([sys.executable, __file__, "--one", name, str(n), "--per-item", str(args.per_item),
                                  "--seconds", str(args.seconds)], capture_output=True, text=True, check=True)
            got = json.loads(out.stdout.strip().splitlines()[-1])
            model = ALGORITHMS[name].memory.bytes(n, got["answers"])
            peaks.append((n, got["peak"]))
            print(f"{name:<18} {n:>7,} {got['answers']:>9,} {got['peak'] / 1e6:>8.0f} {model / 1e6:>9.0f}", flush=True)
        if len(peaks) >= 2:
            (n0, p0), (n1, p1) = peaks[0], peaks[-1]
            print(f"{'':<18} growth per added item pair: {(p1 - p0) / (n1 ** 2 - n0 ** 2):.1f} B "
                  f"(model {ALGORITHMS[name].memory.per_pair:g} B)")


if __name__ == "__main__":
    main()
