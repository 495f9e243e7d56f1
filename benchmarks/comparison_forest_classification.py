"""Benchmark 1: classification test error of CompRF (supervised and unsupervised) against
scikit-learn's RandomForestClassifier and k-NN (k by 5-fold CV) on scikit-learn's bundled data.

Triplets are answered by a noise-free TripletOracle on Euclidean distances of standardised
features. Usage: python benchmarks/comparison_forest_classification.py [--quick] [--splits 5]
"""
from __future__ import annotations

import argparse

import numpy as np
from comparison_forest_common import build, mean_std, route_all, standardised_oracle
from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_wine
from sklearn.ensemble import RandomForestClassifier
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

DATASETS = {"iris": load_iris, "wine": load_wine, "breast_cancer": load_breast_cancer, "digits": load_digits}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 splits, M = 10 only, small datasets + digits")
    parser.add_argument("--splits", type=int, default=5)
    parser.add_argument("--datasets", nargs="*", default=list(DATASETS))
    args = parser.parse_args()
    splits = 2 if args.quick else args.splits
    trees = [10] if args.quick else [10, 50, 100]
    print(f"test error % (mean ± std over {splits} stratified 80/20 splits); n0 = 1; "
          "triplets: build / per test item")
    print(f"{'dataset':14s} {'method':22s} {'M':>4s} {'error %':>14s} {'build triplets':>15s} {'per query':>10s}")
    for name in args.datasets:
        X, y = DATASETS[name](return_X_y=True)
        rows = {}
        for split in range(splits):
            X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.2, stratify=y, random_state=split)
            n = len(X_tr)
            oracle = standardised_oracle(X_tr, X_te)
            queries = np.arange(n, n + len(X_te))
            knn = GridSearchCV(make_pipeline(StandardScaler(), KNeighborsClassifier()),
                               {"kneighborsclassifier__n_neighbors": [1, 3, 5, 7, 9, 11, 15, 21]}, cv=5)
            knn.fit(X_tr, y_tr)
            rows.setdefault(("k-NN (k by 5-fold CV)", ""), []).append((np.mean(knn.predict(X_te) != y_te), 0, 0))
            for m in trees:
                rf = RandomForestClassifier(n_estimators=m, random_state=split).fit(X_tr, y_tr)
                rows.setdefault(("CART random forest", m), []).append((np.mean(rf.predict(X_te) != y_te), 0, 0))
                for label, labels in (("CompRF unsupervised", None), ("CompRF supervised", y_tr)):
                    forest, asked = build(n, oracle, n_trees=m, leaf_size=1, labels=labels,
                                          random_state=1000 * split + m)
                    results, per_query = route_all(forest, oracle, queries)
                    if labels is None:  # unsupervised pivots: majority over the pooled leaves by hand
                        pred = np.array([np.bincount(y_tr[np.concatenate([forest.leaf_members(v) for v in r.leaves])]
                                                     ).argmax() for r in results])
                    else:
                        pred = np.array([r.label for r in results])
                    rows.setdefault((label, m), []).append((np.mean(pred != y_te), asked, per_query))
        for (method, m), vals in rows.items():
            err = [v[0] for v in vals]
            build_cost = f"{np.mean([v[1] for v in vals]):.0f}" if vals[0][1] else "-"
            per_q = f"{np.mean([v[2] for v in vals]):.0f}" if vals[0][2] else "-"
            print(f"{name:14s} {method:22s} {m!s:>4s} {mean_std(err, 100):>14s} {build_cost:>15s} {per_q:>10s}")


if __name__ == "__main__":
    main()
