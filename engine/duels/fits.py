"""Candidate duels' refits as pure stages (:class:`FitTask`, :func:`run_fit`) that run inline or beside the
passes, with the constants of the refit cadence and the warm-up; when a refit starts and how its result is
put in place is :mod:`.refits`. Numpy only; must never import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .dims import FEATURE_MAP, MAP_DIMS, _fit_start, _kernel_of
from .priors import STIFFNESS

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
    with ``stiffness``: ``STIFFNESS``, less for weak features, see :attr:`~.priors.FeaturePrior.stiffness`).
    ``key`` identifies the stage (its refit's seed, triplets and dimensions),
    so a result is only ever applied to its own refit.
    """

    n_items: int
    triplets: np.ndarray
    dims: tuple[int, ...]
    inits: dict
    maps: dict
    seed: int
    features: np.ndarray | None = None
    stiffness: float = STIFFNESS

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
        prior = {} if task.features is None else {"features": task.features, "stiffness": task.stiffness}
        X = emb.fit_embedding(task.triplets, task.n_items, dim=d, kernel=_kernel_of(d), init=init,
                              random_state=task.seed, max_iter=FIT_MAX_ITER, **prior)
        fitted[d] = np.asarray(X, np.float64)
    return fitted
