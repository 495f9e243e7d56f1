"""Benchmark — items added to a running study: how good the neighbours predicted from their features are.

A study of ``n`` clustered 4-D items (clusters of 20, as ``features_prior.py``) runs the default learner with
features of known quality (``simulation.features``: triplet agreement .7 / .9 with the truth, agreement .9
beside 8 columns of noise, or pure noise), driven offline through ``make_planner("duels", n,
features=F[:n], random_state=s)`` and answered by the human noise model (logistic 0.1, lapse 0.1). Then
``m`` more items of the same clusters are added: the learner never asks about them, and each gets its 3
nearest among all ``n + m`` items predicted from its features (``engine.features.predicted_neighbors``, as
every update pass gives them): through duels' learned map W from the features to its fitted space (every
item at Z W: ``map``), or in the standardised features alone (``F``). Scored: the share of added items whose
predicted top-3 holds one of their 3 truly nearest (``top-3 hit``), and whose predicted nearest is one of
them (``hit@3``, the other tables' measure), mean over seeds; also the time one prediction takes (all added
items, one call: what a pass adds).

    python benchmarks/added_items.py                                   # n = 1000, m = 50, 2 seeds
    python benchmarks/added_items.py --items 1000 --added 50 --budgets 0,5,10,25 --seeds 1
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from harness import print_table  # noqa: E402

from engine.features import BY_LEARNED_MAP, nearest_of, predicted_neighbors, study_space  # noqa: E402
from engine.planners import make_planner  # noqa: E402
from engine.registry import feature_placement, fitted_coordinates  # noqa: E402
from simulation import oracles  # noqa: E402
from simulation.features import features_of_agreement, noise_features  # noqa: E402

NOISE, LAPSE = 0.1, 0.1


def clustered(n: int, seed: int) -> np.ndarray:
    """n points in clusters of 20 (unit spread) in [0, 10]^4, in a random order (so the last items of a
    study, the ones added, are spread over the clusters)."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0, 10, size=(-(-n // 20), 4))
    X = np.repeat(centres, 20, axis=0)[:n] + rng.normal(size=(n, 4))
    return X[rng.permutation(n)]


def scores(pred: np.ndarray, added: np.ndarray, D: np.ndarray) -> tuple[float, float]:
    """(top-3 hit, hit@3) of the predicted rows ``pred`` (m, 3) of the items ``added`` against distances D."""
    Dm = D[added].copy()
    Dm[np.arange(len(added)), added] = np.inf
    third = np.sort(Dm, axis=1)[:, 2]
    near = np.take_along_axis(Dm, pred, axis=1) <= third[:, None] + 1e-9
    return float(near.any(axis=1).mean()), float(near[:, 0].mean())


def run(n: int, m: int, budgets: list[int], seed: int, make_features) -> dict[str, list]:
    X = clustered(n + m, seed)
    D = np.sqrt(((X[:, None] - X[None]) ** 2).sum(axis=2))
    F = make_features(X, D, seed)
    oracle = oracles.TripletOracle.from_points(X[:n], noise=NOISE, model="human", lapse=LAPSE, random_state=seed + 1)
    planner = make_planner("duels", n, question_kind="triplet", random_state=seed, features=F[:n])
    added = np.arange(n, n + m)
    Y = study_space(F, n)  # (a worker reads it once per item count)
    alone = scores(predicted_neighbors(Y, n, 3)[0], added, D)
    out: dict[str, list] = {"map": [], "F": [], "fitted": [], "how": [], "ms": []}
    total = 0
    for per_item in budgets:
        while total < per_item * n:
            qs = planner.next_questions(min(n, per_item * n - total))
            planner.observe(oracle.answer(qs))
            total += len(qs)
        began = time.perf_counter()
        pred, how = predicted_neighbors(Y, n, 3, feature_placement(planner))
        out["ms"].append(1000 * (time.perf_counter() - began))
        out["map"].append(scores(pred, added, D))
        out["F"].append(alone)
        out["how"].append(how)
        # the alternative the platform does not take: the study's items at their fitted places X (with the
        # offsets the answers gave them) beside the added ones at rows W
        Xf = fitted_coordinates(planner)
        if how == BY_LEARNED_MAP and Xf is not None:
            Xf = np.asarray(Xf, np.float64)
            W = np.linalg.lstsq(Y[:n].astype(np.float64), Xf, rcond=None)[0]
            out["fitted"].append(scores(nearest_of(np.vstack([Xf, Y[n:] @ W]), added, 3), added, D))
        else:
            out["fitted"].append(scores(pred, added, D))
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--items", type=int, default=1000)
    ap.add_argument("--added", type=int, default=50)
    ap.add_argument("--budgets", default="0,5,10,25", help="answers per item before the items are added")
    ap.add_argument("--agreements", default=".7,.9")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--fitted", action="store_true",
                    help="also the study's items at their fitted places (with the answers' offsets) beside the added "
                         "items at rows W, instead of every item at Z W")
    args = ap.parse_args(argv)
    budgets = [int(b) for b in args.budgets.split(",")]
    variants = {f"F .{round(float(a) * 10)}": (lambda X, D, s, a=float(a): features_of_agreement(
        X, a, random_state=s, distances=D)) for a in args.agreements.split(",")}
    # features whose columns are not alike: the standardised features weigh every column alike, a learned map
    # weighs the ones people use
    variants["F .9 + 8 noise columns"] = lambda X, D, s: np.hstack([
        features_of_agreement(X, 0.9, random_state=s, distances=D), 3 * noise_features(len(X), 8, random_state=s)])
    variants["noise (16 columns)"] = lambda X, D, s: noise_features(len(X), 16, random_state=s)
    rows = []
    started = time.monotonic()
    for label, make in variants.items():
        runs = [run(args.items, args.added, budgets, seed, make) for seed in range(args.seeds)]
        for what in ("map", "fitted", "F") if args.fitted else ("map", "F"):
            cells = []
            for b in range(len(budgets)):
                top3, hit = np.mean([r[what][b] for r in runs], axis=0)
                used = {r["how"][b] for r in runs} if what in ("map", "fitted") else {"features"}
                mark = "" if what == "F" or used == {"learned map"} else "*" if used == {"features"} else "~"
                cells.append(f"{top3:.2f} / {hit:.2f}{mark}")
            name = {"map": "duels' learned map", "fitted": "map, items at fitted places",
                    "F": "standardised features"}[what]
            rows.append([label, name, *cells])
        shown = 3 if args.fitted else 2
        rows[-shown].append(f"{np.mean([r['ms'] for r in runs]):.0f}")
        for row in rows[-shown + 1:]:
            row.append("")
        print("\n".join(" | ".join(row) for row in rows[-shown:]), f"({time.monotonic() - started:.0f} s)", flush=True)
    print_table(f"{args.added} items added to a study of {args.items} clustered 4-D items (human noise, logistic "
                f"{NOISE}, lapse {LAPSE}): top-3 hit / hit@3 of their predicted neighbours by answers per item "
                f"before they were added, mean of {args.seeds} seed(s); {time.monotonic() - started:.0f} s",
                ["features", "predicted through", *[f"{b}/item" for b in budgets], "ms per pass"], rows)
    print("\n* no learned map at that point (no fit yet, or the features dropped): predicted in the features; "
          "~ some seeds only")


if __name__ == "__main__":
    main()
