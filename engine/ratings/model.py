"""The rating model: items placed in a space whose distances the ratings follow, each rater's own use
of the scale (an offset and a slope), and what each pair says beyond the space (a residual shrunk
toward it). Pure functions on arrays; numpy and scipy only, never Flask, Redis, RQ, ``webapp`` or
``workers``.

Conventions: ``pairs`` (T, 2) item indices, ``values`` (T,) the ratings mapped to distances in [0, 1]
(0 = very alike), ``raters`` (T,) rater codes in ``[0, n_raters]``, where code ``n_raters`` is the
unknown rater (answers that name none: no offset, slope 1). One rating t is modelled as
``values[t] = centre + offset[r] + exp(log_slope[r]) * (||x_i - x_j|| - pivot) + e``, e ~ N(0, noise²),
``pivot`` the mean of ``||x_i - x_j||`` over the ratings; the distance of a pair for the average rater
is ``centre + ||x_i - x_j|| - pivot`` plus its residual.

Triplets of the same items feed the same space: ``triplets`` (S, 3) rows ``(h, w, l)``, w judged closer to h
than l, each with probability ``lapse / 2 + (1 - lapse) * sigmoid((||x_h - x_l|| - ||x_h - x_w||) / tau)``
(the human noise model: a lapse rate and a logistic in the distance gap), ``tau`` a fixed multiple of the
ratings' noise (:data:`TRIPLET_SCALE_PER_NOISE`).

With item features ``Z`` (n_items, p: their space, ``engine.features.feature_space``) the points are
``X = Z W + E``: a map of the features fitted with the ratings (how people weigh them) plus each item's offset
from where its features put it, both with Gaussian priors sharing the points' (:data:`PRIOR_POINT_SD`) by
how well the features predict the ratings (:func:`feature_share`): features that predict them let few
ratings place an item; features that do not are left out of the fit (their map 0).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse
from scipy.optimize import minimize

from ..utils import RandomState, check_random_state

#: L-BFGS iterations of one fit
FIT_MAX_ITER = 250
#: priors before anything is estimated (distance units: a 1-9 scale's point is 1/8): per-rating noise,
#: raters' offsets, raters' log slopes, and the pair residuals the space leaves
PRIOR_NOISE, PRIOR_OFFSET, PRIOR_LOG_SLOPE, PRIOR_RESIDUAL = 0.25, 0.12, 0.3, 0.05
#: floors of the estimated spreads (an estimate of 0 would freeze a part of the model)
MIN_SPREAD = 1e-3
#: the estimated spreads are shrunk toward the priors, which count as this many raters (offsets, log slopes)
#: and as this many pairs rated often enough to show their residual (:func:`estimate_hyper`): estimated
#: from the data alone they ran away on few ratings (30 items: raters' log-slope SD 1.5-2.2 against a true
#: 0.3 up to 100 ratings per item, the pairs' residual SD at its floor)
PRIOR_RATERS, PRIOR_PAIRS = 20.0, 50.0
#: and kept within this factor of the priors either way: at 1,000 items the raters' fitted log slopes
#: spread SD 3 on 25 ratings per item (a space fitted to noise lets a slope fit each rater's noise too),
#: however many raters there were
SPREAD_RANGE = 2.0
#: the prior SD of the points' coordinates (distance units): pair distances then spread about as much as
#: pair means do, so a fit on few ratings does not place items by their noise
PRIOR_POINT_SD = 0.15
#: with item features, the prior variance of where the features' map puts an item is a share of the points'
#: prior variance (``PRIOR_POINT_SD``²; the items' offsets from it get the rest), set by how well the features
#: predict the ratings (:func:`feature_share`), at most this (the offsets keep a tenth: people may depart from
#: any features)
MAX_FEATURE_SHARE = 0.9
#: the features' distances must predict the ratings by this many standard errors of their correlation
FEATURE_TEST_Z = 3.0
#: triplets: the share of answers given at random (people's lapse rate, ALGORITHMS.md section 6), and the
#: logistic's scale per unit of one rating's noise SD: a triplet as noisy as two of the rater's ratings
#: compared (a gap's SD sqrt(2) noise; a logistic of scale s has SD 1.8 s). Fixed, not fitted: fitted with
#: the space it shrank toward 0 (the space overfits noisy triplets, and the lapse bounds what a misfit costs)
TRIPLET_LAPSE = 0.1
TRIPLET_SCALE_PER_NOISE = 2**0.5 / 1.8


@dataclass
class Hyper:
    """The spreads the fit weighs its parts by: ``noise`` one rating's, ``offset`` raters' offsets,
    ``log_slope`` raters' log slopes, ``residual`` the pairs' residuals from the space (SDs, distance
    units). Estimated from the data after each fit (:func:`estimate_hyper`)."""

    noise: float = PRIOR_NOISE
    offset: float = PRIOR_OFFSET
    log_slope: float = PRIOR_LOG_SLOPE
    residual: float = PRIOR_RESIDUAL

    def to_list(self) -> list[float]:
        return [float(self.noise), float(self.offset), float(self.log_slope), float(self.residual)]

    @classmethod
    def from_list(cls, values: Sequence[float]) -> Hyper:
        return cls(*(float(v) for v in values))


@dataclass
class RatingFit:
    """A fitted rating model. ``points`` (n_items, dim); ``offsets`` and ``log_slopes`` (n_raters + 1,),
    the last the unknown rater's (0); ``centre``, ``pivot`` scalars; ``hyper`` the spreads it used and
    the ones estimated after it (``estimated``); ``triplet_scale`` the triplets' ``tau``."""

    points: np.ndarray
    offsets: np.ndarray
    log_slopes: np.ndarray
    centre: float
    pivot: float
    hyper: Hyper
    estimated: Hyper
    #: the triplets' logistic scale (distance units) the fit used
    triplet_scale: float = TRIPLET_SCALE_PER_NOISE * PRIOR_NOISE
    #: with item features, the fitted map ``W`` (p, dim) of their space to the points (``points`` = Z W + the
    #: items' offsets); None without
    feature_map: np.ndarray | None = None
    #: with item features, the share of the points' prior spread the map got (:func:`feature_share`; 0: the
    #: features did not predict the ratings and were left out of the fit)
    feature_share: float = 0.0

    @property
    def noise_sd(self) -> float:
        return float(self.estimated.noise)

    def space(self, pairs: np.ndarray | None = None) -> np.ndarray:
        """The space's distance for the average rater, ``centre + ||x_i - x_j|| - pivot``: of ``pairs``
        (T,), or of every pair (n_items, n_items)."""
        X = self.points
        if pairs is None:
            sq = np.einsum("ij,ij->i", X, X)
            f = np.sqrt(np.maximum(sq[:, None] + sq[None, :] - 2.0 * X @ X.T, 0.0))
        else:
            f = np.linalg.norm(X[pairs[:, 0]] - X[pairs[:, 1]], axis=1)
        return self.centre + f - self.pivot

    def distances(self) -> np.ndarray:
        """Every pair's distance by the space alone (n_items, n_items), zero diagonal."""
        D = self.space()
        np.fill_diagonal(D, 0.0)
        return D

    def corrected(self, values: np.ndarray, raters: np.ndarray) -> np.ndarray:
        """Ratings (distances) as the average rater would have given them, by the raters' fits (a rater
        the fit has not seen counts as the average)."""
        known = raters < len(self.offsets)
        r = np.where(known, raters, len(self.offsets) - 1)
        off = np.where(known, self.offsets[r], 0.0)
        slope = np.where(known, np.exp(self.log_slopes[r]), 1.0)
        return self.centre + (values - self.centre - off) / slope


