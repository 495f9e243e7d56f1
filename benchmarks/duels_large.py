"""Benchmark — what a live pass of the default learner (candidate duels) costs at many items.

A study of n items whose refit has been put in place (an embedding in 4 dimensions, every head's
shortlist built from it) and ``--duels`` answered duels per head; then, as a worker's update pass
runs it: plan ``--batch`` questions (pool mode), observe their answers, and ask what every pass and
the dashboard's summary ask — ``done`` (every head certified?) and the graph. Reported per n, in
milliseconds: the pass's planning and observing, ``done`` and the graph as a pass after the previous
look finds them (only the heads the pass changed are read again), and the same with every head read
again (what each look cost before results were kept between looks, and what the first look after a
refit costs), with the ratio of the two in the same run.

    python benchmarks/duels_large.py                       # n = 1000, 10000, 50000
    python benchmarks/duels_large.py --items 50000 --batch 1000
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.duels import CandidateDuels  # noqa: E402


def fitted_study(n: int, duels: int, seed: int = 0) -> CandidateDuels:
    """A planner at n items just after a refit was put in place, ``duels`` answered duels per head."""
    rng = np.random.default_rng(seed)
    p = CandidateDuels(n, random_state=seed)
    p.pool = True
    p.embedding_, p.n_fits_ = rng.normal(size=(n, 4)), 1
    p._shortlists_from_fit(0)
    p.kappa_ = 4.0
    h = np.repeat(np.arange(n), duels)
    w = p.cands_.shape[1]
    i = rng.integers(0, w, size=len(h))
    j = (i + rng.integers(1, w, size=len(h))) % w
    a, b = p.cands_[h, i], p.cands_[h, j]
    p.observe(np.column_stack([h, a, b, np.where(rng.random(len(h)) < 0.5, a, b)]))
    p.fitted_on_ = p.n_answers_  # the refit covers them: no refit falls due in the passes below
    return p


def ms(f) -> float:
    t = time.perf_counter()
    f()
    return 1000.0 * (time.perf_counter() - t)


def measure(n: int, duels: int, batch: int, passes: int) -> dict:
    p = fitted_study(n, duels)
    p.neighbor_graph(1)  # the first look after the refit: every head
    p.done  # noqa: B018
    rows = {"plan": [], "observe": [], "done": [], "graph": [], "done_all": [], "graph_all": []}
    for _ in range(passes):
        t = time.perf_counter()
        qs = p.next_questions(batch)
        rows["plan"].append(1000.0 * (time.perf_counter() - t))
        answers = [(h, a, b, a) for h, a, b in qs]
        rows["observe"].append(ms(lambda answers=answers: p.observe(answers)))
        rows["done"].append(ms(lambda: p.done))
        rows["graph"].append(ms(lambda: p.neighbor_graph(1)))
        p._certified_rows = p._ranked_rows_kept = None  # every head read again
        rows["done_all"].append(ms(lambda: p.done))
        rows["graph_all"].append(ms(lambda: p.neighbor_graph(1)))
    return {name: float(np.median(v)) for name, v in rows.items()}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", default="1000,10000,50000")
    ap.add_argument("--duels", type=int, default=6, help="answered duels per head before the passes")
    ap.add_argument("--batch", type=int, default=500, help="questions planned and answered per pass")
    ap.add_argument("--passes", type=int, default=5, help="passes measured (medians reported)")
    args = ap.parse_args(argv)
    print(f"# duels, one live pass of {args.batch} answers after {args.duels} duels per head "
          f"(median of {args.passes} passes, ms)\n")
    print(f"{'items':>7}  {'plan':>7}  {'observe':>7}  {'done':>7}  {'graph':>7}  "
          f"{'done, all heads':>15}  {'graph, all heads':>16}  {'kept / all':>10}")
    for n in (int(x) for x in args.items.split(",")):
        r = measure(n, args.duels, args.batch, args.passes)
        ratio = (r["done"] + r["graph"]) / max(r["done_all"] + r["graph_all"], 1e-9)
        print(f"{n:>7}  {r['plan']:>7.1f}  {r['observe']:>7.1f}  {r['done']:>7.1f}  {r['graph']:>7.1f}  "
              f"{r['done_all']:>15.1f}  {r['graph_all']:>16.1f}  {ratio:>10.3f}", flush=True)


if __name__ == "__main__":
    main()
