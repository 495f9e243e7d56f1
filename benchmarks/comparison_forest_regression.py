"""Benchmark 2: regression RMSE of unsupervised CompRF against RandomForestRegressor on
scikit-learn's diabetes data (noise-free triplets on standardised features).

Usage: python benchmarks/comparison_forest_regression.py [--quick] [--splits 5]
"""
from __future__ import annotations

import argparse

import numpy as np
from comparison_forest_common import build, mean_std, route_all, standardised_oracle
from sklearn.datasets import load_diabetes
from sklearn.ensemble import RandomForestRegressor
from sklearn.model_selection import train_test_split


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--splits", type=int, default=5)
    args = parser.parse_args()
    splits = 2 if args.quick else args.splits
    trees = [10] if args.quick else [10, 50, 100]
    leaf_sizes = [1, 5] if not args.quick else [5]
    X, y = load_diabetes(return_X_y=True)
    rows = {}
    for split in range(splits):
        X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.2, random_state=split)
        n = len(X_tr)
        oracle = standardised_oracle(X_tr, X_te)
        queries = np.arange(n, n + len(X_te))
        rows.setdefault(("predict the training mean", "", ""), []).append(
            (np.sqrt(np.mean((y_te - y_tr.mean()) ** 2)), 0, 0))
        for m in trees:
            for n0 in leaf_sizes:
                rf = RandomForestRegressor(n_estimators=m, min_samples_leaf=n0, random_state=split).fit(X_tr, y_tr)
                rows.setdefault(("RandomForestRegressor", m, n0), []).append(
                    (np.sqrt(np.mean((rf.predict(X_te) - y_te) ** 2)), 0, 0))
                forest, asked = build(n, oracle, n_trees=m, leaf_size=n0, values=y_tr, random_state=split * 1000 + m)
                results, per_query = route_all(forest, oracle, queries)
                pred = np.array([r.value for r in results])
                rows.setdefault(("CompRF unsupervised", m, n0), []).append(
                    (np.sqrt(np.mean((pred - y_te) ** 2)), asked, per_query))
    print(f"diabetes (n = {len(X)}): test RMSE (mean ± std over {splits} random 80/20 splits)")
    print(f"{'method':26s} {'M':>4s} {'n0':>3s} {'RMSE':>14s} {'build triplets':>15s} {'per query':>10s}")
    for (method, m, n0), vals in rows.items():
        b = f"{np.mean([v[1] for v in vals]):.0f}" if vals[0][1] else "-"
        q = f"{np.mean([v[2] for v in vals]):.0f}" if vals[0][2] else "-"
        print(f"{method:26s} {m!s:>4s} {n0!s:>3s} {mean_std([v[0] for v in vals]):>14s} {b:>15s} {q:>10s}")


if __name__ == "__main__":
    main()
