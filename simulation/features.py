"""Simulated item features of a known quality, for benchmarks and tests of the feature prior.

A feature matrix's quality is its *triplet agreement*: the share of uniformly random triplets
(i; j, k) on which the features and the truth agree about whether j or k is nearer to i (.5: pure
noise, 1: the truth's order). :func:`features_of_agreement` blurs the true coordinates until they
agree that often. Random triplets mostly compare far items: at many items, features of agreement .7 on
them are blurred far beyond the distance between neighbours (at 50,000 clustered items 1-NN in them is
almost never one of the true 3 nearest). ``local=k`` measures the agreement on *local* triplets instead
(j and k among i's k truly nearest): features that tell near items apart as often. Numpy/scipy only.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from scipy.spatial import cKDTree

from engine.utils import RandomState, check_random_state

#: random triplets the agreement of a feature matrix is measured on
AGREEMENT_TRIPLETS = 200_000


def triplet_agreement(features: ArrayLike, distances: ArrayLike | None, n_triplets: int = AGREEMENT_TRIPLETS,
                      random_state: RandomState = 0, points: ArrayLike | None = None,
                      triplets: ArrayLike | None = None) -> float:
    """Share of uniformly random triplets (or the rows (i, j, k) of ``triplets``) on which feature distances
    and the truth agree: ``distances`` (n, n), or with ``distances`` None the Euclidean distances of
    ``points`` (n, d), computed per triplet (no n x n matrix)."""
    F = np.asarray(features, np.float64).reshape(len(features), -1)
    if triplets is None:
        rng = check_random_state(random_state)
        t = rng.integers(len(F), size=(n_triplets, 3))
        t = t[(t[:, 0] != t[:, 1]) & (t[:, 0] != t[:, 2]) & (t[:, 1] != t[:, 2])]
    else:
        t = np.asarray(triplets, np.int64).reshape(-1, 3)
    fj = ((F[t[:, 0]] - F[t[:, 1]]) ** 2).sum(axis=1)
    fk = ((F[t[:, 0]] - F[t[:, 2]]) ** 2).sum(axis=1)
    if distances is not None:
        D = np.asarray(distances, np.float64)
        truth = D[t[:, 0], t[:, 1]] < D[t[:, 0], t[:, 2]]
    else:
        P = np.asarray(points, np.float64).reshape(len(F), -1)
        truth = ((P[t[:, 0]] - P[t[:, 1]]) ** 2).sum(axis=1) < ((P[t[:, 0]] - P[t[:, 2]]) ** 2).sum(axis=1)
    return float(np.mean((fj < fk) == truth))


def local_triplets(points: ArrayLike, k: int, n_triplets: int = AGREEMENT_TRIPLETS,
                   random_state: RandomState = 0) -> np.ndarray:
    """Random triplets (i, j, k) with j and k two distinct items of i's ``k`` truly nearest (Euclidean)."""
    P = np.asarray(points, np.float64)
    P = P[:, None] if P.ndim == 1 else P
    n = len(P)
    k = int(min(k, n - 1))
    if k < 2:
        raise ValueError("local triplets need at least 2 neighbours per item")
    rng = check_random_state(random_state)
    _, near = cKDTree(P).query(P, k=k + 1)
    near = np.asarray(near, np.int64)[:, 1:]
    heads = rng.integers(n, size=n_triplets)
    a = rng.integers(k, size=n_triplets)
    b = (a + rng.integers(1, k, size=n_triplets)) % k
    return np.column_stack([heads, near[heads, a], near[heads, b]])


def noise_features(n_items: int, n_features: int = 16, random_state: RandomState = 0) -> np.ndarray:
    """Features that tell nothing: standard normal, independent of the items."""
    return check_random_state(random_state).normal(size=(n_items, n_features))


def features_of_agreement(points: ArrayLike, agreement: float, n_features: int | None = None,
                          random_state: RandomState = 0, distances: ArrayLike | None = None,
                          local: int = 0) -> np.ndarray:
    """Features of the items at ``points`` (n, d) that agree with their distances on ``agreement`` of
    random triplets (within ~.005): the points, randomly rotated into ``n_features`` (default d + 4)
    columns, plus Gaussian noise of the scale that gives that agreement (found by bisection).
    ``distances`` (n, n): the truth's, if not the points' Euclidean ones (those are computed per triplet).
    ``local`` > 0: the agreement on local triplets instead (:func:`local_triplets` with k = ``local``, from
    the points' Euclidean distances): features as good at telling near items apart."""
    P = np.asarray(points, np.float64)
    n, d = P.shape
    if not 0.5 < agreement < 1.0:
        raise ValueError(f"agreement must lie in (0.5, 1), got {agreement}")
    rng = check_random_state(random_state)
    p = d + 4 if n_features is None else int(n_features)
    if p < d:
        raise ValueError(f"n_features must be at least the points' dimension {d}")
    Q, _ = np.linalg.qr(rng.normal(size=(p, p)))
    base = np.hstack([P, np.zeros((n, p - d))]) @ Q
    unit = rng.normal(size=(n, p))
    if local:
        t = local_triplets(P, local, 50_000, random_state=rng)

        def agree(F):
            return triplet_agreement(F, None, points=P, triplets=t)
    else:
        D = None if distances is None else np.asarray(distances)

        def agree(F):
            return triplet_agreement(F, D, 50_000, points=P)
    lo, hi = 0.0, 10.0 * float(P.std(axis=0).sum() + 1e-12)
    for _ in range(30):
        mid = 0.5 * (lo + hi)
        if agree(base + mid * unit) > agreement:
            lo = mid
        else:
            hi = mid
    return base + 0.5 * (lo + hi) * unit
