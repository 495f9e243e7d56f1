"""Candidate duels' answers: ``(head, a, b, winner)`` rows in, as triplets for the embedding and as
duel counts per (head, pair) in sorted arrays (rebuilt from the triplets on load, never saved);
the questions issued and not yet answered, and forgotten ones released.

:class:`Duels` owns these arrays and their part of the state; the planner's parts hold one (``Parts.duels``).
Numpy only; must never import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Self

import numpy as np


class Duels:
    """The answers of a study of ``n`` items and the duels they make.

    ``triplets`` (every answer as (i, j, k), i closer to j than to k; new ones buffered until read
    through :meth:`all_triplets`), the duel counts per (head, pair) that follow from them as sorted
    arrays ``codes`` (code (h * n + a) * n + b, a < b), ``wins`` (wins of a) and ``counts``
    (answers); ``pending`` (issued, unanswered questions per (h, a, b), a < b), ``asked`` (answers +
    pending per head: the scheduling load), ``answered`` per head, ``n_answers`` and ``n_issued``."""

    def __init__(self, n: int) -> None:
        self.n = int(n)
        self.triplets = np.empty((0, 3), np.int64)
        self.buffer: list[tuple[int, int, int]] = []
        self.codes = np.empty(0, np.int64)
        self.wins = np.empty(0, np.int64)
        self.counts = np.empty(0, np.int64)
        self.pending: dict[tuple[int, int, int], int] = {}
        self.asked = np.zeros(self.n, np.int64)
        self.answered = np.zeros(self.n, np.int64)
        self.n_answers = 0
        self.n_issued = 0

    def observe(self, arr: np.ndarray) -> None:
        """Apply checked ``(head, a, b, winner)`` rows; any triplet is accepted (issued or not): it
        feeds the embedding, and counts as a duel of a and b for that head."""
        for h, a, b, w in arr.tolist():
            lo, hi = (a, b) if a < b else (b, a)
            key = (h, lo, hi)
            self.buffer.append((h, w, hi if w == lo else lo))
            left = self.pending.get(key, 0)
            if left:
                # the answer settles a pending question: its load is already counted
                if left == 1:
                    del self.pending[key]
                else:
                    self.pending[key] = left - 1
            else:
                self.asked[h] += 1
            self.answered[h] += 1
        self.n_answers += len(arr)
        if len(arr):
            lo, hi = np.minimum(arr[:, 1], arr[:, 2]), np.maximum(arr[:, 1], arr[:, 2])
            self.add(self.code(arr[:, 0], lo, hi), (arr[:, 3] == lo).astype(np.int64))

    def issue(self, h: int, lo: int, hi: int) -> None:
        """Count the question (h, lo, hi), lo < hi, as issued and pending."""
        key = (h, lo, hi)
        self.pending[key] = self.pending.get(key, 0) + 1
        self.asked[h] += 1
        self.n_issued += 1

    def forget(self, questions: Iterable[Sequence[int]]) -> int:
        """Release issued questions that will never be answered; returns how many were pending."""
        released = 0
        for q in questions:
            if len(q) != 3:
                raise ValueError(f"questions to forget must be (head, a, b), got {tuple(q)!r}")
            h, a, b = (int(x) for x in q)
            key = (h, min(a, b), max(a, b))
            left = self.pending.get(key, 0)
            if not left:
                continue
            if left == 1:
                del self.pending[key]
            else:
                self.pending[key] = left - 1
            self.asked[h] -= 1
            released += 1
        return released

    def code(self, h: np.ndarray | int, a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray:
        n = self.n
        return (np.asarray(h, np.int64) * n + a) * n + b

    def add(self, codes: np.ndarray, wins: np.ndarray) -> None:
        """Add answered duels (their codes, 1 where the smaller item won) to the sorted arrays."""
        u, inv = np.unique(codes, return_inverse=True)
        w = np.bincount(inv, wins, len(u)).astype(np.int64)
        c = np.bincount(inv, minlength=len(u)).astype(np.int64)
        pos = np.searchsorted(self.codes, u)
        found = pos < len(self.codes)
        found[found] = self.codes[pos[found]] == u[found]
        self.wins[pos[found]] += w[found]
        self.counts[pos[found]] += c[found]
        new = ~found
        self.codes = np.insert(self.codes, pos[new], u[new])
        self.wins = np.insert(self.wins, pos[new], w[new])
        self.counts = np.insert(self.counts, pos[new], c[new])

    def reindex(self) -> None:
        """Rebuild the duel counts from the triplets (each answer (h, winner, loser) once)."""
        t = self.all_triplets()
        lo, hi = np.minimum(t[:, 1], t[:, 2]), np.maximum(t[:, 1], t[:, 2])
        self.codes, self.wins, self.counts = (np.empty(0, np.int64) for _ in range(3))
        self.add(self.code(t[:, 0], lo, hi), (t[:, 1] == lo).astype(np.int64))

    def all_triplets(self) -> np.ndarray:
        if self.buffer:
            self.triplets = np.concatenate([self.triplets, np.asarray(self.buffer, np.int64)])
            self.buffer = []
        return self.triplets

    def lookup(self, codes: np.ndarray, ask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(answers, wins of the smaller item) of the duels ``codes`` where ``ask`` holds, 0 elsewhere
        (float arrays of codes' shape)."""
        if not len(self.codes):
            return np.zeros(codes.shape), np.zeros(codes.shape)
        pos = np.minimum(np.searchsorted(self.codes, codes), len(self.codes) - 1)
        hit = (self.codes[pos] == codes) & ask
        return (np.where(hit, self.counts[pos], 0).astype(np.float64),
                np.where(hit, self.wins[pos], 0).astype(np.float64))

    def table(self) -> np.ndarray:
        """Rows (h, a, b, wins of a, answers), a < b, sorted (as ``sorted(duels_)``)."""
        n = self.n
        h, rest = np.divmod(self.codes, n * n)
        a, b = np.divmod(rest, n)
        return np.column_stack([h, a, b, self.wins, self.counts]).astype(np.int64).reshape(-1, 5)

    def per_head(self) -> np.ndarray:
        """Answered duels per head: a head whose count and shortlist are as before has the same inputs
        to its certificate and its ranking (an answer only ever adds a duel)."""
        n = self.n
        if not len(self.codes):
            return np.zeros(n, np.int64)
        return np.bincount(self.codes // (n * n), weights=self.counts, minlength=n).astype(np.int64)

    def pending_by_head(self) -> dict[int, list[tuple[int, int]]]:
        """The pending questions' pairs (a < b) per head, once per pair and issue."""
        out: dict[int, list[tuple[int, int]]] = {}
        for (h, a, b), k in self.pending.items():
            out.setdefault(h, []).extend([(a, b)] * k)
        return out

    def to_state(self) -> dict:
        """Their part of the planner's state: ``triplets``, ``pending`` (rows h, a, b, issues),
        ``asked``, ``answered`` (``n_answers`` and ``n_issued`` are saved with the planner's counters)."""
        pending = (np.empty((0, 4), np.int64) if not self.pending else
                   np.array([(*k, v) for k, v in sorted(self.pending.items())], np.int64))
        return {"triplets": self.all_triplets().copy(), "pending": pending,
                "asked": self.asked.copy(), "answered": self.answered.copy()}

    @classmethod
    def from_state(cls, n: int, state: dict) -> Self:
        d = cls(n)
        d.triplets = np.array(state["triplets"], np.int64).reshape(-1, 3)
        d.reindex()
        d.pending = {(int(r[0]), int(r[1]), int(r[2])): int(r[3])
                     for r in np.asarray(state["pending"], np.int64).reshape(-1, 4)}
        d.asked = np.array(state["asked"], np.int64)
        d.answered = np.array(state["answered"], np.int64)
        return d
