"""Benchmark — duels' dimension choice in a world of 5 dimensions: does hit@3 only rise with more answers?

Duels (``dim="auto"``) fits 2, 4, 8 dimensions and a line and takes the shortlists from one, chosen on fresh
answers (``engine.duels.dims``). Items varying on 5 factors sit between its 4-D and 8-D fits: both predict
fresh duels alike while 1-NN in them differs by .2 hit@3, and before issue 43 a recheck that scored the
smaller within a standard error handed it the graph (hit@3 .72 -> .48 at 1,000 items). Here each run is made
twice, paired by seed: with the chosen dimension held while no other beats it by ``AUTO_HOLD`` standard errors
(``hold``, the learner as it is) and without (``no hold``: the smallest within ``AUTO_MARGIN`` of the best
at every refit, as before). Offline (``make_planner``, the registry's defaults, one question per head per
call), the human noise model (``simulation.oracles``: logistic 0.075 of the largest distance, lapse .03),
truths ``uniform`` (the unit 5-cube) and ``clustered`` (clusters of 5, sd 0.3, in a 10-wide 5-cube); ``eggs``
(``--items`` of the alien eggs, a 1-D continuum, with the noise fitted to their crowds, as ``duels_quick.py``)
checks that the line is still chosen where it should be. Scored anytime at each budget of one run: hit@3 of
the graph, and the dimension it came from (1: the line)::

    python benchmarks/duels_dims5.py                                   # 500 items, seeds 1-3
    python benchmarks/duels_dims5.py --items 1000 --truths uniform --seeds 5,6 --budgets 80,120,160,200,250,300,400
    python benchmarks/duels_dims5.py --truths eggs --items 300 --seeds 0,1,2 --budgets 50,100,200,300
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
from scipy.spatial.distance import pdist

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from harness import nn_metrics, print_table, scores, to_budgets, world_points  # noqa: E402

from engine.duels import dims as duel_dims  # noqa: E402
from engine.planners import make_planner  # noqa: E402
from simulation.datasets import load_alien_eggs  # noqa: E402
from simulation.noise import alien_egg_noise  # noqa: E402
from simulation.oracles import HUMAN_LAPSE, HUMAN_SCALE, TripletOracle  # noqa: E402


def world(n: int, kind: str, seed: int, dims: int = 5) -> np.ndarray:
    """``n`` points in ``dims`` dimensions, scaled to a largest distance of 1."""
    X = world_points(n, kind, seed, dims)
    return X / pdist(X).max()


def eggs(n: int, seed: int) -> np.ndarray:
    """Distances (largest 1) of ``n`` alien eggs drawn at random (``duels_quick.py``'s draw)."""
    D = load_alien_eggs().distances
    rng = np.random.default_rng(1000 + seed)
    idx = np.sort(rng.choice(len(D), size=min(n, len(D)), replace=False))
    D = D[np.ix_(idx, idx)]
    return D / D.max()


def run(X: np.ndarray, seed: int, budgets: list[int], hold: bool, kind: str) -> list[tuple[float, int]]:
    """(hit@3, chosen dimension) at each budget (answers per item) of one run; ``X`` the truth's points, or
    its distances where ``kind`` is ``eggs``."""
    n = len(X)
    kept = duel_dims.AUTO_HOLD
    duel_dims.AUTO_HOLD = kept if hold else -math.inf  # (-inf: no dimension is ever held)
    try:
        if kind == "eggs":
            fit = alien_egg_noise()
            oracle = TripletOracle(X, noise=fit.scale, model="human", lapse=fit.lapse, random_state=seed + 7)
        else:
            oracle = TripletOracle.from_points(X, noise=HUMAN_SCALE, model="human", lapse=HUMAN_LAPSE,
                                               random_state=seed + 7)
        planner = make_planner("duels", n, random_state=seed)
        out = []
        for _ in to_budgets(planner, oracle, n, budgets):
            picks = np.asarray(planner.neighbor_graph(k=1).neighbors)[:, 0]
            hit = nn_metrics(picks, X)[1] if kind == "eggs" else scores(picks, X)[1]
            out.append((hit, int(planner.progress()["embedding_dim"])))
        return out
    finally:
        duel_dims.AUTO_HOLD = kept


def largest_fall(curve: list[float]) -> float:
    """The largest fall of hit@3 from any budget to any later one (0: it never fell)."""
    return max([0.0] + [curve[i] - min(curve[i + 1:]) for i in range(len(curve) - 1)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=500)
    ap.add_argument("--truths", default="uniform,clustered")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--budgets", default="50,75,100,150,200,300,400", help="answers per item")
    ap.add_argument("--dims", type=int, default=5, help="the truth's dimensions")
    ap.add_argument("--rules", default="no hold,hold", help="'no hold', 'hold' or both")
    a = ap.parse_args()
    budgets = sorted(int(b) for b in a.budgets.split(","))
    seeds = [int(s) for s in a.seeds.split(",")]
    rows, falls, t0 = [], {}, time.time()
    for kind in a.truths.split(","):
        for seed in seeds:
            X = eggs(a.items, seed) if kind == "eggs" else world(a.items, kind, seed, a.dims)
            for hold in [r.strip() == "hold" for r in a.rules.split(",")]:
                curve = run(X, seed, budgets, hold, kind)
                hits = [h for h, _ in curve]
                falls.setdefault(hold, []).append(largest_fall(hits))
                rows.append([kind, str(seed), "hold" if hold else "no hold"]
                            + [f"{h:.2f} ({d})" for h, d in curve] + [f"{largest_fall(hits):.2f}"])
                print(f"  {' | '.join(rows[-1])}: done at {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    world_of = "the alien eggs" if a.truths == "eggs" else f"a {a.dims}-D world"
    print_table(f"duels in {world_of}, {a.items} items: hit@3 (chosen dimension) at answers per item",
                ["truth", "seed", "rule"] + [str(b) for b in budgets] + ["largest fall"], rows)
    print("\nmean largest fall: " + ", ".join(f"{'hold' if h else 'no hold'} {np.mean(v):.3f} (worst {max(v):.2f})"
                                              for h, v in sorted(falls.items())))


if __name__ == "__main__":
    main()
