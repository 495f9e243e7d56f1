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
#: Distinct (mean, level) pairs whose KL interval ends are remembered (the cache starts over when full).
_KL_CACHE_SIZE = 1 << 14
_KL_CACHE: dict[tuple[float, float], tuple[float, float]] = {}


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


def _kl_brackets(m, level):
    """Outer ends (lower, upper) of the bisection brackets of {q : kl(m, q) ≤ level} for 1-D float64
    arrays of means in [0, 1] and levels.

    kl(p, q) = p log(p/q) + (1 − p) log((1 − p)/(1 − q)) with p and q clipped to [1e-12, 1 − 1e-12].
    Both sides bisect as one array of 2·len(m) brackets ([m, 1] for the upper end, [0, m] for the
    lower one), and the p terms are clipped once; every step evaluates, elementwise, the same
    floating-point expression in the same order as a bisection of one side at a time would.
    """
    n = m.size
    p = np.clip(np.concatenate([m, m]), 1e-12, 1 - 1e-12)
    one_minus_p = 1 - p
    level = np.concatenate([level, level])
    lo = np.concatenate([m, np.zeros(n)])
    hi = np.concatenate([np.ones(n), m])
    below = np.arange(2 * n) >= n  # the lower end's brackets: mid inside moves their upper end
    for _ in range(_KL_BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        q = np.clip(mid, 1e-12, 1 - 1e-12)
        raise_lo = (p * np.log(p / q) + one_minus_p * np.log(one_minus_p / (1 - q)) <= level) != below
        lo = np.where(raise_lo, mid, lo)
        hi = np.where(raise_lo, hi, mid)
    return lo[n:], hi[:n]


def _kl_ends(m, level):
    """:func:`_kl_brackets` of distinct (m, level) pairs; pairs bisected before are read back from
    ``_KL_CACHE`` (the same floats a new bisection gives: the bisection is elementwise)."""
    keys = list(zip(m.tolist(), level.tolist(), strict=True))
    ends = [_KL_CACHE.get(key) for key in keys]
    todo = [i for i, e in enumerate(ends) if e is None]
    if todo:
        lo, hi = _kl_brackets(m[todo], level[todo])
        keep = len(todo) <= _KL_CACHE_SIZE  # a batch larger than the cache is not remembered
        if keep and len(_KL_CACHE) + len(todo) > _KL_CACHE_SIZE:
            _KL_CACHE.clear()
        for i, e in zip(todo, zip(lo.tolist(), hi.tolist(), strict=True), strict=True):
            ends[i] = e
            if keep and keys[i][0] == keys[i][0] and keys[i][1] == keys[i][1]:  # a NaN key is never found again
                _KL_CACHE[keys[i]] = e
    ends = np.array(ends, dtype=np.float64).reshape(len(keys), 2)
    return ends[:, 0], ends[:, 1]


def kl_interval(mean: ArrayLike, count: ArrayLike, n_items: int, delta: float) -> tuple[np.ndarray, np.ndarray]:
    """Chernoff–KL interval for samples in [0, 1]: {q : T·kl(m̂, q) ≤ log(4n²T²/δ)}, by bisection.

    The bisection runs once per distinct (m̂, level) pair, and once per process for the pairs it
    remembers: means of 0/1 answers are k/T, so a planner asks about the same few pairs over and over.
    """
    m = np.clip(np.asarray(mean, dtype=np.float64), 0.0, 1.0)
    T = np.asarray(count, dtype=np.float64)
    level = _log_term(T, n_items, delta) / np.maximum(T, 1.0)
    m, level = np.broadcast_arrays(m, level)
    key = np.empty(m.shape, dtype=np.complex128)
    key.real, key.imag = m, level
    # equal_nan=False: a NaN mean or level stays its own entry, as in an elementwise bisection
    key, where = np.unique(key.ravel(), return_inverse=True, equal_nan=False)
    lo, hi = _kl_ends(np.ascontiguousarray(key.real), np.ascontiguousarray(key.imag))
    # The outer ends of the bisection brackets keep the interval conservative.
    lower = np.where(T > 0, lo[where].reshape(m.shape), 0.0)
    upper = np.where(T > 0, hi[where].reshape(m.shape), 1.0)
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
