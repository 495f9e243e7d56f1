"""Ordinal embeddings (STE / t-STE / the human noise model) fitted to triplet answers, and the planners
built on them.

The peer Proxima is judged against: uniformly random (or uncertainty-sampled) triplets and an
embedding fitted to them, whose nearest points give the neighbour graph. Numpy/scipy only; must
never import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Self

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import minimize
from scipy.spatial import cKDTree
from scipy.special import expit

from .continuum import continuum_start
from .features import PRIOR_STIFFNESS, feature_space
from .graph import NO_NEIGHBOR, NeighborGraph
from .random_triplets import candidate_pairs
from .utils import (
    RandomState,
    check_n_items,
    check_random_state,
    check_triplets,
    counters_state,
    generator_state,
    load_counters,
    planner_from_state,
)

KERNELS = ("ste", "tste", "human")
#: Lapse rate the ``"human"`` fitting kernel assumes: the share of answers given at random. People lapse
#: on ~3% (the alien-egg crowds, ``simulation.oracles.HUMAN_LAPSE``, what simulations use) to ~10% of
#: triplets; a fit that expects a little more than the crowd's lapses does not pull items apart to
#: explain one odd answer. A property of the fit, not of the raters it simulates.
FIT_LAPSE = 0.05
#: Below this squared distance the ``"human"`` kernel's distance is smoothed (sqrt(d + eps)): its
#: gradient stays finite where two points meet.
HUMAN_EPS = 1e-9
#: How many nearest points :meth:`EmbeddingLearner.screen_candidates` gives a screen planner
SCREEN_CANDIDATES = 16


# ---------------------------------------------------------------------------- fitting core
def _check_kernel(kernel: str, alpha, dim: int) -> float:
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, not {kernel!r}")
    if alpha is None:
        return float(max(dim - 1, 1))
    if alpha <= 0:
        raise ValueError(f"alpha must be > 0, got {alpha}")
    return float(alpha)


def _human_p(dij, dik) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The ``"human"`` kernel from the squared distances: (p, s, ri, rk) with p = λ/2 + (1 − λ) s,
    λ = ``FIT_LAPSE``, s = sigmoid(sqrt(dik) − sqrt(dij)) and ri, rk the two distances."""
    lapse = FIT_LAPSE
    ri = np.sqrt(np.asarray(dij, dtype=np.float64) + HUMAN_EPS)
    rk = np.sqrt(np.asarray(dik, dtype=np.float64) + HUMAN_EPS)
    s = expit(rk - ri)
    return 0.5 * lapse + (1.0 - lapse) * s, s, ri, rk


def _log_p(dij, dik, kernel: str, alpha: float) -> np.ndarray:
    """log P(i closer to j) from the squared distances d(i, j), d(i, k)."""
    if kernel == "ste":  # p = sigmoid(dik - dij)
        return -np.logaddexp(0.0, dij - dik)
    if kernel == "human":
        return np.log(_human_p(dij, dik)[0])
    c = -(alpha + 1.0) / 2.0
    log_kj = c * np.log1p(dij / alpha)
    log_kk = c * np.log1p(dik / alpha)
    return log_kj - np.logaddexp(log_kj, log_kk)


def _log_p_and_grads(dij, dik, kernel: str, alpha: float):
    """log P(i closer to j) and its derivatives with respect to the squared distances."""
    log_p = _log_p(dij, dik, kernel, alpha)
    if kernel == "ste":
        q = np.exp(-np.logaddexp(0.0, -(dij - dik)))  # 1 - p, computed stably
        return log_p, -q, q
    if kernel == "human":
        p, s, ri, rk = _human_p(dij, dik)
        u = (1.0 - FIT_LAPSE) * s * (1.0 - s) / p  # d log p / d (rk - ri)
        return log_p, -u / (2.0 * ri), u / (2.0 * rk)
    c = -(alpha + 1.0) / 2.0
    q = -np.expm1(log_p)
    # d log K / d d = c / (alpha + d)
    return log_p, q * c / (alpha + dij), -q * c / (alpha + dik)


