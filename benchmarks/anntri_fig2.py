"""Benchmark 1 — the ANNTri paper's Fig. 2: 10 clusters × 10 points around a circle, σ = 0.1.

Two tables, both means over seeds:

- Per round (the paper's Fig. 2b): rounds run one at a time in their random order; for
  round j, the error at t is whether j's current best (argmin of D̂[j, ·] over the arms not
  eliminated) is wrong after t samples taken *in round j* (samples of earlier rounds are
  reused by symmetry, and triangle bounds from them eliminate arms before round j samples
  at all). A finished round keeps its final answer. "Random" here samples round j's arms
  uniformly (all a != j), with the same estimates and stopping rule as ANN.
- Global: share of items whose current best is wrong against total queries per item, with
  the engine's ``RandomSampling`` (uniform pairs over the whole matrix).

Geometry (default, as in the paper's published experiment code): clusters are discs of
diameter 2 (radius 1), neighbouring discs 10% of the diameter apart (centres 2.2 apart,
circle radius ≈ 3.56), the distance of a point to its disc centre uniform in [0, 1]
("linear"); σ = 0.1. ``--diameter 1 --radial uniform`` gives the earlier, 4× harder data.
    python benchmarks/anntri_fig2.py            # 20 seeds, rounds capped at 1e5 (paper)
    python benchmarks/anntri_fig2.py --quick    # 3 seeds, cap 1e4 (unless --seeds/--cap given)
"""
from __future__ import annotations

import argparse

import numpy as np
from anntri_common import PLANNERS, fmt, quick_defaults, table

from engine.anntri import ANN
from simulation.oracles import PointsOracle, circle_clusters, run

GRID = [0, 3, 10, 30, 100, 300, 1000, 3000, 10000]
ROUND_GRID = [0, 1, 3, 10, 30, 100, 300, 1000, 3000, 10000, 30000, 100000]


class RoundRandom(ANN):
    """The paper's per-round Random: round j samples its arms uniformly (ANN's stopping rule)."""

    def _eligible(self, j):
        if self._decide_round(j) is None:
            return None
        arms = np.flatnonzero((np.arange(self.n_items) != j) & (self.pending_[j] == 0))
        return self.rng_.permutation(arms).tolist()


ROUND_PLANNERS = {"ANNTri": PLANNERS["ANNTri"], "ANN": ANN, "Random": RoundRandom}


def per_round_errors(planner, oracle, grid, nn_dist):
    """Drive ``planner`` (window 1) round by round; error of every round at each grid t.

    Returns (errors of shape (n_rounds, len(grid)), total queries, finished).
    """
    n = planner.n_items
    D = oracle.distances
    err = {}  # round -> {t: wrong}
    total = 0

    def wrong(j):
        best, t = planner.round_best(j)
        return t, float(D[j, best[0]] > nn_dist[j] + 1e-9)

    while True:
        planner.progress()  # settle: close the round its answers decided
        if planner.open_rounds_:
            j = planner.open_rounds_[0]
            t = int(planner.round_issued_[j])
            nxt = next((g for g in grid if g > t), None)
            budget = (nxt - t) if nxt is not None else n
        else:
            budget = 1
        qs = planner.next_questions(budget)
        if not qs:
            break
        for r in {q[0] for q in qs}:
            if r not in err:  # a round's first questions: score it at t = 0 first
                err[r] = {0: wrong(r)[1]}
        planner.observe(oracle.answer(qs))
        total += len(qs)
        for r in {q[0] for q in qs}:
            t, w = wrong(r)
            if t in grid:
                err[r][t] = w
    out = np.empty((n, len(grid)))
    for j in range(n):
        best = planner.current_neighbors()[j]
        final = float(D[j, best[0]] > nn_dist[j] + 1e-9)
        rec = err.get(j, {})
        for c, g in enumerate(grid):
            past = [t for t in rec if t <= g]
            t_last = max(past) if past else None
            # Still inside the round at g: its recorded error; past its end: final answer.
            if t_last is not None and (t_last == g or planner.round_issued_[j] > t_last):
                out[j, c] = rec[t_last]
            else:
                out[j, c] = final
    return out, total, bool(planner.done)


def error_at(res, n, q):
    idx = np.searchsorted(res.queries, q * n, side="right") - 1
    return res.error[max(idx, 0)]


