"""What one pooled-ratings learner (:class:`~.planner.PooledRatings`) learned: :class:`Learned`, made on the
learner's first use (:func:`start`; its ``__init__`` stores the parameters only) or from a saved state
(:func:`learned_of_state`), and the learner's attribute names for it (:data:`NAMES`), each reading and
setting a field of its ``Learned`` through :func:`engine.utils.read_through`, as candidate duels'
planner reads its parts. Imports no module of functions (:mod:`.questions` and :mod:`.refits` work on the
learner through those names). Numpy only; must never import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from ..features import feature_space
from ..utils import RandomState, check_random_state, generator_from_state, read_through
from .estimates import PairEstimates
from .fits import fit_from_arrays
from .log import RatingLog, TripletLog
from .model import RatingFit

T = TypeVar("T", bound=type)

#: the counters the state keeps
COUNTERS = ("n_answers", "n_issued", "n_fits", "fitted_on", "fitted_triplets")


@dataclass
class Learned:
    """A pooled-ratings learner's learned state: the random generator, the ratings and triplets taken,
    the pair estimates (derived from the log and the fit, never saved), the last fit, the refit under way
    (``fit_job``: {"answers", "seed", "triplets"}; ``fit_running``: (its task's key, the fitter's future),
    never saved), the counters of :data:`COUNTERS` and the caches of the learner's triplet scale
    (``tau_*``) and of the estimates moved by the triplets (``with_triplets_*``), each kept with the key
    of what it was made of."""

    rng: np.random.Generator
    log: RatingLog
    triplets: TripletLog
    pairs: PairEstimates
    fit: RatingFit | None = None
    fit_job: dict | None = None
    fit_running: tuple | None = None
    n_answers: int = 0
    n_issued: int = 0
    n_fits: int = 0
    fitted_on: int = 0
    fitted_triplets: int = 0
    tau_key: tuple | None = None
    tau_value: float | None = None
    with_triplets_key: tuple | None = None
    with_triplets_value: tuple[np.ndarray, np.ndarray] | None = None
    #: the items' features' space (float32, n_items x p: ``engine.features.feature_space``), None without
    features: np.ndarray | None = None


def start(n_items: int, random_state: RandomState, features: np.ndarray | None = None) -> Learned:
    """A new learner's state for ``n_items`` items: nothing taken, no fit, the random generator of
    ``random_state``, the features (checked, raw) read once into their space."""
    return Learned(check_random_state(random_state), RatingLog(), TripletLog(), PairEstimates(n_items),
                   features=None if features is None else feature_space(features, n_items))


def learned_of_state(state: dict, n_items: int) -> Learned:
    """The learned state a learner's saved ``state`` holds (a state saved before triplets were kept counts
    no fitted triplets)."""
    job = state["fit_job"]
    s = Learned(generator_from_state(state["rng"]), RatingLog.from_state(state), TripletLog.from_state(state),
                PairEstimates(n_items), fit=None if state["fit"] is None else fit_from_arrays(state["fit"]),
                fit_job=None if job is None else {k: int(v) for k, v in job.items()},
                features=None if state.get("features") is None else np.asarray(state["features"], np.float32))
    counted = {"fitted_triplets": 0, **state}
    for name in COUNTERS:
        setattr(s, name, int(counted[name]))
    return s


#: the learner's attribute name -> the field of its :class:`Learned` it reads and sets
NAMES: dict[str, Any] = {
    "rng_": read_through("rng"), "log_": read_through("log"), "triplets_": read_through("triplets"),
    "_pairs": read_through("pairs"), "fit_": read_through("fit"), "fit_job_": read_through("fit_job"),
    "features_": read_through("features"),
    "_fit_running": read_through("fit_running"), **{f"{name}_": read_through(name) for name in COUNTERS},
    "_tau_key": read_through("tau_key"), "_tau_value": read_through("tau_value"),
    "_with_triplets_key": read_through("with_triplets_key"),
    "_with_triplets_value": read_through("with_triplets_value"),
}


def with_learned_names(cls: T) -> T:
    """Class decorator: :data:`NAMES` as properties of ``cls``."""
    for name, attr in NAMES.items():
        setattr(cls, name, attr)
    return cls
