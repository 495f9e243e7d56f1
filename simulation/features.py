"""Simulated item features of a known quality, for benchmarks and tests of the feature prior.

A feature matrix's quality is its *triplet agreement*: the share of uniformly random triplets
(i; j, k) on which the features and the truth agree about whether j or k is nearer to i (.5: pure
noise, 1: the truth's order). :func:`features_of_agreement` blurs the true coordinates until they
agree that often. Numpy only.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from engine.utils import RandomState, check_random_state

#: random triplets the agreement of a feature matrix is measured on
AGREEMENT_TRIPLETS = 200_000


def triplet_agreement(features: ArrayLike, distances: ArrayLike, n_triplets: int = AGREEMENT_TRIPLETS,
                      random_state: RandomState = 0) -> float:
    """Share of uniformly random triplets on which feature distances and ``distances`` (n, n) agree."""
    F = np.asarray(features, np.float64).reshape(len(features), -1)
    D = np.asarray(distances, np.float64)
    rng = check_random_state(random_state)
    n = len(F)
    t = rng.integers(n, size=(n_triplets, 3))
    t = t[(t[:, 0] != t[:, 1]) & (t[:, 0] != t[:, 2]) & (t[:, 1] != t[:, 2])]
    fj = ((F[t[:, 0]] - F[t[:, 1]]) ** 2).sum(axis=1)
    fk = ((F[t[:, 0]] - F[t[:, 2]]) ** 2).sum(axis=1)
    truth = D[t[:, 0], t[:, 1]] < D[t[:, 0], t[:, 2]]
    return float(np.mean((fj < fk) == truth))


def noise_features(n_items: int, n_features: int = 16, random_state: RandomState = 0) -> np.ndarray:
    """Features that tell nothing: standard normal, independent of the items."""
    return check_random_state(random_state).normal(size=(n_items, n_features))


def features_of_agreement(points: ArrayLike, agreement: float, n_features: int | None = None,
                          random_state: RandomState = 0, distances: ArrayLike | None = None) -> np.ndarray:
    """Features of the items at ``points`` (n, d) that agree with their distances on ``agreement`` of
    random triplets (within ~.005): the points, randomly rotated into ``n_features`` (default d + 4)
    columns, plus Gaussian noise of the scale that gives that agreement (found by bisection)."""
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
    D = np.sqrt(((P[:, None] - P[None]) ** 2).sum(axis=2)) if distances is None else np.asarray(distances)
    lo, hi = 0.0, 10.0 * float(P.std(axis=0).sum() + 1e-12)
    for _ in range(30):
        mid = 0.5 * (lo + hi)
        if triplet_agreement(base + mid * unit, D, 50_000) > agreement:
            lo = mid
        else:
            hi = mid
    return base + 0.5 * (lo + hi) * unit