def scatter(n_items: int, rows: np.ndarray, signs: np.ndarray) -> scipy.sparse.csr_matrix:
    """(n_items, len(rows)): ``M @ V`` adds ``signs[k] * V[k]`` to row ``rows[k]`` for every k, in the order of
    k, as ``np.add.at`` adds (the same sums to the last bit, so a fit takes the same steps either way)."""
    order = np.argsort(rows, kind="stable")
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n_items))])
    return scipy.sparse.csr_matrix((np.asarray(signs, np.float64)[order], order, indptr), shape=(n_items, len(rows)))


class Differences:
    """``x_a - x_b`` for rows ``(a, b)`` of items (T of them) as one sparse incidence matrix (T, n_items), +1
    at a and -1 at b, and its way back (:func:`scatter`), both built once per fit: indexing the points and
    ``np.add.at`` back were most of a fit's time."""

    def __init__(self, n_items: int, a: np.ndarray, b: np.ndarray) -> None:
        t = np.arange(len(a))
        signs = np.concatenate([np.ones(len(a)), -np.ones(len(a))])
        self.matrix = scipy.sparse.csr_matrix((signs, (np.concatenate([t, t]), np.concatenate([a, b]))),
                                              shape=(len(a), n_items))
        self.back = scatter(n_items, np.concatenate([a, b]), signs)

    def __len__(self) -> int:
        return self.matrix.shape[0]

    def of(self, X: np.ndarray) -> np.ndarray:
        """(T, dim): ``X[a] - X[b]`` of every row."""
        return self.matrix @ X

    def add_back(self, g: np.ndarray, coef: np.ndarray) -> None:
        """``g[a] += coef``, then ``g[b] -= coef`` (a gradient in the differences, taken to the points)."""
        g += self.back @ np.concatenate([coef, coef])


