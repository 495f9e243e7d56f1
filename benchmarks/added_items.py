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

With ``--forests``, the seeds' feature learners trained on the triplets the answers imply (at most
``MAX_TRIPLETS`` of them, the bound a worker would keep) predict too: a SMERF distance forest (``engine.smerf``)
on each pair's share of lost triplets, random pairs counted as far (a random pair is almost never an item with
one of its nearest; with only the pairs duels asks about, all near, the forest's distances to the rest are
guesses: top-3 hit .02-.04 with F .9 + noise columns at 10/item), and a similarity TreeRank ranking forest
(``engine.treerank``) on the winning pairs (alike) against the losing and random pairs. SimForest classifies
items by their similarities to labelled ones: an added item has no similarity to any, so it predicts nothing
here. ``chosen`` is what a worker choosing by held-out agreement would predict with: of the learned map, the
standardised features and the forests, the one agreeing most with the triplets of a held-out 20% of the items
(headed by them; the forests checked without any triplet touching them, then trained on all; the map saw
them, so the choice leans to it).

    python benchmarks/added_items.py                                   # n = 1000, m = 50, 2 seeds
    python benchmarks/added_items.py --items 1000 --added 50 --budgets 0,5,10,25 --seeds 1
    python benchmarks/added_items.py --items 1000 --added 50 --budgets 0,5,10,25 --seeds 1 --forests
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
from engine.smerf import DistanceForest  # noqa: E402
from engine.treerank import RankingForest  # noqa: E402
from simulation import oracles  # noqa: E402
from simulation.features import features_of_agreement, noise_features  # noqa: E402

NOISE, LAPSE = 0.1, 0.1
#: the feature learners train on at most this many implied triplets (a random sample), ...
MAX_TRIPLETS = 10_000
#: ... a share of them held out to choose between the predictors
HELDOUT_SHARE = 0.2
FORESTS = ("smerf", "treerank")


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


def _top3(M: np.ndarray, added: np.ndarray, higher: bool) -> np.ndarray:
    """The 3 best columns of each row of M (len(added), n + m), the added item itself left out."""
    M = np.array(M, np.float64)
    M[np.arange(len(added)), added] = -np.inf if higher else np.inf
    return np.argsort(-M if higher else M, axis=1, kind="stable")[:, :3]


def _agreement(closer: np.ndarray) -> float:
    return float(np.mean(closer)) if len(closer) else float("nan")


def _random_pairs(n: int, count: int, rng: np.random.Generator) -> np.ndarray:
    r = rng.integers(n, size=(count, 2))
    return r[r[:, 0] != r[:, 1]]


def _fit_forests(F: np.ndarray, n: int, t: np.ndarray, seed: int) -> dict[str, tuple]:
    """{forest: (distance of row-aligned pairs (a, b) of items, the added items' predicted top-3 (m, 3))} of SMERF
    and a TreeRank ranking forest trained on the features F[:n] and the triplets ``t``."""
    rng = np.random.default_rng(seed)
    added = np.arange(n, len(F))
    far = _random_pairs(n, len(t), rng)
    # SMERF: z = the share of a pair's triplets it lost, a random pair counted as lost
    lost, won = np.zeros((n, n)), np.zeros((n, n))
    np.add.at(won, (t[:, 0], t[:, 1]), 1)
    np.add.at(lost, (t[:, 0], t[:, 2]), 1)
    np.add.at(lost, (far[:, 0], far[:, 1]), 1)
    lost, won = lost + lost.T, won + won.T
    count = lost + won
    Z = np.where(count > 0, lost / np.maximum(count, 1), np.nan)
    smerf = DistanceForest(n_trees=50, max_features=None, min_samples_leaf=5, random_state=seed).fit(
        F[:n], Z, pair_weight=count)
    pairs = np.vstack([t[:, [0, 1]], t[:, [0, 2]], far])
    alike = np.r_[np.ones(len(t)), -np.ones(len(t) + len(far))]
    ranker = RankingForest(n_trees=20, max_depth=6, random_state=seed).fit(F[pairs[:, 0]], F[pairs[:, 1]], alike)
    return {"smerf": (lambda a, b: smerf.predict_pairs(F[a], F[b]),
                      lambda: _top3(smerf.predict(F[n:], F), added, higher=False)),
            "treerank": (lambda a, b: -ranker.score(F[a], F[b]),
                         lambda: _top3(ranker.score_matrix(F[n:], F), added, higher=True))}


