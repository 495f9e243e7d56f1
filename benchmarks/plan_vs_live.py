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
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from scipy.spatial.distance import cdist

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from engine.planning import METRICS, Scenario, nn_accuracy, plan  # noqa: E402
from simulation.oracles import HUMAN_LAPSE, HUMAN_SCALE, TripletOracle  # noqa: E402


def clustered_truth(n_items: int, seed: int = 0, cluster: int = 5, spread: float = 0.3) -> np.ndarray:
    """Distances (scaled to a largest of 1) of ``n_items`` points in clusters of ``cluster``."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0, 10, size=(-(-n_items // cluster), 2))
    X = np.repeat(centres, cluster, axis=0)[:n_items] + rng.normal(scale=spread, size=(n_items, 2))
    D = cdist(X, X)
    return D / D.max()


def live_curve(app, conn, distances: np.ndarray, scale: float, lapse: float, algorithm: str,
               budgets, seed: int, raters: int = 10, params: dict | None = None, through: str = "api",
               metric: str = "exact") -> np.ndarray:
    """Exact-NN accuracy (``metric="hit3"``: hit@3) a live study of ``algorithm`` reaches at each budget
    (answers per item).

    ``raters`` simulated raters each hold one question at a time and answer in turn; the worker runs
    the update jobs the web processes queued after every ``raters`` answers (one pass per round of
    the crowd, as a busy worker would). ``through="api"``: the raters take and answer questions
    through the Flask app's rater API; ``"store"``: through the two storage calls the API makes
    (``issue_question``: pop a pooled question or a fallback and record it as issued; ``accept_answer``:
    the answer script, which schedules the update) without HTTP, so a 1,000-item study fits in a
    test's time (``app`` is unused then)."""
    from rq import SimpleWorker

    from workers.store import keys
    from workers.store.answers import accept_answer
    from workers.store.config import StudyConfig
    from workers.store.questions import issue_question
    from workers.store.queue import enqueue_update, get_queue, schedule_update
    from workers.store.studies import Item, create_study

    if through not in ("api", "store"):
        raise ValueError(f"through must be 'api' or 'store', not {through!r}")

    def run_worker():
        SimpleWorker([get_queue(conn)], connection=conn).work(burst=True, logging_level="WARNING")

    n = len(distances)
    study_id = f"plan-vs-live-{algorithm.replace('_', '-')}-{seed}"
    config = StudyConfig.from_dict({"name": study_id, "random_state": seed,
                                    "algorithms": [{"algorithm": algorithm, "params": dict(params or {})}]})
    create_study(conn, config, [Item(id=f"i{i}", kind="text", text=f"item {i}") for i in range(n)],
                 study_id=study_id)
    schedule_update(conn, study_id)
    run_worker()
    oracle = TripletOracle(distances, noise=scale, model="human", lapse=lapse, random_state=seed + 1000)
    if through == "api":
        from webapp.handles import shown_index

        def index(item):
            return shown_index(app.config["SECRET_KEY"], study_id, item["handle"])

        crowd = [app.test_client() for _ in range(raters)]
        held = [c.get(f"/api/studies/{study_id}/questions/next").get_json()["question"] for c in crowd]
    else:
        def issue(r):
            now = time.time()
            return issue_question(conn, study_id, config, n, f"rater-{r}", now, now + 3600)[0]

        held = [issue(r) for r in range(raters)]
    label = config.algorithms[0].label
    out, total = [], 0
    for per_item in budgets:
        mark = int(round(per_item * n))
        while total < mark:
            for r in range(raters):
                q = held[r]
                # the wire names items by handles: read with the app's secret key
                head, (a, b) = ((index(q["head"]), [index(c) for c in q["candidates"]]) if through == "api"
                                else (q["head"], q["candidates"]))
                if through == "api":
                    pick = q["candidates"][[a, b].index(oracle(head, a, b))]["handle"]
                    body = crowd[r].post(f"/api/studies/{study_id}/answers",
                                         json={"token": q["token"], "choice": pick}).get_json()
                    held[r] = body["next"]
                    if held[r] is None:
                        raise RuntimeError(f"the study stopped asking after {total} answers: {body.get('done')}")
                else:
                    _, scheduled = accept_answer(conn, study_id, q, f"rater-{r}", oracle(head, a, b),
                                                 issued_at=time.time(), response_ms=1500, used_ttl=3600)
                    if scheduled:
                        enqueue_update(conn, study_id)
                    held[r] = issue(r)
                total += 1
            run_worker()
        run_worker()
        summary = json.loads(conn.hget(keys.engine_stats(study_id), "summary"))[label]
        out.append(nn_accuracy(np.asarray(summary["neighbors"]), distances)[METRICS.index(metric)])
    return np.array(out)


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
