"""Candidate duels' one scoring: each shortlisted candidate's smoothed win share in its duels, the
certificate of a head's neighbour, the embedding prior's weight and the results kept between looks.

The fit's kernel (:func:`_log_kernel`) is read here and by the question choice; the per-head rows are
scored in chunks of ``BATCH_HEADS``. Numpy only; must never import Flask, Redis, RQ, ``webapp`` or
``workers``.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ..graph import NO_NEIGHBOR
from .dims import duel_trust
from .fits import _embedding_module
from .parts import KeptResults as KeptResults  # (its import path before it moved)
from .parts import _HeadRows

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from .parts import Params, Parts

#: weight (in duels) of the shortlist order in a candidate's score, until repeated duels have
#: weighed the embedding's own prediction (``kappa_``)
PRIOR_DUELS = 1.0
#: the same weight in the per-pair average (Borda) that takes over as a head's pairs fill up
BORDA_PRIOR_DUELS = 2.0
#: weights the estimate of ``kappa_`` chooses from (a geometric grid, in duels)
KAPPA_GRID = tuple(2.0**k for k in range(-1, 13))
#: heads scored together by the whole-array paths (graph, certificates, kept leaders): arrays of
#: BATCH_HEADS x shortlist^2, a few MB, however many items a study has
BATCH_HEADS = 2048


def _radius(n: np.ndarray, delta: float, n_pairs: int) -> np.ndarray:
    """Anytime Hoeffding radius for a win share after n duels.

    A union bound over time steps (sum 1/t^2 = pi^2/6) and over a head's candidate pairs makes
    it hold for all pairs and all times with probability 1 - delta. Lapses (coin-flip answers)
    only pull P(b beats a) towards 1/2 without changing its side, so the bound stays sound.
    """
    n = np.maximum(np.asarray(n, dtype=np.float64), 1.0)
    return np.sqrt(np.log(math.pi**2 * n_pairs * n**2 / (3.0 * delta)) / (2.0 * n))


def _beats(W: np.ndarray, N: np.ndarray, delta: float, n_pairs) -> np.ndarray:
    """Where candidate i beats candidate j with confidence (``[..., i, j]``): its win share is above 1/2
    by more than :func:`_radius`. The one rule of eliminations and certificates; W, N (..., m, m) wins
    and duels, ``n_pairs`` the head's candidate pairs (broadcast against N)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(N > 0, W / np.maximum(N, 1), 0.5)
    return (share - _radius(N, delta, n_pairs) > 0.5) & (N > 0)


def _log_kernel(X: np.ndarray, h, c) -> np.ndarray:
    """log of the fit's kernel between rows h and c of X: t-STE (alpha = max(dim - 1, 1)); on a
    line (the human model, see ``AUTO_DIMS``) minus the distance, so that a difference of two is
    the logit of the model's answer before lapses."""
    d = ((X[c] - X[h]) ** 2).sum(axis=-1)
    if X.shape[1] == 1:
        return -np.sqrt(d)
    alpha = float(max(X.shape[1] - 1, 1))
    return -(alpha + 1.0) / 2.0 * np.log1p(d / alpha)


def _with_lapses(X: np.ndarray, p: np.ndarray) -> np.ndarray:
    """The fit's P(answer) from its kernel's: on a line the human model's lapses are added."""
    if X.shape[1] != 1:
        return p
    lapse = _embedding_module().FIT_LAPSE
    return 0.5 * lapse + (1.0 - lapse) * p


def _pair_preference(X: np.ndarray, h, a, b) -> np.ndarray:
    """P(h closer to a than to b) under the fit X, for arrays of heads and pairs."""
    return _with_lapses(X, 1.0 / (1.0 + np.exp(np.clip(_log_kernel(X, h, b) - _log_kernel(X, h, a),
                                                       -700, 700))))


