"""Ordinal embeddings (STE / t-STE) fitted to triplet answers, and the planners built on them.

The peer Proxima is judged against: uniformly random (or uncertainty-sampled) triplets and an
embedding fitted to them, whose nearest points give the neighbour graph. Numpy/scipy only; must
never import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize

from .utils import check_n_items, check_random_state

KERNELS = ("ste", "tste")


# ---------------------------------------------------------------------------- fitting core
def _check_triplets(triplets, n_items: int) -> np.ndarray:
    t = np.asarray(triplets, dtype=np.int64)
    if t.size == 0:
        return np.empty((0, 3), np.int64)
    if t.ndim != 2 or t.shape[1] != 3:
        raise ValueError(f"triplets must be rows (i, j, k), got shape {t.shape}")
    if t.min() < 0 or t.max() >= n_items:
        raise ValueError(f"item indices must lie in 0..{n_items - 1}")
    return t


def _check_kernel(kernel: str, alpha, dim: int) -> float:
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, not {kernel!r}")
    if alpha is None:
        return float(max(dim - 1, 1))
    if alpha <= 0:
        raise ValueError(f"alpha must be > 0, got {alpha}")
    return float(alpha)


def _log_p_and_grads(dij, dik, kernel: str, alpha: float):
    """log P(i closer to j) and its derivatives with respect to the squared distances."""
    if kernel == "ste":
        # p = sigmoid(dik - dij)
        z = dij - dik
        log_p = -np.logaddexp(0.0, z)
        q = np.exp(-np.logaddexp(0.0, -z))  # 1 - p, computed stably
        return log_p, -q, q
    c = -(alpha + 1.0) / 2.0
    log_kj = c * np.log1p(dij / alpha)
    log_kk = c * np.log1p(dik / alpha)
    log_p = log_kj - np.logaddexp(log_kj, log_kk)
    q = -np.expm1(log_p)
    # d log K / d d = c / (alpha + d)
    return log_p, q * c / (alpha + dij), -q * c / (alpha + dik)


def triplet_probabilities(X, triplets, kernel: str = "tste", alpha=None) -> np.ndarray:
    """P(i closer to j than to k) under the fitted model, one per ``(i, j, k)`` row."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be an array of shape (n_items, dim), got {X.shape}")
    a = _check_kernel(kernel, alpha, X.shape[1])
    t = _check_triplets(triplets, len(X))
    dij = np.sum((X[t[:, 0]] - X[t[:, 1]]) ** 2, axis=1)
    dik = np.sum((X[t[:, 0]] - X[t[:, 2]]) ** 2, axis=1)
    return np.exp(_log_p_and_grads(dij, dik, kernel, a)[0])


def _objective(flat, t, n, dim, kernel, alpha, l2):
    X = flat.reshape(n, dim)
    xi, xj, xk = X[t[:, 0]], X[t[:, 1]], X[t[:, 2]]
    dj, dk = xi - xj, xi - xk
    dij = np.einsum("md,md->m", dj, dj)
    dik = np.einsum("md,md->m", dk, dk)
    log_p, g_j, g_k = _log_p_and_grads(dij, dik, kernel, alpha)
    m = len(t)
    # mean over triplets keeps the tolerances of L-BFGS independent of the number of answers
    loss = -log_p.sum() / m + l2 * np.sum(X * X) / n
    # d(-log p)/dx_i = -(g_j * 2 dj + g_k * 2 dk); x_j and x_k get the opposite of their part
    fj = (-2.0 / m) * g_j[:, None] * dj
    fk = (-2.0 / m) * g_k[:, None] * dk
    grad = np.empty((n, dim))
    for d in range(dim):
        grad[:, d] = (np.bincount(t[:, 0], fj[:, d] + fk[:, d], minlength=n)
                      - np.bincount(t[:, 1], fj[:, d], minlength=n)
                      - np.bincount(t[:, 2], fk[:, d], minlength=n))
    grad += (2.0 * l2 / n) * X
    return loss, grad.ravel()


