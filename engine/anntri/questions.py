"""ANNTri's question choice: which pairs the open rounds ask next, repeats, expired questions.

SETri's fewest-sampled undecided arms of every open round, one arm of each round per pass
(:func:`round_robin`), counted as pending until answered or forgotten. Numpy only; must never
import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TypeVar

import numpy as np

from ..utils import check_int
from .checks import check_pairs
from .rounds import ROUND_OPEN

#: With more open rounds than this (and than the questions wanted), ``next_questions`` serves
#: them in turn, reading only the rounds it asks (``QuestionChoice._next_spread``).
SPREAD_MIN_ROUNDS = 32

T = TypeVar("T")


def round_robin(rows: Sequence[Sequence[T]]) -> Iterator[tuple[int, T]]:
    """``(i, rows[i][depth])`` for depth 0, 1, ... and, within a depth, every row that still has an
    item, in order: the first item of each row, then the second of each, and so on. ANNTri's
    issuing order (one arm of each open round per pass, fewest-sampled first), which the array
    path (``QuestionChoice._next_general``) and the overlay share; the caller stops it at its budget."""
    depth = 0
    more = True
    while more:
        more = False
        for i, row in enumerate(rows):
            if depth < len(row):
                more = True
                yield i, row[depth]
        depth += 1


class QuestionChoice:
    """Mixin of the planner (``engine.anntri.planner``): the questions of the open rounds."""

    def next_questions(self, budget: int) -> list[tuple[int, int]]:
        """Up to ``budget`` pairs ``(i, j)`` worth asking now, as plain int tuples; i is the round.

        Draws SETri's fewest-sampled undecided arms from every open round (at most
        ``window`` rounds, round-robin), never re-issuing a pair that is still pending.
        Returns fewer than ``budget`` when every useful question is pending or all rounds
        are done (``[]`` then). Issued pairs count as pending until answered or forgotten.
        With the default ``lookahead=0`` the pairs are distinct; with ``lookahead > 0`` an
        arm whose round has sampled it T times is issued up to ``1 + floor(lookahead * T)``
        times at once (a batch of SETri layers, see :class:`engine.anntri.ANNTri`).
        """
        if self._fast_ok:  # a long duel: the scalar overlay's path, when it applies (engine.anntri.overlay)
            out = self._next_hot(budget)
            if out is not None:
                return out
        return self._next_general(budget)

    def _eligible(self, j):
        """SETri's arms for round j: undecided, fewest samples, not already pending (a list)."""
        # Refresh row j after n questions of its own, and geometrically less often as the
        # round grows (a long duel is decided by its own samples): O(n) amortised per
        # question, whatever the window.
        if self.triangle:
            issued = int(self.round_issued_[j])
            if issued - int(self.refresh_mark_[j]) >= max(self.n_items, issued >> 3):
                self._refresh(j)
        undecided = self._decide_round(j)
        if undecided is None:
            return None
        if isinstance(undecided, list):
            crow = self.count_[j]
            prow = self.pending_[j]
            T = [int(crow[a]) for a in undecided]
            tmin = min(T)
            return [a for a, t in zip(undecided, T, strict=True) if t == tmin and not prow[a]]
        T = self.count_[j, undecided]
        return undecided[(T == T.min()) & (self.pending_[j, undecided] == 0)].tolist()

    def _next_general(self, budget) -> list[tuple[int, int]]:
        self._ensure_state()
        budget = check_int("budget", budget, minimum=0)
        # ``window`` may be changed on a live planner (the platform adapts it to its raters).
        self.window = check_int("window", self.window)
        out: list[tuple[int, int]] = []
        cap = self.max_samples_per_round
        lookahead = float(self.lookahead)
        pending, issued, status = self.pending_, self.round_issued_, self.status_
        self._fill_window()
        if not lookahead and len(self.open_rounds_) > max(budget, SPREAD_MIN_ROUNDS):
            out = self._next_spread(budget)
        while len(out) < budget:
            self._fill_window()
            if not self.open_rounds_:
                break
            lists = []
            for j in list(self.open_rounds_):
                arms = self._eligible(j)
                if arms:
                    reps = 1 + int(lookahead * int(self.count_[j, arms[0]])) if lookahead else 1
                    lists.append((j, arms, reps))
            if self._room():
                continue  # a round closed: refill the window first
            issued_before = len(out)
            for i, a in round_robin([arms for _, arms, _ in lists]):
                if len(out) >= budget:
                    break
                j, _, reps = lists[i]
                if status[j] != ROUND_OPEN or pending[j, a]:
                    continue  # capped in this call, or already issued by the round of a in this call
                if reps > 1:
                    reps = min(reps, budget - len(out))
                    if cap is not None:
                        reps = min(reps, cap - int(issued[j]))
                self._issue(out, j, a, reps, pending, issued, cap)
            if len(out) == issued_before or not self._room():
                break
        self.n_issued_ += len(out)
        return out

    def _next_spread(self, budget: int) -> list[tuple[int, int]]:
        """More open rounds than questions wanted (e.g. every round open in a busy study): one
        fewest-sampled arm from each of the next rounds in turn, reading only the rounds it
        visits; the visited rounds move to the back of ``open_rounds_``, so successive calls
        go round all the open rounds instead of serving the first ``budget`` ones forever.
        (Only reached with more open rounds than ``budget``; otherwise every round is read.)"""
        out: list[tuple[int, int]] = []
        cap = self.max_samples_per_round
        pending, issued, status = self.pending_, self.round_issued_, self.status_
        rounds = list(self.open_rounds_)
        visited = 0
        for j in rounds:
            if len(out) >= budget:
                break
            visited += 1
            if status[j] != ROUND_OPEN:
                continue
            arms = self._eligible(j)
            if not arms:
                continue
            self._issue(out, j, arms[0], 1, pending, issued, cap)
        seen = set(rounds[:visited])
        still = self.open_rounds_
        self.open_rounds_ = [j for j in still if j not in seen] + [j for j in still if j in seen]
        self._fill_window()
        return out

    def repeat_questions(self, budget: int) -> list[tuple[int, int]]:
        """Up to ``budget`` repeats for when every useful question is already pending: SETri
        with questions in flight counted as samples.

        For each open round in turn (round-robin), the undecided arm with the fewest answers
        + pending questions (ties: the lowest index); the pair is issued (pending, counted
        towards the round's cap) even if it is already pending, so raters get a useful repeat
        rather than a uniformly random fallback. Rounds at ``max_samples_per_round`` are
        skipped; returns ``[]`` when no round is open.
        """
        self._ensure_state()
        budget = check_int("budget", budget, minimum=0)
        cap = self.max_samples_per_round
        rounds = []
        for j in np.flatnonzero(self.status_ == ROUND_OPEN).tolist():
            undecided = self._decide_round(j)  # None once the round is closed
            if undecided is not None:
                arms = np.asarray(undecided, dtype=np.int64)
                arms = arms[arms != j]
                if len(arms):
                    rounds.append((j, arms))
        count, pending, issued = self.count_, self.pending_, self.round_issued_
        out: list[tuple[int, int]] = []
        while len(out) < budget and rounds:
            for entry in list(rounds):
                j, arms = entry
                if len(out) >= budget:
                    break
                if cap is not None and issued[j] >= cap:
                    rounds.remove(entry)
                    continue
                a = int(arms[np.argmin(count[j, arms] + pending[j, arms])])
                self._issue(out, j, a, 1, pending, issued)
        self.n_issued_ += len(out)
        return out

    def _issue(self, out: list, j: int, a: int, reps: int, pending: np.ndarray, issued: np.ndarray,
               cap: int | None = None) -> None:
        """Issue ``reps`` questions (j, a): append them to ``out``, count them as pending (both
        entries when symmetric) and towards round j's cap, and close round j as capped once it
        reaches ``cap`` (None: never here). ``pending``/``issued`` are the planner's ``pending_``
        and ``round_issued_``, read once by the caller."""
        out.extend([(j, a)] * reps)
        pending[j, a] += reps
        self._touched.add(j)
        if self.symmetric:
            pending[a, j] += reps
            self._touched.add(a)
        issued[j] += reps
        if cap is not None and issued[j] >= cap:
            self._close_capped(j)

    def forget(self, pairs: Iterable[Sequence[int]] | np.ndarray) -> None:
        """Release pending entries of questions that expired unanswered, one per ``(i, j)`` row.

        The platform calls this when an issued question times out (or is taken back unasked, or
        skipped), so the pair can be asked again; an answer that still arrives later is used as
        usual. A released question no longer counts towards its round's sample cap: ``(i, j)``
        was issued by round ``i``, whose ``round_issued_`` goes down by one.
        """
        self._ensure_state()
        a, b, arr = check_pairs(pairs, self.n_items, 2, "pairs")
        if len(arr) == 0:
            return
        pending, issued = self.pending_, self.round_issued_
        for p, q in zip(a.tolist(), b.tolist(), strict=False):
            v = int(pending[p, q])
            if v <= 0:
                continue
            pending[p, q] = v - 1
            self._touched.add(p)
            if self.symmetric:
                pending[q, p] = v - 1
                self._touched.add(q)
            if issued[p] > 0:
                issued[p] -= 1

