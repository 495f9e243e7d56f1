"""Benchmark — does ``proxima plan`` predict what a live study then reaches?

The plan (``engine.planning.plan``: learners driven in-process, no Redis) against the same study
run through the real serving path in-process: the study stored in a real Redis (the embedded
server), simulated raters (simulation.oracles' human logistic + lapse model, the one the plan uses)
answering through the Flask app's rater API (pool, sealed tokens, the answer script, fallbacks
when a pool runs dry), RQ update passes applying the answers, and the accuracy read from the
learner summary the dashboard shows. Truth: clustered points (clusters of 5 in the plane), so the
answer is known.

    python benchmarks/plan_vs_live.py                      # 300 items, duels, 10 and 20 answers/item
    python benchmarks/plan_vs_live.py --items 60 --budgets 10,20,50 --algorithm anntri
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from engine.planning import Scenario, plan  # noqa: E402
from simulation.oracles import HUMAN_LAPSE, HUMAN_SCALE  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from harness import clustered_truth, live_curve  # noqa: E402, F401


def compare(n_items: int, algorithm: str, budgets, live_seeds: int, plan_runs: int, raters: int = 10,
            scale: float = HUMAN_SCALE, lapse: float = HUMAN_LAPSE, truth_seed: int = 0, app=None, conn=None,
            cluster: int = 5, spread: float = 0.3, batch: int | None = None):
    """(plan mean, live mean, live per seed, plan seconds, live seconds) at each budget."""
    from engine.planning import DEFAULT_BATCH

    D = clustered_truth(n_items, truth_seed, cluster, spread)
    t0 = time.perf_counter()
    p = plan([Scenario(D, scale, lapse)], [algorithm], budgets, runs=plan_runs, batch=batch or DEFAULT_BATCH)
    planned = p.exact[0].mean(axis=0)
    plan_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    live = np.array([live_curve(app, conn, D, scale, lapse, algorithm, budgets, seed, raters)
                     for seed in range(live_seeds)])
    return planned, live.mean(axis=0), live, plan_seconds, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=300)
    ap.add_argument("--algorithm", default="duels")
    ap.add_argument("--budgets", default="10,20")
    ap.add_argument("--live-seeds", type=int, default=2)
    ap.add_argument("--plan-runs", type=int, default=3)
    ap.add_argument("--raters", type=int, default=10)
    ap.add_argument("--cluster", type=int, default=5, help="items per cluster (2: pairs)")
    ap.add_argument("--spread", type=float, default=0.3, help="sd of a cluster around its centre (centres in 10x10)")
    ap.add_argument("--batch", type=int, default=None, help="the plan's questions per refill (default: the plan's)")
    a = ap.parse_args()
    budgets = [float(x) for x in a.budgets.split(",")]

    import redis

    from webapp import create_app
    from webapp.cli.embedded import EmbeddedRedis

    with tempfile.TemporaryDirectory() as tmp:
        store = EmbeddedRedis(Path(tmp) / "redis", appendfsync="everysec")
        url = store.start()
        try:
            conn = redis.Redis.from_url(url)
            app = create_app({"TESTING": True, "REDIS_URL": url, "SECRET_KEY": "benchmark",
                              "RATE_LIMIT_EXEMPT_ADDRESSES": ("127.0.0.1",)})
            planned, live, runs, plan_s, live_s = compare(a.items, a.algorithm, budgets, a.live_seeds, a.plan_runs,
                                                          a.raters, app=app, conn=conn, cluster=a.cluster,
                                                          spread=a.spread, batch=a.batch)
        finally:
            store.stop()
    print(f"{a.algorithm}, {a.items} items in clusters of {a.cluster} (sd {a.spread}), "
          f"human noise (scale {HUMAN_SCALE}, lapse {HUMAN_LAPSE}), "
          f"{a.raters} raters; plan {a.plan_runs} runs in {plan_s:.1f} s, live {a.live_seeds} seeds in {live_s:.1f} s")
    print("answers/item | plan exact | live exact (mean) | live runs | gap (live - plan)")
    for b, per_item in enumerate(budgets):
        print(f"{per_item:12g} | {planned[b]:10.3f} | {live[b]:17.3f} | "
              f"{' '.join(f'{x:.3f}' for x in runs[:, b])} | {live[b] - planned[b]:+.3f}")


if __name__ == "__main__":
    main()
