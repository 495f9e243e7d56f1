"""Pooled ratings' refit scheduler: when the rating model is refitted (the answers grown by
``refit_growth`` since the last fit), the refit as a :class:`~.fits.FitTask` run inside the call or handed
to the ``fitter`` of a live pool (put in place by a later call once ready), and the result put in place.

The refit under way is the learner's ``fit_job_`` (saved) and the task handed over ``_fit_running``
(never saved). Functions over the learner's data (:class:`~.learner.RatingLearner`, what
:class:`~.planner.PooledRatings` holds). Numpy only; must never import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .fits import FitTask, fit_arrays, fit_from_arrays, run_fit
from .model import Hyper

if TYPE_CHECKING:
    from .learner import RatingLearner

#: a refit of at most this many answers (ratings and triplets) runs inside the call even in a live pool:
#: 0.03-0.07 s on one core at 30-300 items, and handed to the fit process it lands a pass later, when a
#: small study has spent its first few hundred ratings on random pairs (30 items, 25 ratings per item,
#: batches of 200: 400 of the 750 were random, and live trailed offline by .09 hit@3 over 48 seeds)
FIT_INLINE_ANSWERS = 1000


def needs_refit(p: RatingLearner) -> bool:
    """Whether a refit is under way or due: the first once the warm-up's answers are in, then each time
    the answers have grown by ``refit_growth``."""
    if p.fit_job_ is not None:
        return True
    taken = len(p.log_) + len(p.triplets_)
    if p.n_fits_ == 0:
        return taken >= max(p.warmup * p.n_items, 2)
    return taken >= (p.fitted_on_ + p.fitted_triplets_) * (1.0 + p.refit_growth) + 1


def refresh_if_due(p: RatingLearner) -> None:
    """Refit if the ratings call for it: to the end here, or handed to the ``fitter`` of a live pool
    (put in place by a later call once ready) unless it is small (:data:`FIT_INLINE_ANSWERS`)."""
    if not needs_refit(p):
        return
    if p.fit_job_ is None:
        p.fit_job_ = {"answers": int(len(p.log_)), "seed": int(p.rng_.integers(2**31 - 1)),
                      "triplets": int(len(p.triplets_))}
    task = fit_task(p)
    if p.fitter is None or not p.pool or task.answers <= FIT_INLINE_ANSWERS:
        take_fit(p, run_fit(task))
        return
    running = p._fit_running
    if running is None or running[0] != task.key:
        running = p._fit_running = (task.key, p.fitter.fit(task))
    if running[1].done():
        p._fit_running = None
        take_fit(p, running[1].result())  # a failed fit raises here: the pass fails and says why


def fit_task(p: RatingLearner) -> FitTask:
    """The refit under way (``fit_job_``) as a task: the answers it covers, the last fit to start from."""
    job = p.fit_job_
    t = int(job["answers"])
    log = p.log_
    # the spreads the last fit suggests (empirical Bayes), but the priors' once triplets shape the space:
    # its spread is then no longer the ratings', and the estimates ran away (raters' log-slope SD 1.9-2.3
    # against a true 0.3), so that ratings with triplets did worse than ratings alone
    # (benchmarks/rating_learners.py --mixed)
    estimated = p.fit_ is not None and not len(p.triplets_)
    hyper = p.fit_.estimated.to_list() if estimated else Hyper().to_list()
    return FitTask(p.n_items, int(p.dim), log.pairs[:t].copy(), log.values[:t].copy(),
                   log.raters[:t].copy(), log.n_raters,
                   None if p.fit_ is None else fit_arrays(p.fit_),
                   tuple(hyper), int(job["seed"]), p.triplets_.rows[: int(job.get("triplets", 0))].copy(),
                   None if p.features_ is None else p.features_.astype(np.float64))


def take_fit(p: RatingLearner, arrays: dict) -> None:
    """Put a finished refit (``arrays``, :func:`~.fits.fit_arrays`) in place and close its job."""
    p.fit_ = fit_from_arrays(arrays)
    p.fitted_on_ = int(p.fit_job_["answers"])
    p.fitted_triplets_ = int(p.fit_job_.get("triplets", 0))
    p.fit_job_ = None
    p.n_fits_ += 1
    p._pairs.clear()  # every rating re-read with the raters' new offsets and slopes


def settle_fit(p: RatingLearner) -> bool:
    """Put a refit that finished beside the calls in place (or hand over one that is due); True if
    a fit was put in place."""
    before = p.n_fits_
    if p.fitter is not None and p.pool and needs_refit(p):
        refresh_if_due(p)
    return p.n_fits_ != before


def fit_ready(p: RatingLearner) -> bool | None:
    """True once a refit handed to the ``fitter`` is ready, False while it runs, None if none is."""
    running = p._fit_running
    if running is None or p.fit_job_ is None or p.fitter is None or not p.pool:
        return None
    return bool(running[1].done())
