"""Candidate duels' answers: ``(head, a, b, winner)`` rows in, as triplets for the embedding and as
duel counts per (head, pair) in sorted arrays (rebuilt from the triplets on load, never saved);
forgotten questions released.

Numpy only; must never import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from ..utils import check_triplets


class Answers:
    """Mixin of :class:`~engine.duels.planner.CandidateDuels`: ``triplets_`` (every answer as
    (i, j, k), i closer to j than to k) and the duel counts per (head, pair) that follow from them,
    as sorted arrays ``_codes`` (code (h * n + a) * n + b, a < b), ``_wins`` (wins of a) and
    ``_counts`` (answers)."""

    def observe(self, answers: Iterable[Sequence[int]] | np.ndarray) -> None:
        """Apply ``(head, a, b, winner)`` rows; any triplet is accepted (issued or not): it feeds
        the embedding, and counts as a duel of a and b for that head."""
        arr = check_triplets(answers, self.n_items, "triplet answer", width=4)
        for h, a, b, w in arr.tolist():
            lo, hi = (a, b) if a < b else (b, a)
            key = (h, lo, hi)
            self._buffer.append((h, w, hi if w == lo else lo))
            left = self.pending_.get(key, 0)
            if left:
                # the answer settles a pending question: its load is already counted
                if left == 1:
                    del self.pending_[key]
                else:
                    self.pending_[key] = left - 1
            else:
                self.asked_[h] += 1
            self.answered_[h] += 1
        self.n_answers_ += len(arr)
        if len(arr):
            lo, hi = np.minimum(arr[:, 1], arr[:, 2]), np.maximum(arr[:, 1], arr[:, 2])
            self._index_add(self._code(arr[:, 0], lo, hi), (arr[:, 3] == lo).astype(np.int64))

    def _code(self, h, a, b):
        n = self.n_items
        return (np.asarray(h, np.int64) * n + a) * n + b

    def _index_add(self, codes: np.ndarray, wins: np.ndarray) -> None:
        """Add answered duels (their codes, 1 where the smaller item won) to the sorted arrays."""
        u, inv = np.unique(codes, return_inverse=True)
        w = np.bincount(inv, wins, len(u)).astype(np.int64)
        c = np.bincount(inv, minlength=len(u)).astype(np.int64)
        pos = np.searchsorted(self._codes, u)
        found = pos < len(self._codes)
        found[found] = self._codes[pos[found]] == u[found]
        self._wins[pos[found]] += w[found]
        self._counts[pos[found]] += c[found]
        new = ~found
        self._codes = np.insert(self._codes, pos[new], u[new])
        self._wins = np.insert(self._wins, pos[new], w[new])
        self._counts = np.insert(self._counts, pos[new], c[new])

    def _reindex(self) -> None:
        """Rebuild the duel counts from ``triplets_`` (each answer (h, winner, loser) once)."""
        t = self._all_triplets()
        lo, hi = np.minimum(t[:, 1], t[:, 2]), np.maximum(t[:, 1], t[:, 2])
        self._codes, self._wins, self._counts = (np.empty(0, np.int64) for _ in range(3))
        self._index_add(self._code(t[:, 0], lo, hi), (t[:, 1] == lo).astype(np.int64))

    def forget(self, questions: Iterable[Sequence[int]]) -> int:
        """Release issued questions that will never be answered; returns how many were pending."""
        released = 0
        for q in questions:
            if len(q) != 3:
                raise ValueError(f"questions to forget must be (head, a, b), got {tuple(q)!r}")
            h, a, b = (int(x) for x in q)
            key = (h, min(a, b), max(a, b))
            left = self.pending_.get(key, 0)
            if not left:
                continue
            if left == 1:
                del self.pending_[key]
            else:
                self.pending_[key] = left - 1
            self.asked_[h] -= 1
            released += 1
        return released

    def _all_triplets(self) -> np.ndarray:
        if self._buffer:
            self.triplets_ = np.concatenate([self.triplets_, np.asarray(self._buffer, np.int64)])
            self._buffer = []
        return self.triplets_

    def _duel_table(self) -> np.ndarray:
        """Rows (h, a, b, wins of a, answers), a < b, sorted (as ``sorted(duels_)``)."""
        n = self.n_items
        h, rest = np.divmod(self._codes, n * n)
        a, b = np.divmod(rest, n)
        return np.column_stack([h, a, b, self._wins, self._counts]).astype(np.int64).reshape(-1, 5)

    def _head_duels(self) -> np.ndarray:
        """Answered duels per head: a head whose count and shortlist are as before has the same inputs
        to its certificate and its ranking (an answer only ever adds a duel)."""
        n = self.n_items
        if not len(self._codes):
            return np.zeros(n, np.int64)
        return np.bincount(self._codes // (n * n), weights=self._counts, minlength=n).astype(np.int64)
