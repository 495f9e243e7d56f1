"""Benchmark 3: noisy raters. Test error and triplets used by supervised CompRF on digits as the
flip probability of every triplet answer goes 0 -> 0.3, with redundancy 1, 3 and "adaptive"
(until one side leads by 2, at most 5 answers). Training and routing use the same noisy rater.

Usage: python benchmarks/comparison_forest_noise.py [--quick] [--splits 3] [--trees 20]
"""
from __future__ import annotations

import numpy as np
from comparison_forest_common import build, mean_std, parse_args, route_all, standardised_oracle
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split


def main():
    args = parse_args(__doc__, splits=3, trees=20)
    splits = 1 if args.quick else args.splits
    flips = [0.0, 0.3] if args.quick else [0.0, 0.1, 0.2, 0.3]
    trees = 5 if args.quick else args.trees
    X, y = load_digits(return_X_y=True)
    print(f"digits, supervised CompRF, M = {trees}, n0 = 1; error % (mean ± std over {splits} splits); "
          "triplets per tree (build) and per test item (routing)")
    print(f"{'flip p':>6s} {'redundancy':>10s} {'error %':>14s} {'triplets/tree':>14s} {'per query':>10s}")
    for p in flips:
        for r in (1, 3, "adaptive"):
            errs, builds, queries_cost = [], [], []
            for split in range(splits):
                X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.2, stratify=y, random_state=split)
                n = len(X_tr)
                oracle = standardised_oracle(X_tr, X_te, noise=p, seed=split)
                forest, asked = build(n, oracle, n_trees=trees, labels=y_tr, redundancy=r, random_state=split)
                results, per_query = route_all(forest, oracle, np.arange(n, n + len(X_te)))
                errs.append(np.mean(np.array([res.label for res in results]) != y_te))
                builds.append(asked / trees)
                queries_cost.append(per_query)
            print(f"{p:6.2f} {r!s:>10s} {mean_std(errs, 100):>14s} {np.mean(builds):14.0f} "
                  f"{np.mean(queries_cost):10.0f}")


if __name__ == "__main__":
    main()