class TripletDifferences:
    """The differences ``h - w`` and ``h - l`` of triplet rows ``(h, w, l)`` (:class:`Differences`), and the
    way back of a gradient in both."""

    def __init__(self, n_items: int, triplets: np.ndarray) -> None:
        h, w, lo = triplets[:, 0], triplets[:, 1], triplets[:, 2]
        self.hw, self.hl = Differences(n_items, h, w), Differences(n_items, h, lo)
        ones = np.ones(len(h))
        # each item's gradient so far first, then the triplets' terms added to it one by one
        self.back = scatter(n_items, np.concatenate([np.arange(n_items), h, w, lo]),
                            np.concatenate([np.ones(n_items), ones, -ones, -ones]))

    def __len__(self) -> int:
        return len(self.hw)

    def add_back(self, g: np.ndarray, cw: np.ndarray, cl: np.ndarray) -> None:
        """``g[h] += cw + cl``, then ``g[w] -= cw``, then ``g[l] -= cl``."""
        g[...] = self.back @ np.concatenate([g, cw + cl, cw, cl])


def _objective(theta: np.ndarray, n: int, dim: int, n_raters: int, pairs: Differences, values: np.ndarray,
               raters: np.ndarray, lam_offset: float, lam_slope: float, lam_point: float,
               triplets: TripletDifferences | None = None, tau: float = 1.0, weight: float = 1.0,
               slope_weights: np.ndarray | None = None, features: np.ndarray | None = None,
               lam_map: float = 0.0) -> tuple[float, np.ndarray]:
    """Half the sum of squared residuals plus the raters' priors (in units of the noise variance), plus
    ``weight`` (the noise variance) times the ``triplets``' negative log-likelihood at scale ``tau``, and its
    gradient. theta = [points, offsets (n_raters), log slopes (n_raters), centre]; ``pairs`` the rated pairs'
    differences (:class:`Differences`), ``triplets`` the triplets' (:class:`TripletDifferences`). The pivot is the mean
    of the space's distances over the ratings, so a slope turns a rater's ratings about their middle and
    cannot stand in for an offset. With ``slope_weights`` (n_raters,) summing to 1, the log slopes are
    theta's less their weighted mean (:func:`centred_log_slopes`). With ``features`` Z (n, p), theta's points
    are the items' offsets E and the map W (p, dim) follows the centre: the points are Z W + E, W's prior
    ``lam_map``."""
    k = n * dim
    E = theta[:k].reshape(n, dim)
    o = np.append(theta[k: k + n_raters], 0.0)
    ls = np.append(centred_log_slopes(theta[k + n_raters: k + 2 * n_raters], slope_weights), 0.0)
    centre = theta[k + 2 * n_raters]
    W = None if features is None else theta[k + 2 * n_raters + 1:].reshape(-1, dim)
    X = E if W is None else E + features @ W
    gX = np.zeros((n, dim))
    if len(values):
        diff = pairs.of(X)
        f = np.sqrt(np.einsum("ij,ij->i", diff, diff) + 1e-12)
        pivot = f.mean()
        g = np.exp(ls[raters])
        e = centre + o[raters] + g * (f - pivot) - values
        eg = e * g
        coef = ((eg - eg.mean()) / f)[:, None] * diff
        pairs.add_back(gX, coef)
    else:
        e = eg = f = pivot = np.zeros(0)
    loss = 0.5 * float(e @ e) + 0.5 * lam_offset * float(o @ o) + 0.5 * lam_slope * float(ls @ ls) \
        + 0.5 * lam_point * float(np.sum(E * E))
    go = np.bincount(raters, weights=e, minlength=n_raters + 1)[:n_raters] + lam_offset * o[:n_raters]
    gl = np.bincount(raters, weights=eg * (f - pivot), minlength=n_raters + 1)[:n_raters] \
        + lam_slope * ls[:n_raters]
    if slope_weights is not None:
        gl = gl - slope_weights * gl.sum()
    if W is None:
        gX += lam_point * E
    if triplets is not None and len(triplets):
        loss += _triplet_term(X, triplets, tau, weight, gX)
    if W is None:
        return loss, np.concatenate([gX.ravel(), go, gl, [e.sum()]])
    # gX is the answers' gradient in the points: to the offsets with their prior, through Z to the map with its
    loss += 0.5 * lam_map * float(np.sum(W * W))
    return loss, np.concatenate([(gX + lam_point * E).ravel(), go, gl, [e.sum()],
                                 (features.T @ gX + lam_map * W).ravel()])


