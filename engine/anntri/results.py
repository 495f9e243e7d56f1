"""ANNTri's results: the current neighbours, the k-NN graph and the dashboard's numbers.

Rows recomputed only where they changed since the last read (``StateIO._fold``). Numpy only;
must never import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

import numpy as np

from ..graph import NO_NEIGHBOR, NeighborGraph
from . import estimates
from .estimates import exact_mean
from .rounds import FAR, ROUND_CAPPED, ROUND_CERTIFIED, ROUND_OPEN, ROUND_WAITING


class Results:
    """Mixin of the planner (``engine.anntri.planner``): what it has learned, read without changing it."""

    def current_neighbors(self) -> np.ndarray:
        """Current best k neighbours of every item, shape (n_items, k): the certified answer
        where a round is certified, else the best estimates among the not-eliminated.

        A row's best depends on that row alone: rows not written since the previous call are
        taken from then (the dashboard asks every second; O(changed rows x n), not O(n²))."""
        self._ensure_state()
        self._settle()
        n = self.n_items
        if self._hot_on:
            self._drop_hot()
        tick = self._fold()
        cached = self.__dict__.get("_best_cache")
        if cached is not None and cached[1].shape == (n, self.k):
            rows = np.flatnonzero(self._row_epoch > cached[0])
            best = cached[1]
        else:
            rows = np.arange(n)
            best = np.empty((n, self.k), dtype=np.int64)
        step = max(1, estimates.ROW_CHUNK_ELEMENTS // n)  # a few (step, n) temporaries, not (n, n)
        for start in range(0, len(rows), step):
            chunk = rows[start:start + step]
            best[chunk] = self._best_rows(chunk)
        self._best_cache = (tick, best)
        best = best.copy()
        done = self.status_ == ROUND_CERTIFIED
        best[done] = self.neighbors_[done]
        return best.astype(np.int64)

    def _best_rows(self, rows: np.ndarray) -> np.ndarray:
        """Current best k neighbours of the given rows (certified or not), shape (len(rows), k)."""
        k = self.k
        r = np.arange(len(rows))
        U, L = self._synced.rows_bounds(rows)
        U[r, rows] = np.inf
        L[r, rows] = np.inf
        kth_upper = np.partition(U, k - 1, axis=1)[:, k - 1] if k > 1 else U.min(axis=1)
        sampled = self.count_[rows] > 0
        with np.errstate(invalid="ignore"):
            mid = np.where(np.isfinite(U), 0.5 * (U + L), np.inf)
        key = np.where(sampled, exact_mean(self.mean_[rows], self.count_[rows]), mid)
        key = np.where(np.isfinite(key), key, FAR + np.minimum(L, FAR / 4))
        key[L >= kth_upper[:, None]] += 4 * FAR
        key[r, rows] = np.inf
        if k == 1:
            return key.argmin(axis=1)[:, None]
        part = np.argpartition(key, k - 1, axis=1)[:, :k]
        order = np.argsort(np.take_along_axis(key, part, axis=1), axis=1, kind="stable")
        return np.take_along_axis(part, order, axis=1)

    def _row_sums(self):
        """Row sums of ``count_`` and ``pending_`` (int64), recomputed for the rows written since the
        previous call only (:meth:`progress` runs with every dashboard summary)."""
        if self._hot_on:
            self._drop_hot()
        tick = self._fold()
        cached = self.__dict__.get("_sums_cache")
        est = self._est
        if cached is not None and cached[1].shape == (self.n_items,):
            rows = np.flatnonzero(self._row_epoch > cached[0])
            counts, pendings = cached[1], cached[2]
            counts[rows] = est.count[rows].sum(axis=1)
            pendings[rows] = est.pending[rows].sum(axis=1)
        else:
            counts = est.count.sum(axis=1, dtype=np.int64)
            pendings = est.pending.sum(axis=1, dtype=np.int64)
        self._sums_cache = (tick, counts, pendings)
        return counts, pendings

    def round_best(self, j: int) -> tuple[np.ndarray, int]:
        """Round j's current best k neighbours (as in :meth:`current_neighbors`, row j only,
        shape (k,)) and the number of questions round j itself has issued so far.

        Lets a caller score each round against the samples spent inside it (the paper's
        Fig. 2b x-axis); earlier rounds' samples of pairs (j, a) count for the estimates but
        not for the round's own question count.
        """
        self._ensure_state()
        j = int(j)
        if not 0 <= j < self.n_items:
            raise ValueError(f"round index must lie in 0..{self.n_items - 1}, got {j}")
        self._settle()
        if self.status_[j] == ROUND_CERTIFIED:
            return self.neighbors_[j].astype(np.int64), int(self.round_issued_[j])
        # Row j of current_neighbors, in O(n) instead of O(n²).
        best = self._best_rows(np.array([j]))[0]
        return best.astype(np.int64), int(self.round_issued_[j])

    def _certified(self):
        return self.status_ == ROUND_CERTIFIED

    def result(self) -> NeighborGraph:
        """The k-NN graph now: certified rows are final, the others are best estimates."""
        nb = self.current_neighbors()
        rows = np.arange(self.n_items)[:, None]
        est = self._est
        if est.derived:
            T = est.count[rows, nb]
            lower, upper = est.interval(exact_mean(est.mean[rows, nb], T), T)
            for j, tight in est.tight.items():
                for pos, a in enumerate(nb[j].tolist()):
                    if a in tight:
                        upper[j, pos], lower[j, pos] = tight[a]
        else:
            lower = self.lower_[rows, nb].astype(np.float64)
            upper = self.upper_[rows, nb].astype(np.float64)
        return NeighborGraph(
            neighbors=nb,
            certified=self._certified().copy(),
            estimates=exact_mean(self.mean_[rows, nb], self.count_[rows, nb]),
            lower=lower,
            upper=upper,
            samples=self.count_[rows, nb].astype(np.int64),
        )

    def progress(self) -> dict:
        """Numbers for the dashboard (all plain Python scalars)."""
        self._ensure_state()
        self._settle()
        st = self.status_
        n = self.n_items
        per_item, pending_rows = self._row_sums()
        pending = int(pending_rows.sum()) // (2 if self.symmetric else 1)
        return {
            "n_items": n,
            "k": int(self.k),
            "rounds_certified": int(np.sum(st == ROUND_CERTIFIED)),
            "rounds_uncertified": int(np.sum(st == ROUND_CAPPED)),
            "rounds_open": int(np.sum(st == ROUND_OPEN)),
            "rounds_waiting": int(np.sum(st == ROUND_WAITING)),
            "pending_questions": pending,
            "samples": int(self.n_samples_),
            "answers": int(self.n_samples_),
            "items_certified": int(np.sum(st == ROUND_CERTIFIED)),
            "questions_issued": int(self.n_issued_),
            "samples_per_item": float(self.n_samples_) / n,
            "samples_per_item_max": int(per_item.max()),
            "done": self.done,
        }

    def neighbor_graph(self, k: int = 1) -> NeighborGraph:
        """:meth:`result` with ``k`` columns: fewer are cut, more are filled with :data:`NO_NEIGHBOR`
        (the planner has no estimate beyond its own ``k``); an item no answer has touched has no
        neighbour yet (not the argmin of zeros)."""
        k = int(k)
        if k < 1:
            raise ValueError(f"k must be a positive integer, got {k}")
        g = self.result()
        blind = np.asarray(self.count_).sum(axis=1) == 0
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