def _share_scores(W: np.ndarray, N: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Share of all its duels each candidate won, smoothed towards its shortlist place by
    ``PRIOR_DUELS`` pseudo-duels (3/4 for the first candidate down to 1/4 for the last).

    W, N (..., w, w) as :func:`matrices`; valid (..., w) marks the candidates
    (padding at the end of each row). Used until repeated duels have weighed the embedding
    (``kappa_``): with at most a duel per pair, the share of all duels (the leaders having met
    the strongest challengers, see the schedule) ranked the candidates better than the average
    over opponents (Borda), in which every untried pair sits at the prior (recorded answers at
    25 answers per item: hit@3 .71 -> .81).
    """
    m = valid.sum(axis=-1, keepdims=True)
    r = np.arange(valid.shape[-1]) / np.maximum(m - 1, 1)
    prior = np.where(m > 1, 0.75 - 0.5 * r, 1.0)
    wins, played = W.sum(axis=-1), N.sum(axis=-1)
    return np.where(valid, (wins + PRIOR_DUELS * prior) / (played + PRIOR_DUELS), 0.0)


def _early_scores(W: np.ndarray, N: np.ndarray, valid: np.ndarray, trust: float = 1.0) -> np.ndarray:
    """Scores before ``kappa_`` where duels are answered consistently: :func:`_share_scores`
    while few of the candidates' pairs have met, turning into the per-pair average (Borda, pairs
    smoothed to the shortlist order by ``BORDA_PRIOR_DUELS``) as the pairs fill up (the share
    weighs ``trust`` x (1 - the share of pairs dueled))."""
    m = valid.sum(axis=-1, keepdims=True)
    w = valid.shape[-1]
    r = np.arange(w) / np.maximum(m - 1, 1)
    prior = 0.5 + 0.25 * (r[..., None, :] - r[..., :, None])
    both = valid[..., :, None] & valid[..., None, :] & ~np.eye(w, dtype=bool)
    P = np.where(both, (W + BORDA_PRIOR_DUELS * prior) / (N + BORDA_PRIOR_DUELS), 0.0)
    borda = P.sum(axis=-1) / np.maximum(m - 1, 1)
    covered = ((N > 0) & both).sum(axis=(-2, -1)) / np.maximum(m[..., 0] * (m[..., 0] - 1), 1)
    lam = trust * np.clip(1.0 - covered, 0.0, 1.0)[..., None]
    share = _share_scores(W, N, valid)
    return np.where(valid & (m > 1), lam * share + (1.0 - lam) * borda, np.where(valid, 1.0, 0.0))


def matrices(s: Parts, h: int, cands: np.ndarray, pending: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """W[i, j] = duels candidate i won against j for head h; N = answered (+ pending) duels.
    (:func:`~.questions.next_questions` adds the pending ones itself, from :func:`pending_by_head`.)"""
    c = np.asarray(cands, np.int64)
    m = len(c)
    lo, hi = np.minimum(c[:, None], c[None, :]), np.maximum(c[:, None], c[None, :])
    N, wins_lo = s.duels.lookup(s.duels.code(h, lo, hi), lo != hi)
    W = np.where(c[:, None] < c[None, :], wins_lo, N - wins_lo)
    if pending and s.duels.pending:
        for i in range(m):
            for j in range(i + 1, m):
                p = s.duels.pending.get((h, int(lo[i, j]), int(hi[i, j])), 0)
                N[i, j] += p
                N[j, i] += p
    return W, N


def scores(s: Parts, params: Params, h: int, cands: np.ndarray, W: np.ndarray | None = None,
           N: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Smoothed win share of each candidate in its duels with the others (W, N: its
    :func:`matrices`, looked up when not given): :func:`score_matrices` of one head."""
    c = np.asarray(cands, np.int64)
    if W is None:
        W, N = matrices(s, h, c)
    score, counts = score_matrices(s, params, np.array([h]), c[None, :], W[None], N[None], np.ones((1, len(c)), bool))
    return score[0], counts[0]