def fig2_runs(planners, a, data):
    """Each seed's circle clusters, then each of ``planners`` on them: yields (name, planner,
    oracle), the planner with ``a``'s σ and round cap, δ = 0.1, and a fresh oracle per planner."""
    for seed in range(a.seeds):
        X, _ = circle_clusters(random_state=seed, **data)
        n = len(X)
        for name, cls in planners.items():
            oracle = PointsOracle(X, noise=a.sigma, random_state=1000 + seed)
            planner = cls(n, sigma=a.sigma, delta=0.1, max_samples_per_round=a.cap, random_state=seed)
            yield name, planner, oracle


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", type=int, default=None, help="default 20 (3 with --quick)")
    ap.add_argument("--cap", type=int, default=None, help="round cap, default 1e5 (1e4 with --quick)")
    ap.add_argument("--sigma", type=float, default=0.1)
    ap.add_argument("--random-budget", type=float, default=None,
                    help="Random's queries per item (default: the largest grid point)")
    ap.add_argument("--diameter", type=float, default=2.0, help="cluster disc diameter")
    ap.add_argument("--radial", choices=("linear", "uniform"), default="linear",
                    help="distance to the disc centre uniform (linear) or area-uniform")
    ap.add_argument("--no-global", action="store_true", help="per-round table only")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    quick_defaults(a, seeds=(3, 20), cap=(10_000, 100_000))
    data = dict(diameter=a.diameter, radial=a.radial)
    print(f"Fig. 2 setting: 10 clusters x 10 points, discs of diameter {a.diameter:g} "
          f"({a.radial} radius), gap 10% of diameter, sigma={a.sigma}, delta=0.1, "
          f"round cap {a.cap}, {a.seeds} seeds")
    rgrid = [g for g in ROUND_GRID if g <= a.cap]
    rcurves = {name: [] for name in ROUND_PLANNERS}
    rtotals = {name: [] for name in ROUND_PLANNERS}
    rfinished = {name: 0 for name in ROUND_PLANNERS}
    for name, planner, oracle in fig2_runs(ROUND_PLANNERS, a, data):
        D = np.array(oracle.distances, dtype=np.float64)
        np.fill_diagonal(D, np.inf)
        e, tot, fin = per_round_errors(planner, oracle, rgrid, D.min(axis=1))
        rcurves[name].append(e.mean(axis=0))
        rtotals[name].append(tot)
        rfinished[name] += fin
    print("\nPer round (paper's Fig. 2b): mean error of a round's current best after t "
          "samples in that round")
    rows = [[t] + [fmt(float(np.mean([c[i] for c in rcurves[nm]]))) for nm in ROUND_PLANNERS]
            for i, t in enumerate(rgrid)]
    table(["samples in round"] + list(ROUND_PLANNERS), rows)
    print("\nPer-round run: total queries to finish (mean over seeds)")
    base = float(np.mean(rtotals["Random"]))
    rows = [[nm, fmt(float(np.mean(rtotals[nm]))), fmt(float(np.mean(rtotals[nm])) / 100),
             f"{rfinished[nm]}/{a.seeds}", fmt(base / float(np.mean(rtotals[nm])))]
            for nm in ROUND_PLANNERS]
    table(["planner", "queries", "queries/item", "finished", "Random / planner"], rows)
    if a.no_global:
        return
    grid = [g for g in GRID]
    rb = a.random_budget or grid[-1]
    curves = {name: [] for name in PLANNERS}
    totals = {name: [] for name in PLANNERS}
    finished = {name: 0 for name in PLANNERS}
    secs = {name: 0.0 for name in PLANNERS}
    for name, planner, oracle in fig2_runs(PLANNERS, a, data):
        n = planner.n_items
        budget = int(rb * n) if name == "Random" else 10**9
        res = run(planner, oracle, budget)
        curves[name].append([error_at(res, n, q) for q in grid])
        totals[name].append(res.total_queries)
        finished[name] += res.finished
        secs[name] += res.engine_seconds
    print(f"\nGlobal (all rounds together), Random = uniform pairs stopped at {rb:g} "
          "queries/item: mean error rate at q total queries per item")
    rows = [[q] + [fmt(float(np.mean([c[i] for c in curves[nm]]))) for nm in PLANNERS]
            for i, q in enumerate(grid)]
    table(["queries/item"] + list(PLANNERS), rows)
    print("\nGlobal run: total queries to finish (mean over seeds)")
    rows = [[nm, fmt(float(np.mean(totals[nm]))), fmt(float(np.mean(totals[nm])) / 100),
             f"{finished[nm]}/{a.seeds}", fmt(secs[nm] / a.seeds)] for nm in PLANNERS]
    table(["planner", "queries", "queries/item", "finished", "engine s/run"], rows)


if __name__ == "__main__":
    main()
