"""Candidate duels' refit scheduler: when the embedding is refitted, the refit's stages
(:class:`~.fits.FitTask`) run inline or handed to a ``fitter`` beside the passes, and the result put in
place; the features' judgement while they are tested.

A refit starts when the answers have grown by ``refit_growth`` (``COIN_REFIT`` where duels are coin
flips) and rebuilds every head's shortlist from the new fit. The refit under way is ``Embedding.fit_job``
(saved) and the stage handed to ``fitter`` ``Embedding.running`` (never saved); each stage starts from
the dimension's previous fit. Functions over the planner's parts (:class:`~.parts.Parts`) and parameters
(:class:`~.parts.Params`). Numpy only; must never import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..graph import NO_NEIGHBOR
from . import fits, scores, shortlists
from .dims import (
    FEATURE_MAP,
    MAP_DIMS,
    best_dim_index,
    chosen_dim,
    coin_flips,
    dims_of,
    dims_to_refit,
    score_dims,
    update_coin,
)
from .embedding import Embedding
from .fits import FitTask
from .priors import FIRST_FIT

if TYPE_CHECKING:
    from .parts import Params, Parts


def started(s: Parts) -> bool:
    """Whether duels may start: a fit placed the items, or their features did (once trusted)."""
    return s.fit.n_fits > 0 or (s.prior is not None and s.prior.trusted)


def warmup_of(s: Parts, params: Params) -> float:
    """Random-triplet answers per head before its duels start: ``warmup``, or :func:`auto_warmup`
    (none with features once they are trusted: their shortlists are better than random ones; while
    they are tested, or found to predict nothing, the warm-up a study without them has: its first
    questions are then the tests)."""
    if params.warmup == "auto":
        trusted = s.prior is not None and s.prior.trusted
        return 0.0 if trusted else fits.auto_warmup(params.n_items)
    return float(params.warmup)


def needs_refit(s: Parts, params: Params) -> bool:
    if s.fit.fit_job is not None:
        return True
    if s.fit.n_fits == 0:
        if s.prior is not None and s.prior.testing:
            return False  # (no fit before the features are judged: the tests are the warm-up)
        if s.prior is not None and s.prior.trusted:
            warmup = 0.0 if params.warmup == "auto" else warmup_of(s, params)
            # (duels among the feature neighbours first: the first fit learns from them)
            return s.duels.n_answers >= max(warmup * params.n_items, s.prior.trusted_on_ + FIRST_FIT * params.n_items)
        return s.duels.n_answers >= warmup_of(s, params) * params.n_items or warmup_of(s, params) == 0
    return grown(s, params, s.fit.fitted_on)


def grown(s: Parts, params: Params, fitted_on: int) -> bool:
    """Answers have grown enough since a fit on ``fitted_on`` answers to refit."""
    growth = min(params.refit_growth, fits.COIN_REFIT) if coin_flips(s) else params.refit_growth
    return s.duels.n_answers >= fitted_on * (1.0 + growth) + 1


def refresh(s: Parts, params: Params) -> None:
    """Refit the embedding (warm start) and rebuild every head's shortlist."""
    trip = s.duels.all_triplets()
    emb = fits._embedding_module()
    if emb is not None and len(trip):
        job = s.fit.fit_job
        if job is not None and s.fit.coin and job.get("published") and grown(s, params, job["answers"]):
            # where duels are coin flips only the leading dimension's shortlists matter: when it is
            # due again, the others wait for a later refit (they take long in 8 dimensions)
            end_fit(s, params)
        if s.fit.fit_job is None:
            start_fit(s, params, emb, trip)
        answers_fitted = s.fit.fit_job["answers"]
        if not continue_fit(s, params, emb):
            # the refit goes on at the next call; the shortlists stay those of the last fit (or,
            # once its leading dimension is done, of that one while the others finish)
            return
        s.fit.embedding = s.fit.embeddings[chosen_dim(s, params)]
        scores.estimate_kappa(s)
        shortlists.shortlists_from_fit(s, params, answers_fitted)
        return
    shortlists.shortlists_from_win_rates(s, params, trip)