def batch_matrices(s: Parts, heads: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`matrices` of many heads at once: rows (len(heads), w) of candidates, the padding
    (``NO_NEIGHBOR``) at the end of each row; returns W, N (len(heads), w, w), zero where the
    padding is, and the mask of candidates (len(heads), w)."""
    valid = rows >= 0
    c = np.where(valid, rows, 0)
    both = valid[:, :, None] & valid[:, None, :]
    lo, hi = np.minimum(c[:, :, None], c[:, None, :]), np.maximum(c[:, :, None], c[:, None, :])
    N, wins_lo = s.duels.lookup(s.duels.code(heads[:, None, None], lo, hi), (lo != hi) & both)
    W = np.where(c[:, :, None] < c[:, None, :], wins_lo, N - wins_lo)
    return W, N, valid


def score_matrices(s: Parts, params: Params, heads: np.ndarray, rows: np.ndarray, W: np.ndarray, N: np.ndarray,
                   valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each candidate's smoothed win share in its duels with the others, for many heads at once
    (the one scoring of the planner: questions, rankings, the graph and kept leaders all use it);
    W, N, valid as :func:`batch_matrices` gives them; returns scores and duel counts (len(heads), w).

    Before ``kappa_``, where duels are answered consistently (trust > 0): :func:`_early_scores`.
    Once repeats have weighed the embedding: per pair, the share of i beating j smoothed towards
    the embedding's prediction (its own kernel, so the fit's calibration carries over) with
    ``kappa_`` pseudo-duels, averaged over opponents (Borda on the preference matrix): unlike a
    share of all duels it does not depend on whom the schedule paired i with. kappa_ is large
    where repeated duels scatter around the fit's predictions only as much as coin flips do (the
    fit, pooling every answer, is then the better judge: items on a line people can hardly tell
    apart up close), small where they disagree with it systematically (a per-item ranking no
    embedding holds). Before that, the prior is a lean to the earlier candidate of the
    shortlist (nearer in the fit), from 1/2 up to 3/4 for first against last."""
    w = rows.shape[1]
    c = np.where(valid, rows, 0)
    m = valid.sum(axis=1)
    both = valid[:, :, None] & valid[:, None, :]
    X = s.fit.embedding
    trust = duel_trust(s, params) if s.fit.kappa is None else 0.0
    if trust > 0:
        N = np.where(both, N, 0.0)
        return _early_scores(np.where(both, W, 0.0), N, valid, trust), N.sum(axis=2)
    if X is None or s.fit.kappa is None:
        r = np.arange(w)[None, :] / np.maximum(m[:, None] - 1, 1)
        prior = 0.5 + 0.25 * (r[:, None, :] - r[:, :, None])
    else:
        lk = _log_kernel(X, heads[:, None], c)
        prior = _with_lapses(X, 1.0 / (1.0 + np.exp(np.clip(lk[:, None, :] - lk[:, :, None], -700, 700))))
    kappa = BORDA_PRIOR_DUELS if s.fit.kappa is None else s.fit.kappa
    P = np.where(both, (W + kappa * prior) / (N + kappa), 0.0)
    P[:, np.arange(w), np.arange(w)] = 0.0
    score = np.where(m[:, None] > 1, P.sum(axis=2) / np.maximum(m[:, None] - 1, 1), 1.0)
    return score, N.sum(axis=2)


def batch_scores(s: Parts, params: Params, rows: np.ndarray,
                 heads: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`score_matrices` of the heads' rows of candidates (all heads: ``rows`` (n_items, w),
    the padding at the end of each row), in chunks of ``BATCH_HEADS`` (bounded memory)."""
    heads = np.arange(len(rows)) if heads is None else np.asarray(heads, np.int64)
    score, counts = np.zeros(rows.shape), np.zeros(rows.shape)
    for at in range(0, len(rows), BATCH_HEADS):
        part = slice(at, at + BATCH_HEADS)
        W, N, valid = batch_matrices(s, heads[part], rows[part])
        score[part], counts[part] = score_matrices(s, params, heads[part], rows[part], W, N, valid)
    return score, counts


def batch_certified(s: Parts, params: Params, heads: np.ndarray, W: np.ndarray, N: np.ndarray,
                    valid: np.ndarray) -> np.ndarray:
    """:func:`certified` of many heads at once (W, N, valid as :func:`batch_matrices`)."""
    m = valid.sum(axis=1)
    sure = _beats(W, N, params.delta, np.maximum(1, m * (m - 1) // 2)[:, None, None])
    flags = (m >= 2) & (sure.sum(axis=2).max(axis=1, initial=0) == m - 1)
    for i in np.flatnonzero(m == 1):
        flags[i] = bool(s.short.eliminated.get(int(heads[i])))
    return flags


def certified(s: Parts, params: Params, h: int, cands: ArrayLike, W: ArrayLike, N: ArrayLike) -> bool:
    """Whether h's leader is certain: it beats every other alive candidate with confidence (or it
    is the last one left after eliminations). :func:`batch_certified` of the one head."""
    m = len(cands)
    return bool(batch_certified(s, params, np.array([h]), np.asarray(W).reshape(1, m, m),
                                      np.asarray(N).reshape(1, m, m), np.ones((1, m), bool))[0])


def ranked_rows(s: Parts, params: Params, heads: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The heads' shortlists best first (duel score, then shortlist order), ``NO_NEIGHBOR`` padding
    last, with each one's score and duels, and whether each head is certified (:func:`certified`)."""
    rows = s.short.cands[heads]
    W, N, valid = batch_matrices(s, heads, rows)
    score, counts = score_matrices(s, params, heads, rows, W, N, valid)
    order = np.argsort(np.where(valid, -score, np.inf), axis=1, kind="stable")
    ranked = np.where(np.take_along_axis(valid, order, axis=1), np.take_along_axis(rows, order, axis=1),
                      NO_NEIGHBOR)
    return (ranked, np.take_along_axis(score, order, axis=1),
            np.take_along_axis(counts, order, axis=1).astype(np.int64), batch_certified(s, params, heads, W, N, valid))


