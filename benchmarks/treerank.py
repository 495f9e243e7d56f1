"""Similarity TreeRank benchmark: ranking pairs of unseen items, and the paper's synthetic case.

1. digits (scikit-learn's load_digits, 1797 images, 64 pixel features): items are split in half
   (stratified); TreeRank and the ranking forest learn from pairs of training items (+1 same
   digit), and every pair of test items is ranked (unseen items only). AUC and TPR at FPR = 0.1
   against the negative Euclidean distance and the cosine similarity of the pixel vectors.
2. the synthetic ranking tree of Clémençon & Vogel (2019, §4 and appendix 6.4): p = 3, D_gt = 3,
   delta = 0.01, half the pairs alike; a tree of depth D = D_gt learns from n pairs; AUC*, the
   learned AUC on a large test sample, D_1 = AUC* - AUC and D_inf = sup |ROC - ROC*|.

Usage: python benchmarks/treerank.py [--quick] [--seeds 3]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
from scipy.spatial.distance import cdist
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from engine.treerank import (  # noqa: E402
    GroundTruthTree,
    RankingForest,
    SimilarityTreeRank,
    auc,
    pairs_from_labels,
    roc_curve,
    tpr_at_fpr,
)


def mean_std(values) -> str:
    values = np.asarray(values, dtype=float)
    return f"{values.mean():.4f} ± {values.std():.4f}"


def upper(M: np.ndarray) -> np.ndarray:
    return M[np.triu_indices(M.shape[0], 1)]


def digits(seeds: int, n_pairs: int, n_trees: int, quick: bool) -> None:
    X, labels = load_digits(return_X_y=True)
    methods = {
        "TreeRank D=8, LeafRank depth 3": lambda s: SimilarityTreeRank(
            max_depth=8, leafrank_depth=3, min_samples_leaf=10, random_state=s),
        f"RankingForest {n_trees} trees, sqrt features": lambda s: RankingForest(
            n_trees=n_trees, max_depth=8, leafrank_depth=3, min_samples_leaf=10, max_features="sqrt",
            max_samples=0.5, random_state=s),
    }
    if not quick:
        methods[f"RankingForest {n_trees} trees, all features"] = lambda s: RankingForest(
            n_trees=n_trees, max_depth=8, leafrank_depth=3, min_samples_leaf=10, max_samples=0.5, random_state=s)
    rows: dict[str, list] = {}
    for seed in range(seeds):
        train, test = train_test_split(np.arange(len(X)), test_size=0.5, stratify=labels, random_state=seed)
        pairs, y = pairs_from_labels(labels[train], n_pairs=n_pairs, balanced=True, random_state=seed)
        test_y = upper(np.where(labels[test][:, None] == labels[test][None, :], 1, -1))
        Xte = X[test]
        baselines = {"-Euclidean distance": -cdist(Xte, Xte), "cosine similarity": 1 - cdist(Xte, Xte, "cosine")}
        for name, M in baselines.items():
            s = upper(M)
            rows.setdefault(name, []).append((auc(s, test_y), tpr_at_fpr(s, test_y, 0.1), 0.0))
        for name, make in methods.items():
            t0 = time.perf_counter()
            model = make(seed).fit_pairs(X[train], pairs, y)
            fit_s = time.perf_counter() - t0
            s = upper(model.score_matrix(Xte, Xte))
            rows.setdefault(name, []).append((auc(s, test_y), tpr_at_fpr(s, test_y, 0.1), fit_s))
    n_test = len(test)
    print(f"digits: {len(train)} training items ({n_pairs} balanced training pairs), {n_test} unseen test items "
          f"({n_test * (n_test - 1) // 2} test pairs, {np.mean(test_y > 0):.1%} alike); mean ± std over "
          f"{seeds} item split(s)")
    print(f"{'method':42s} {'AUC':>17s} {'TPR @ FPR=0.1':>17s} {'fit s':>7s}")
    for name, vals in rows.items():
        a, t, f = zip(*vals, strict=True)
        print(f"{name:42s} {mean_std(a):>17s} {mean_std(t):>17s} {np.mean(f):7.1f}")
    print()


def roc_sup_distance(scores, y, opt_fpr, opt_tpr) -> float:
    """sup over alpha of |ROC(alpha) - ROC*(alpha)|, both piecewise linear (checked on a fine grid
    plus every knot of either curve)."""
    fpr, tpr = roc_curve(scores, y)
    grid = np.unique(np.r_[np.linspace(0, 1, 2001), fpr, opt_fpr])
    # right-continuous reading (top of vertical segments) of each curve
    def read(f, t):
        idx = np.searchsorted(f, grid, side="right") - 1
        nxt = np.minimum(idx + 1, f.size - 1)
        span = np.where(f[nxt] > f[idx], f[nxt] - f[idx], 1.0)
        w = np.where(f[nxt] > f[idx], (grid - f[idx]) / span, 0.0)
        return t[idx] + w * (t[nxt] - t[idx])
    return float(np.abs(read(fpr, tpr) - read(opt_fpr, opt_tpr)).max())


def synthetic(runs: int, sizes, n_test: int, n_trees: int, alike_shares) -> None:
    print(f"synthetic ranking tree (Clémençon & Vogel 2019, app. 6.4): p = 3, D_gt = D = 3, delta = 0.01; "
          f"{n_test} test pairs; mean ± std over {runs} runs (a new ground-truth tree each run)")
    print(f"{'alike share':>11s} {'n pairs':>8s} {'AUC*':>7s} {'-Euclidean AUC':>15s} {'TreeRank AUC':>17s} "
          f"{'D_1':>17s} {'D_inf':>17s} {f'forest ({n_trees}) AUC':>18s}")
    for share in alike_shares:
        for n in sizes:
            vals = []
            for run in range(runs):
                gt = GroundTruthTree(n_features=3, depth=3, delta=0.01, random_state=1000 + run)
                X1, X2, y = gt.sample(n, alike_share=share, random_state=run)
                if len(np.unique(y)) < 2:
                    continue
                T1, T2, ty = gt.sample(n_test, alike_share=0.5, random_state=10_000 + run)
                tree = SimilarityTreeRank(max_depth=3, leafrank_depth=2, min_samples_leaf=5, random_state=run)
                s = tree.fit(X1, X2, y).score(T1, T2)
                forest = RankingForest(n_trees=n_trees, max_depth=3, leafrank_depth=2, min_samples_leaf=5,
                                       random_state=run).fit(X1, X2, y)
                opt_fpr, opt_tpr = gt.optimal_roc()
                a = auc(s, ty)
                vals.append((gt.optimal_auc(), auc(-np.linalg.norm(T1 - T2, axis=1), ty), a,
                             gt.optimal_auc() - a, roc_sup_distance(s, ty, opt_fpr, opt_tpr),
                             auc(forest.score(T1, T2), ty)))
            best, eucl, a, d1, dinf, fa = zip(*vals, strict=True)
            print(f"{share:11.2f} {n:8d} {np.mean(best):7.4f} {np.mean(eucl):15.4f} {mean_std(a):>17s} "
                  f"{mean_std(d1):>17s} {mean_std(dinf):>17s} {mean_std(fa):>18s}")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one digits split, fewer pairs and trees (< 1 min)")
    parser.add_argument("--seeds", type=int, default=3, help="digits item splits (default 3)")
    args = parser.parse_args()
    if args.quick:
        digits(seeds=1, n_pairs=10_000, n_trees=10, quick=True)
        synthetic(runs=3, sizes=(250, 1000, 4000, 16_000), n_test=50_000, n_trees=10, alike_shares=(0.5,))
    else:
        digits(seeds=args.seeds, n_pairs=40_000, n_trees=20, quick=False)
        synthetic(runs=10, sizes=(250, 1000, 4000, 16_000, 64_000), n_test=100_000, n_trees=20,
                  alike_shares=(0.5, 0.1))


if __name__ == "__main__":
    main()