def start_fit(s: Parts, params: Params, emb: Any, trip: np.ndarray) -> None:
    """Begin a refit: score the dimensions refitted last time on the answers that arrived since
    (:func:`score_dims`), decide the coin-flip regime and choose which dimensions to refit warm
    (:func:`dims_to_refit`), with the refit's seed."""
    score_dims(s, params, emb, trip)
    # (the refit under way from here: the choices below read the answers it was scored on, dims.scored_on)
    s.fit.fit_job = job = {"dims": [], "triplets": int(len(trip)), "answers": int(s.duels.n_answers),
                           "seed": int(s.rng.integers(2**31 - 1)), "iterations": 0}
    if s.prior is not None and s.prior.trusted:
        job["stiffness"] = s.prior.stiffness  # (as the features stood when the refit started)
    prior = s.prior
    if prior is not None and prior.trusted and not prior.map_earned_ and FEATURE_MAP in dims_of(s, params):
        at = dims_of(s, params).index(FEATURE_MAP)
        prior.map_earned_ = bool(s.fit.dim_scores[1, at] > 0 and best_dim_index(s, params) == at)
    update_coin(s, params)
    job["dims"] = [int(i) for i in dims_to_refit(s, params)]


def judge_features(s: Parts, params: Params) -> None:
    """While the features are tested or trusted: score the answers that arrived since the last look and
    judge them (:func:`~engine.duels.priors.FeaturePrior.judge`; final once the answers reach the warm-up a
    study without features spends, while they are tested). Trusted: duels start (the first fit is due).
    Dropped: the study goes on exactly as one without them, whose random warm-up the tests were (the feature
    neighbours' shortlists go, the answers stay); dropped once trusted, also without the fits made with
    them (the features' map, the shortlists from it, every dimension's warm start and the dimensions' scores
    of those fits): as a study without features before its first fit, which comes once the answers reach
    its warm-up."""
    prior = s.prior
    if prior is None or prior.dropped_:
        return
    trip = s.duels.all_triplets()
    if len(trip) > prior.judged_:
        prior.score(trip[prior.judged_:])
        prior.judged_ = int(len(trip))
    verdict = prior.judge(final=s.duels.n_answers >= fits.auto_warmup(params.n_items) * params.n_items)
    if verdict is None:
        return
    if verdict:
        prior.trust()
        return
    prior.dropped_ = True
    prior.pending_.clear()
    s.short.cands = np.full_like(s.short.cands, NO_NEIGHBOR)
    s.short.filled = None
    s.kept.certified = s.kept.ranked = None
    if s.fit.n_fits or s.fit.fit_job is not None:
        # every fit made with them goes: the chosen one, the other dimensions' warm starts (pulled toward where
        # the features put the items) and the dimensions' scores (of those fits), the regime read from them
        s.fit = Embedding(len(s.fit.dim_scores[0]))


def fit_task(s: Parts, params: Params, dims: list[int]) -> FitTask:
    """The refit under way's next stage: the dimensions ``dims`` (indices into :func:`~.dims.dims_of`)."""
    job = s.fit.fit_job
    ds = dims_of(s, params)
    want = tuple(int(ds[i]) for i in dims)
    inits = {d: s.fit.embeddings.get(d) for d in want}
    maps = {d: X for d, X in s.fit.embeddings.items() if d not in (1, FEATURE_MAP)}
    # features that predict nothing fall out of the fits (and a fit after them starts small and random)
    prior = s.prior if s.prior is not None and s.prior.trusted else None
    if prior is not None:
        # a first fit starts where the features put the items (a line: from the order along a map)
        inits = {d: X if X is not None or d == 1 else
                 prior.start(min(MAP_DIMS, prior.space_.shape[1]) if d == FEATURE_MAP else d)
                 for d, X in inits.items()}
    return FitTask(params.n_items, s.duels.triplets[: job["triplets"]], want,
                   {d: X for d, X in inits.items() if X is not None}, maps, int(job["seed"]),
                   None if prior is None else prior.points(), float(job.get("stiffness", fits.STIFFNESS)))


def take_fit(s: Parts, params: Params, task: FitTask, fitted: dict[int, np.ndarray]) -> bool:
    """Put a finished stage in place; True when it held the leading dimension (the shortlists
    are rebuilt from it then, while the other dimensions of a refit that checks them all go on)."""
    job = s.fit.fit_job
    ds = dims_of(s, params)
    publish = False
    for d in task.dims:
        i = ds.index(d)
        if i in job["dims"]:
            job["dims"].remove(i)
        if d not in fitted:  # (the features' map of features dropped meanwhile)
            continue
        # a finished dimension is used at once (the leading one gives the shortlists); the
        # others only count in the choice of dimension once the whole refit is done
        was = s.fit.embeddings.get(d)
        s.fit.embeddings[d] = np.asarray(fitted[d], np.float64)
        if was is not None and s.fit.embedding is was:
            # the chosen dimension's newer fit is the chosen fit (dims.held_dim_index reads which it is)
            s.fit.embedding = s.fit.embeddings[d]
        job["fitted"] = job.get("fitted", 0) | (1 << i)
        if not job.get("published"):
            job["published"] = 1
            publish = True
    job["iterations"] = 0
    return publish


