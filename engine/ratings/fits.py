"""Refits of the rating model as pure tasks (:class:`FitTask`), run inline or handed to a ``fitter``
beside a live study's passes (as candidate duels' refits are), and the arrays a finished fit hands
back. Numpy only; must never import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .model import PRIOR_NOISE, TRIPLET_SCALE_PER_NOISE, Hyper, RatingFit, fit_ratings


@dataclass(frozen=True)
class FitTask:
    """One refit: a pure function of these fields, so it can run anywhere (inline, a thread, another
    process) and give the same arrays. ``pairs``, ``values``, ``raters`` the first ratings of the log
    (the ones the refit started with; raters as codes, -1 unknown); ``n_raters`` the raters known then;
    ``init`` the previous fit's arrays (a warm start) or None; ``hyper`` the spreads to weigh by;
    ``seed`` the refit's; ``triplets`` the first triplets of the log, ``(h, w, l)`` rows; ``features`` the items'
    features' space (n_items, p) or None. ``key`` identifies it, so a result is only applied to its own refit."""

    n_items: int
    dim: int
    pairs: np.ndarray
    values: np.ndarray
    raters: np.ndarray
    n_raters: int
    init: dict | None
    hyper: tuple[float, ...]
    seed: int
    triplets: np.ndarray | None = None
    features: np.ndarray | None = None

    @property
    def answers(self) -> int:
        """The ratings and triplets it fits."""
        return len(self.values) + (0 if self.triplets is None else len(self.triplets))

    @property
    def key(self) -> tuple[int, int, int]:
        return (int(self.seed), int(len(self.values)), 0 if self.triplets is None else int(len(self.triplets)))

    def run(self) -> dict:
        return run_fit(self)


def fit_arrays(fit: RatingFit) -> dict:
    """A fit as plain arrays and floats (what a task hands back and a state saves; ``feature_map`` only
    with features)."""
    out = {"points": fit.points, "offsets": fit.offsets, "log_slopes": fit.log_slopes, "centre": fit.centre,
           "pivot": fit.pivot, "hyper": fit.hyper.to_list(), "estimated": fit.estimated.to_list(),
           "triplet_scale": fit.triplet_scale}
    if fit.feature_map is not None:
        out["feature_map"] = fit.feature_map
        out["feature_share"] = float(fit.feature_share)
    return out


def fit_from_arrays(arrays: dict) -> RatingFit:
    """Inverse of :func:`fit_arrays`."""
    return RatingFit(np.asarray(arrays["points"], np.float64).copy(), np.asarray(arrays["offsets"], np.float64).copy(),
                     np.asarray(arrays["log_slopes"], np.float64).copy(), float(arrays["centre"]),
                     float(arrays["pivot"]), Hyper.from_list(arrays["hyper"]), Hyper.from_list(arrays["estimated"]),
                     float(arrays.get("triplet_scale", TRIPLET_SCALE_PER_NOISE * PRIOR_NOISE)),
                     None if arrays.get("feature_map") is None
                     else np.asarray(arrays["feature_map"], np.float64).copy(),
                     float(arrays.get("feature_share", 0.0)))


def run_fit(task: FitTask) -> dict:
    """Fit the model to the task's ratings: :func:`fit_arrays` of the result."""
    init = None if task.init is None else fit_from_arrays(task.init)
    fit = fit_ratings(task.n_items, task.pairs, task.values, task.raters, task.n_raters, dim=task.dim,
                      hyper=Hyper.from_list(task.hyper), init=init, random_state=task.seed, triplets=task.triplets,
                      features=task.features)
    return fit_arrays(fit)
