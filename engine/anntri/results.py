"""ANNTri's results: the current neighbours, the k-NN graph and the dashboard's numbers, as
functions over a planner's :class:`.estimates.Estimates` and :class:`.rounds.Rounds`.

Rows recomputed only where they changed since the last read (``Estimates.fold``). Numpy only;
must never import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..graph import NO_NEIGHBOR, NeighborGraph
from . import estimates
from .estimates import exact_mean
from .rounds import FAR, ROUND_CAPPED, ROUND_CERTIFIED, ROUND_OPEN, ROUND_WAITING, Rounds

if TYPE_CHECKING:
    from .estimates import Estimates


def current_neighbors(est: Estimates, rounds: Rounds, k: int, cached: tuple | None) -> tuple[np.ndarray, tuple]:
    """Current best k neighbours of every item, shape (n_items, k) (certified rows: the certified
    answer), and the cache to pass next time: rows not written since ``cached`` was made are taken
    from it (O(changed rows x n), not O(n²)). The estimates are in sync."""
    n = est.n_items
    tick = est.fold()
    if cached is not None and cached[1].shape == (n, k):
        rows = np.flatnonzero(est.row_epoch > cached[0])
        best = cached[1]
    else:
        rows = np.arange(n)
        best = np.empty((n, k), dtype=np.int64)
    step = max(1, estimates.ROW_CHUNK_ELEMENTS // n)  # a few (step, n) temporaries, not (n, n)
    for start in range(0, len(rows), step):
        chunk = rows[start:start + step]
        best[chunk] = best_rows(est, k, chunk)
    cache = (tick, best)
    best = best.copy()
    done = rounds.status == ROUND_CERTIFIED
    best[done] = rounds.neighbors[done]
    return best.astype(np.int64), cache


def best_rows(est: Estimates, k: int, rows: np.ndarray) -> np.ndarray:
    """Current best k neighbours of the given rows (certified or not), shape (len(rows), k)."""
    r = np.arange(len(rows))
    U, L = est.rows_bounds(rows)
    U[r, rows] = np.inf
    L[r, rows] = np.inf
    kth_upper = np.partition(U, k - 1, axis=1)[:, k - 1] if k > 1 else U.min(axis=1)
    sampled = est.count[rows] > 0
    with np.errstate(invalid="ignore"):
        mid = np.where(np.isfinite(U), 0.5 * (U + L), np.inf)
    key = np.where(sampled, exact_mean(est.mean[rows], est.count[rows]), mid)
    key = np.where(np.isfinite(key), key, FAR + np.minimum(L, FAR / 4))
    key[L >= kth_upper[:, None]] += 4 * FAR
    key[r, rows] = np.inf
    if k == 1:
        return key.argmin(axis=1)[:, None]
    part = np.argpartition(key, k - 1, axis=1)[:, :k]
    order = np.argsort(np.take_along_axis(key, part, axis=1), axis=1, kind="stable")
    return np.take_along_axis(part, order, axis=1)


def row_sums(est: Estimates, cached: tuple | None) -> tuple[np.ndarray, np.ndarray, tuple]:
    """Row sums of ``count`` and ``pending`` (int64), recomputed for the rows written since ``cached``
    only, and the cache to pass next time. The estimates are in sync."""
    tick = est.fold()
    if cached is not None and cached[1].shape == (est.n_items,):
        rows = np.flatnonzero(est.row_epoch > cached[0])
        counts, pendings = cached[1], cached[2]
        counts[rows] = est.count[rows].sum(axis=1)
        pendings[rows] = est.pending[rows].sum(axis=1)
    else:
        counts = est.count.sum(axis=1, dtype=np.int64)
        pendings = est.pending.sum(axis=1, dtype=np.int64)
    return counts, pendings, (tick, counts, pendings)


def graph(est: Estimates, rounds: Rounds, nb: np.ndarray) -> NeighborGraph:
    """The k-NN graph of neighbours ``nb`` (n, k): estimates, bounds and answers of each edge."""
    rows = np.arange(est.n_items)[:, None]
    if est.derived:
        T = est.count[rows, nb]
        lower, upper = est.interval(exact_mean(est.mean[rows, nb], T), T)
        for j, tight in est.tight.items():
            for pos, a in enumerate(nb[j].tolist()):
                if a in tight:
                    upper[j, pos], lower[j, pos] = tight[a]
    else:
        lower = est.lower[rows, nb].astype(np.float64)
        upper = est.upper[rows, nb].astype(np.float64)
    return NeighborGraph(
        neighbors=nb,
        certified=(rounds.status == ROUND_CERTIFIED).copy(),
        estimates=exact_mean(est.mean[rows, nb], est.count[rows, nb]),
        lower=lower,
        upper=upper,
        samples=est.count[rows, nb].astype(np.int64),
    )


def progress(rounds: Rounds, n: int, k: int, per_item: np.ndarray, pending_rows: np.ndarray, symmetric: bool,
             done: bool) -> dict:
    """The dashboard's numbers (plain Python scalars) from the rounds and the row sums."""
    st = rounds.status
    pending = int(pending_rows.sum()) // (2 if symmetric else 1)
    return {
        "n_items": n,
        "k": int(k),
        "rounds_certified": int(np.sum(st == ROUND_CERTIFIED)),
        "rounds_uncertified": int(np.sum(st == ROUND_CAPPED)),
        "rounds_open": int(np.sum(st == ROUND_OPEN)),
        "rounds_waiting": int(np.sum(st == ROUND_WAITING)),
        "pending_questions": pending,
        "samples": int(rounds.n_samples),
        "answers": int(rounds.n_samples),
        "items_certified": int(np.sum(st == ROUND_CERTIFIED)),
        "questions_issued": int(rounds.n_issued),
        "samples_per_item": float(rounds.n_samples) / n,
        "samples_per_item_max": int(per_item.max()),
        "done": done,
    }


def with_columns(g: NeighborGraph, blind: np.ndarray, k: int) -> NeighborGraph:
    """``g`` with ``k`` columns: fewer are cut, more are filled with :data:`NO_NEIGHBOR`; the rows
    ``blind`` (items no answer has touched) have no neighbour."""
    if blind.any():
        b = blind[:, None]
        g = NeighborGraph(np.where(b, NO_NEIGHBOR, g.neighbors).astype(np.int64), g.certified,
                          np.where(b, np.nan, g.estimates), np.where(b, np.nan, g.lower),
                          np.where(b, np.nan, g.upper), np.where(b, 0, g.samples).astype(np.int64))
    have = g.neighbors.shape[1]
    if k <= have:
        return NeighborGraph(g.neighbors[:, :k], g.certified, g.estimates[:, :k], g.lower[:, :k],
                             g.upper[:, :k], g.samples[:, :k])
    extra = k - have

    def pad(a, value, dtype):
        return np.concatenate([np.asarray(a, dtype), np.full((len(a), extra), value, dtype)], axis=1)

    return NeighborGraph(pad(g.neighbors, NO_NEIGHBOR, np.int64), g.certified, pad(g.estimates, np.nan, float),
                         pad(g.lower, np.nan, float), pad(g.upper, np.nan, float), pad(g.samples, 0, np.int64))
