"""Pooled ratings' question choice: uniformly random pairs during the warm-up and as an ``explore`` share,
the rest where an item's best neighbour is least settled (top-two Thompson sampling among each item's
shortlist, the items weighed by how likely their best is not among their first few); triplets of an
item's two likeliest neighbours the same way. Functions over the learner's data
(:class:`~.learner.RatingLearner`: :class:`~.planner.PooledRatings`'s log, fit, estimates and generator).
Numpy only; must never import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .model import PRIOR_NOISE

if TYPE_CHECKING:
    from .learner import RatingLearner

#: draws per item that weigh how likely its current best neighbour is to be beaten (:data:`HEAD_TOP`)
HEAD_DRAWS = 32
#: the least weight an item's questions get (an item whose neighbour looks settled is still checked)
HEAD_FLOOR = 0.02
#: an item's questions are weighed by how likely its current best is not among its ``HEAD_TOP`` nearest (a
#: draw of the estimates where at least this many of its shortlist beat it): a near tie between an item's
#: first two (either does) no longer draws questions that a neighbour outside its first few needs
HEAD_TOP = 3


def random_pairs(p: RatingLearner, m: int) -> np.ndarray:
    """``m`` uniformly random pairs of distinct items, (m, 2)."""
    n = p.n_items
    i = p.rng_.integers(n, size=m)
    j = (i + 1 + p.rng_.integers(n - 1, size=m)) % n
    return np.column_stack([i, j])


def next_questions(p: RatingLearner, budget: int) -> list[tuple[int, int]]:
    """Up to ``budget`` pairs ``(i, j)``: during the warmup uniformly random; then an ``explore``
    share uniformly random and the rest where an item's best neighbour is least settled: the item
    drawn by how likely its best is not among its first few, and (top-two Thompson sampling) the best
    of its shortlist under one draw of the estimates or, half the time, the best of another draw but
    that."""
    budget = int(budget)
    if budget <= 0:
        return []
    p.refresh_if_due()
    if p.n_answers_ < p.warmup * p.n_items or p.fit_ is None:
        pairs = random_pairs(p, budget)
    else:
        n_random = int(p.rng_.binomial(budget, p.explore))
        pairs = np.concatenate([random_pairs(p, n_random), adaptive_pairs(p, budget - n_random)])
        pairs = pairs[p.rng_.permutation(len(pairs))]
    p.n_issued_ += len(pairs)
    return [(int(i), int(j)) for i, j in pairs]


def next_triplets(p: RatingLearner, budget: int) -> list[tuple[int, int, int]]:
    """Up to ``budget`` triplets ``(head, a, b)``: during the warmup uniformly random; then an ``explore``
    share uniformly random and the rest an item drawn as :func:`next_questions` draws it, with the best
    of its shortlist under one draw of the estimates against the best of another draw but that one (a
    triplet asks the two directly), in random order."""
    budget = int(budget)
    if budget <= 0 or p.n_items < 3:
        return []
    p.refresh_if_due()
    n, rng = p.n_items, p.rng_
    if p.n_answers_ < p.warmup * p.n_items or p.fit_ is None:
        n_random = budget
    else:
        n_random = int(rng.binomial(budget, p.explore))
    out = np.empty((budget, 3), np.int64)
    heads = rng.integers(n, size=n_random)
    first = (heads + 1 + rng.integers(n - 1, size=n_random)) % n
    # the second candidate uniformly among the n - 2 items that are neither the head nor the first
    k = rng.integers(n - 2, size=n_random)
    lo, hi = np.minimum(heads, first), np.maximum(heads, first)
    second = k + (k >= lo) + ((k + (k >= lo)) >= hi)
    out[:n_random] = np.column_stack([heads, first, second])
    if budget > n_random:
        h, a, b = adaptive_heads(p, budget - n_random)
        out[n_random:] = np.column_stack([h, a, b])
    out = out[rng.permutation(budget)]
    swap = rng.random(budget) < 0.5
    out[swap, 1], out[swap, 2] = out[swap, 2], out[swap, 1].copy()
    p.n_issued_ += len(out)
    return [(int(h), int(a), int(b)) for h, a, b in out]


def adaptive_pairs(p: RatingLearner, m: int) -> np.ndarray:
    """``m`` pairs (m, 2): each drawn item (:func:`adaptive_heads`) with one of its two picks, either
    half the time."""
    if m <= 0:
        return np.empty((0, 2), np.int64)
    heads, a, b = adaptive_heads(p, m)
    pick = np.where(p.rng_.random(m) < 0.5, a, b)
    return np.column_stack([heads, pick])


def adaptive_heads(p: RatingLearner, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``m`` items drawn by how likely their best is not among their :data:`HEAD_TOP` nearest
    (:func:`unsettled`), each with the best of its shortlist under one draw of the estimates and the
    best of another draw but that one.

    In rounds of at most one question per item: a batch larger than that (a live pool's pass at few
    items) counts each round's pairs as half-answered before the next round is drawn (their variance
    shrunk by half a rating each; the means stay), so one batch leans less on the same few unsettled
    pairs (30 items, live batches of 200, 48 seeds: hit@3 at 400 ratings per item .92 against .90,
    level at the other budgets)."""
    n = p.n_items
    mean, var = p.estimates()
    s = min(p.shortlist, n - 1)
    if len(p.triplets_):
        cand = np.argpartition(mean, s - 1, axis=1)[:, :s]
    else:  # kept up to date row by row as ratings come
        cand = p._pairs.shortlist(p.log_, s)
    mu = np.take_along_axis(mean, cand, axis=1)
    v = np.take_along_axis(var, cand, axis=1)
    rng = p.rng_
    lead = np.argmin(mu, axis=1)
    out = []
    for start in range(0, m, n):
        k = min(n, m - start)
        if start:
            v = half_answered(p, v, cand, *out[-1])
        sd = np.sqrt(v)
        weight = unsettled(p, mu, sd, lead) + HEAD_FLOOR
        heads = rng.choice(n, size=k, p=weight / weight.sum())
        first = mu[heads] + sd[heads] * rng.standard_normal((k, s))
        second = mu[heads] + sd[heads] * rng.standard_normal((k, s))
        a = np.argmin(first, axis=1)
        second[np.arange(k), a] = np.inf
        out.append((heads, a, np.argmin(second, axis=1)))
    heads, a, b = (np.concatenate(parts) for parts in zip(*out, strict=True))
    return heads, cand[heads, a], cand[heads, b]