def centred_log_slopes(log_slopes: np.ndarray, weights: np.ndarray | None) -> np.ndarray:
    """The raters' log slopes less their mean weighted by ``weights`` (each rater's share of the ratings):
    the typical rater's slope is 1, and the space carries the ratings' overall spread. Left free, the
    slopes and the space trade scale (every slope up, the space shrunk toward its prior) and the raters'
    log slopes drifted up together (a mean of 1.5-1.7 on 25 ratings per item, 30 items)."""
    return log_slopes if weights is None else log_slopes - weights @ log_slopes


def _triplet_term(X: np.ndarray, triplets: TripletDifferences, tau: float, weight: float, gX: np.ndarray) -> float:
    """``weight`` times the triplets' negative log-likelihood; adds its gradient in the points to ``gX``."""
    dw, dl = triplets.hw.of(X), triplets.hl.of(X)
    fw = np.sqrt(np.einsum("ij,ij->i", dw, dw) + 1e-12)
    fl = np.sqrt(np.einsum("ij,ij->i", dl, dl) + 1e-12)
    u = (fl - fw) / tau
    s = 0.5 * (1.0 + np.tanh(0.5 * u))  # the logistic, without overflow
    p = 0.5 * TRIPLET_LAPSE + (1.0 - TRIPLET_LAPSE) * s
    dnll_du = -weight * (1.0 - TRIPLET_LAPSE) * s * (1.0 - s) / p
    cw = (-dnll_du / tau / fw)[:, None] * dw  # u falls as x_h moves toward x_l, rises toward x_w
    cl = (dnll_du / tau / fl)[:, None] * dl
    triplets.add_back(gX, cw, cl)
    return weight * float(-np.log(p).sum())