def triplet_probabilities(X: ArrayLike, triplets: ArrayLike, kernel: str = "tste",
                          alpha: float | None = None) -> np.ndarray:
    """P(i closer to j than to k) under the fitted model, one per ``(i, j, k)`` row."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be an array of shape (n_items, dim), got {X.shape}")
    a = _check_kernel(kernel, alpha, X.shape[1])
    t = check_triplets(triplets, len(X))
    dij = np.sum((X[t[:, 0]] - X[t[:, 1]]) ** 2, axis=1)
    dik = np.sum((X[t[:, 0]] - X[t[:, 2]]) ** 2, axis=1)
    return np.exp(_log_p(dij, dik, kernel, a))


def _objective(flat, t, n, dim, kernel, alpha, l2):
    """The objective of :func:`fit_embedding` and its gradient, written out plainly: the reference the
    tests hold :class:`_TripletLoss` (what the fits run) to."""
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


class _TripletLoss:
    """The objective of :func:`fit_embedding` (mean negative log-likelihood + ``l2`` · mean squared
    norm) and its gradient for one set of triplets, the same numbers as :func:`_objective` to float
    rounding but several times cheaper.

    Everything is computed over the answered triplets only (no array of all item pairs): memory is
    O(triplets · dim + items · dim) whatever the number of items. The triplets' columns are laid out
    once per fit; the distances and the gradient go coordinate by coordinate, a gather per column and
    three ``bincount`` per coordinate. t-STE's probability comes from the ratio of the two kernels: a
    division and one ``log1p`` (and a power above 2 dimensions) instead of two logarithms and a
    log-sum-exp.
    """

    def __init__(self, t: np.ndarray, n: int, dim: int, kernel: str, alpha: float, l2: float) -> None:
        self.n, self.dim, self.kernel, self.alpha, self.l2 = n, dim, kernel, alpha, l2
        self.m = len(t)
        self.power = (alpha + 1.0) / 2.0
        self.i, self.j, self.k = (np.ascontiguousarray(t[:, c], dtype=np.intp) for c in range(3))

    def _terms(self, dij: np.ndarray, dik: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        """(sum of −log p, wj, wk): the gradient is Σ wj·∂dij/∂X + wk·∂dik/∂X (mean over triplets).
        Overwrites ``dij`` and ``dik``."""
        scale = 2.0 / self.m
        if self.kernel == "ste":  # p = sigmoid(dik − dij)
            z = np.subtract(dij, dik, out=dij)
            nll = float(np.sum(np.logaddexp(0.0, z)))
            w = expit(z)
            w *= scale
            return nll, w, -w
        if self.kernel == "human":  # p = lapse/2 + (1 − lapse)·sigmoid(√dik − √dij)
            p, s, ri, rk = _human_p(dij, dik)
            nll = float(-np.sum(np.log(p)))
            u = (1.0 - FIT_LAPSE) * scale / 2.0 * s * (1.0 - s) / p
            return nll, u / ri, -(u / rk)
        # t-STE: p = Kj / (Kj + Kk) = 1 / (1 + v), v = Kk / Kj = r ** power, r = (alpha + dij) / (alpha + dik)
        aj, ak = np.add(dij, self.alpha, out=dij), np.add(dik, self.alpha, out=dik)
        r = aj / ak
        e = self.power
        if e == 1.0:  # p = ak / (aj + ak): wj = scale / (aj + ak), wk = −wj · r
            nll = float(np.sum(np.log1p(r)))
            wj = np.divide(scale, np.add(aj, ak, out=aj), out=aj)
            return nll, wj, np.negative(np.multiply(r, wj, out=r), out=r)
        with np.errstate(over="ignore"):
            v = r * r if e == 2.0 else np.square(r * r) if e == 4.0 else np.power(r, e)
        nll = float(np.sum(np.log1p(v)))
        if np.isfinite(nll):
            q = v / (1.0 + v)
        else:  # v overflowed: the same in logs
            s = e * np.log(r)
            nll = float(np.sum(np.logaddexp(0.0, s)))
            q = expit(s)
        q *= scale * e
        return nll, np.divide(q, aj, out=aj), np.negative(np.divide(q, ak, out=ak), out=ak)

    def __call__(self, flat: np.ndarray) -> tuple[float, np.ndarray]:
        n, dim = self.n, self.dim
        X = flat.reshape(n, dim)
        XT = np.ascontiguousarray(X.T)
        dj, dk = [], []
        for d in range(dim):
            xi = XT[d].take(self.i)
            dj.append(xi - XT[d].take(self.j))
            dk.append(xi - XT[d].take(self.k))
        dij, dik = dj[0] * dj[0], dk[0] * dk[0]
        for d in range(1, dim):
            dij += dj[d] * dj[d]
            dik += dk[d] * dk[d]
        nll, wj, wk = self._terms(dij, dik)
        grad = np.empty((n, dim))
        for d in range(dim):
            fj, fk = wj * dj[d], wk * dk[d]
            grad[:, d] = (np.bincount(self.i, fj + fk, minlength=n) - np.bincount(self.j, fj, minlength=n)
                          - np.bincount(self.k, fk, minlength=n))
        grad += (2.0 * self.l2 / n) * X
        return nll / self.m + self.l2 * float(np.sum(X * X)) / n, grad.ravel()


class _FeatureLoss:
    """The objective of :func:`fit_embedding` with item features Z (n, p): the points are X = Z W + E,
    a learned linear map of the features (how people weigh them) plus each item's offset from where
    its features put it. The offsets cost ``stiffness`` · Σ‖E_i‖² / (number of answers · ``spread``),
    ``spread`` the start's total variance (an offset as large as the items' typical distance from
    their centre costs about ``stiffness`` answers): an item's features weigh as much as a few answers
    about it, so few answers leave it where its features put it, and many move it where the answers
    say. Parameters: W then E, flattened."""

    def __init__(self, base: _TripletLoss, Z: np.ndarray, stiffness: float, spread: float) -> None:
        self.base, self.Z = base, Z
        # (in units of the start's spread: an embedding's scale is its own, the offsets' cost is not)
        self.cost = float(stiffness) / (max(base.m, 1) * max(spread, 1e-12))
        self.size_w = Z.shape[1] * base.dim

    def points(self, flat: np.ndarray) -> np.ndarray:
        W = flat[: self.size_w].reshape(self.Z.shape[1], self.base.dim)
        return self.Z @ W + flat[self.size_w:].reshape(self.base.n, self.base.dim)

    def __call__(self, flat: np.ndarray) -> tuple[float, np.ndarray]:
        E = flat[self.size_w:]
        loss, g = self.base(self.points(flat).ravel())
        g = g.reshape(self.base.n, self.base.dim)
        grad_w = (self.Z.T @ g).ravel()
        return loss + self.cost * float(E @ E), np.concatenate([grad_w, g.ravel() + 2.0 * self.cost * E])


def fit_embedding(triplets: ArrayLike, n_items: int, dim: int = 2, kernel: str = "tste", alpha: float | None = None,
                  init: ArrayLike | None = None, l2: float = 1e-3, max_iter: int = 300,
                  random_state: RandomState = None, return_n_iter: bool = False,
                  max_fun: int | None = None,
                  return_info: bool = False, features: ArrayLike | None = None,
                  stiffness: float = 1.0) -> np.ndarray | tuple[np.ndarray, int] | tuple[np.ndarray, dict]:
    """Fit an STE or t-STE embedding (van der Maaten & Weinberger 2012) by L-BFGS.

    ``triplets`` rows ``(i, j, k)`` mean "i is closer to j than to k". STE:
    p = exp(−d_ij) / (exp(−d_ij) + exp(−d_ik)) on squared distances; t-STE replaces exp(−d) by
    the Student-t kernel (1 + d/α)^(−(α+1)/2), α = max(dim − 1, 1) by default. ``"human"``: the
    noise model fitted to people's answers, p = λ/2 + (1 − λ)·sigmoid(‖x_i − x_k‖ − ‖x_i − x_j‖) on plain
    distances, λ = ``FIT_LAPSE`` (``alpha`` unused; a line is the continuum ``engine.duels`` fits). Minimises the
    mean negative log-likelihood + ``l2`` · mean squared norm. ``init`` (n_items, dim) warm
    starts (e.g. the previous fit); otherwise a small random start from ``random_state``.
    Returns ndarray (n_items, dim), and the number of L-BFGS iterations if ``return_n_iter``, or
    a dict ``{"nit", "nfev", "converged"}`` if ``return_info`` (``max_fun`` bounds the objective
    evaluations; a fit stopped by ``max_iter`` or ``max_fun`` is not converged and can be
    continued from its result).

    ``features`` (n_items, p), e.g. :func:`engine.features.feature_space`: a prior the answers can
    overrule. The points are then X = Z W + E, the map W (how people weigh the features) and the
    offsets E fitted together, each offset costing ``stiffness`` · ‖E_i‖² / (number of answers · the
    start's total variance) (see :class:`_FeatureLoss`); features that predict nothing get little
    weight in W. ``stiffness=np.inf`` fits the map alone (X = Z W: a linear metric over the features).
    Without ``init`` the fit starts from the features' leading columns; an ``init`` is
    split into its least-squares map and the rest.
    """
    n = check_n_items(n_items)
    dim = int(dim)
    if dim < 1:
        raise ValueError(f"dim must be a positive integer, got {dim}")
    a = _check_kernel(kernel, alpha, dim)
    if l2 < 0:
        raise ValueError(f"l2 must be >= 0, got {l2}")
    t = check_triplets(triplets, n)
    if init is None:
        X0 = check_random_state(random_state).normal(scale=1e-2, size=(n, dim))
        if features is not None:
            # where the features put the items: their leading columns (the principal components of
            # engine.features.feature_space), the small random start in the dimensions past them
            lead = np.asarray(features, dtype=np.float64)[:, :dim]
            X0[:, : lead.shape[1]] = lead
    else:
        X0 = np.array(init, dtype=np.float64)
        if X0.shape != (n, dim):
            raise ValueError(f"init must have shape {(n, dim)}, got {X0.shape}")
    if len(t) == 0:
        if return_info:
            return X0, {"nit": 0, "nfev": 0, "converged": True}
        return (X0, 0) if return_n_iter else X0
    options = {"maxiter": int(max_iter), "gtol": 1e-7, "ftol": 1e-12}
    if max_fun is not None:
        options["maxfun"] = int(max_fun)
    loss = _TripletLoss(t, n, dim, kernel, a, float(l2))
    if features is None:
        res = minimize(loss, X0.ravel(), jac=True, method="L-BFGS-B", options=options)
        X = res.x.reshape(n, dim)
    else:
        Z = np.asarray(features, dtype=np.float64)
        if Z.ndim != 2 or len(Z) != n:
            raise ValueError(f"features must have shape ({n}, n_features), got {Z.shape}")
        if stiffness < 0:
            raise ValueError(f"stiffness must be >= 0, got {stiffness}")
        W0 = np.linalg.lstsq(Z, X0, rcond=None)[0] if Z.shape[1] else np.zeros((0, dim))
        if np.isinf(stiffness):  # the map alone: X = Z W
            def mapped(w: np.ndarray) -> tuple[float, np.ndarray]:
                value, g = loss((Z @ w.reshape(-1, dim)).ravel())
                return value, (Z.T @ g.reshape(n, dim)).ravel()

            res = minimize(mapped, W0.ravel(), jac=True, method="L-BFGS-B", options=options)
            X = Z @ res.x.reshape(-1, dim)
        else:
            prior = _FeatureLoss(loss, Z, stiffness, float(X0.var(axis=0).sum()))
            res = minimize(prior, np.concatenate([W0.ravel(), (X0 - Z @ W0).ravel()]), jac=True,
                           method="L-BFGS-B", options=options)
            X = prior.points(res.x)
    if return_info:
        # status 1: stopped by maxiter / maxfun (0 converged, 2 the line search gave up)
        return X, {"nit": int(res.nit), "nfev": int(res.nfev), "converged": int(res.status) != 1}
    return (X, int(res.nit)) if return_n_iter else X


def embedding_neighbors(X: ArrayLike, k: int = 1) -> np.ndarray:
    """Each item's k nearest other items in the embedding, closest first (ties by item index): int
    (n_items, k). From a k-d tree over the points: O(n_items · k) memory, no array of all pairs."""
    X = np.asarray(X, dtype=np.float64)
    k = int(k)
    if X.ndim != 2 or k < 1 or k >= len(X):
        raise ValueError(f"need X of shape (n, dim) and 1 <= k < n, got {X.shape} and k={k}")
    return _nearest(X, k)[0]


def _nearest(X: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(neighbours, squared distances), both (n, k): each point's k nearest other points, closest
    first, ties by index. The tree is asked for k + 1 points; a point's own row is dropped (if a
    duplicate point hid it, the farthest of the k + 1 is)."""
    n = len(X)
    _, nb = cKDTree(X).query(X, k=k + 1)
    nb = nb.reshape(n, k + 1).astype(np.int64)
    d2 = _pair_sq_dists(X, np.arange(n)[:, None], nb)
    own = nb == np.arange(n)[:, None]
    d2[own] = np.inf  # the point itself goes last, then is cut
    order = np.lexsort((nb, d2), axis=1)[:, :k]
    return np.take_along_axis(nb, order, axis=1), np.take_along_axis(d2, order, axis=1)


def _sq_dists_from(X: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Squared distances (len(rows), n) from the points X[rows] to every point, summed coordinate by
    coordinate (the same numbers for a row whatever the other rows are)."""
    D2 = np.zeros((len(rows), len(X)))
    for d in range(X.shape[1]):
        diff = X[rows, d][:, None] - X[None, :, d]
        D2 += diff * diff
    return D2


def _pair_sq_dists(X: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Squared distances between the points indexed by a and b (broadcast together)."""
    diff = X[a] - X[b]
    return np.einsum("...d,...d->...", diff, diff)


def triplet_accuracy(X: ArrayLike, triplets: ArrayLike) -> float:
    """Share of ``(i, j, k)`` rows where j is strictly the closer of the two in X."""
    t = check_triplets(triplets, len(X))
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


def select_embedding(triplets: ArrayLike, n_items: int, dims: Iterable[int] = (2, 3, 5, 8),
                     kernels: Sequence[str] = ("ste", "tste"), holdout: float = 0.2, random_state: RandomState = 0,
                     line: bool = True, folds: int = 1, **fit_params: Any) -> EmbeddingChoice:
    """Pick dim and kernel by held-out triplet accuracy, then refit the winner on all triplets.

    The "random triplets + best embedding" peer of the benchmarks. ``scores`` maps
    ``(kernel, dim)`` to held-out accuracy; ties go to the smaller dim and the earlier kernel.
    ``line``: also offer what ``engine.duels`` fits for items on a continuum, the human noise model
    on a line (``("human", 1)``) started from the items' order along the 2-D t-STE map, so a peer has
    every model the learner it is compared with can choose (it is tried last and must beat the rest).
    ``folds`` > 1: score by K-fold cross-validation (every triplet held out once, ``holdout`` unused)
    instead of one held-out share: a pilot's few hundred held-out answers spread the single split's
    scores by ~.03, enough to pick a line for items in clusters (the world a plan simulates).
    """
    n = check_n_items(n_items)
    t = check_triplets(triplets, n)
    if not 0 < holdout < 1:
        raise ValueError(f"holdout must lie in (0, 1), got {holdout}")
    if len(t) < 2:
        raise ValueError("need at least 2 triplets to hold some out")
    folds = int(folds)
    if folds < 1 or (folds > 1 and len(t) < folds):
        raise ValueError(f"folds must be 1 or at most the {len(t)} triplets, got {folds}")
    rng = check_random_state(random_state)
    order = rng.permutation(len(t))
    if folds == 1:
        n_test = max(1, int(round(holdout * len(t))))
        splits = [(t[order[n_test:]], t[order[:n_test]])]
    else:
        fold = np.empty(len(t), dtype=np.int64)
        fold[order] = np.arange(len(t)) % folds
        splits = [(t[fold != f], t[fold == f]) for f in range(folds)]
    seed = int(rng.integers(2**31))

    def score(fit: Callable[[np.ndarray], np.ndarray]) -> float:
        return float(np.mean([triplet_accuracy(fit(train), test) for train, test in splits]))

    scores = {}
    best = None
    for dim in sorted(int(d) for d in dims):
        for kernel in kernels:
            acc = score(lambda train, dim=dim, kernel=kernel: fit_embedding(
                train, n, dim=dim, kernel=kernel, random_state=seed, **fit_params))
            scores[(kernel, dim)] = acc
            if best is None or acc > best[0]:
                best = (acc, kernel, dim)
    if line and n > 2:
        acc = score(lambda train: _line(train, n, seed, fit_params))
        scores[("human", 1)] = acc
        if acc > best[0]:
            best = (acc, "human", 1)
    acc, kernel, dim = best
    if kernel == "human" and dim == 1 and line:
        X = _line(t, n, seed, fit_params)
    else:
        X = fit_embedding(t, n, dim=dim, kernel=kernel, random_state=seed, **fit_params)
    return EmbeddingChoice(X, dim, kernel, acc, scores)


def _line(triplets: np.ndarray, n: int, seed: int, fit_params: dict) -> np.ndarray:
    """The human model on a line, started from the order along a 2-D t-STE map (as engine.duels does)."""
    plane = fit_embedding(triplets, n, dim=2, kernel="tste", random_state=seed, **fit_params)
    return fit_embedding(triplets, n, dim=1, kernel="human", init=continuum_start(plane), random_state=seed,
                         **fit_params)


# ---------------------------------------------------------------------------- planners
def _answers_to_triplets(answers: np.ndarray) -> np.ndarray:
    """``(head, a, b, winner)`` rows -> ``(head, winner, loser)`` rows."""
    h, a, b, w = answers.T
    return np.column_stack([h, w, np.where(w == a, b, a)])


class EmbeddingLearner:
    """Uniformly random triplets + a t-STE (or STE) embedding: the NEXT/Salmon-style peer.

    Asks uniformly random distinct (head, a, b), keeps every answer, and fits the embedding
    with warm starts. Fitting is lazy: it happens when the graph or embedding is wanted and the
    answers grew by at least ``max(refit_min, refit_share · answers at the last fit)`` since the
    last fit, so a live worker asking for the graph after every small batch stays cheap.
    ``dim=2`` by default: t-STE's held-out triplet accuracy in 2-D was the best on the alien
    eggs (1-D truth; 1-D t-STE is clearly worse, its heavy tails need room) and within a point
    of the best dimension on the material triplets, and fewer dimensions need fewer answers
    per item (benchmarks/embedding_peer.py, benchmarks/README.md).

    Parameters
    ----------
    n_items : int
    random_state : None, int or numpy Generator
    kernel : "tste" or "ste"
    dim : int, embedding dimension
    refit_share, refit_min : laziness of the refits (see above)
    """

    VERSION = 1
    #: the counters the state keeps (as whole numbers, last)
    _COUNTERS = ("fitted_answers", "n_fits", "n_planned")

    #: ``make_planner(..., features=X)`` passes the items' features: every fit starts from them and fits
    #: the map from them to the space people use with the answers (``fit_embedding``'s ``features``),
    #: and an item nobody was asked about yet gets the neighbours its features predict
    TAKES_FEATURES = True

    def __init__(self, n_items: int, random_state: RandomState = None, kernel: str = "tste", dim: int = 2,
                 refit_share: float = 0.1, refit_min: int | None = None, l2: float = 1e-3,
                 features: ArrayLike | None = None) -> None:
        self.n_items = check_n_items(n_items)
        # the features' space (engine.features.feature_space), not the matrix (it may be large)
        self.features_ = None if features is None else feature_space(features, self.n_items)
        self.random_state = random_state
        self.kernel = kernel
        self.dim = int(dim)
        if self.dim < 1:
            raise ValueError(f"dim must be a positive integer, got {dim}")
        self.alpha_ = _check_kernel(kernel, None, self.dim)
        if refit_share < 0:
            raise ValueError(f"refit_share must be >= 0, got {refit_share}")
        self.refit_share = float(refit_share)
        self.refit_min = self.n_items if refit_min is None else int(refit_min)
        self.l2 = float(l2)
        self.rng_ = check_random_state(random_state)
        # the first fit's start is drawn once, so when a refit happens never changes the questions
        self.fit_seed_ = int(self.rng_.integers(2**31))
        self.answers_ = np.empty((0, 4), np.int64)
        self.embedding_ = None
        self.fitted_answers_ = 0
        self.n_fits_ = 0
        self.n_planned_ = 0

    # -- parameters the state keeps
    def _params(self) -> dict:
        return {"kernel": self.kernel, "dim": self.dim, "refit_share": self.refit_share,
                "refit_min": self.refit_min, "l2": self.l2}

    def _random_questions(self, budget: int) -> np.ndarray:
        n, rng = self.n_items, self.rng_
        heads = rng.integers(n, size=budget)
        a, b = candidate_pairs(rng, n, heads, budget)
        return np.column_stack([heads, a, b])

    def next_questions(self, budget: int) -> list[tuple[int, int, int]]:
        budget = int(budget)
        if budget <= 0:
            return []
        q = self._random_questions(budget)
        self.n_planned_ += budget
        return [tuple(map(int, row)) for row in q]

    def observe(self, answers: Iterable[Sequence[int]]) -> None:
        arr = check_triplets(answers, self.n_items, "triplet answer", width=4)
        if len(arr):
            self.answers_ = np.concatenate([self.answers_, arr])

    def forget(self, questions: Iterable[Sequence[int]]) -> None:
        """Nothing to release: random questions are fresh, none is reserved."""

    @property
    def done(self) -> bool:
        """Never: an embedding has no certificate, the study's budget stops it."""
        return False

    def _stale(self) -> bool:
        new = len(self.answers_) - self.fitted_answers_
        if new <= 0:
            # with features, the first "fit" is the features themselves (no answer needed)
            return self.embedding_ is None and self.features_ is not None
        return self.embedding_ is None or new >= max(self.refit_min, self.refit_share * self.fitted_answers_)

    def refit(self) -> np.ndarray:
        """Fit now on every answer so far (warm started from the previous fit)."""
        prior = {} if self.features_ is None else {"features": self.features_.astype(np.float64),
                                                     "stiffness": PRIOR_STIFFNESS}
        self.embedding_ = fit_embedding(
            _answers_to_triplets(self.answers_), self.n_items, dim=self.dim, kernel=self.kernel,
            alpha=self.alpha_, init=self.embedding_, l2=self.l2, random_state=self.fit_seed_, **prior)
        self.fitted_answers_ = len(self.answers_)
        self.n_fits_ += 1
        return self.embedding_

    def embedding(self) -> np.ndarray | None:
        """The current embedding (n_items, dim), refitted if stale; None before any answer."""
        if self._stale():
            self.refit()
        return None if self.embedding_ is None else self.embedding_.copy()

    def neighbor_graph(self, k: int = 1) -> NeighborGraph:
        """Nearest points of the embedding; ``estimates`` embedding distances, ``samples`` the
        answers with that head. Items in no answer yet (their point is arbitrary) get -1."""
        k = int(k)
        if not 1 <= k < self.n_items:
            raise ValueError(f"k must lie in 1..{self.n_items - 1}, got {k}")
        X = self.embedding()
        if X is None:
            return NeighborGraph.from_neighbors(np.full((self.n_items, k), NO_NEIGHBOR, np.int64))
        nb, d2 = _nearest(X, k)
        est = np.sqrt(d2)
        seen = np.bincount(self.answers_[:, :3].ravel(), minlength=self.n_items) > 0
        if self.features_ is not None:
            seen[:] = True  # every item is placed: by its features until answers move it
        nb = np.where(seen[:, None] & seen[nb], nb, NO_NEIGHBOR)
        per_head = np.bincount(self.answers_[:, 0], minlength=self.n_items)
        samples = np.repeat(per_head[:, None], k, axis=1)
        return NeighborGraph.from_neighbors(nb, estimates=est, samples=samples)

    def refresh_if_due(self) -> None:
        """Refit now if the answers have grown enough (see the class docstring)."""
        if self._stale():
            self.refit()

    def screen_of_tests(self, h: int, size: int) -> np.ndarray | None:
        """No screen of tests: the embedding fits the features with the answers and tests nothing apart."""
        return None

    def screen_candidates(self, h: int) -> tuple[np.ndarray, bool]:
        """h's nearest points in the current fit, nearest first (``SCREEN_CANDIDATES`` of them), for
        a screen showing several items at once; never certified. Empty before any fit or while h is in
        no answer yet (its point is arbitrary)."""
        h = int(h)
        X = self.embedding_
        cached = getattr(self, "_seen", None)
        if cached is None or cached[0] != len(self.answers_):
            seen = np.bincount(self.answers_[:, :3].ravel(), minlength=self.n_items) > 0
            cached = self._seen = (len(self.answers_), seen)
        if X is None or not cached[1][h]:
            return np.empty(0, np.int64), False
        d = ((X - X[h]) ** 2).sum(axis=1)
        d[h] = np.inf
        m = min(SCREEN_CANDIDATES, self.n_items - 1)
        near = np.argpartition(d, m - 1)[:m]
        return near[np.lexsort((near, d[near]))].astype(np.int64), False

    def result(self) -> np.ndarray | None:
        return self.embedding()

    def train_accuracy(self) -> float:
        X = self.embedding()
        if X is None:
            return float("nan")
        return triplet_accuracy(X, _answers_to_triplets(self.answers_))

    def progress(self) -> dict:
        return {
            "answers": int(len(self.answers_)),
            "questions_issued": int(self.n_planned_),
            "done": False,
            "items_certified": 0,
            "fits": int(self.n_fits_),
            "dim": self.dim,
            "kernel": self.kernel,
            "train_accuracy": self.train_accuracy(),
        }

    def to_state(self) -> dict:
        return {
            "class": type(self).__name__,
            "version": self.VERSION,
            "n_items": self.n_items,
            "params": self._params(),
            "answers": self.answers_.copy(),
            "embedding": None if self.embedding_ is None else self.embedding_.copy(),
            "rng": generator_state(self.rng_),
            "fit_seed": self.fit_seed_,
            **counters_state(self, self._COUNTERS),
            **({} if self.features_ is None else {"features": self.features_.copy()}),
        }

    @classmethod
    def from_state(cls, state: dict) -> Self:
        planner = planner_from_state(cls, state)
        planner.fit_seed_ = int(state["fit_seed"])
        planner.answers_ = np.array(state["answers"], dtype=np.int64).reshape(-1, 4)
        emb = state.get("embedding")
        planner.embedding_ = None if emb is None else np.array(emb, dtype=np.float64)
        load_counters(planner, cls._COUNTERS, state)
        space = state.get("features")
        planner.features_ = None if space is None else np.array(space, np.float32)
        planner._restore_extra(state)
        return planner

    def _restore_extra(self, state: dict) -> None:
        """Hook for subclasses with more state."""


#: :class:`ActiveEmbedding` ranks candidates from at most this many head-to-item distances at a time.
SCORING_CELLS = 1 << 18


class ActiveEmbedding(EmbeddingLearner):
    """Embedding learner that, after a random warm-up, asks the most informative triplets.

    After ``warmup`` answers (default 5 · n_items · dim) of uniformly random triplets, each
    question takes the least-asked head (answers + pending; ties in a random order), draws
    ``n_candidates`` random pairs (a, b) and asks the one of highest score
    p·(1 − p) · w, where p = P(head closer to a) under the current fit (uncertainty sampling
    as in NEXT's STE-based triplet app, Jamieson et al. 2015) and w = 1 / (1 + r / r0) with r
    the smaller embedding-distance rank of a or b from the head and r0 = max(1, n/20): like
    Salmon's adaptive round robin (Sievert et al. 2023), which goes round the heads and scores
    random candidate pairs under the current embedding, but weighting the uncertain pairs by
    how plausible a neighbour they hold, since only the near end of each head matters for a
    neighbour graph. Questions within one call are distinct.
    """

    VERSION = 1

    def __init__(self, n_items: int, random_state: RandomState = None, kernel: str = "tste", dim: int = 2,
                 refit_share: float = 0.1, refit_min: int | None = None, l2: float = 1e-3,
                 warmup: int | None = None, n_candidates: int = 50, features: ArrayLike | None = None) -> None:
        super().__init__(n_items, random_state=random_state, kernel=kernel, dim=dim,
                         refit_share=refit_share, refit_min=refit_min, l2=l2, features=features)
        self.warmup = 5 * self.n_items * self.dim if warmup is None else int(warmup)
        self.n_candidates = int(n_candidates)
        if self.n_candidates < 1:
            raise ValueError(f"n_candidates must be >= 1, got {n_candidates}")
        self.pending_ = np.zeros(self.n_items, np.int64)

    def _params(self) -> dict:
        return {**super()._params(), "warmup": self.warmup, "n_candidates": self.n_candidates}

    def next_questions(self, budget: int) -> list[tuple[int, int, int]]:
        budget = int(budget)
        if budget <= 0:
            return []
        n_random = max(0, min(budget, self.warmup - len(self.answers_) - int(self.pending_.sum())))
        out = [tuple(map(int, q)) for q in self._random_questions(n_random)]
        for h, _, _ in out:
            self.pending_[h] += 1
        if budget > n_random:
            out += self._active_questions(budget - n_random, set(out))
        self.n_planned_ += len(out)
        return out

    def _candidate_scores(self, X: np.ndarray, heads: np.ndarray, first: np.ndarray,
                          second: np.ndarray) -> np.ndarray:
        """Score p·(1 − p)·w of each candidate pair (first[s, c], second[s, c]) for head heads[s] (see
        the class): p from the fit's squared distances, w = 1 / (1 + r / r0) of the pair's nearer
        candidate by its rank r from the head (the head itself ranks last, ties by item index).

        The ranks need each head's distances to every item: they are computed for the heads asked,
        ``SCORING_CELLS`` (heads × items) at a time, so memory stays O(n_items), never n × n."""
        n = self.n_items
        r0 = max(1.0, n / 20.0)
        uniq, inv = np.unique(heads, return_inverse=True)
        d_first, d_second = np.empty(first.shape), np.empty(second.shape)
        w_first, w_second = np.empty(first.shape), np.empty(second.shape)
        step = max(1, SCORING_CELLS // n)
        for lo in range(0, len(uniq), step):
            hs = uniq[lo:lo + step]
            rows = np.arange(len(hs))
            D2 = _sq_dists_from(X, hs)
            D2[rows, hs] = np.inf
            rank = np.empty(D2.shape, np.int64)
            rank[rows[:, None], np.argsort(D2, axis=1, kind="stable")] = np.arange(n)
            mine = np.flatnonzero((inv >= lo) & (inv < lo + len(hs)))
            r = (inv[mine] - lo)[:, None]
            d_first[mine], d_second[mine] = D2[r, first[mine]], D2[r, second[mine]]
            w_first[mine], w_second[mine] = rank[r, first[mine]], rank[r, second[mine]]
        p = np.exp(_log_p(d_first, d_second, self.kernel, self.alpha_))
        near = 1.0 / (1.0 + np.minimum(w_first, w_second) / r0)
        return p * (1.0 - p) * near

    def _active_questions(self, budget: int, taken: set) -> list[tuple[int, int, int]]:
        X = self.embedding()
        if X is None:  # warm-up of 0 and no answer yet: nothing to score with
            q = [tuple(map(int, r)) for r in self._random_questions(budget)]
            for h, _, _ in q:
                self.pending_[h] += 1
            return q
        n, c = self.n_items, self.n_candidates
        asked = np.bincount(self.answers_[:, 0], minlength=n) + self.pending_
        # the least-asked heads, ties in a random order, counting the questions issued here too:
        # level by level, every head as often asked as the least-asked ones in a random permutation
        heads, left = [], budget
        while left:
            tied = self.rng_.permutation(np.flatnonzero(asked == asked.min()))[:left]
            asked[tied] += 1
            heads.append(tied)
            left -= len(tied)
        heads = np.concatenate(heads)
        first, second = (x.reshape(budget, c) for x in candidate_pairs(self.rng_, n, np.repeat(heads, c), budget * c))
        score = self._candidate_scores(X, heads, first, second)
        best = score.argmax(axis=1)  # the first of each row's stable descending order
        picked = np.column_stack([heads, first[np.arange(budget), best], second[np.arange(budget), best]])
        out = []
        for s, cand in enumerate(map(tuple, picked.tolist())):
            if cand in taken or (cand[0], cand[2], cand[1]) in taken:
                h = cand[0]
                for j in np.argsort(-score[s], kind="stable"):
                    cand = (h, int(first[s, j]), int(second[s, j]))
                    if cand not in taken and (h, cand[2], cand[1]) not in taken:
                        break
                else:
                    cand = (h, int(first[s, 0]), int(second[s, 0]))
            taken.add(cand)
            out.append(cand)
        self.pending_ += np.bincount(heads, minlength=n)
        return out

    def observe(self, answers: Iterable[Sequence[int]]) -> None:
        arr = check_triplets(answers, self.n_items, "triplet answer", width=4)
        if len(arr):
            self.answers_ = np.concatenate([self.answers_, arr])
            # an answer settles one pending question of its head (if any: it may come from a log)
            got = np.bincount(arr[:, 0], minlength=self.n_items)
            self.pending_ = np.maximum(self.pending_ - got, 0)

    def forget(self, questions: Iterable[Sequence[int]]) -> None:
        """Release the pending count of questions that will never be answered."""
        q = np.asarray(list(questions), dtype=np.int64).reshape(-1, 3)
        if len(q) and (q.min() < 0 or q.max() >= self.n_items):
            raise ValueError(f"item indices must lie in 0..{self.n_items - 1}")
        got = np.bincount(q[:, 0], minlength=self.n_items)
        self.pending_ = np.maximum(self.pending_ - got, 0)

    def progress(self) -> dict:
        return {**super().progress(), "pending": int(self.pending_.sum()),
                "active": bool(len(self.answers_) >= self.warmup)}

    def to_state(self) -> dict:
        return {**super().to_state(), "pending": self.pending_.copy()}

    def _restore_extra(self, state: dict) -> None:
        self.pending_ = np.array(state["pending"], dtype=np.int64).reshape(self.n_items)