def ranking(s: Parts, params: Params, h: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """h's candidates best first (duel score, then shortlist order), with score and duels: the row
    of :func:`ranked_rows` (so one head's ranking is the graph's, to the last bit)."""
    ranked, score, counts, _ = ranked_rows(s, params, np.array([h]))
    keep = ranked[0] >= 0
    return ranked[0][keep], score[0][keep], counts[0][keep]


def estimate_kappa(s: Parts) -> None:
    """Empirical-Bayes weight of the embedding prior: the kappa of ``KAPPA_GRID`` maximising
    the beta-binomial likelihood of the pairs dueled at least twice, each pair's win share
    drawn from Beta(kappa p, kappa (1 - p)) around the fit's prediction p."""
    if s.fit.embedding is None or not len(s.duels.codes):
        return
    rec = s.duels.table()
    rec = rec[rec[:, 4] >= 2]
    if len(rec) < 20:
        return
    from scipy.special import betaln

    p = _pair_preference(s.fit.embedding, rec[:, 0], rec[:, 1], rec[:, 2])
    p = np.clip(p, 1e-6, 1 - 1e-6)
    w, n = rec[:, 3].astype(np.float64), rec[:, 4].astype(np.float64)
    best = None
    for kappa in KAPPA_GRID:
        a, b = kappa * p, kappa * (1 - p)
        ll = float(np.sum(betaln(w + a, n - w + b) - betaln(a, b)))
        if best is None or ll > best[0] + 1e-9:
            best = (ll, kappa)
    s.fit.kappa = float(best[1])


def refreshed(s: Parts, params: Params, kept: _HeadRows | None, key: tuple,
              compute: Callable[[np.ndarray], tuple]) -> _HeadRows:
    """``kept`` brought up to date: the rows of the heads whose shortlist or duels changed since it
    was made redone by ``compute(heads) -> tuple of arrays (len(heads), ...)``, in chunks of
    ``BATCH_HEADS``; every row when ``key`` (what all heads' results depend on) changed. A pass of a
    live study changes a few hundred heads: at 50,000 items redoing every head took seconds."""
    duels = s.duels.per_head()
    if kept is None or kept.key != key or kept.cands.shape != s.short.cands.shape:
        heads, rows = np.arange(params.n_items), None
    else:
        heads = np.flatnonzero((kept.cands != s.short.cands).any(axis=1) | (kept.duels != duels))
        rows = kept.rows
    for at in range(0, len(heads), BATCH_HEADS):
        part = heads[at: at + BATCH_HEADS]
        values = compute(part)
        if rows is None:
            rows = tuple(np.empty((params.n_items, *v.shape[1:]), v.dtype) for v in values)
        for row, v in zip(rows, values, strict=True):
            row[part] = v
    if rows is None:  # (no items at all)
        rows = tuple(v[:0] for v in compute(np.arange(0)))
    return _HeadRows(key, s.short.cands.copy(), duels, rows)
