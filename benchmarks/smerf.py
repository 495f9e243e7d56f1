"""SMERF on the three distance-learning simulations of Tomita & Vogelstein §5.1 (Appendix D.2),
against a Mahalanobis metric fitted with scipy and a scaled Euclidean distance.

Data (p = 20 features, only the first two enter the distance; n training items, 200 test items):
- regression (§5.1 "Regression Distance", eq. 5.1): x ~ U(0.1, 0.9)^20, y = ½(x¹ + x²) + ε with
  ε ~ U(−0.1, 0.1), z_ij = (y_i − y_j)²;
- bilinear (§5.1 "Bilinear Distance"): x ~ U(0, 1)^20, y = ½(x¹ + x²) (no noise), similarity
  q_ij = y_i y_j, distance z_ij = 1 − q_ij;
- radial (§5.1 "Radial Distance", eq. D.2): x uniform in the unit ball of R^20,
  z_ij = (|x_i^(1:2)| − |x_j^(1:2)|)².
Methods are trained on the n × n matrix Z of the training items and predict the 200 × 200
distances between test items. Metrics, as in the paper's Figure 1, over the test items: mAP@10
(average precision of each test item's ranking of the other test items, the 10 truly closest
being the relevant ones), Spearman correlation of predicted and true distances from each test
item to the others (mean over test items), and RMSE
over all test pairs. Figures are mean ± standard error over the seeds.
SMERF here splits along single features ("sqrt": 4 random features tried per node; "all": all 20;
"50% miss": half of the training pairs hidden as NaN), where the paper's runs used oblique
random-projection splits (its Appendix C), so the figures are not the paper's.

Usage: python benchmarks/smerf.py [--quick] [--seeds 5] [--trees 100]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
from scipy.optimize import minimize
from scipy.stats import rankdata

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from engine.smerf import DistanceForest  # noqa: E402

P = 20
N_TEST = 200
TOP_K = 10


# ----------------------------------------------------------------------------------------
# the simulations
# ----------------------------------------------------------------------------------------
def regression_distance(rng, n):
    X = rng.uniform(0.1, 0.9, size=(n, P))
    y = 0.5 * (X[:, 0] + X[:, 1]) + rng.uniform(-0.1, 0.1, size=n)
    return X, (y[:, None] - y[None, :]) ** 2


def bilinear_distance(rng, n):
    X = rng.uniform(0.0, 1.0, size=(n, P))
    y = 0.5 * (X[:, 0] + X[:, 1])
    return X, 1.0 - y[:, None] * y[None, :]


def radial_distance(rng, n):
    g = rng.normal(size=(n, P))
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    X = g * rng.uniform(size=(n, 1)) ** (1.0 / P)
    r = np.linalg.norm(X[:, :2], axis=1)
    return X, (r[:, None] - r[None, :]) ** 2


SIMULATIONS = {"regression": regression_distance, "bilinear": bilinear_distance, "radial": radial_distance}


def simulate(name, n, seed):
    """Training and test items drawn together, so the test block of Z is the ground truth."""
    rng = np.random.default_rng(seed)
    X, Z = SIMULATIONS[name](rng, n + N_TEST)
    return X[:n], Z[:n, :n], X[n:], Z[n:, n:]


# ----------------------------------------------------------------------------------------
# baselines
# ----------------------------------------------------------------------------------------
def _pair_differences(X, Z):
    i, j = np.triu_indices(len(X), 1)
    keep = ~np.isnan(Z[i, j])
    return X[i[keep]] - X[j[keep]], Z[i[keep], j[keep]]


class Mahalanobis:
    """Squared Mahalanobis distance (x − x')ᵀ M (x − x'), M = L Lᵀ ⪰ 0, fitted by least squares on
    the training pairs (the paper's MAHALANOBIS, Appendix D.1) plus a small ridge penalty
    ``ridge·‖M‖²_F`` (made scale-free), without which M is not determined when there are fewer
    pairs than the p(p+1)/2 = 210 entries of M (n = 20 gives 190). Start from the ridge
    least-squares M projected on the PSD cone, then L-BFGS on L (scipy.optimize.minimize)."""

    def __init__(self, ridge=1e-3):
        self.ridge = ridge

    def fit(self, X, Z):
        D, z = _pair_differences(X, Z)
        p = X.shape[1]
        iu = np.triu_indices(p)
        # d M d = Σ_k M_kk d_k² + 2 Σ_{k<l} M_kl d_k d_l; the off-diagonal columns carry the 2 so that
        # ‖coef‖² counts each off-diagonal entry twice, like ‖M‖²_F
        off = iu[0] != iu[1]
        design = D[:, iu[0]] * D[:, iu[1]] * np.where(off, np.sqrt(2.0), 1.0)
        n_pairs = len(z)
        scale = max(float(np.mean(z * z)), 1e-12)
        size = float(np.mean((D * D).sum(axis=1))) ** 2  # a distance is about ‖M‖·size^½
        lam = self.ridge * size
        gram = design.T @ design / n_pairs + lam * np.eye(design.shape[1])
        coef = np.linalg.solve(gram, design.T @ z / n_pairs)
        M0 = np.zeros((p, p))
        M0[iu] = coef * np.where(off, 1.0 / np.sqrt(2.0), 1.0)
        M0 = M0 + np.triu(M0, 1).T
        vals, vecs = np.linalg.eigh(M0)
        L0 = vecs * np.sqrt(np.clip(vals, 0.0, None))

        def loss(flat):
            L = flat.reshape(p, p)
            proj = D @ L
            resid = (proj * proj).sum(axis=1) - z
            M = L @ L.T
            value = float(resid @ resid) / n_pairs + lam * float((M * M).sum())
            grad = 4.0 * D.T @ (resid[:, None] * proj) / n_pairs + 4.0 * lam * M @ L
            return value / scale, grad.ravel() / scale

        res = minimize(loss, L0.ravel(), jac=True, method="L-BFGS-B", options={"maxiter": 500})
        L = res.x.reshape(p, p)
        self.M_ = L @ L.T
        return self

    def predict(self, A, B):
        diff = A[:, None, :] - B[None, :, :]
        return np.einsum("ijk,kl,ijl->ij", diff, self.M_, diff)


class ScaledEuclidean:
    """α·|x − x'|², α ≥ 0 fitted by least squares on the training pairs."""

    def fit(self, X, Z):
        D, z = _pair_differences(X, Z)
        d = (D * D).sum(axis=1)
        self.alpha_ = max(float(d @ z / (d @ d)), 0.0)
        return self

    def predict(self, A, B):
        return self.alpha_ * ((A[:, None, :] - B[None, :, :]) ** 2).sum(axis=2)


class Smerf:
    def __init__(self, n_trees, seed, max_features="sqrt", missing=0.0):
        self.forest = DistanceForest(n_trees=n_trees, max_features=max_features, random_state=seed)
        self.missing, self.seed = missing, seed

    def fit(self, X, Z):
        if self.missing:
            rng = np.random.default_rng(self.seed + 1)
            hide = np.triu(rng.uniform(size=Z.shape) < self.missing, 1)
            Z = np.where(hide | hide.T, np.nan, Z)
        self.forest.fit(X, Z)
        return self

    def predict(self, A, B):
        return self.forest.predict(A, B)


# ----------------------------------------------------------------------------------------
# metrics over the test items
# ----------------------------------------------------------------------------------------
def _others(M):
    """Each row without its diagonal entry: shape (m, m − 1)."""
    m = M.shape[0]
    return M[~np.eye(m, dtype=bool)].reshape(m, m - 1)


def map_at_k(pred, truth, k=TOP_K):
    pred, truth = _others(pred), _others(truth)
    relevant = np.zeros(truth.shape, bool)
    np.put_along_axis(relevant, np.argsort(truth, axis=1, kind="stable")[:, :k], True, axis=1)
    ranked = np.take_along_axis(relevant, np.argsort(pred, axis=1, kind="stable"), axis=1)
    hits = np.cumsum(ranked, axis=1)
    precision = hits / np.arange(1, ranked.shape[1] + 1)
    return float(np.mean((precision * ranked).sum(axis=1) / k))


def mean_spearman(pred, truth):
    a = rankdata(_others(pred), axis=1)
    b = rankdata(_others(truth), axis=1)
    a -= a.mean(axis=1, keepdims=True)
    b -= b.mean(axis=1, keepdims=True)
    denom = np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))
    rho = np.divide((a * b).sum(axis=1), denom, out=np.zeros(len(a)), where=denom > 0)
    return float(rho.mean())