def unsettled(p: RatingLearner, mu: np.ndarray, sd: np.ndarray, lead: np.ndarray) -> np.ndarray:
    """(n_items,): the share of :data:`HEAD_DRAWS` draws of each item's shortlist (means ``mu``, SDs ``sd``,
    both (n_items, s)) in which at least :data:`HEAD_TOP` candidates come out nearer than its current best
    (column ``lead``): how likely the best is not among the item's first few."""
    draws = mu[None] + sd[None] * p.rng_.standard_normal((HEAD_DRAWS, *mu.shape))
    best = np.take_along_axis(draws, np.broadcast_to(lead[None, :, None], (HEAD_DRAWS, len(lead), 1)), axis=2)
    return np.mean(np.sum(draws < best, axis=2) >= min(HEAD_TOP, mu.shape[1] - 1), axis=0)


def half_answered(p: RatingLearner, v: np.ndarray, cand: np.ndarray, heads: np.ndarray, a: np.ndarray,
                  b: np.ndarray) -> np.ndarray:
    """The shortlists' variances ``v`` (n_items, s) once the pairs of ``heads`` with their candidates at
    ``a`` and ``b`` have half a rating each (either may be asked), in both items' shortlists."""
    noise = PRIOR_NOISE if p.fit_ is None else p.fit_.estimated.noise
    got = np.zeros_like(v)
    for col in (a, b):
        np.add.at(got, (heads, col), 0.5)
        # the same pair in the candidate's own shortlist
        other = cand[heads, col]
        hit = cand[other] == heads[:, None]
        rows, cols = np.nonzero(hit)
        np.add.at(got, (other[rows], cols), 0.5)
    return 1.0 / (1.0 / v + got / noise**2)