def fit_ratings(n_items: int, pairs: np.ndarray, values: np.ndarray, raters: np.ndarray, n_raters: int,
                dim: int = 3, hyper: Hyper | None = None, init: RatingFit | None = None,
                random_state: RandomState = 0, max_iter: int = FIT_MAX_ITER,
                triplets: np.ndarray | None = None, features: np.ndarray | None = None) -> RatingFit:
    """Fit the model by regularised least squares (L-BFGS), warm from ``init`` where given (its raters
    first, new raters at 0). Raters' offsets and log slopes have Gaussian priors of the ``hyper``
    spreads; the spreads the data then suggest are in the result's ``estimated``. ``triplets`` (S, 3)
    rows ``(h, w, l)`` (w judged closer to h than l) add their likelihood, weighed in the same units.
    ``features`` (n_items, p), the items' features' space (``engine.features.feature_space``): the points
    are then the features' map plus each item's offset (see the module's doc), the map in the result's
    ``feature_map``; without ``init`` the fit starts where the features' leading components put the items."""
    hyper = hyper or Hyper()
    p = np.sort(np.asarray(pairs, np.int64).reshape(-1, 2), axis=1)
    y = np.asarray(values, np.float64)
    r = np.asarray(raters, np.int64)
    r = np.where((r < 0) | (r >= n_raters), n_raters, r)
    t = np.empty((0, 3), np.int64) if triplets is None else np.asarray(triplets, np.int64).reshape(-1, 3)
    Z = None if features is None else np.asarray(features, np.float64)
    if Z is not None and (Z.ndim != 2 or len(Z) != n_items):
        raise ValueError(f"features must have shape ({n_items}, n_features), got {Z.shape}")
    # features that do not predict the ratings are left out of the fit (its map 0), so the fit is the one
    # without features: a map held at 0 by a huge prior weight instead gave other (worse) points
    share = 0.0 if Z is None else feature_share(Z, p, y, hyper)
    given, Z = Z, (Z if share > 0 else None)
    rng = check_random_state(random_state)
    if init is not None and init.points.shape == (n_items, dim):
        X0 = init.points.copy()
        o0 = np.zeros(n_raters)
        l0 = np.zeros(n_raters)
        k = min(n_raters, len(init.offsets) - 1)
        o0[:k], l0[:k] = init.offsets[:k], init.log_slopes[:k]
        c0 = init.centre
        W0 = None if Z is None else (init.feature_map if init.feature_map is not None
                                     and init.feature_map.shape == (Z.shape[1], dim) else np.zeros((Z.shape[1], dim)))
    else:
        X0 = rng.normal(scale=0.1, size=(n_items, dim))
        o0, l0 = np.zeros(n_raters), np.zeros(n_raters)
        c0 = float(y.mean()) if len(y) else 0.5
        W0 = None if Z is None else _map_start(Z, dim)
        if Z is not None:
            X0 = 0.1 * X0 + Z @ W0  # where the features put the items, a little apart where they coincide
    theta0 = np.concatenate([(X0 if Z is None else X0 - Z @ W0).ravel(), o0, l0, [c0]]
                            + ([] if Z is None else [W0.ravel()]))
    var = hyper.noise ** 2
    lam_o, lam_l = var / max(hyper.offset, MIN_SPREAD) ** 2, var / max(hyper.log_slope, MIN_SPREAD) ** 2
    lam_x = var / (PRIOR_POINT_SD**2 * (1.0 - share))
    lam_w = 0.0 if Z is None else var / max(map_prior_sd(Z, share), 1e-12) ** 2
    tau = TRIPLET_SCALE_PER_NOISE * hyper.noise
    counts = np.bincount(r, minlength=n_raters + 1)[:n_raters].astype(np.float64)
    weights = counts / counts.sum() if counts.sum() else None
    if len(y) or len(t):
        rated = Differences(n_items, p[:, 0], p[:, 1])
        compared = TripletDifferences(n_items, t) if len(t) else None
        res = minimize(_objective, theta0, args=(n_items, dim, n_raters, rated, y, r, lam_o, lam_l, lam_x, compared,
                                                 tau, var, weights, Z, lam_w),
                       jac=True, method="L-BFGS-B", options={"maxiter": int(max_iter)})
        theta = res.x
    else:
        theta = theta0
    k = n_items * dim
    X = theta[:k].reshape(n_items, dim)
    W = None if Z is None else theta[k + 2 * n_raters + 1:].reshape(-1, dim).copy()
    if W is not None:
        X = X + Z @ W
    o = np.append(theta[k: k + n_raters], 0.0)
    ls = np.append(centred_log_slopes(theta[k + n_raters: k + 2 * n_raters], weights), 0.0)
    pivot = float(np.linalg.norm(X[p[:, 0]] - X[p[:, 1]], axis=1).mean()) if len(y) else 0.0
    fit = RatingFit(X, o, ls, float(theta[k + 2 * n_raters]), pivot, hyper, hyper, tau, W, share)
    fit.estimated = estimate_hyper(fit, n_items, p, y, r, n_raters)
    if given is not None and Z is None:
        fit.feature_map = np.zeros((given.shape[1], dim))  # (a map of 0: the fit is as without features)
    return fit


