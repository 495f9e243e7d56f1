"""Candidate duels' dimensions: which embedding dimensions are fitted (``dim="auto"``), their
prequential scores on fresh answers, the line (a continuum) and the regime gates read from them.

How well the chosen fit predicts answers no fit had seen says whether single duels are read at face
value (:func:`duel_trust`) or are coin flips (``Embedding.coin``). Functions over the planner's parts
(:class:`~.parts.Parts`) and parameters (:class:`~.parts.Params`). Numpy only; must never import Flask, Redis, RQ,
``webapp`` or ``workers``.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ..continuum import continuum_start

if TYPE_CHECKING:
    from .parts import Params, Parts

#: embedding dimensions ``dim="auto"`` keeps fitted side by side (warm started). Dimension 1 is a
#: continuum (morphs, a scale): fitted with the human noise model (``embedding.FIT_LAPSE``; t-STE's
#: heavy tails need more room than a line) from the order of the items along the smallest map
#: (:func:`continuum_start`); it is listed last, so it is chosen only where it predicts fresh
#: answers ``AUTO_MARGIN`` standard errors better than every other dimension (the alien eggs)
AUTO_DIMS = (2, 4, 8, 1)
#: with features and ``dim="auto"``, one more candidate beside the dimensions: the map of the features
#: alone (X = Z W fitted to the answers, no per-item offsets: how people weigh the features), in at most
#: ``MAP_DIMS`` dimensions (a line where the features have one component). Listed last, it is chosen
#: only where it predicts fresh answers better than every fit, e.g. features that order the items as
#: people do once weighed; dropped features leave it out
FEATURE_MAP = 0
MAP_DIMS = 8
#: weight of older refits in the prequential score of each dimension (per refit)
AUTO_DECAY = 0.7
#: standard errors (of the best accuracy) a larger dimension must beat a smaller one by
AUTO_MARGIN = 1.0
#: standard errors (of the best accuracy) another dimension must beat the one chosen last by to replace it
#: (:func:`held_dim_index`). Fresh answers are mostly duels among the chosen fit's shortlists, the pairs that
#: fit is least sure of, so the chosen dimension is scored on its own hardest questions and the others are not:
#: in a world of 5 dimensions the 4-D and 8-D fits then predicted fresh duels alike (.607 against .603) while
#: 1-NN in them hit a true 3 nearest .48 against .72 of the time, and each recheck handed the graph to the
#: fit not chosen (``benchmarks/duels_dims5.py``)
AUTO_HOLD = 1.0
#: ... from this many answers per item on (at the refit that scored the dimensions, :func:`scored_on`): before,
#: a larger dimension that won a refit on the first, noisy scores was held where the smaller fits placed the
#: items better (300 clustered 5-D items: the 8-D fit held from 15 to 40 answers per item, hit@3 .70 against .81
#: at 50)
HOLD_FROM = 40.0
#: ... and by this much accuracy at least: a hold counted in standard errors alone shrinks as the tallies grow,
#: the chosen fit's handicap does not (1,000 uniform 5-D items, seed 7: at 300 answers per item the 4-D fit
#: scored .6080 against the held 8-D fit's .6062, one standard error on 87,000 decayed answers; hit@3 .67
#: against .84)
HOLD_GAP = 0.005
#: in a study of more than ``priors.LARGE_ITEMS`` items with trusted features, the features' map (see
#: ``FEATURE_MAP``) is the chosen dimension up to ``MAP_UNTIL`` answers per item, whatever the fits would score,
#: and the only one refitted (a refit of the map alone costs a fraction of one of every dimension); from there
#: the fits are refitted beside it, and one must beat it by ``MAP_MARGIN`` standard errors. A fit has one
#: offset per item: with few answers per item against many items the offsets scatter items among others'
#: neighbours, which fresh answers (duels among the chosen shortlists) cannot show: at 10,000 clustered items
#: with features of local agreement .7 (``simulation.features.features_of_agreement(local=50)``) the fits
#: predicted fresh answers 10 standard errors better than the map at 8 answers per item (.687 against .663)
#: while 1-NN in them hit a true 3 nearest .34 of the time, in the map .46 (.34 against .52 at 20 answers per
#: item); chosen by the scores, hit@3 at 10 answers per item was .40-.55, with the map kept .76 (.88 at 20).
#: Where the fits take over (benchmarks/README.md, "A large study"; 10,000 such items, 2 seeds): kept to 100
#: answers per item the map reached hit@3 .88 at 100 against .65 with the fits taking over at 50 (.73 both at 50);
#: 50 was kept while the features' test could trust pure noise (a study then held at .00 by the map), which it
#: no longer does for good (``priors.FeaturePrior``: noise trusted in at most 2.5% of studies, and dropped again)
MAP_UNTIL = 100.0
MAP_MARGIN = 3.0
#: refits that fit every dimension before only the leading one is refitted each time ...
AUTO_SETTLE = 4
#: ... and the others again every this many refits (a fit in 8 dimensions costs ~5x one in 2)
AUTO_RECHECK = 4
#: prequential accuracy of the embedding under which single duels are not read at face value,
#: and over which they fully are (see :func:`duel_trust`)
TRUST_ACCURACY = (0.62, 0.67)
#: ... measured from this many answers per item on (before, the warm-up's random triplets,
#: easier to predict than duels, dominate it)
TRUST_FROM = 10.0
#: prequential accuracy from which the coin-flip regime ends (it is entered below TRUST_ACCURACY[0]);
#: a margin above it (.645: stay until the fit predicts clearly better) cost recorded answers with
#: lapse 0.1 ~.06 hit@3 at 20 answers per item (6 seeds), without a gain on the alien eggs
COIN_LEAVE = 0.62


def _kernel_of(dim: int) -> str:
    """The embedding kernel duels fits in ``dim`` dimensions: t-STE, the human model on a line."""
    return "human" if dim == 1 else "tste"


def _fit_start(dim: int, init: np.ndarray | None, maps: dict, n_items: int) -> np.ndarray | None:
    """Where a fit in ``dim`` dimensions starts: its warm start ``init`` (None: a small random start),
    except on a line (``dim`` 1), which starts from the order of the items along the smallest of
    ``maps`` (dim -> fit; :func:`continuum_start`) where there is one: items cannot pass each other on
    a line, so a warm start would keep an early fit's folds."""
    if dim == 1 and n_items > 2:
        lead = next((maps[e] for e in sorted(maps) if e != 1), None)
        return init if lead is None else continuum_start(lead)
    return init


