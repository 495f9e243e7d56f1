"""Benchmark 3 — engine speed and memory of ANNTri (engine CPU time only: the simulated
rater is excluded, and process time is used so other jobs on the machine do not count).

Table 1, the issue's yardstick: one full n = 100 run in the paper's Fig. 2 setting (10 × 10
circle clusters, σ = 0.1, δ = 0.1, rounds capped at 1e5, window 1, ``run`` asking
``next_questions(100)``), exact SETri (``lookahead=0``) and with ``lookahead=0.05``
(several SETri layers per call), against the ≈150 s the reference code spends. Exact
SETri makes ~400,000 ``next_questions`` + ``observe`` pairs of 1–2 questions each, and a
CPU-time clock read costs 0.5–2 µs on a shared machine, so ``run``'s per-call timers
(4 clock reads per pair) are a large share of what they measure. "engine s" therefore
replays the run: the answers ``run`` got are replayed, in the same calls, into a fresh
planner (it must ask exactly the same questions — checked), with ``current_neighbors``
at the same checkpoints and ``result()`` at the end, and one CPU clock around the whole
loop. "engine s (run timers)" is ``run``'s own figure, per-call clock reads included.

Table 2, growing n: hierarchical clusters (noise 0.05 × the median nearest-neighbour
distance), ANNTri with window 10 driven by ``next_questions(50)`` → answers → ``observe``
until the graph is finished or 2,000,000 answers were observed (300,000 above n = 2000); engine seconds per
1,000 answers and per ``next_questions`` call, the planner's arrays and the process's peak
RSS (each size runs in its own process, and the simulated rater computes distances per
asked pair, so the peak is the engine's own plus the interpreter's ≈ 70 MB).
    python benchmarks/anntri_speed.py            # n = 100, 1000, 2000, 5000
    python benchmarks/anntri_speed.py --quick    # n = 100, 1000; 1 Fig. 2 run, cap 1e4
"""
from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys
import time

import numpy as np
from anntri_common import fmt, table

from engine.anntri import ANNTri
from simulation.oracles import PointsOracle, circle_clusters, hierarchical_clusters, run

REFERENCE_SECONDS = 150.0


class Recording:
    """An oracle that keeps every batch of answers it gave (for :func:`replay_seconds`)."""

    def __init__(self, oracle):
        self.oracle, self.distances, self.batches = oracle, oracle.distances, []

    def answer(self, pairs):
        ans = self.oracle.answer(pairs)
        self.batches.append((list(pairs), ans))
        return ans


def replay_seconds(make_planner, batches, batch: int, checkpoint_growth: float = 1.05) -> float:
    """CPU seconds a fresh planner spends on the recorded run, measured with one clock read
    around the loop: the same ``next_questions(batch)`` calls (their questions must equal
    the recorded ones), the recorded answers, ``current_neighbors`` at ``run``'s
    checkpoints and ``result()`` at the end."""
    planner = make_planner()
    n = planner.n_items
    nq, ob, cn = planner.next_questions, planner.observe, planner.current_neighbors
    gc.collect()
    gc.freeze()  # the recording's ~10⁶ answer tuples are not the engine's to scan
    mismatches = 0
    total = 0
    next_mark = n
    t0 = time.process_time()
    cn()
    for asked, answers in batches:
        if nq(batch) != asked:
            mismatches += 1
        ob(answers)
        total += len(answers)
        if total >= next_mark:
            cn()
            next_mark = max(total * checkpoint_growth, total + n)
    last = nq(batch)
    cn()
    planner.result()
    seconds = time.process_time() - t0
    gc.unfreeze()
    if mismatches or last:
        raise RuntimeError("the replayed planner asked different questions")
    return seconds


def fig2_run(lookahead: float, cap: int, seed: int = 0) -> dict:
    X, _ = circle_clusters(random_state=seed, diameter=2.0, radial="linear")
    oracle = Recording(PointsOracle(X, noise=0.1, random_state=1000 + seed))

    def make():
        return ANNTri(len(X), sigma=0.1, delta=0.1, max_samples_per_round=cap, random_state=seed,
                      lookahead=lookahead)

    planner = make()
    res = run(planner, oracle, 10**10, batch=100)
    seconds = replay_seconds(make, oracle.batches, 100)
    return {"seconds": seconds, "run_seconds": res.engine_seconds, "calls": len(oracle.batches),
            "queries": res.total_queries, "error": float(res.error[-1]),
            "certified": int(planner.progress()["rounds_certified"])}


class PointsOnTheFly:
    """Noisy distance samples ||x_i - x_j|| + N(0, noise²) computed per asked pair, so the
    rater holds no n x n matrix and the peak RSS is the engine's own."""

    def __init__(self, X, noise, random_state):
        self.X, self.noise = X, noise
        self.rng = np.random.default_rng(random_state)

    def answer(self, pairs):
        idx = np.asarray(pairs, dtype=np.int64)
        d = np.sqrt(((self.X[idx[:, 0]] - self.X[idx[:, 1]]) ** 2).sum(axis=1))
        d = d + self.rng.normal(0.0, self.noise, size=len(d))
        return [(int(i), int(j), float(v)) for (i, j), v in zip(pairs, d, strict=True)]


