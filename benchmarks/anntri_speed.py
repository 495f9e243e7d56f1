"""Benchmark 3 — engine speed and memory of ANNTri at n = 100, 1000, 2000, 5000.

Drives ANNTri (window 10) on noisy clustered points and reports engine seconds per
1,000 observed answers, per ``next_questions`` call, per O(n²) row refresh, and the
state's memory. ``--quick`` runs n = 100, 1000 with fewer answers.
    python benchmarks/anntri_speed.py [--quick] [--sizes 100 1000 2000 5000]
"""
from __future__ import annotations

import argparse
import resource
import time

from anntri_common import fmt, table

from engine.anntri import ANNTri
from engine.oracles import PointsOracle, hierarchical_clusters


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 2000, 5000])
    ap.add_argument("--answers", type=int, default=20_000, help="answers observed per size")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.sizes, a.answers = [100, 1000], 5_000
    rows = []
    for n in a.sizes:
        X, _ = hierarchical_clusters(n, random_state=0)
        oracle = PointsOracle(X, noise=0.05, random_state=0)
        planner = ANNTri(n, sigma=0.05, window=10, random_state=0)
        t_next = t_obs = 0.0
        calls = answers = 0
        while answers < a.answers:
            t0 = time.perf_counter()
            qs = planner.next_questions(50)
            t_next += time.perf_counter() - t0
            calls += 1
            if not qs:
                break
            ans = oracle.answer(qs)
            t0 = time.perf_counter()
            planner.observe(ans)
            t_obs += time.perf_counter() - t0
            answers += len(qs)
        state_mb = sum(getattr(planner, k).nbytes for k in planner._ARRAYS) / 2**20
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        from engine.triangle import refresh_row
        t0 = time.perf_counter()
        refresh_row(planner.upper_, planner.lower_, 0)
        t_row = time.perf_counter() - t0
        rows.append([n, answers, fmt(t_obs * 1000 / max(answers, 1)), fmt(1000 * t_next / calls),
                     fmt(1000 * t_row), fmt((t_obs + t_next) * 1000 / max(answers, 1)),
                     fmt(state_mb), fmt(rss_mb), str(planner.upper_.dtype)])
        del planner
    print("ANNTri engine speed (window 10, next_questions(50), noisy hierarchical clusters)")
    table(["n", "answers", "observe s/1k ans", "next_questions ms/call", "row refresh ms",
           "engine s/1k ans", "state MB", "peak RSS MB", "bound dtype"], rows)


if __name__ == "__main__":
    main()