def held_out_split(n: int, triplets: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(training triplets, held-out triplets) of at most ``MAX_TRIPLETS`` of ``triplets``: a share of the items
    is held out, as the added items are: the held-out triplets are those of their heads, the training ones
    those with none of them (a forest remembers the pairs it saw: triplets of the items it trained on would
    score its memory, not its prediction for new items)."""
    rng = np.random.default_rng(seed)
    t = triplets[rng.permutation(len(triplets))[:MAX_TRIPLETS]]
    out = np.zeros(n, bool)
    out[rng.permutation(n)[:int(round(HELDOUT_SHARE * n))]] = True
    return t[~out[t].any(axis=1)], t[out[t[:, 0]]]


def forest_predictions(F: np.ndarray, n: int, triplets: np.ndarray, seed: int) -> dict[str, tuple]:
    """{forest: (predicted top-3 of the added items (m, 3), held-out agreement)}: SMERF and a TreeRank ranking
    forest on the study's items' features F[:n] and the implied ``triplets`` (i, j, k) ("i is closer to j than
    to k"): checked on held-out items (``held_out_split``), then trained on all the (bounded) triplets."""
    train, held = held_out_split(n, triplets, seed)
    checked = _fit_forests(F, n, train, seed)
    final = _fit_forests(F, n, np.vstack([train, held]), seed)
    out = {}
    for name, (distance, _) in checked.items():
        agree = _agreement(distance(held[:, 0], held[:, 1]) < distance(held[:, 0], held[:, 2]))
        out[name] = (final[name][1](), agree)
    return out


def _space_agreement(points: np.ndarray, triplets: np.ndarray) -> float:
    d = lambda a, b: ((points[a] - points[b]) ** 2).sum(axis=1)  # noqa: E731
    return _agreement(d(triplets[:, 0], triplets[:, 1]) < d(triplets[:, 0], triplets[:, 2]))


def run(n: int, m: int, budgets: list[int], seed: int, make_features, forests: bool = False) -> dict[str, list]:
    X = clustered(n + m, seed)
    D = np.sqrt(((X[:, None] - X[None]) ** 2).sum(axis=2))
    F = make_features(X, D, seed)
    oracle = oracles.TripletOracle.from_points(X[:n], noise=NOISE, model="human", lapse=LAPSE, random_state=seed + 1)
    planner = make_planner("duels", n, question_kind="triplet", random_state=seed, features=F[:n])
    added = np.arange(n, n + m)
    Y = study_space(F, n)  # (a worker reads it once per item count)
    alone = scores(predicted_neighbors(Y, n, 3)[0], added, D)
    out: dict[str, list] = {"map": [], "F": [], "fitted": [], "how": [], "ms": [], "chosen": [], "by": [],
                            "forest_s": [], **{name: [] for name in FORESTS}}
    total, triplets = 0, []
    for per_item in budgets:
        while total < per_item * n:
            qs = planner.next_questions(min(n, per_item * n - total))
            answers = oracle.answer(qs)
            planner.observe(answers)
            triplets.extend((x, w, p2 if w == p1 else p1) for x, p1, p2, w in answers)
            total += len(qs)
        began = time.perf_counter()
        pred, how = predicted_neighbors(Y, n, 3, feature_placement(planner))
        out["ms"].append(1000 * (time.perf_counter() - began))
        out["map"].append(scores(pred, added, D))
        out["F"].append(alone)
        out["how"].append(how)
        if forests:
            _choose(out, F, Y, n, np.asarray(triplets, np.int64).reshape(-1, 3), pred, how, planner, added, D, seed)
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


def _choose(out, F, Y, n, triplets, pred, how, planner, added, D, seed) -> None:
    """The forests' scores at this budget, and the predictor of highest held-out agreement (``chosen``, ``by``)."""
    if len(triplets) < 100:
        for name in FORESTS:
            out[name].append(None)
        out["chosen"].append(scores(pred, added, D))
        out["by"].append("map" if how == BY_LEARNED_MAP else "F")
        out["forest_s"].append(0.0)
        return
    began = time.perf_counter()
    found = forest_predictions(F, n, triplets, seed)
    out["forest_s"].append(time.perf_counter() - began)
    held = held_out_split(n, triplets, seed)[1]  # the forests' held-out triplets
    placed = feature_placement(planner)(Y[n:]) if how == BY_LEARNED_MAP else None
    candidates = {"F": (predicted_neighbors(Y, n, 3)[0], _space_agreement(Y[:n], held))}
    if placed is not None:
        candidates["map"] = (pred, _space_agreement(np.asarray(placed[0], np.float64), held))
    for name, (top, agree) in found.items():
        out[name].append(scores(top, added, D))
        candidates[name] = (top, agree)
    best = max(candidates, key=lambda c: candidates[c][1])
    out["chosen"].append(scores(candidates[best][0], added, D))
    out["by"].append(best)


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
    ap.add_argument("--forests", action="store_true",
                    help="also SMERF and a similarity TreeRank forest trained on the implied triplets, and the "
                         "predictor a choice by held-out agreement takes")
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
        runs = [run(args.items, args.added, budgets, seed, make, args.forests) for seed in range(args.seeds)]
        methods = ["map", *(["fitted"] if args.fitted else []), "F", *([*FORESTS, "chosen"] if args.forests else [])]
        for what in methods:
            cells = []
            for b in range(len(budgets)):
                if what in FORESTS and any(r[what][b] is None for r in runs):
                    cells.append("-")
                    continue
                top3, hit = np.mean([r[what][b] for r in runs], axis=0)
                if what == "chosen":
                    cells.append(f"{top3:.2f} / {hit:.2f} ({'+'.join(sorted({r['by'][b] for r in runs}))})")
                    continue
                used = {r["how"][b] for r in runs} if what in ("map", "fitted") else {"features"}
                mark = "" if what not in ("map", "fitted") or used == {"learned map"} else "*" if used == {
                    "features"} else "~"
                cells.append(f"{top3:.2f} / {hit:.2f}{mark}")
            name = {"map": "duels' learned map", "fitted": "map, items at fitted places",
                    "F": "standardised features", "smerf": "SMERF forest", "treerank": "TreeRank ranking forest",
                    "chosen": "chosen by held-out agreement"}[what]
            rows.append([label, name, *cells])
        shown = len(methods)
        rows[-shown].append(f"{np.mean([r['ms'] for r in runs]):.0f}")
        for row in rows[-shown + 1:]:
            row.append("")
        if args.forests:
            # the SMERF row: the longest check + final fits of both forests at a budget
            rows[-3][-1] = f"{1000 * np.mean([max(r['forest_s']) for r in runs]):.0f} (forest fits)"
        print("\n".join(" | ".join(row) for row in rows[-shown:]), f"({time.monotonic() - started:.0f} s)", flush=True)
    print_table(f"{args.added} items added to a study of {args.items} clustered 4-D items (human noise, logistic "
                f"{NOISE}, lapse {LAPSE}): top-3 hit / hit@3 of their predicted neighbours by answers per item "
                f"before they were added, mean of {args.seeds} seed(s); {time.monotonic() - started:.0f} s",
                ["features", "predicted through", *[f"{b}/item" for b in budgets], "ms per pass"], rows)
    print("\n* no learned map at that point (no fit yet, or the features dropped): predicted in the features; "
          "~ some seeds only" + ("; - no answers to train on; (x): the predictor chosen (F: the standardised "
                                 "features)" if args.forests else ""))


if __name__ == "__main__":
    main()