def dims_for(features: bool, dim: int | str) -> tuple[int, ...]:
    """The dimensions a planner of parameter ``dim`` fits: ``dim``, or ``AUTO_DIMS`` (and the features' map,
    with ``features``)."""
    if dim != "auto":
        return (int(dim),)
    return AUTO_DIMS + (FEATURE_MAP,) if features else AUTO_DIMS


def dims_of(s: Parts, params: Params) -> tuple[int, ...]:
    """The dimensions fitted (:func:`dims_for`)."""
    return dims_for(s.prior is not None, params.dim)


def map_out(s: Parts) -> bool:
    """Whether the features' map is a candidate no longer (no features, or they were dropped)."""
    return s.prior is None or not s.prior.trusted


def map_only(s: Parts, params: Params) -> bool:
    """Whether the features' map is the one dimension chosen and refitted: trusted features in a large study,
    below ``MAP_UNTIL`` answers per item (``dim="auto"``)."""
    return (FEATURE_MAP in dims_of(s, params) and not map_out(s) and s.prior.large
            and s.duels.n_answers < MAP_UNTIL * params.n_items)


def score_dims(s: Parts, params: Params, emb: Any, trip: np.ndarray) -> None:
    """Score the dimensions refitted last time on the answers that arrived since (no fit has
    seen them); older refits count ``AUTO_DECAY`` times less per refit.

    Two tallies: ``dim_scores`` takes every refit's score (the leading dimension is refitted,
    so scored, at every refit: the regime gates read its latest accuracy), ``dim_compare``
    only the refits that fitted two dimensions or more, each scored on the same answers. The
    choice of dimension reads ``dim_compare``: from ``dim_scores`` the leader, scored on the
    newest answers by its newest fits while the others kept the scores of older ones, looked
    better for being scored later (1,000 clustered 4-D items, one seed in three: 8 dimensions
    to the end, hit@3 .70 against .94 at 60 answers per item)."""
    fit = s.fit
    dims = dims_of(s, params)
    fresh = trip[fit.fitted_triplets:]
    if len(dims) > 1 and len(fresh) and fit.fresh_dims.any():
        scored = fit.fresh_dims
        right = np.array([emb.triplet_accuracy(fit.embeddings[dims[i]], fresh) * len(fresh)
                          for i in np.flatnonzero(scored)])
        tallies = (fit.dim_scores, fit.dim_compare) if scored.sum() > 1 else (fit.dim_scores,)
        for tally in tallies:
            tally[:, scored] *= AUTO_DECAY
            tally[0, scored] += right
            tally[1, scored] += len(fresh)