def one_size(n: int, max_answers: int, window: int, batch: int) -> dict:
    X, _ = hierarchical_clusters(n, random_state=0)
    # Median nearest-neighbour distance from (up to) 500 rows, without an n x n matrix.
    rows = np.random.default_rng(0).choice(n, min(n, 500), replace=False)
    d = np.sqrt(((X[rows, None] - X[None]) ** 2).sum(-1))
    d[np.arange(len(rows)), rows] = np.inf
    noise = 0.05 * float(np.median(d.min(axis=1)))
    del d
    oracle = PointsOnTheFly(X, noise, random_state=0)
    planner = ANNTri(n, sigma=noise, window=window, max_samples_per_round=5000, random_state=0)
    t_next = t_obs = 0.0
    calls = answers = 0
    while answers < max_answers:
        t0 = time.process_time()
        qs = planner.next_questions(batch)
        t_next += time.process_time() - t0
        calls += 1
        if not qs:
            break
        ans = oracle.answer(qs)
        t0 = time.process_time()
        planner.observe(ans)
        t_obs += time.process_time() - t0
        answers += len(qs)
    t0 = time.process_time()
    graph = planner.result()
    t_res = time.process_time() - t0
    state_mb = sum(getattr(planner, k).nbytes for k in planner._ARRAYS) / 2**20
    return {"n": n, "answers": answers, "done": bool(planner.done), "t_obs": t_obs, "t_next": t_next,
            "calls": calls, "t_result": t_res, "state_mb": state_mb,
            "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "dtype": str(planner.upper_.dtype), "certified": int(graph.certified.sum())}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", type=int, nargs="+", default=None)
    ap.add_argument("--answers", type=int, default=None,
                    help="stop a size after this many answers (default: 2,000,000 up to n = 2000, "
                         "300,000 above; 30,000 with --quick)")
    ap.add_argument("--window", type=int, default=10)
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--cap", type=int, default=None, help="Fig. 2 round cap (default 1e5; 1e4 with --quick)")
    ap.add_argument("--no-fig2", action="store_true")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)  # internal: one size, JSON out
    ap.add_argument("--fig2-one", type=float, help=argparse.SUPPRESS)  # internal: one Fig. 2 run
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.sizes is None:
        a.sizes = [100, 1000] if a.quick else [100, 1000, 2000, 5000]
    def answers_for(n):
        if a.answers is not None:
            return a.answers
        return 30_000 if a.quick else (2_000_000 if n <= 2000 else 300_000)
    if a.cap is None:
        a.cap = 10_000 if a.quick else 100_000
    if a.one is not None:
        print(json.dumps(one_size(a.one, answers_for(a.one), a.window, a.batch)))
        return
    if a.fig2_one is not None:
        print(json.dumps(fig2_run(a.fig2_one, a.cap)))
        return
    if not a.no_fig2:
        rows = []
        for la in (0.0, 0.05):
            # Its own process: the recorded answers (~10⁶ tuples) must not inflate the peak RSS
            # the size runs below report (a child inherits its parent's peak).
            cmd = [sys.executable, __file__, "--fig2-one", str(la), "--cap", str(a.cap)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            rows.append([f"{la:g}", fmt(r["seconds"]), fmt(r["run_seconds"]), f"{r['calls']:,}",
                         fmt(1e6 * r["seconds"] / r["calls"]), f"{r['queries']:,}", fmt(r["error"]),
                         f"{r['certified']}/100", fmt(REFERENCE_SECONDS / r["seconds"])])
        print(f"One n = 100 Fig. 2 run (sigma 0.1, delta 0.1, round cap {a.cap:g}, window 1, "
              "next_questions(100)), engine CPU seconds (replayed, one clock read); reference ≈ 150 s")
        table(["lookahead", "engine s", "engine s (run timers)", "calls", "µs/call pair", "queries",
               "final error", "certified", "150 s / engine s"], rows)
        print(flush=True)
    rows = []
    for n in a.sizes:
        cmd = [sys.executable, __file__, "--one", str(n), "--answers", str(answers_for(n)),
               "--window", str(a.window), "--batch", str(a.batch)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        eng = r["t_obs"] + r["t_next"]
        k = max(r["answers"], 1) / 1000
        rows.append([n, f"{r['answers']:,}", "yes" if r["done"] else "no", fmt(eng), fmt(r["t_obs"] / k),
                     fmt(1000 * r["t_next"] / r["calls"]), fmt(eng / k), fmt(r["t_result"]),
                     fmt(r["state_mb"]), fmt(r["rss_mb"]), r["dtype"]])
        print(f"n={n} done", file=sys.stderr, flush=True)
    print(f"ANNTri engine speed (hierarchical clusters, noise 0.05 x median NN distance, window "
          f"{a.window}, next_questions({a.batch}), round cap 5000; a size stops when finished or "
          "after 2,000,000 answers (300,000 above n = 2000; --answers overrides))")
    table(["n", "answers", "finished", "engine s", "observe s/1k ans", "next_questions ms/call",
           "engine s/1k ans", "result() s", "state MB", "peak RSS MB", "bound dtype"], rows)


if __name__ == "__main__":
    main()
