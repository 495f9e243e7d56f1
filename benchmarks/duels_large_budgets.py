"""Benchmark — the default learner in a large study at small budgets: hit@3 against answers per item,
next to random triplets + an embedding, and what its warmup does.

Offline (``make_planner``, one question per head per call, refits finished), clustered 4-D points as
dense at any size (``live_serve.points``: clusters of 20, unit spread), the human noise model (logistic
0.1 of the unit spread, lapse 0.1); every learner scored anytime at each budget of one run. The peer:
random triplets answered by the same crowd and the best of ``--peer-dims`` t-STE embeddings (the
learner's own models; ``engine.embedding.select_embedding``). Three decimals: at 50,000 items chance
is 6e-05. Rows: duels as the registry makes it (``warmup="auto"``) and with each ``--warmups``::

    python benchmarks/duels_large_budgets.py                         # 5,000 items, 10/20/30/50 per item
    python benchmarks/duels_large_budgets.py --items 10000 --budgets 10,20,50 --warmups 3
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from harness import offline, peer, points  # noqa: E402

from engine.duels.fits import auto_warmup  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=5000)
    ap.add_argument("--budgets", default="10,20,30,50", help="answers per item")
    ap.add_argument("--warmups", default="3,6", help="fixed warmups to compare with the automatic one ('' for none)")
    ap.add_argument("--peer-dims", default="4", help="the peer's t-STE dimensions (4: the truth's)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    n, budgets = args.items, [int(b) for b in args.budgets.split(",")]
    X = points(n, args.seed)
    rows = []

    def row(name, run):
        t0 = time.process_time()
        res = run()
        rows.append((name, res, time.process_time() - t0))
        print(f"{name:<34}" + "".join(f"  {h:.3f} ({e:.3f})" for e, h in res) + f"   {rows[-1][2]:.0f} s", flush=True)

    print(f"{n} clustered items, hit@3 (exact) at {', '.join(map(str, budgets))} answers per item; CPU seconds")
    row("random triplets + embedding", lambda: peer(X, 0.1, 0.1, budgets, args.seed,
                                                     dims=tuple(int(d) for d in args.peer_dims.split(",")),
                                                     kernels=("tste",)))
    row(f"duels, warmup auto ({auto_warmup(n):.1f})", lambda: offline(X, 0.1, 0.1, budgets, args.seed))
    for w in [float(w) for w in args.warmups.split(",") if w]:
        row(f"duels, warmup {w:g}", lambda w=w: offline(X, 0.1, 0.1, budgets, args.seed, {"warmup": w}))


if __name__ == "__main__":
    main()