def dims_to_refit(s: Parts, params: Params) -> list[int]:
    """The dimensions (indices into :func:`dims_of`) a refit fits warm, in order: every dimension at
    first and every ``AUTO_RECHECK``-th refit, else only the leading one."""
    dims = dims_of(s, params)
    if map_only(s, params):
        return [dims.index(FEATURE_MAP)]
    n_fits = s.fit.n_fits
    every = n_fits < AUTO_SETTLE or n_fits % AUTO_RECHECK == 0
    best = best_dim_index(s, params)
    # the leading dimension first: its fit gives the shortlists as soon as it is done; then the
    # others from the cheapest up, the line right after the smallest map it starts from, so that
    # in a live pool, where a refit of the leading one that falls due cuts the others short, the
    # cheap ones are scored too
    maps = [d for d in dims if d not in (1, FEATURE_MAP)]
    after = min(maps) + 0.5 if maps else 0

    def cost(i: int) -> float:
        return after if dims[i] == 1 else dims[i]

    out = map_out(s)
    rest = sorted((i for i in range(len(dims)) if i != best and not (out and dims[i] == FEATURE_MAP)),
                  key=cost) if every else []
    return [best] + rest


def best_dim_index(s: Parts, params: Params, line: bool = True) -> int:
    """The dimension whose fits best predicted fresh answers; the first of ``AUTO_DIMS`` within
    ``AUTO_MARGIN`` standard errors of the best (a larger one must earn its place: on the alien
    eggs 2, 4 and 8 dimensions score within a point of each other and the 2-D fit places the
    eggs best; the line, listed last, must beat them all). ``line=False`` leaves the line out
    (the regime gates: how well near duels are predicted is read from the t-STE fits). Read
    from the refits that scored several dimensions on the same answers (``dim_compare``),
    every refit's scores until there is one. The dimension chosen last (:func:`held_dim_index`) stays
    while no other beats it by ``AUTO_HOLD`` standard errors (from ``HOLD_FROM`` answers per item on): its fits
    are scored on its own hardest duels."""
    fit = s.fit
    right, seen = fit.dim_compare if fit.dim_compare[1].any() else fit.dim_scores
    acc = np.where(seen > 0, right / np.maximum(seen, 1e-300), -np.inf)
    dims = dims_of(s, params)
    if not line and len(dims) > 1 and 1 in dims:
        acc[dims.index(1)] = -np.inf
    if FEATURE_MAP in dims and (not line or map_out(s)):
        acc[dims.index(FEATURE_MAP)] = -np.inf
    mapped = line and FEATURE_MAP in dims and not map_out(s)
    if mapped and (map_only(s, params) or not (seen > 0).any()):
        return dims.index(FEATURE_MAP)  # nothing scored yet: the features, as people weigh them
    best = int(np.argmax(acc))
    if AUTO_MARGIN <= 0 or seen[best] <= 0:
        return best
    se = math.sqrt(max(acc[best] * (1.0 - acc[best]), 0.0) / seen[best])
    near = acc >= acc[best] - AUTO_MARGIN * se
    if mapped and s.prior.large:
        # a large study: the features' map up to MAP_UNTIL answers per item, then while no fit beats it by
        # MAP_MARGIN standard errors
        at = dims.index(FEATURE_MAP)
        if map_only(s, params) or acc[at] >= acc[best] - MAP_MARGIN * se:
            return at
    elif mapped:
        if s.prior.map_earned_ and near[dims.index(FEATURE_MAP)]:
            # (the features' map, once it won on fresh answers, stays while no fit beats it by the margin)
            return dims.index(FEATURE_MAP)
    held = held_dim_index(s, params) if scored_on(s) >= HOLD_FROM * params.n_items else None
    if held is not None and acc[held] >= acc[best] - max(AUTO_HOLD * se, HOLD_GAP):
        return held  # (no other dimension beats the chosen one by AUTO_HOLD standard errors: it stays)
    return int(np.flatnonzero(near)[0])


