"""Candidate duels' refits: when the embedding is refitted, the refit as pure stages (:class:`FitTask`)
run inline or handed to a ``fitter`` beside the passes, and the result put in place.

A refit starts when the answers have grown by ``refit_growth`` (``COIN_REFIT`` where duels are coin
flips) and rebuilds every head's shortlist from the new fit. Numpy only; must never import Flask,
Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..graph import NO_NEIGHBOR
from .dims import FEATURE_MAP, MAP_DIMS, _fit_start, _kernel_of
from .priors import FIRST_FIT, STIFFNESS

#: L-BFGS iterations a refit of one dimension may take
FIT_MAX_ITER = 300
#: where duels are coin flips (``coin_``, see :mod:`.dims`): the refit cadence (answers grown by this
#: share since the last fit), when below ``refit_growth``
COIN_REFIT = 0.1
#: ``warmup="auto"`` as (warmup, up to items, more for every fivefold of items beyond): a random start
#: must place each item among more others before its shortlist holds its neighbours. Clustered 4-D
#: items, the human noise model, hit@3 at 20 / 30 answers per item on 5,000 items: warmup 3 .034 / -,
#: 6 .118 / .335, 10 .089 / .297; random triplets + a 4-D t-STE .050 / .089
#: (``benchmarks/duels_large_budgets.py``). Fitting through the warmup as well (a first fit at 3 answers
#: per item, the graph read from it) was tried and dropped: at 5,000 items .003 / .044 / .325 / .731 at
#: 10 / 20 / 30 / 50 against .001 / .118 / .335 / .670, the early fits' prequential scores, taken on
#: random triplets, chose 8 dimensions and held the coin-flip regime to 22 answers per item
AUTO_WARMUP = (3.0, 1000, 3.0)


def auto_warmup(n_items: int) -> float:
    """The warmup ``warmup="auto"`` gives a study of ``n_items`` (:data:`AUTO_WARMUP`): 3 up to 1,000
    items, growing with the log of the items beyond (6 at 5,000 items, 7.3 at 10,000, 10.3 at 50,000)."""
    warmup, items, per_fivefold = AUTO_WARMUP
    if n_items <= items:
        return warmup
    return warmup + per_fivefold * math.log(n_items / items) / math.log(5.0)


def _embedding_module():
    """The ordinal-embedding fitter, or None where it is not installed (shortlists then come
    from the heads' own win rates)."""
    try:
        from .. import embedding
    except ImportError:
        return None
    return embedding if hasattr(embedding, "fit_embedding") else None


@dataclass(frozen=True)
class FitTask:
    """One stage of a refit of duels' embedding: a pure function of these fields, so it can run
    anywhere (inline in a call, a thread, another process) and give the same arrays.

    ``triplets`` (T, 3) rows (i, j, k), i closer to j than to k: the answers the refit started with;
    ``dims`` the dimensions to fit, in order; ``inits`` warm starts per dimension (missing: a small
    random start); ``maps`` the maps a line (dimension 1) starts from when the stage fits none
    (see :func:`continuum_start`); ``seed`` the refit's; ``features`` the items' feature space
    (n_items, p) or None, fitted as a prior (``engine.embedding.fit_embedding``'s ``features``,
    with ``STIFFNESS``). ``key`` identifies the stage (its refit's seed, triplets and dimensions),
    so a result is only ever applied to its own refit.
    """

    n_items: int
    triplets: np.ndarray
    dims: tuple[int, ...]
    inits: dict
    maps: dict
    seed: int
    features: np.ndarray | None = None

    @property
    def key(self) -> tuple[int, int, tuple[int, ...]]:
        return (int(self.seed), int(len(self.triplets)), tuple(int(d) for d in self.dims))

    def run(self) -> dict[int, np.ndarray]:
        return run_fit(self)


def run_fit(task: FitTask) -> dict[int, np.ndarray]:
    """Fit every dimension of ``task`` to convergence (or ``FIT_MAX_ITER`` iterations): {dim: X}.

    A line starts from the order of the items along the smallest map (fitted earlier in the same
    stage, else from ``task.maps``; see :func:`~engine.duels.dims._fit_start`)."""
    emb = _embedding_module()
    fitted: dict[int, np.ndarray] = {}
    for d in task.dims:
        if d == FEATURE_MAP:
            if task.features is None:
                continue  # (the features were dropped: no map to fit)
            # the features' map alone: X = Z W, the offsets infinitely dear
            q = min(MAP_DIMS, task.features.shape[1])
            X = emb.fit_embedding(task.triplets, task.n_items, dim=q, kernel=_kernel_of(q), init=task.inits.get(d),
                                  random_state=task.seed, max_iter=FIT_MAX_ITER, features=task.features,
                                  stiffness=np.inf)
            fitted[d] = np.asarray(X, np.float64)
            continue
        maps = {e: X for e, X in {**task.maps, **fitted}.items() if e != FEATURE_MAP}
        init = _fit_start(d, task.inits.get(d), maps, task.n_items)
        prior = {} if task.features is None else {"features": task.features, "stiffness": STIFFNESS}
        X = emb.fit_embedding(task.triplets, task.n_items, dim=d, kernel=_kernel_of(d), init=init,
                              random_state=task.seed, max_iter=FIT_MAX_ITER, **prior)
        fitted[d] = np.asarray(X, np.float64)
    return fitted


class Refits:
    """Mixin of :class:`~engine.duels.planner.CandidateDuels`: the refit scheduler and the fitter
    hand-over. The refit under way is ``fit_job_`` (saved) and the stage handed to ``fitter``
    ``_fit_running`` (never saved); each stage starts from the dimension's previous fit."""

    @property
    def warmup_(self) -> float:
        """Random-triplet answers per head before its duels start: ``warmup``, or :func:`auto_warmup`
        (none with features once they are trusted: their shortlists are better than random ones; while
        they are tested, or found to predict nothing, the warm-up a study without them has: its first
        questions are then the tests)."""
        if self.warmup == "auto":
            trusted = self.prior_ is not None and self.prior_.trusted
            return 0.0 if trusted else auto_warmup(self.n_items)
        return float(self.warmup)

    def _needs_refit(self) -> bool:
        if self.fit_job_ is not None:
            return True
        if self.n_fits_ == 0:
            if self.prior_ is not None and self.prior_.testing:
                return False  # (no fit before the features are judged: the tests are the warm-up)
            if self.prior_ is not None and self.prior_.trusted:
                warmup = 0.0 if self.warmup == "auto" else self.warmup_
                # (duels among the feature neighbours first: the first fit learns from them)
                return self.n_answers_ >= max(warmup * self.n_items, self.prior_.judged_ + FIRST_FIT * self.n_items)
            return self.n_answers_ >= self.warmup_ * self.n_items or self.warmup_ == 0
        return self._grown(self.fitted_on_)

    def _grown(self, fitted_on: int) -> bool:
        """Answers have grown enough since a fit on ``fitted_on`` answers to refit."""
        growth = min(self.refit_growth, COIN_REFIT) if self._coin_flips() else self.refit_growth
        return self.n_answers_ >= fitted_on * (1.0 + growth) + 1

    def _refresh(self) -> None:
        """Refit the embedding (warm start) and rebuild every head's shortlist."""
        trip = self._all_triplets()
        emb = _embedding_module()
        if emb is not None and len(trip):
            job = self.fit_job_
            if job is not None and self.coin_ and job.get("published") and self._grown(job["answers"]):
                # where duels are coin flips only the leading dimension's shortlists matter: when it is
                # due again, the others wait for a later refit (they take long in 8 dimensions)
                self._end_fit()
            if self.fit_job_ is None:
                self._start_fit(emb, trip)
            answers_fitted = self.fit_job_["answers"]
            if not self._continue_fit(emb):
                # the refit goes on at the next call; the shortlists stay those of the last fit (or,
                # once its leading dimension is done, of that one while the others finish)
                return
            self.embedding_ = self.embeddings_[self.chosen_dim_]
            self._estimate_kappa()
            self._shortlists_from_fit(answers_fitted)
            return
        self._shortlists_from_win_rates(trip)

    def _start_fit(self, emb, trip: np.ndarray) -> None:
        """Begin a refit: score the dimensions refitted last time on the answers that arrived since
        (:meth:`_score_dims`), decide the coin-flip regime and choose which dimensions to refit warm
        (:meth:`_dims_to_refit`), with the refit's seed."""
        self._score_dims(emb, trip)
        prior = self.prior_
        if prior is not None and prior.trusted and not prior.map_earned_ and FEATURE_MAP in self._dims():
            at = self._dims().index(FEATURE_MAP)
            prior.map_earned_ = bool(self.dim_scores_[1, at] > 0 and self._best_dim_index() == at)
        self._update_coin()
        todo = self._dims_to_refit()
        self.fit_job_ = {"dims": [int(i) for i in todo], "triplets": int(len(trip)),
                         "answers": int(self.n_answers_), "seed": int(self.rng_.integers(2**31 - 1)),
                         "iterations": 0}

    def _judge_features(self) -> None:
        """While the features are tested (before any fit): score the answers that arrived since the last
        look and judge them (:meth:`~engine.duels.priors.FeaturePrior.judge`; final once the answers reach
        the warm-up a study without features spends). Trusted: duels start (the first fit is due). Dropped:
        the study goes on exactly as one without them, whose random warm-up the tests were (the feature
        neighbours' shortlists go, the answers stay)."""
        prior = self.prior_
        if prior is None or not prior.testing:
            return
        trip = self._all_triplets()
        if len(trip) > prior.judged_:
            prior.score(trip[prior.judged_:])
            prior.judged_ = int(len(trip))
        verdict = prior.judge(final=self.n_answers_ >= auto_warmup(self.n_items) * self.n_items)
        if verdict is None:
            return
        if verdict:
            prior.decided_ = True
            return
        prior.dropped_ = True
        self.cands_ = np.full_like(self.cands_, NO_NEIGHBOR)
        self._certified_rows = self._ranked_rows_kept = None

    def _fit_task(self, dims: list[int]) -> FitTask:
        """The refit under way's next stage: the dimensions ``dims`` (indices into ``_dims()``)."""
        job = self.fit_job_
        ds = self._dims()
        want = tuple(int(ds[i]) for i in dims)
        inits = {d: self.embeddings_.get(d) for d in want}
        maps = {d: X for d, X in self.embeddings_.items() if d not in (1, FEATURE_MAP)}
        # features that predict nothing fall out of the fits (and a fit after them starts small and random)
        prior = self.prior_ if self.prior_ is not None and self.prior_.trusted else None
        if prior is not None:
            # a first fit starts where the features put the items (a line: from the order along a map)
            inits = {d: X if X is not None or d == 1 else
                     prior.start(min(MAP_DIMS, prior.space_.shape[1]) if d == FEATURE_MAP else d)
                     for d, X in inits.items()}
        return FitTask(self.n_items, self.triplets_[: job["triplets"]], want,
                       {d: X for d, X in inits.items() if X is not None}, maps, int(job["seed"]),
                       None if prior is None else prior.points())

    def _take_fit(self, task: FitTask, fitted: dict[int, np.ndarray]) -> bool:
        """Put a finished stage in place; True when it held the leading dimension (the shortlists
        are rebuilt from it then, while the other dimensions of a refit that checks them all go on)."""
        job = self.fit_job_
        ds = self._dims()
        publish = False
        for d in task.dims:
            i = ds.index(d)
            if i in job["dims"]:
                job["dims"].remove(i)
            if d not in fitted:  # (the features' map of features dropped meanwhile)
                continue
            # a finished dimension is used at once (the leading one gives the shortlists); the
            # others only count in the choice of dimension once the whole refit is done
            self.embeddings_[d] = np.asarray(fitted[d], np.float64)
            job["fitted"] = job.get("fitted", 0) | (1 << i)
            if not job.get("published"):
                job["published"] = 1
                publish = True
        job["iterations"] = 0
        return publish

    def _continue_fit(self, emb) -> bool:
        """Take the refit under way as far as this call can; True when its leading dimension (the
        chosen one, fitted first) was finished in this call.

        Without a ``fitter`` (a script, ``proxima plan``, a replay) the refit runs to its end inside
        the call. With one (a live worker) each stage of the refit (the leading dimension, then the
        others) is handed to it and runs beside the update passes; a call takes a stage's result
        when it is ready, and otherwise plans from what is already known (the previous fit's
        shortlists, the duel counts). A stage is a pure function of its :class:`FitTask`, so where
        it ran changes only when its result arrives."""
        job = self.fit_job_
        if self.fitter is None or not self.pool:
            task = self._fit_task(list(job["dims"]))
            publish = self._take_fit(task, run_fit(task))
            self._end_fit()
            return publish or not job.get("published")
        lead = not job.get("published")
        task = self._fit_task(job["dims"][:1] if lead else list(job["dims"]))
        running = self._fit_running
        if running is None or running[0] != task.key:
            # (a planner restored from its state hands its refit over again: the fitter may have it)
            running = self._fit_running = (task.key, self.fitter.fit(task))
        if not running[1].done():
            return False
        fitted = running[1].result()  # a failed fit raises here: the pass fails and says why
        self._fit_running = None
        publish = self._take_fit(task, fitted)
        if job["dims"]:
            # the other dimensions go on beside the passes; the shortlists come from the leading one now
            task = self._fit_task(list(job["dims"]))
            self._fit_running = (task.key, self.fitter.fit(task))
            return publish
        self._end_fit()
        return publish or not job.get("published")

    def _end_fit(self) -> None:
        """Close the refit under way: the dimensions it finished are scored on the answers that
        arrive next; those it did not finish (a new refit of the leading dimension fell due first)
        keep their previous fit, unscored."""
        job = self.fit_job_
        dims = self._dims()
        fitted = job.get("fitted", 0)
        self.fresh_dims_ = np.array([bool(fitted >> i & 1) for i in range(len(dims))])
        self.fitted_triplets_ = job["triplets"]
        self.fitted_on_ = job["answers"]
        self.fit_job_ = None

    def settle_fit(self) -> bool:
        """Take the refit under way as far as it goes without planning a question (a pass with nothing
        to plan: a refit that finished beside the passes is put in place, shortlists and all); with a
        fitter, also hand over a refit that is due (a study whose raters stopped still gets the refit
        its last answers call for). True when a fit (or a stage of one) was put in place."""
        beside = self.fitter is not None and self.pool
        self._judge_features()
        if self.fit_job_ is None and not (beside and self._needs_refit()):
            return False

        def stage():
            job = self.fit_job_
            return self.n_fits_, None if job is None else (job["seed"], len(job["dims"]))

        before = stage()
        self._refresh()
        # put in place: a new fit, or a stage of the refit under way (the others' dimensions), or its end
        return self.n_fits_ != before[0] or (before[1] is not None and stage()[1] != before[1])

    def fit_ready(self) -> bool | None:
        """None: no refit handed to a fitter; False: one runs beside the calls; True: its result waits
        for the next call (or :meth:`settle_fit`)."""
        running = self._fit_running
        if running is None or running[1] is None or self.fit_job_ is None or self.fitter is None or not self.pool:
            return None
        return bool(running[1].done())

    def refresh_if_due(self) -> None:
        """Refit and rebuild the shortlists if the answers call for it (what :meth:`next_questions`
        does first); screen planners (``engine.screens``) that choose their own questions call it."""
        self._judge_features()
        if self._needs_refit():
            self._refresh()