def feature_share(features: np.ndarray, pairs: np.ndarray, values: np.ndarray, hyper: Hyper) -> float:
    """The share of the points' prior variance the features' map gets: how well the features' distances
    predict the ratings, tested on the ratings themselves (no fit, so it cannot fit noise). The correlation
    of each rated pair's distance in the features with its rating counts only if it is above
    :data:`FEATURE_TEST_Z` standard errors (else 0: the features fall away); it is then corrected for what
    no features can predict (each rating's noise and each pair's own residual, ``hyper``'s), squared, and
    kept within :data:`MAX_FEATURE_SHARE`."""
    Z = np.asarray(features, np.float64)
    y = np.asarray(values, np.float64)
    if len(y) < 3:
        return 0.0
    fd = np.linalg.norm(Z[pairs[:, 0]] - Z[pairs[:, 1]], axis=1)
    if np.std(fd) == 0 or np.std(y) == 0:
        return 0.0
    r = float(np.corrcoef(fd, y)[0, 1])
    if not r * np.sqrt(len(y) - 2) / np.sqrt(max(1.0 - r * r, 1e-12)) > FEATURE_TEST_Z:
        return 0.0
    structured = float(np.var(y)) - hyper.noise**2 - hyper.residual**2
    true_r = r * float(np.std(y)) / np.sqrt(max(structured, 1e-12))
    return float(np.clip(true_r**2, 0.0, MAX_FEATURE_SHARE))


def map_prior_sd(features: np.ndarray, share: float) -> float:
    """The prior SD of each weight of the features' map: where the map puts an item then varies by
    ``share`` of the points' prior variance, however many components the features have."""
    spread2 = float(np.sum(np.var(np.asarray(features, np.float64), axis=0)))
    return float(np.sqrt(share / max(spread2, 1e-12))) * PRIOR_POINT_SD


def _map_start(features: np.ndarray, dim: int) -> np.ndarray:
    """The map a fit without a start begins from: the features' leading components (their space orders
    them by variance) as the first dimensions, scaled to the points' prior SD."""
    Z = np.asarray(features, np.float64)
    q = min(dim, Z.shape[1])
    W = np.zeros((Z.shape[1], dim))
    sd = np.std(Z[:, :q], axis=0)
    W[np.arange(q), np.arange(q)] = PRIOR_POINT_SD / np.maximum(sd, 1e-12)
    return W