def continue_fit(s: Parts, params: Params, emb: Any) -> bool:
    """Take the refit under way as far as this call can; True when its leading dimension (the
    chosen one, fitted first) was finished in this call.

    Without a ``fitter`` (a script, ``proxima plan``, a replay) the refit runs to its end inside
    the call. With one (a live worker) each stage of the refit (the leading dimension, then the
    others) is handed to it and runs beside the update passes; a call takes a stage's result
    when it is ready, and otherwise plans from what is already known (the previous fit's
    shortlists, the duel counts). A stage is a pure function of its :class:`FitTask`, so where
    it ran changes only when its result arrives."""
    job = s.fit.fit_job
    if params.fitter is None or not params.pool:
        task = fit_task(s, params, list(job["dims"]))
        publish = take_fit(s, params, task, fits.run_fit(task))
        end_fit(s, params)
        return publish or not job.get("published")
    lead = not job.get("published")
    task = fit_task(s, params, job["dims"][:1] if lead else list(job["dims"]))
    running = s.fit.running
    if running is None or running[0] != task.key:
        # (a planner restored from its state hands its refit over again: the fitter may have it)
        running = s.fit.running = (task.key, params.fitter.fit(task))
    if not running[1].done():
        return False
    fitted = running[1].result()  # a failed fit raises here: the pass fails and says why
    s.fit.running = None
    publish = take_fit(s, params, task, fitted)
    if job["dims"]:
        # the other dimensions go on beside the passes; the shortlists come from the leading one now
        task = fit_task(s, params, list(job["dims"]))
        s.fit.running = (task.key, params.fitter.fit(task))
        return publish
    end_fit(s, params)
    return publish or not job.get("published")


def end_fit(s: Parts, params: Params) -> None:
    """Close the refit under way: the dimensions it finished are scored on the answers that
    arrive next; those it did not finish (a new refit of the leading dimension fell due first)
    keep their previous fit, unscored."""
    job = s.fit.fit_job
    dims = dims_of(s, params)
    fitted = job.get("fitted", 0)
    s.fit.fresh_dims = np.array([bool(fitted >> i & 1) for i in range(len(dims))])
    s.fit.fitted_triplets = job["triplets"]
    s.fit.fitted_on = job["answers"]
    s.fit.fit_job = None


def settle_fit(s: Parts, params: Params) -> bool:
    """Take the refit under way as far as it goes without planning a question (a pass with nothing
    to plan: a refit that finished beside the passes is put in place, shortlists and all); with a
    fitter, also hand over a refit that is due (a study whose raters stopped still gets the refit
    its last answers call for). True when a fit (or a stage of one) was put in place."""
    beside = params.fitter is not None and params.pool
    judge_features(s, params)
    if s.fit.fit_job is None and not (beside and needs_refit(s, params)):
        return False

    def stage():
        job = s.fit.fit_job
        return s.fit.n_fits, None if job is None else (job["seed"], len(job["dims"]))

    before = stage()
    refresh(s, params)
    # put in place: a new fit, or a stage of the refit under way (the others' dimensions), or its end
    return s.fit.n_fits != before[0] or (before[1] is not None and stage()[1] != before[1])


def fit_ready(s: Parts, params: Params) -> bool | None:
    """None: no refit handed to a fitter; False: one runs beside the calls; True: its result waits
    for the next call (or :func:`settle_fit`)."""
    running = s.fit.running
    if running is None or running[1] is None or s.fit.fit_job is None or params.fitter is None or not params.pool:
        return None
    return bool(running[1].done())


def refresh_if_due(s: Parts, params: Params) -> None:
    """Refit and rebuild the shortlists if the answers call for it (what :func:`next_questions`
    does first); screen planners (``engine.screens``) that choose their own questions call it."""
    judge_features(s, params)
    if needs_refit(s, params):
        refresh(s, params)
