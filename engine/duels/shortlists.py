"""Candidate duels' shortlists: each head's candidates, rebuilt at every refit from the fit (its
nearest items) or, without a fitter, from the heads' win rates; dueled leaders survive a rebuild.

Numpy/scipy only; must never import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ..graph import NO_NEIGHBOR
from . import scores
from .dims import map_only
from .parts import Shortlist as Shortlist  # (its import path before it moved)

if TYPE_CHECKING:
    from .parts import Params, Parts


#: share of a refreshed shortlist kept for the dueled leaders of the previous one
KEEP_SHARE = 0.5


def target_size(s: Parts, params: Params) -> int:
    """The shortlists' size now: ``shortlist``, shrinking like sqrt(``shrink_at`` / answers per item) past
    ``shrink_at`` answers per item, down to ``min_shortlist``."""
    per_item = s.duels.n_answers / params.n_items
    m = params.shortlist * math.sqrt(params.shrink_at / max(params.shrink_at, per_item))
    return int(min(params.shortlist, max(params.min_shortlist, round(m)), params.n_items - 1))


def old_leaders(s: Parts, params: Params, m: int) -> list[list[int]]:
    """Per head, the dueled leaders of its shortlist that survive a refit (``KEEP_SHARE`` of m)."""
    return [[int(c) for c in row if c >= 0] for row in old_leader_rows(s, params, m)]


def old_leader_rows(s: Parts, params: Params, m: int, heads: np.ndarray | None = None) -> np.ndarray:
    """:func:`old_leaders` as rows (one per head of ``heads``, all by default; ceil(m KEEP_SHARE) wide),
    ``NO_NEIGHBOR`` padding: per head,
    the candidates of its shortlist that are not eliminated and have duels, best score first (ties
    in shortlist order). Whole-array operations: at 50,000 items a loop over the heads took seconds."""
    n, width = params.n_items, s.short.cands.shape[1]
    at = np.arange(n) if heads is None else np.asarray(heads, np.int64)
    heads = at[:, None]
    rows = s.short.cands[at]
    valid = rows >= 0
    gone = s.short.eliminated_codes()
    if len(gone):
        valid &= ~np.isin(heads * n + rows, gone)
    # the shortlist without its eliminated candidates, in its order, the padding at the end
    order = np.argsort(~valid, axis=1, kind="stable")
    olds = np.where(np.take_along_axis(valid, order, axis=1), np.take_along_axis(rows, order, axis=1),
                    NO_NEIGHBOR)
    score, counts = scores.batch_scores(s, params, olds, at)
    ok = (olds >= 0) & (counts > 0)
    rank = np.argsort(np.where(ok, -score, np.inf), axis=1, kind="stable")
    ranked_ok = np.take_along_axis(ok, rank, axis=1)
    take = ranked_ok & (np.cumsum(ranked_ok, axis=1) <= math.ceil(m * KEEP_SHARE))
    ranked = np.where(take, np.take_along_axis(olds, rank, axis=1), NO_NEIGHBOR)
    # (taken entries come first in each row: they are the first ``ok`` ones of the ranking)
    return ranked[:, : max(1, min(width, math.ceil(m * KEEP_SHARE)))]


def shortlists_from_fit(s: Parts, params: Params, answers_fitted: int) -> None:
    """Every head's shortlist from the fit: its dueled leaders, then its nearest items in the
    fit, in order of nearness. The nearest items come from a k-d tree over the fit (no n x n
    array: at 50,000 items in 4 dimensions a rebuild takes about a second)."""
    from scipy.spatial import cKDTree

    X = s.fit.embedding
    n = params.n_items
    m = target_size(s, params)
    gone = s.short.eliminated_codes()
    # enough nearest items (the head itself comes first) for the head with most eliminated candidates
    k = min(n, m + 1 + max((len(g) for g in s.short.eliminated.values()), default=0))
    rows = np.arange(n)  # the heads whose shortlists are rebuilt
    if map_only(s, params):
        # a large study below MAP_UNTIL answers per item: the candidates and their order come from the
        # features themselves, whose neighbours were found once (no tree over the fit at each refit). At
        # 50,000 clustered items with features of local agreement .7, 1-NN in the refitted map fell from .50
        # to .27 over the first 10 answers per item, and hit@3 from .60 to .41; from the features .63
        X = s.prior.points()
        rows = s.short.heads_to_refill(m, len(s.short.log))
        near = s.prior.neighbors(min(k, s.prior.widest))[rows]
    else:
        _, near = cKDTree(X).query(X, k=k)
        near = np.asarray(near, np.int64).reshape(n, k)
        if s.prior is not None and s.prior.trusted:
            near = s.prior.mix(near)
    s.short.filled = (m, len(s.short.log))
    keeps = old_leader_rows(s, params, m, rows)
    sq = (X**2).sum(axis=1)
    heads = rows[:, None]
    # fill each head's kept leaders up to m with its nearest items in the fit: neither the head, nor
    # one eliminated for it, nor a kept leader (nor past the last item: a k-d tree's padding)
    fill = (near != heads) & (near < n)
    if len(gone):
        fill &= ~np.isin(heads * n + np.minimum(near, n - 1), gone)
    kept = keeps >= 0
    if kept.any():
        codes = np.unique((heads * n + keeps)[kept])
        fill &= ~np.isin(heads * n + np.minimum(near, n - 1), codes)
    need = m - kept.sum(axis=1)
    fill &= np.cumsum(fill, axis=1) <= need[:, None]
    picked = np.concatenate([np.where(kept, keeps, NO_NEIGHBOR), np.where(fill, near, NO_NEIGHBOR)], axis=1)
    # shortlist order = nearness in the fit (the prior of the duel scores), ties to the smaller index;
    # the padding last
    safe = np.maximum(picked, 0)
    d = sq[rows, None] + sq[safe] - 2.0 * np.einsum("hcd,hd->hc", X[safe], X[rows])
    d = np.where(picked >= 0, d, np.inf)
    key = np.where(picked >= 0, picked, n)
    order = np.lexsort((key, d), axis=1)
    picked = np.take_along_axis(picked, order, axis=1)[:, : params.shortlist]
    cands = np.full((n, params.shortlist), NO_NEIGHBOR, np.int64) if len(rows) == n else s.short.cands.copy()
    cands[rows] = NO_NEIGHBOR
    cands[rows, : picked.shape[1]] = picked
    s.short.cands = cands
    s.fit.fitted_on = answers_fitted
    s.fit.n_fits += 1


def shortlists_from_win_rates(s: Parts, params: Params, trip: np.ndarray) -> None:
    """Every head's shortlist without an embedding fitter (or before any answer): its dueled
    leaders, then candidates ranked by their smoothed win rate as this head's answers (a weak,
    head-local signal; the duels sharpen it). n x n: only without scipy."""
    answers_fitted = s.duels.n_answers
    n = params.n_items
    wins = np.zeros((n, n))
    shown = np.zeros((n, n))
    if len(trip):
        np.add.at(wins, (trip[:, 0], trip[:, 1]), 1.0)
        np.add.at(shown, (trip[:, 0], trip[:, 1]), 1.0)
        np.add.at(shown, (trip[:, 0], trip[:, 2]), 1.0)
    D = -(wins + 1.0) / (shown + 2.0)
    np.fill_diagonal(D, np.inf)
    m = target_size(s, params)
    order = neighbours_of_neighbours(s, params, np.argsort(D, axis=1, kind="stable"))
    cands = np.full((params.n_items, params.shortlist), NO_NEIGHBOR, np.int64)
    # the dueled leaders survive a refit, so evidence is not thrown away (and stay first: no fit
    # to order the shortlist by)
    keeps = old_leaders(s, params, m)
    for h in range(params.n_items):
        chosen = s.short.fill(h, keeps[h], order[h], m)
        cands[h, : len(chosen)] = chosen
    s.short.cands = cands
    s.fit.fitted_on = answers_fitted
    s.fit.n_fits += 1


def neighbours_of_neighbours(s: Parts, params: Params, order: np.ndarray, r: int = 3) -> np.ndarray:
    """Candidate order without an embedding: the current leaders' leaders and the heads that
    lead with h first (near items share near items), then the win-rate order."""
    n = params.n_items
    leaders = [list(scores.ranking(s, params, h)[0][:r]) for h in range(n)]
    met: list[set[int]] = [set() for _ in range(n)]  # candidates h has seen in a duel
    heads, rest = np.divmod(s.duels.codes, n * n)
    for h, a, b in zip(heads.tolist(), *(x.tolist() for x in np.divmod(rest, n)), strict=True):
        met[h].add(a)
        met[h].add(b)
    reverse: list[list[int]] = [[] for _ in range(n)]
    for g in range(n):
        for c in leaders[g]:
            reverse[int(c)].append(g)
    out = np.empty_like(order)
    for h in range(n):
        pool = []
        for c in leaders[h]:
            pool.extend(int(x) for x in leaders[int(c)])
        pool.extend(reverse[h])
        seen, first = set(), []
        for c in pool:
            if c != h and c not in seen:
                seen.add(c)
                first.append(c)
        # unmet items first, so a shortlist that lost its best keeps discovering new ones
        first = [c for c in first if c not in met[h]] + [c for c in first if c in met[h]]
        rest = [int(c) for c in order[h] if int(c) not in seen]
        rest = [c for c in rest if c not in met[h]] + [c for c in rest if c in met[h]]
        out[h] = np.asarray(first + rest, np.int64)[: order.shape[1]]
    return out
