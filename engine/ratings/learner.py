"""What pooled ratings' module functions (:mod:`.questions`, :mod:`.refits`) read and write of the learner
(:class:`~.planner.PooledRatings`, which passes itself): its parameters, its learned data under the names
its saved state keeps, and the two calls they go back through. Imports no module of functions (they
import it). Numpy only; must never import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from .estimates import PairEstimates
from .log import RatingLog, TripletLog
from .model import RatingFit


class RatingLearner(Protocol):
    """The learner's fields the question choice and the refits work on (see
    :class:`~.planner.PooledRatings`)."""

    n_items: int
    dim: int
    warmup: float
    explore: float
    shortlist: int
    refit_growth: float
    pool: bool
    fitter: Any
    rng_: np.random.Generator
    log_: RatingLog
    triplets_: TripletLog
    fit_: RatingFit | None
    features_: np.ndarray | None
    fit_job_: dict | None
    n_answers_: int
    n_issued_: int
    n_fits_: int
    fitted_on_: int
    fitted_triplets_: int
    _pairs: PairEstimates
    _fit_running: tuple | None

    def estimates(self) -> tuple[np.ndarray, np.ndarray]: ...

    def refresh_if_due(self) -> None: ...
