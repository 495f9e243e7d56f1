"""Benchmark 2 — query efficiency at scale on hierarchical clusters (the paper's Thm 4.6).

Data: ``hierarchical_clusters(n)`` (leaf clusters of ~log2 n points, split recursively
along a binary tree), Gaussian noise σ = ``--noise-rel`` × the median nearest-neighbour
distance. The script prints how many points satisfy the paper's cluster condition (12),
2·d(i, j) + 6·C(1) <= d(i, k) for i, j in a leaf cluster and k outside it, with C(1) the
LIL radius after one sample — Thm 4.6 assumes it at every level of the tree.

Metric (the paper's §5 error rate, no tolerance): after q total queries, the share of
items whose current best neighbour (argmin of D̂ over the not-eliminated; certified answer
once a round is certified) is not their true nearest neighbour (an exact tie counts as
right). Reported: total queries per item before the error first drops to 10%, 5% and 0%.
The error is recorded at checkpoints every 2% more queries, so figures are within 2%.

Planners: ANNTri with window 1 (the paper's sequential rounds), ANNTri and ANN with
``--window`` rounds open at once (a round stuck on a near-tie then no longer holds every
later round back), and Random (uniform pairs; stopped at ``--random-factor`` × ANNTri
window-1's total, or at 0% error; — = not reached). Rounds are capped at ``--cap`` questions.
A second table adds ANNTri with ``--window2`` rounds and both windows with ``stagger=True``
(a round opens only as others pass their first layer, so rounds opened together no
longer sample whole rows blind), against the same Random run.
    python benchmarks/anntri_scale.py                 # n = 100, 200, 500, 1000
    python benchmarks/anntri_scale.py --quick         # n = 100, 200, 1 seed
"""
from __future__ import annotations

import argparse

import numpy as np
from anntri_common import PLANNERS, fmt, table

from engine.bounds import lil_radius
from simulation.oracles import PointsOracle, hierarchical_clusters, run

ERRORS = (0.1, 0.05, 0.0)


def condition_12(D, leaf, c1):
    """Share of points i with 2·max_{j in C(i)} d(i, j) + 6·C(1) <= min_{k not in C(i)} d(i, k)."""
    same = leaf[:, None] == leaf[None, :]
    intra = np.where(same, D, 0.0).max(axis=1)
    inter = np.where(same, np.inf, D).min(axis=1)
    return float(np.mean(2 * intra + 6 * c1 <= inter))


def run_until(planner, oracle, budget, **kw):
    return run(planner, oracle, budget, checkpoint_growth=1.02, **kw)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", type=int, nargs="+", default=None)
    ap.add_argument("--seeds", type=int, default=None, help="default 2 (1 with --quick)")
    ap.add_argument("--noise-rel", type=float, default=0.05,
                    help="noise sigma as a share of the median nearest-neighbour distance")
    ap.add_argument("--shrink", type=float, default=0.35, help="hierarchical_clusters(shrink=...)")
    ap.add_argument("--cap", type=int, default=5000)
    ap.add_argument("--window", type=int, default=20)
    ap.add_argument("--window2", type=int, default=50)
    ap.add_argument("--random-factor", type=float, default=40.0)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.sizes is None:
        a.sizes = [100, 200] if a.quick else [100, 200, 500, 1000]
    if a.seeds is None:
        a.seeds = 1 if a.quick else 2
    names = ["ANNTri w=1", f"ANNTri w={a.window}", f"ANN w={a.window}", "Random"]
    more = [f"ANNTri w={a.window2}", f"ANNTri w={a.window} stagger", f"ANNTri w={a.window2} stagger"]
    names += more
    rows, rows2, extra = [], [], []
    for n in a.sizes:
        reach = {nm: {e: [] for e in ERRORS} for nm in names}
        totals = {nm: [] for nm in names}
        cond = []
        for seed in range(a.seeds):
            X, leaf = hierarchical_clusters(n, shrink=a.shrink, random_state=seed)
            D = np.sqrt(((X[:, None] - X[None]) ** 2).sum(-1))
            Dn = D + np.diag(np.full(n, np.inf))
            noise = a.noise_rel * float(np.median(Dn.min(axis=1)))
            cond.append(condition_12(D, leaf, float(lil_radius(1, n, 0.1, noise))))
            first_total = None
            for name in names:
                oracle = PointsOracle(X, noise=noise, random_state=100 + seed)
                kind = name.split()[0]
                window = int(name.split()[1][2:]) if kind != "Random" else 1
                kw = {} if kind == "Random" else {"window": window, "stagger": name.endswith("stagger")}
                planner = PLANNERS[kind](n, sigma=noise, max_samples_per_round=a.cap,
                                         random_state=seed, **kw)
                if kind == "Random":
                    res = _random_until_exact(planner, oracle, int(a.random_factor * first_total))
                else:
                    res = run_until(planner, oracle, 10**10)
                if first_total is None:
                    first_total = res.total_queries
                totals[name].append(res.total_queries)
                for e in ERRORS:
                    reach[name][e].append(res.queries_to_reach(e))
        for e in ERRORS:
            m = {nm: float(np.mean(reach[nm][e])) / n for nm in names}
            best = m[names[1]]
            rows.append([n, f"{e:.0%}"] + [fmt(m[nm]) for nm in names[:4]]
                        + [fmt(m["Random"] / m[names[0]]), fmt(m["Random"] / best), fmt(m[names[2]] / best)])
            rows2.append([n, f"{e:.0%}"] + [fmt(m[nm]) for nm in [names[1]] + more + ["Random"]]
                         + [fmt(m["Random"] / m[nm]) for nm in more[1:]])
        extra.append([n, f"{float(np.mean(cond)):.2f}"] + [fmt(float(np.mean(totals[nm])) / n) for nm in names])
        print(f"n={n} done", flush=True)
    print(f"\nQueries per item to first reach an error rate (hierarchical clusters, shrink {a.shrink:g}, "
          f"noise sigma = {a.noise_rel:g} x median NN distance, delta 0.1, LIL bounds, round cap {a.cap}, "
          f"mean of {a.seeds} seed(s); error = share of items whose current best is not the true NN; "
          f"Random stopped at {a.random_factor:g}x ANNTri w=1's total or at 0% error, — = not reached)")
    table(["n", "error"] + names[:4] + ["Random / ANNTri w=1", f"Random / ANNTri w={a.window}",
                                         f"ANN / ANNTri w={a.window}"], rows)
    print("\nThe same, larger window and staggered opening (stagger=True); Random as above")
    table(["n", "error", names[1]] + more + ["Random"] + [f"Random / {nm}" for nm in more[1:]], rows2)
    print("\nTotal queries per item when each run stopped, and the share of points satisfying the "
          "paper's cluster condition (12) at the leaf level")
    table(["n", "(12) holds"] + names, extra)


def _random_until_exact(planner, oracle, budget):
    """Random in slices, stopping early once its error has reached 0 (a run has no such hook)."""
    from simulation.oracles import RunResult

    queries, errors, done = [], [], 0
    res = None
    step = max(budget // 8, planner.n_items)
    engine = 0.0
    while done < budget:
        res = run_until(planner, oracle, min(step, budget - done))
        queries.append(res.queries[1:] + done if queries else res.queries + done)
        errors.append(res.error[1:] if len(errors) else res.error)
        done += res.total_queries
        engine += res.engine_seconds
        if res.error[-1] == 0.0 or res.total_queries == 0:
            break
    return RunResult(np.concatenate(queries), np.concatenate(errors), done, res.finished, engine, res.graph)


if __name__ == "__main__":
    main()
