"""Anytime confidence intervals for the mean of repeated noisy distance samples.

Pure vectorised functions of (mean, count) arrays; every interval holds for all sample
counts at once (a union over time), so intervals from different times may be intersected.
Must never import Flask, Redis or anything outside numpy/scipy.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

#: Names accepted by :func:`confidence_interval` (``bound=``).
BOUNDS = ("lil", "hoeffding", "bernstein", "kl")
#: Bounds that assume every sample lies in [0, 1] (e.g. triplet-derived 0/1 answers).
UNIT_INTERVAL_BOUNDS = ("bernstein", "kl")
#: The paper's law-of-the-iterated-logarithm parameter.
LIL_EPSILON = 0.7

_KL_BISECTION_STEPS = 30


def check_bound(bound: str) -> str:
    if bound not in BOUNDS:
        raise ValueError(f"bound must be one of {BOUNDS}, not {bound!r}")
    return bound


def lil_radius(count: ArrayLike, n_items: int, delta: float, sigma: float, epsilon: float = LIL_EPSILON) -> np.ndarray:
    """Finite-LIL radius C(T) the paper's experiments used (ε = 0.7), union over n rounds.

    ``C(T) = (1 + √ε) σ sqrt(2(1 + ε)/T · log(log((1 + ε)T + 2) / (δ/n)))``; C(0) = ∞.
    """
    T = np.asarray(count, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        inner = np.log(np.log((1.0 + epsilon) * T + 2.0) / (delta / n_items))
        r = (1.0 + np.sqrt(epsilon)) * sigma * np.sqrt(2.0 * (1.0 + epsilon) / T * inner)
    return np.where(T > 0, r, np.inf)


def hoeffding_radius(count: ArrayLike, n_items: int, delta: float, sigma: float) -> np.ndarray:
    """The paper's eq. (2), scaled by the sub-Gaussian σ: σ sqrt(2 log(4 n² T² / δ) / T)."""
    T = np.asarray(count, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = sigma * np.sqrt(2.0 * np.log(4.0 * n_items**2 * T**2 / delta) / T)
    return np.where(T > 0, r, np.inf)


def _log_term(T, n_items, delta):
    # Union over both sides, the n² pairs and all T (Σ 1/T² < 2), like eq. (2).
    return np.log(4.0 * n_items**2 * np.maximum(T, 1.0) ** 2 / delta)


def bernstein_interval(mean: ArrayLike, count: ArrayLike, n_items: int, delta: float) -> tuple[np.ndarray, np.ndarray]:
    """Empirical-Bernstein interval for samples in [0, 1] (Audibert, Munos & Szepesvári 2009).

    The empirical variance of [0, 1] samples is at most m̂(1 − m̂), so that plug-in keeps
    the bound valid without storing squared samples.
    """
    m = np.asarray(mean, dtype=np.float64)
    T = np.asarray(count, dtype=np.float64)
    log_term = np.log(1.5) + _log_term(T, n_items, delta)
    var = np.clip(m * (1.0 - m), 0.0, 0.25)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.sqrt(2.0 * var * log_term / T) + 3.0 * log_term / T
    r = np.where(T > 0, r, np.inf)
    return np.clip(m - r, 0.0, 1.0), np.clip(m + r, 0.0, 1.0)


def _kl_bernoulli(p, q):
    p = np.clip(p, 1e-12, 1 - 1e-12)
    q = np.clip(q, 1e-12, 1 - 1e-12)
    return p * np.log(p / q) + (1 - p) * np.log((1 - p) / (1 - q))


def kl_interval(mean: ArrayLike, count: ArrayLike, n_items: int, delta: float) -> tuple[np.ndarray, np.ndarray]:
    """Chernoff–KL interval for samples in [0, 1]: {q : T·kl(m̂, q) ≤ log(4n²T²/δ)}, by bisection."""
    m = np.clip(np.asarray(mean, dtype=np.float64), 0.0, 1.0)
    T = np.asarray(count, dtype=np.float64)
    level = _log_term(T, n_items, delta) / np.maximum(T, 1.0)
    lo_up, hi_up = m.copy(), np.ones_like(m)
    lo_dn, hi_dn = np.zeros_like(m), m.copy()
    for _ in range(_KL_BISECTION_STEPS):
        mid = 0.5 * (lo_up + hi_up)
        inside = _kl_bernoulli(m, mid) <= level
        lo_up = np.where(inside, mid, lo_up)
        hi_up = np.where(inside, hi_up, mid)
        mid = 0.5 * (lo_dn + hi_dn)
        inside = _kl_bernoulli(m, mid) <= level
        hi_dn = np.where(inside, mid, hi_dn)
        lo_dn = np.where(inside, lo_dn, mid)
    # The outer ends of the bisection brackets keep the interval conservative.
    lower = np.where(T > 0, lo_dn, 0.0)
    upper = np.where(T > 0, hi_up, 1.0)
    return lower, upper


def confidence_interval(mean: ArrayLike, count: ArrayLike, n_items: int, delta: float, sigma: float,
                        bound: str = "lil") -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper confidence bounds on the distance of every entry of ``mean``/``count``.

    ``bound``: ``"lil"`` (default, ε = 0.7), ``"hoeffding"`` (eq. (2)), ``"bernstein"`` or
    ``"kl"`` (samples in [0, 1]; σ is not used). An unsampled entry gets (−∞, ∞) for the
    sub-Gaussian bounds and [0, 1] for the bounded ones.
    """
    mean = np.asarray(mean, dtype=np.float64)
    if bound == "lil":
        r = lil_radius(count, n_items, delta, sigma)
    elif bound == "hoeffding":
        r = hoeffding_radius(count, n_items, delta, sigma)
    elif bound == "bernstein":
        return bernstein_interval(mean, count, n_items, delta)
    elif bound == "kl":
        return kl_interval(mean, count, n_items, delta)
    else:
        raise ValueError(f"bound must be one of {BOUNDS}, not {bound!r}")
    with np.errstate(invalid="ignore"):
        return mean - r, mean + r