def fit_embedding(triplets, n_items: int, dim: int = 2, kernel: str = "tste", alpha=None, init=None,
                  l2: float = 1e-3, max_iter: int = 300, random_state=None, return_n_iter: bool = False):
    """Fit an STE or t-STE embedding (van der Maaten & Weinberger 2012) by L-BFGS.

    ``triplets`` rows ``(i, j, k)`` mean "i is closer to j than to k". STE:
    p = exp(−d_ij) / (exp(−d_ij) + exp(−d_ik)) on squared distances; t-STE replaces exp(−d) by
    the Student-t kernel (1 + d/α)^(−(α+1)/2), α = max(dim − 1, 1) by default. Minimises the
    mean negative log-likelihood + ``l2`` · mean squared norm. ``init`` (n_items, dim) warm
    starts (e.g. the previous fit); otherwise a small random start from ``random_state``.
    Returns ndarray (n_items, dim), and the number of L-BFGS iterations if ``return_n_iter``.
    """
    n = check_n_items(n_items)
    dim = int(dim)
    if dim < 1:
        raise ValueError(f"dim must be a positive integer, got {dim}")
    a = _check_kernel(kernel, alpha, dim)
    if l2 < 0:
        raise ValueError(f"l2 must be >= 0, got {l2}")
    t = _check_triplets(triplets, n)
    if init is None:
        X0 = check_random_state(random_state).normal(scale=1e-2, size=(n, dim))
    else:
        X0 = np.array(init, dtype=np.float64)
        if X0.shape != (n, dim):
            raise ValueError(f"init must have shape {(n, dim)}, got {X0.shape}")
    if len(t) == 0:
        return (X0, 0) if return_n_iter else X0
    res = minimize(_objective, X0.ravel(), args=(t, n, dim, kernel, a, float(l2)), jac=True,
                   method="L-BFGS-B", options={"maxiter": int(max_iter), "gtol": 1e-7, "ftol": 1e-12})
    X = res.x.reshape(n, dim)
    return (X, int(res.nit)) if return_n_iter else X


def embedding_neighbors(X, k: int = 1) -> np.ndarray:
    """Each item's k nearest other items in the embedding, closest first: int (n_items, k)."""
    X = np.asarray(X, dtype=np.float64)
    k = int(k)
    if X.ndim != 2 or k < 1 or k >= len(X):
        raise ValueError(f"need X of shape (n, dim) and 1 <= k < n, got {X.shape} and k={k}")
    D = _sq_dists(X)
    np.fill_diagonal(D, np.inf)
    return np.argsort(D, axis=1, kind="stable")[:, :k].astype(np.int64)


def _sq_dists(X: np.ndarray) -> np.ndarray:
    sq = np.sum(X * X, axis=1)
    return np.maximum(sq[:, None] + sq[None, :] - 2.0 * X @ X.T, 0.0)


def triplet_accuracy(X, triplets) -> float:
    """Share of ``(i, j, k)`` rows where j is strictly the closer of the two in X."""
    t = _check_triplets(triplets, len(X))
    if len(t) == 0:
        return float("nan")
    X = np.asarray(X, dtype=np.float64)
    dij = np.sum((X[t[:, 0]] - X[t[:, 1]]) ** 2, axis=1)
    dik = np.sum((X[t[:, 0]] - X[t[:, 2]]) ** 2, axis=1)
    return float(np.mean(dij < dik))


@dataclass(frozen=True)
class EmbeddingChoice:
    """What :func:`select_embedding` found: the refitted embedding and every candidate's score."""

    embedding: np.ndarray
    dim: int
    kernel: str
    holdout_accuracy: float
    scores: dict


def select_embedding(triplets, n_items: int, dims=(2, 3, 5, 8), kernels=("ste", "tste"),
                     holdout: float = 0.2, random_state=0, **fit_params) -> EmbeddingChoice:
    """Pick dim and kernel by held-out triplet accuracy, then refit the winner on all triplets.

    The "random triplets + best embedding" peer of the benchmarks. ``scores`` maps
    ``(kernel, dim)`` to held-out accuracy; ties go to the smaller dim and the earlier kernel.
    """
    n = check_n_items(n_items)
    t = _check_triplets(triplets, n)
    if not 0 < holdout < 1:
        raise ValueError(f"holdout must lie in (0, 1), got {holdout}")
    if len(t) < 2:
        raise ValueError("need at least 2 triplets to hold some out")
    rng = check_random_state(random_state)
    order = rng.permutation(len(t))
    n_test = max(1, int(round(holdout * len(t))))
    test, train = t[order[:n_test]], t[order[n_test:]]
    seed = int(rng.integers(2**31))
    scores = {}
    best = None
    for dim in sorted(int(d) for d in dims):
        for kernel in kernels:
            X = fit_embedding(train, n, dim=dim, kernel=kernel, random_state=seed, **fit_params)
            acc = triplet_accuracy(X, test)
            scores[(kernel, dim)] = acc
            if best is None or acc > best[0]:
                best = (acc, kernel, dim)
    acc, kernel, dim = best
    X = fit_embedding(t, n, dim=dim, kernel=kernel, random_state=seed, **fit_params)
    return EmbeddingChoice(X, dim, kernel, acc, scores)
