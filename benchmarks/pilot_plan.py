"""Benchmark — does a plan made from a pilot predict what a study needs?

A researcher runs a pilot (random triplets, ~10 answers per item), then ``proxima plan --pilot`` fits a
world to it (``simulation.noise.fit_pilot``: an embedding chosen by cross-validation, the smallest
dimension within a standard error of the best; the raters' noise the human model's, 0.080 of the world's
robust range, unless the pilot shows worse raters) and simulates the learner in that world. Here the truth
is known, so the same plan is also made from the truth (``plan_vs_live.py`` shows that plan matches the
live study through the real serving path), and ``--live-seeds`` runs the live study too (the store path of
``plan_vs_live.live_curve``: the pool, the answer script, RQ passes). Reported: the answers per item each
predicts to reach the target, and the pilot plan's ratio to the truth's (goal: within ±30%). The truth's
plan takes ``--truth-runs`` runs: near hit@3 .8 the curve is flat, and two runs put the clustered truth's
need anywhere from 43 to 56 answers per item.

Truths: ``clustered`` (clusters of 5 in 3-D, sd 0.3 in a 10-wide cube: items varying on 3 factors) and
``uniform`` (uniform in the 3-D cube); raters: simulation.oracles' human model (logistic 0.075, lapse .03).
``--before`` also fits each pilot as cbcdfd1 did (``noise.NOISE_FROM_PRIOR`` False: the scale and the
lapse calibrated, the human model's scale as a share of the largest distance where the scale calibration
ran to its floor).

    python benchmarks/pilot_plan.py --items 100 --pilot-seeds 5,6,7,8
    python benchmarks/pilot_plan.py --items 1000 --truths clustered --pilot-seeds 5,6 --runs 2 --truth-runs 2
        --budgets 10,20,40,80,120,160,200,250,300,400   (one line; and --truths uniform)
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from scipy.spatial.distance import cdist

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

from harness import world_points  # noqa: E402

from engine.planning import METRICS, Scenario, plan, reach  # noqa: E402
from simulation import noise  # noqa: E402
from simulation.oracles import HUMAN_LAPSE, HUMAN_SCALE, TripletOracle  # noqa: E402


def truth(n: int, kind: str, seed: int = 0, dims: int = 3) -> np.ndarray:
    X = world_points(n, kind, seed, dims)
    D = cdist(X, X)
    return D / D.max()


def pilot(D: np.ndarray, per_item: float, seed: int) -> np.ndarray:
    """A pilot of uniformly random triplets answered by the human model: (head, winner, loser) rows."""
    rng = np.random.default_rng(seed)
    n = len(D)
    oracle = TripletOracle(D, noise=HUMAN_SCALE, model="human", lapse=HUMAN_LAPSE, random_state=seed)
    rows = []
    for _ in range(int(per_item * n)):
        h, a, b = (int(x) for x in rng.choice(n, 3, replace=False))
        w = oracle(h, a, b)
        rows.append((h, w, b if w == a else a))
    return np.array(rows)


def live(D: np.ndarray, budgets: list[float], seeds: int, metric: str) -> np.ndarray:
    import redis
    from harness import live_curve

    from webapp.cli.embedded import EmbeddedRedis

    with tempfile.TemporaryDirectory() as tmp:
        store = EmbeddedRedis(Path(tmp) / "redis", appendfsync="everysec")
        conn = redis.Redis.from_url(store.start())
        try:
            return np.mean([live_curve(None, conn, D, HUMAN_SCALE, HUMAN_LAPSE, "duels", budgets, s, through="store",
                                       metric=metric) for s in range(seeds)], axis=0)
        finally:
            store.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=100)
    ap.add_argument("--truths", default="clustered,uniform")
    ap.add_argument("--pilot", type=float, default=10, help="pilot answers per item")
    ap.add_argument("--budgets", default="5,10,20,30,40,50,60,80,120")
    ap.add_argument("--runs", type=int, default=8, help="plan runs (pilot: one bootstrap replicate each)")
    ap.add_argument("--truth-runs", type=int, default=16,
                    help="runs of the plan from the truth (0: pilots alone, no ratio; a slow run split in processes)")
    ap.add_argument("--metric", choices=METRICS, default="hit3")
    ap.add_argument("--target", type=float, default=0.8)
    ap.add_argument("--pilot-seeds", default="5", help="pilots drawn (comma-separated seeds)")
    ap.add_argument("--live-seeds", type=int, default=0)
    ap.add_argument("--before", action="store_true", help="also fit each pilot as cbcdfd1 did (noise calibrated)")
    ap.add_argument("--jobs", type=int, default=1, help="plan processes")
    a = ap.parse_args()
    budgets = [float(b) for b in a.budgets.split(",")]
    m = METRICS.index(a.metric)
    rows = []
    for kind in a.truths.split(","):
        D = truth(a.items, kind)
        truth_reach = None
        if a.truth_runs > 0:
            t0 = time.perf_counter()
            p = plan([Scenario(D, HUMAN_SCALE, HUMAN_LAPSE)], ["duels"], budgets, runs=a.truth_runs, jobs=a.jobs)
            curve = (p.exact if m == 0 else p.hit3)[0].mean(axis=0)
            truth_reach = reach(np.array(budgets), curve, a.target)
            print(f"{kind}: truth plan {np.round(curve, 3)} ({time.perf_counter() - t0:.0f} s)", flush=True)
            rows.append((kind, "plan from the truth", "", truth_reach, truth_reach, curve))
        if a.live_seeds:
            lc = live(D, budgets, a.live_seeds, a.metric)
            rows.append((kind, "live study (truth)", "", reach(np.array(budgets), lc, a.target), truth_reach, lc))
            print(f"{kind}: live {np.round(lc, 3)}", flush=True)
        for seed in (int(s) for s in a.pilot_seeds.split(",")):
            T = pilot(D, a.pilot, seed)
            for label, before in ([("pilot, before", True)] if a.before else []) + [("pilot plan", False)]:
                saved = noise.NOISE_FROM_PRIOR
                noise.NOISE_FROM_PRIOR = not before
                try:
                    t0 = time.perf_counter()
                    fit = noise.fit_pilot(T, a.items, replicates=a.runs)
                finally:
                    noise.NOISE_FROM_PRIOR = saved
                p = plan(list(fit.scenarios), ["duels"], budgets, runs=a.runs, jobs=a.jobs)
                curve = (p.exact if m == 0 else p.hit3)[0].mean(axis=0)
                world = f"{fit.kernel.upper()} {fit.dim}-D, lapse {fit.lapses[0]:.3f}"
                if fit.noise == "prior":
                    world += (f" ({'model' if fit.lapse_from_prior else 'measured'}), scale "
                              f"{fit.range_scales[0]:.3f} of the robust range = {fit.relative_scales[0]:.2f} median "
                              f"gaps ({'model' if fit.scale_from_prior else 'measured'})")
                else:
                    world += (f", scale {fit.relative_scales[0]:.2f}"
                              + (" (model, of the range)" if fit.scale_from_prior else f" (x{fit.calibration:.2f})"))
                rows.append((kind, f"{label} (seed {seed})", world, reach(np.array(budgets), curve, a.target),
                             truth_reach, curve))
                print(f"{kind}: {label} seed {seed}: {world}: {np.round(curve, 3)} "
                      f"({time.perf_counter() - t0:.0f} s)", flush=True)
    scales = ", ".join(f"{kind} {HUMAN_SCALE / noise.median_triplet_gap(truth(a.items, kind), 20_000):.2f} "
                       f"({HUMAN_SCALE / noise.robust_range(truth(a.items, kind)):.3f} of the robust range)"
                       for kind in a.truths.split(","))
    print(f"\nduels, {a.items} items, pilot of {a.pilot:g} random triplets per item, human raters; {a.metric} "
          f"target {a.target}; budgets {a.budgets}; {a.truth_runs} runs from the truth, {a.runs} from a pilot; "
          f"the truths' noise scale in median gaps: {scales}")
    print("| truth | plan | fitted world | answers/item to target | / truth's |")
    print("|---|---|---|---|---|")
    for kind, label, world, r, tr, _ in rows:
        ratio = r.value / tr.value if tr is not None and r.bound != ">" and tr.bound != ">" else float("nan")
        print(f"| {kind} | {label} | {world} | {r.text()} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
