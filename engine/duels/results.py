"""Candidate duels' results: the neighbour graph (each head's shortlist ranked by the one scoring,
certified by elimination), a head's candidates, the certified heads and the dashboard's progress.

Numpy only; must never import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

import numbers
from typing import TYPE_CHECKING

import numpy as np

from ..graph import NO_NEIGHBOR, NeighborGraph
from . import scores
from .dims import chosen_dim, duel_trust

if TYPE_CHECKING:
    from .parts import Params, Parts


def candidates(s: Parts, params: Params, h: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Item ``h``'s candidates for nearest neighbour, best first: (items, smoothed share of the duels
    each won, duels that showed each). Its shortlist once the embedding is fitted; before that the
    items ``h``'s answers chose most often (their win share among the triplets that showed them, as
    :func:`neighbor_graph` ranks them then)."""
    h = int(h)
    if not 0 <= h < params.n_items:
        raise ValueError(f"item {h} is not one of the {params.n_items} items")
    cands, score, counts = scores.ranking(s, params, h)
    if len(cands) or s.fit.embedding is not None:
        return cands, score, counts
    early = win_shares(s, params).get(h)
    if early is None:
        return np.empty(0, np.int64), np.empty(0), np.empty(0, np.int64)
    seen, share, shown = early
    order = np.lexsort((seen, -share))
    return seen[order].astype(np.int64), share[order], shown[order].astype(np.int64)


def neighbor_graph(s: Parts, params: Params, k: int = 1) -> NeighborGraph:
    """Top-k by the duel ranking inside the shortlist, then embedding order; ``estimates``
    1 - smoothed win share, ``samples`` duels behind the edge, ``certified`` by elimination."""
    if isinstance(k, bool) or not isinstance(k, (numbers.Integral, np.integer)) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    k = int(k)
    n = params.n_items
    nb = np.full((n, k), NO_NEIGHBOR, np.int64)
    est = np.full((n, k), np.nan)
    cnt = np.zeros((n, k), np.int64)
    cert = np.zeros(n, bool)
    X = s.fit.embedding
    r = min(k, s.short.cands.shape[1])
    trust = duel_trust(s, params) if s.fit.kappa is None else 0.0
    kept = s.kept.ranked = scores.refreshed(
        s, params, s.kept.ranked, (s.fit.n_fits, id(s.fit.embedding), s.fit.kappa, trust),
        lambda heads: scores.ranked_rows(s, params, heads))
    ranked, score, counts, flags = kept.rows
    top = ranked[:, :r] >= 0
    nb[:, :r] = ranked[:, :r]
    est[:, :r] = np.where(top, 1.0 - score[:, :r], np.nan)
    cnt[:, :r] = np.where(top, counts[:, :r], 0)
    cert[:] = flags
    short = (s.short.cands >= 0).sum(axis=1) < k
    if X is None:
        # before the first fit: the items each head's answers chose most often (smoothed win share
        # among the triplets that showed them), so the graph is anytime
        early = win_shares(s, params) if short.any() else {}
        for h in np.flatnonzero((s.short.cands < 0).all(axis=1)):
            if int(h) in early:
                seen, share, shown = early[int(h)]
                top = np.lexsort((seen, -share))[:k]
                nb[h, : len(top)] = seen[top]
                est[h, : len(top)] = 1.0 - share[top]
                cnt[h, : len(top)] = shown[top]
    else:
        # fewer candidates than k: the rest in the fit's order of nearness
        for h in np.flatnonzero(short):
            picked = [int(c) for c in nb[h] if c >= 0]
            d = ((X - X[h]) ** 2).sum(axis=1)
            d[h] = np.inf
            for c in np.argsort(d, kind="stable"):
                if len(picked) >= k:
                    break
                if int(c) not in picked and c != h:
                    picked.append(int(c))
            nb[h, : len(picked)] = picked
    return NeighborGraph.from_neighbors(nb, estimates=est, samples=cnt, certified=cert)


def place_by_features(s: Parts, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Items that are not the learner's (added to the study later), given in its features' space (m, p),
    placed by the map W its fits learned from the features (X = Z W + E): (its own items at Z W, the rows
    at rows W), or None while it has no such map (no features, features dropped, no fit yet). Its own
    items are taken at Z W, without the offsets E the answers gave them, as an added item has none: at
    500 clustered items their fitted places X set beside rows W gave an added item a true top-3 neighbour
    less often (.60 against .78 with features of agreement .9 at 25 answers per item;
    ``benchmarks/added_items.py --fitted``, benchmarks/README.md)."""
    prior, X = s.prior, s.fit.embedding
    if prior is None or not prior.trusted or X is None:
        return None
    W = prior.learned_map(X)
    return prior.points() @ W, np.asarray(rows, np.float64) @ W


def win_shares(s: Parts, params: Params) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per head h with answers: (items its triplets showed, smoothed share of them each won,
    triplets that showed each), from the answers' (h, item) pairs (no n x n array)."""
    n = params.n_items
    trip = s.duels.all_triplets()
    if not len(trip):
        return {}
    shown_codes = np.concatenate([trip[:, 0] * n + trip[:, 1], trip[:, 0] * n + trip[:, 2]])
    codes, shown = np.unique(shown_codes, return_counts=True)
    won = np.searchsorted(codes, trip[:, 0] * n + trip[:, 1])
    wins = np.bincount(won, minlength=len(codes)).astype(np.float64)
    heads, items = np.divmod(codes, n)
    share = (wins + 1.0) / (shown + 2.0)
    bounds = np.flatnonzero(np.diff(heads)) + 1
    return {int(h[0]): (i, sh, c) for h, i, sh, c in zip(np.split(heads, bounds), np.split(items, bounds),
                                                         np.split(share, bounds), np.split(shown, bounds),
                                                         strict=True)}


def n_certified(s: Parts, params: Params) -> int:
    """Heads whose neighbour is certified inside their shortlist (kept between looks: the dashboard
    summary and every pass's ``done`` ask; only heads whose shortlist or duels changed are redone)."""
    def certified(heads: np.ndarray) -> tuple[np.ndarray]:
        return (scores.batch_certified(s, params, heads, *scores.batch_matrices(s, heads, s.short.cands[heads])),)

    s.kept.certified = scores.refreshed(s, params, s.kept.certified, (), certified)
    return int(s.kept.certified.rows[0].sum())


def done(s: Parts, params: Params) -> bool:
    """True once every head's neighbour is certified inside its shortlist."""
    return s.fit.n_fits > 0 and n_certified(s, params) == params.n_items


def progress(s: Parts, params: Params) -> dict:
    certified = n_certified(s, params) if s.fit.n_fits else 0
    return {
        "answers": int(s.duels.n_answers),
        "questions_issued": int(s.duels.n_issued),
        "done": certified == params.n_items,
        "items_certified": int(certified),
        "pending": int(sum(s.duels.pending.values())),
        "embedding_fits": int(s.fit.n_fits),
        "embedding_dim": int(chosen_dim(s, params)) if s.fit.embeddings else None,
        "shortlist_size": float(np.mean((s.short.cands >= 0).sum(axis=1))),
        # with features: whether they still count, and how often an item's feature neighbour beat
        # another item in the answers (.5: chance; None before any such answer was scored)
        **({} if s.prior is None else {"features_used": bool(s.prior.trusted),
                                       "feature_agreement": s.prior.test_share}),
    }
