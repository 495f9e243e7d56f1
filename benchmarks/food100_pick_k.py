"""Food-100's real screens as pick_k answers: the crowd's own grids replayed through the kind into the learners.

Food-100 (Wilber, Kwak & Belongie, "Cost-Effective HITs for Relative Similarity Comparisons", HCOMP 2014;
../shared/data/food100) is 19,150 screens by 243 workers over 100 dishes: a probe and a grid of N in
{2, 4, 8, 12, 16} dishes, of which the worker picked the K in {1, 2, 4} most similar, in no order: the
``pick_k`` question kind. This script, offline:

1. splits the workers in two halves (seeded); the held-out half's non-catch screens, read as the triplets
   the kind implies (``engine.kinds``: each pick over each unpicked dish), fit the consensus: a 4-D t-STE
   (as ``benchmarks/features_prior.py``'s food100 truth), whose distances are the truth here;
2. replays the other half's non-catch screens in a random order, each answer through the kind's implied
   triplets, into the default triplet learner (``engine.registry.DEFAULT_NN_ALGORITHM``, observed one
   batch of n screens at a time, as an update pass does) and into the random-triplet peer (the best of
   STE / t-STE in 2, 3, 5, 8 dimensions and the line, chosen on held-out answers:
   ``engine.embedding.select_embedding``) on the same triplets;
3. prints hit@3 (each dish's learned nearest dish is among its 3 nearest by the consensus) and the NN error
   at budgets of screens per dish, mean over seeds; and, per grid, the measured time on screen and the
   implied triplets per second of worker time (the kind's ``screen_seconds`` is fitted to these medians).

Catch screens are left out of both halves (they show a near copy of the probe). Food-100's grids were
uniformly random, so a replay cannot show what adaptive screens would gain: the learners differ only in
what they make of the same answers.

    python benchmarks/food100_pick_k.py [--seeds 3] [--budgets 5,10,25,50,all] [--quick]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from harness import nn_metrics, print_table
from scipy.spatial.distance import cdist

from engine.embedding import embedding_neighbors, fit_embedding, select_embedding
from engine.kinds import get_kind
from engine.planners import make_planner
from engine.registry import DEFAULT_NN_ALGORITHM
from engine.screens import ScreenSource
from simulation.datasets import load_food100

KIND = get_kind("pick_k")


def implied(screens) -> np.ndarray:
    """The anchored triplets ``(head, x, y, winner)`` the screens imply as pick_k answers, shape (m, 4)."""
    rows = [t for s in screens for t in KIND.triplets([s.probe, *s.grid], s.picks)]
    return np.asarray(rows, np.int64).reshape(-1, 4)


def list_order(rows: np.ndarray) -> np.ndarray:
    """Rows ``(i, j, k)``: i closer to j (the winner) than to k."""
    loser = np.where(rows[:, 3] == rows[:, 1], rows[:, 2], rows[:, 1])
    return np.column_stack([rows[:, 0], rows[:, 3], loser])


def run(data, seed: int, budgets: list[int | None]) -> tuple[dict, dict]:
    """(hit@3 and NN error per budget of the learner and the peer, facts of the split) for one seed."""
    n = data.n_items
    rng = np.random.default_rng(seed)
    workers = sorted({s.worker for s in data.screens})
    replayed = set(rng.permutation(workers)[: len(workers) // 2].tolist())
    screens = [s for s in data.screens if not s.is_catch]
    train = [s for s in screens if s.worker in replayed]
    held = [s for s in screens if s.worker not in replayed]
    train = [train[i] for i in rng.permutation(len(train))]
    truth_rows = list_order(implied(held))
    consensus = fit_embedding(truth_rows, n, dim=4, kernel="tste", random_state=seed)
    D = cdist(consensus, consensus)
    learner = make_planner(DEFAULT_NN_ALGORITHM, n, question_kind="triplet", random_state=seed)
    out: dict = {}
    fed = 0
    for b in budgets:
        upto = len(train) if b is None else min(b * n, len(train))
        while fed < upto:  # one update pass per n screens
            learner.observe([tuple(r) for r in implied(train[fed: min(fed + n, upto)]).tolist()])
            fed = min(fed + n, upto)
        if isinstance(learner, ScreenSource):
            learner.refresh_if_due()  # the refit it makes before its next questions
        ours = nn_metrics(np.asarray(learner.neighbor_graph(k=1).neighbors)[:, 0], D)
        t = list_order(implied(train[:upto]))
        emb = select_embedding(t, n, random_state=seed).embedding
        peer = nn_metrics(embedding_neighbors(emb, 1)[:, 0], D)
        out[b] = {"ours": ours, "peer": peer, "screens": upto, "triplets": len(t)}
    head, near, far = truth_rows.T
    facts = {"replayed": len(train), "held": len(held), "truth_triplets": len(truth_rows),
             "truth_agrees": float(np.mean(D[head, far] > D[head, near]))}
    return out, facts


def grid_times(data) -> list[list[str]]:
    """Per grid (N, K): non-catch screens, median seconds on screen (measured; the kind's estimate beside it),
    implied triplets per screen and per second of worker time."""
    cells: dict[tuple[int, int], list[int]] = {}
    for s in data.screens:
        if not s.is_catch:
            cells.setdefault((len(s.grid), len(s.picks)), []).append(s.timer_ms)
    rows = []
    for (N, K), ms in sorted(cells.items()):
        median = float(np.median(ms)) / 1000
        per = K * (N - K)
        stated = KIND.screen_seconds({"n_reference": N, "n_select": K})
        rows.append([f"{N} / {K}", f"{len(ms):,}", f"{median:.1f}", f"{stated:.1f}", str(per), f"{per / median:.2f}"])
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--budgets", default="5,10,25,50,all", help="screens per dish ('all': every replayed screen)")
    ap.add_argument("--quick", action="store_true", help="one seed, budgets 5 and 25")
    args = ap.parse_args(argv)
    if args.quick:
        args.seeds, args.budgets = 1, "5,25"
    budgets = [None if b == "all" else int(b) for b in args.budgets.split(",")]
    started = time.time()
    data = load_food100()
    results, facts = zip(*(run(data, seed, budgets) for seed in range(args.seeds)), strict=True)
    def mean(key: str) -> float:
        return float(np.mean([f[key] for f in facts]))

    print(f"Food-100 (Wilber et al., HCOMP 2014): {data.n_items} dishes, {len(data.screens):,} screens; per seed "
          f"{mean('replayed'):,.0f} non-catch screens replayed (half the workers), the consensus a 4-D t-STE of "
          f"the other half's {mean('held'):,.0f} screens ({mean('truth_triplets'):,.0f} triplets; it agrees with "
          f"{mean('truth_agrees'):.3f} of them); mean of {args.seeds} seed(s)")
    header = ["screens / dish", "screens", "triplets", f"{DEFAULT_NN_ALGORITHM} hit@3", "peer hit@3",
              f"{DEFAULT_NN_ALGORITHM} NN error", "peer NN error"]
    rows = []
    for b in budgets:
        cells = [r[b] for r in results]
        screens = np.mean([c["screens"] for c in cells])
        rows.append([f"{screens / data.n_items:.0f}" + (" (all)" if b is None else ""), f"{screens:,.0f}",
                     f"{np.mean([c['triplets'] for c in cells]):,.0f}",
                     f"{np.mean([c['ours'][1] for c in cells]):.2f}", f"{np.mean([c['peer'][1] for c in cells]):.2f}",
                     f"{np.mean([c['ours'][0] for c in cells]):.2f}", f"{np.mean([c['peer'][0] for c in cells]):.2f}"])
    print_table("pick_k answers replayed into the default learner and the random-triplet peer (best embedding)",
                header, rows)
    print_table("Food-100's grids: time on screen and triplets per second of worker time",
                ["N / K", "screens", "median s", "kind's estimate s", "triplets / screen", "triplets / s"],
                grid_times(data))
    print(f"\n{time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