def scored_on(s: Parts) -> int:
    """Answers when the dimensions were last scored (:func:`score_dims`, as a refit starts): the refit under
    way's, else the last fit's; the same from one refit's start to the next."""
    job = s.fit.fit_job
    return int(job["answers"]) if job is not None else int(s.fit.fitted_on)


def held_dim_index(s: Parts, params: Params) -> int | None:
    """The dimension (index into :func:`dims_of`) whose fit gives the shortlists now (``Embedding.embedding``,
    the chosen fit: :func:`~.refits.take_fit` moves it to the same dimension's newer fit), None before any fit.
    A restored state holds that fit as a copy: it is found by its values and made the same array again."""
    X = s.fit.embedding
    if X is None:
        return None
    fits = [s.fit.embeddings.get(d) for d in dims_of(s, params)]
    for i, E in enumerate(fits):
        if E is X:
            return i
    for i, E in enumerate(fits):
        if E is not None and E.shape == X.shape and np.array_equal(E, X):
            s.fit.embedding = E
            return i
    return None


def chosen_dim(s: Parts, params: Params) -> int:
    """The dimension whose fit gives the shortlists (:func:`best_dim_index`)."""
    return dims_of(s, params)[best_dim_index(s, params)]


def duel_trust(s: Parts, params: Params) -> float:
    """How far to read single duels at face value, in [0, 1]: from the prequential accuracy of
    the chosen embedding dimension (answers no fit had seen), 0 at ``TRUST_ACCURACY[0]`` or
    below, 1 at ``TRUST_ACCURACY[1]`` or above; 0 before ``TRUST_FROM`` answers per item. On recorded
    answers of 85 items it is ~.68-.78 from 20 answers per item on; on the alien eggs, whose
    near duels are coin flips and whose embedding judges better, ~.57.

    Asked for every head scored (5% of a live pass at 1,000 items), it changes only with the
    tallies and the answers' count passing ``TRUST_FROM``: kept (``Embedding.trust_kept``) until one
    of them changes."""
    fit = s.fit
    key = (s.duels.n_answers >= TRUST_FROM * params.n_items, fit.dim_scores.tobytes(), fit.dim_compare.tobytes())
    kept = fit.trust_kept
    if kept is not None and kept[0] == key:
        return kept[1]
    right, seen = fit.dim_scores[:, best_dim_index(s, params, line=False)]
    if seen < params.n_items or not key[0]:
        trust = 0.0
    else:
        lo, hi = TRUST_ACCURACY
        trust = float(np.clip((right / seen - lo) / (hi - lo), 0.0, 1.0))
    fit.trust_kept = (key, trust)
    return trust


def coin_flips(s: Parts) -> bool:
    """True where single duels are answered like coin flips (see :func:`update_coin`): only the
    embedding, pooling every answer about an item, can place such items, and questions go to
    placing them."""
    return s.fit.coin


def update_coin(s: Parts, params: Params) -> None:
    """From ``TRUST_FROM`` answers per item on, enter the coin-flip regime when the chosen
    dimension predicted the fresh answers no better than ``TRUST_ACCURACY[0]`` (the alien eggs,
    ~.55-.62; recorded answers of 85 items ~.63-.78 from 15 answers per item on, ~.58-.66 with
    a lapse rate of 0.1), and leave it from ``COIN_LEAVE`` on. Decided when a refit starts (the
    scores change only then), so a replay in the same batches decides the same."""
    fit = s.fit
    right, seen = fit.dim_scores[:, best_dim_index(s, params, line=False)]
    if seen < params.n_items or s.duels.n_answers < TRUST_FROM * params.n_items:
        return
    acc = right / seen
    if fit.coin and chosen_dim(s, params) == 1 and len(dims_of(s, params)) > 1:
        return  # a line places the items best: the regime for items people can hardly tell apart up close
    fit.coin = bool(acc < (COIN_LEAVE if fit.coin else TRUST_ACCURACY[0]))