def rmse(pred, truth):
    return float(np.sqrt(np.mean((_others(pred) - _others(truth)) ** 2)))


def mean_sem(values):
    values = np.asarray(values, float)
    sem = values.std(ddof=1) / np.sqrt(len(values)) if len(values) > 1 else 0.0
    return f"{values.mean():.3f} ± {sem:.3f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 sizes, 1 seed, 25 trees (under a minute)")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--trees", type=int, default=100)
    args = parser.parse_args()
    sizes = [20, 80, 320] if args.quick else [20, 40, 80, 160, 320]
    seeds = 1 if args.quick else args.seeds
    trees = 25 if args.quick else args.trees

    methods = {
        "smerf sqrt": lambda seed: Smerf(trees, seed),
        "smerf all": lambda seed: Smerf(trees, seed, max_features=None),
        "smerf all, 50% miss": lambda seed: Smerf(trees, seed, max_features=None, missing=0.5),
        "mahalanobis": lambda seed: Mahalanobis(),
        "euclidean (scaled)": lambda seed: ScaledEuclidean(),
    }
    print(f"SMERF simulations (Tomita & Vogelstein §5.1): p = {P}, {N_TEST} test items, {seeds} seed(s), "
          f"SMERF {trees} trees, bootstrap, max_features 'sqrt' or all 20")
    header = (f"{'simulation':11s} {'n':>4s} {'method':19s} {'mAP@10':>14s} {'Spearman':>14s} {'RMSE':>14s} "
              f"{'fit s':>6s}")
    print(header)
    print("-" * len(header))
    importances = {}
    for name in SIMULATIONS:
        for n in sizes:
            rows = {m: [] for m in methods}
            for seed in range(seeds):
                X, Z, X_test, Z_test = simulate(name, n, seed)
                for label, make in methods.items():
                    model = make(seed)
                    t0 = time.perf_counter()
                    model.fit(X, Z)
                    fit_s = time.perf_counter() - t0
                    pred = model.predict(X_test, X_test)
                    rows[label].append((map_at_k(pred, Z_test), mean_spearman(pred, Z_test), rmse(pred, Z_test), fit_s))
                    if label == "smerf all" and n == sizes[-1]:
                        importances.setdefault(name, []).append(model.forest.feature_importances_)
            for label, vals in rows.items():
                cols = [mean_sem([v[c] for v in vals]) for c in range(3)]
                print(f"{name:11s} {n:4d} {label:19s} {cols[0]:>14s} {cols[1]:>14s} {cols[2]:>14s} "
                      f"{np.mean([v[3] for v in vals]):6.2f}")
        print()
    print(f"'smerf all' feature importances at n = {sizes[-1]} (mean over seeds): share of features 1-2, top three")
    for name, imps in importances.items():
        imp = np.mean(imps, axis=0)
        top = np.argsort(-imp)[:3]
        print(f"{name:11s} features 1-2: {imp[:2].sum():.3f}   top: "
              + ", ".join(f"x{f + 1} ({imp[f]:.3f})" for f in top))


if __name__ == "__main__":
    main()