def _shrunk(prior: float, raw2: float, evidence: float, pseudo: float) -> float:
    """An SD estimated as ``sqrt(raw2)`` from ``evidence`` (raters, pairs), shrunk toward ``prior`` counted
    as ``pseudo`` of them (in variance), within :data:`SPREAD_RANGE` of ``prior``."""
    sd = float(np.sqrt((pseudo * prior**2 + evidence * raw2) / (pseudo + evidence)))
    return float(np.clip(sd, prior / SPREAD_RANGE, prior * SPREAD_RANGE))


def estimate_hyper(fit: RatingFit, n_items: int, pairs: np.ndarray, values: np.ndarray, raters: np.ndarray,
                   n_raters: int) -> Hyper:
    """The spreads the fitted model suggests (empirical Bayes by moments), each shrunk toward its prior
    (:data:`PRIOR_RATERS`, :data:`PRIOR_PAIRS`, within :data:`SPREAD_RANGE`): the residuals' SD (less the
    parameters fitted); raters' offsets and log slopes, their fitted spread about their mean plus what
    their shrinkage took off; the pairs' residual means' spread less the part their own noise explains,
    weighed by how much each pair's ratings can show it."""
    if len(values) < 2:
        return fit.hyper
    g = np.exp(fit.log_slopes[raters])
    pred = fit.centre + fit.offsets[raters] + g * (fit.space(pairs) - fit.centre)
    e = values - pred
    counts = np.bincount(raters, minlength=n_raters + 1)[:n_raters]
    seen = counts > 0
    # the residuals less the parameters fitted to them (the space's coordinates, the raters' offsets and
    # slopes, the centre; at most half the ratings): on few ratings per item the space takes up much of
    # the noise, and a noise estimated too small trusts each pair's own ratings too much
    mapped = 0 if fit.feature_map is None else fit.feature_map.size
    free = min(fit.points.size + mapped + 2 * int(seen.sum()) + 1, len(values) // 2)
    noise = max(float(np.sqrt(np.sum(e * e) / (len(values) - free))), MIN_SPREAD)
    out = Hyper(noise=noise, offset=fit.hyper.offset, log_slope=fit.hyper.log_slope, residual=fit.hyper.residual)
    if seen.sum() >= 5:
        post_o = 1.0 / (counts[seen] / noise**2 + 1.0 / max(fit.hyper.offset, MIN_SPREAD) ** 2)
        k = float(seen.sum())
        out.offset = _shrunk(PRIOR_OFFSET, float(np.var(fit.offsets[:n_raters][seen]) + np.mean(post_o)), k,
                             PRIOR_RATERS)
        # a slope is only seen through the spread of the space's distances a rater rated
        spread2 = max(float(np.var(fit.space(pairs))), MIN_SPREAD**2)
        post_l = 1.0 / (counts[seen] * spread2 / noise**2 + 1.0 / max(fit.hyper.log_slope, MIN_SPREAD) ** 2)
        out.log_slope = _shrunk(PRIOR_LOG_SLOPE, float(np.var(fit.log_slopes[:n_raters][seen]) + np.mean(post_l)), k,
                                PRIOR_RATERS)
    code = pairs[:, 0] * n_items + pairs[:, 1]
    uniq, inv, cnt = np.unique(code, return_inverse=True, return_counts=True)
    if len(uniq) >= 10:
        u = np.bincount(inv, weights=e / g) / cnt
        # a pair's mean shows its residual only once its ratings' noise is no larger: its weight, and the
        # pairs' worth of evidence, is the residual's share of its mean's variance, squared
        share = PRIOR_RESIDUAL**2 / (PRIOR_RESIDUAL**2 + noise**2 / cnt)
        w = share**2
        raw2 = max(float(np.sum(w * (u * u - noise**2 / cnt)) / w.sum()), 0.0)
        out.residual = _shrunk(PRIOR_RESIDUAL, raw2, float(w.sum()), PRIOR_PAIRS)
    return out
