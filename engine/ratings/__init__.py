"""Rating learners: nearest neighbours from similarity ratings as noisy as people's.

:mod:`.model` the rating model (a fitted space, raters' offsets and slopes, pair residuals) as pure
functions; :mod:`.fits` its refits as tasks a fit process can run; :mod:`.log` the ratings taken;
:mod:`.questions` the question choice and :mod:`.refits` the refits' schedule, functions over the learner's
data (:mod:`.learner`); :mod:`.parts` what a learner learned, made on its first use; :mod:`.planner`
:class:`PooledRatings`, which composes them. Numpy and scipy only;
must never import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

from .fits import FitTask, run_fit
from .model import Hyper, RatingFit, fit_ratings
from .planner import PooledRatings

__all__ = ["FitTask", "Hyper", "PooledRatings", "RatingFit", "fit_ratings", "run_fit"]
