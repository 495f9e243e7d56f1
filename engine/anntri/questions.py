"""ANNTri's question choice: which pairs the open rounds ask next, repeats, expired questions.

SETri's fewest-sampled undecided arms of every open round, one arm of each round per pass
(:func:`round_robin`), counted as pending until answered or forgotten. Numpy only; must never
import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from .checks import check_pairs
from .rounds import ROUND_CAPPED, ROUND_OPEN, Params, Rounds, close, decide_round, fill_window, refresh, room

if TYPE_CHECKING:
    from .estimates import Estimates

#: With more open rounds than this (and than the questions wanted), ``next_questions`` serves
#: them in turn, reading only the rounds it asks (:func:`next_spread`).
SPREAD_MIN_ROUNDS = 32

T = TypeVar("T")


def round_robin(rows: Sequence[Sequence[T]]) -> Iterator[tuple[int, T]]:
    """``(i, rows[i][depth])`` for depth 0, 1, ... and, within a depth, every row that still has an
    item, in order: the first item of each row, then the second of each, and so on. ANNTri's
    issuing order (one arm of each open round per pass, fewest-sampled first), which the array
    path (:func:`next_general`) and the overlay share; the caller stops it at its budget."""
    depth = 0
    more = True
    while more:
        more = False
        for i, row in enumerate(rows):
            if depth < len(row):
                more = True
                yield i, row[depth]
        depth += 1


def eligible(est: Estimates, rounds: Rounds, p: Params, j: int) -> list | None:
    """SETri's arms for round j: undecided, fewest samples, not already pending (a list); None
    once the round is closed."""
    # Refresh row j after n questions of its own, and geometrically less often as the
    # round grows (a long duel is decided by its own samples): O(n) amortised per
    # question, whatever the window.
    if p.triangle:
        est.sync()
        issued = int(rounds.issued[j])
        if issued - int(rounds.refresh_mark[j]) >= max(p.n_items, issued >> 3):
            refresh(est, rounds, j)
    undecided = decide_round(est, rounds, p, j)
    if undecided is None:
        return None
    est.sync()
    if isinstance(undecided, list):
        crow = est.count[j]
        prow = est.pending[j]
        T = [int(crow[a]) for a in undecided]
        tmin = min(T)
        return [a for a, t in zip(undecided, T, strict=True) if t == tmin and not prow[a]]
    T = est.count[j, undecided]
    return undecided[(T == T.min()) & (est.pending[j, undecided] == 0)].tolist()


def next_general(est: Estimates, rounds: Rounds, p: Params, budget: int,
                 eligible_of: Callable[[int], list | None]) -> list[tuple[int, int]]:
    """Up to ``budget`` questions of the open rounds on the arrays (``next_questions`` off the
    overlay): round-robin over the rounds' ``eligible_of(j)`` arms, refilling the window as rounds
    close; the many-rounds case by :func:`next_spread`."""
    out: list[tuple[int, int]] = []
    cap = p.max_samples_per_round
    lookahead = float(p.lookahead)
    est.sync()
    pending, status = est.pending, rounds.status
    fill_window(est, rounds, p)
    if not lookahead and len(rounds.open_rounds) > max(budget, SPREAD_MIN_ROUNDS):
        out = next_spread(est, rounds, p, budget, eligible_of)
    while len(out) < budget:
        fill_window(est, rounds, p)
        if not rounds.open_rounds:
            break
        lists = []
        for j in list(rounds.open_rounds):
            arms = eligible_of(j)
            if arms:
                reps = 1 + int(lookahead * int(est.sync().count[j, arms[0]])) if lookahead else 1
                lists.append((j, arms, reps))
        if room(est, rounds, p):
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
                    reps = min(reps, cap - int(rounds.issued[j]))
            issue(est, rounds, p, out, j, a, reps, cap)
        if len(out) == issued_before or not room(est, rounds, p):
            break
    rounds.n_issued += len(out)
    return out


def next_spread(est: Estimates, rounds: Rounds, p: Params, budget: int,
                eligible_of: Callable[[int], list | None]) -> list[tuple[int, int]]:
    """More open rounds than questions wanted (e.g. every round open in a busy study): one
    fewest-sampled arm from each of the next rounds in turn, reading only the rounds it
    visits; the visited rounds move to the back of ``open_rounds``, so successive calls
    go round all the open rounds instead of serving the first ``budget`` ones forever.
    (Only reached with more open rounds than ``budget``; otherwise every round is read.)"""
    out: list[tuple[int, int]] = []
    cap = p.max_samples_per_round
    status = rounds.status
    order = list(rounds.open_rounds)
    visited = 0
    for j in order:
        if len(out) >= budget:
            break
        visited += 1
        if status[j] != ROUND_OPEN:
            continue
        arms = eligible_of(j)
        if not arms:
            continue
        issue(est, rounds, p, out, j, arms[0], 1, cap)
    seen = set(order[:visited])
    still = rounds.open_rounds
    rounds.open_rounds = [j for j in still if j not in seen] + [j for j in still if j in seen]
    fill_window(est, rounds, p)
    return out


def next_uniform(est: Estimates, rounds: Rounds, p: Params, budget: int,
                 rng: np.random.Generator) -> list[tuple[int, int]]:
    """``budget`` uniformly random pairs i != j, drawn from ``rng`` (the paper's Random:
    :class:`engine.anntri.RandomSampling`), counted pending (both ways where the samples are
    symmetric) and issued; the rounds do not steer the choice."""
    n = p.n_items
    i = rng.integers(n, size=budget)
    j = rng.integers(n - 1, size=budget)
    j = j + (j >= i)
    np.add.at(est.pending, (i, j), 1)
    est.touched.update(i.tolist())
    if p.symmetric:
        np.add.at(est.pending, (j, i), 1)
        est.touched.update(j.tolist())
    rounds.n_issued += budget
    return [(int(a), int(b)) for a, b in zip(i.tolist(), j.tolist(), strict=False)]


def repeat_questions(est: Estimates, rounds: Rounds, p: Params, budget: int) -> list[tuple[int, int]]:
    """Up to ``budget`` repeats for when every useful question is already pending (see
    ``ANNTri.repeat_questions``): per open round in turn, the undecided arm with the fewest
    answers + pending questions, issued even if pending; rounds at their cap are skipped."""
    cap = p.max_samples_per_round
    todo = []
    for j in np.flatnonzero(rounds.status == ROUND_OPEN).tolist():
        undecided = decide_round(est, rounds, p, j)  # None once the round is closed
        if undecided is not None:
            arms = np.asarray(undecided, dtype=np.int64)
            arms = arms[arms != j]
            if len(arms):
                todo.append((j, arms))
    est.sync()
    count, pending, issued = est.count, est.pending, rounds.issued
    out: list[tuple[int, int]] = []
    while len(out) < budget and todo:
        for entry in list(todo):
            j, arms = entry
            if len(out) >= budget:
                break
            if cap is not None and issued[j] >= cap:
                todo.remove(entry)
                continue
            a = int(arms[np.argmin(count[j, arms] + pending[j, arms])])
            issue(est, rounds, p, out, j, a, 1)
    rounds.n_issued += len(out)
    return out


def issue(est: Estimates, rounds: Rounds, p: Params, out: list, j: int, a: int, reps: int,
          cap: int | None = None) -> None:
    """Issue ``reps`` questions (j, a): append them to ``out``, count them as pending (both
    entries when symmetric) and towards round j's cap, and close round j as capped once it
    reaches ``cap`` (None: never here). The estimates are in sync (the callers synced them)."""
    out.extend([(j, a)] * reps)
    pending = est.pending
    pending[j, a] += reps
    est.touched.add(j)
    if p.symmetric:
        pending[a, j] += reps
        est.touched.add(a)
    issued = rounds.issued
    issued[j] += reps
    if cap is not None and issued[j] >= cap:
        close(rounds, j, ROUND_CAPPED)


def forget(est: Estimates, rounds: Rounds, p: Params, pairs: Iterable[Sequence[int]] | np.ndarray) -> None:
    """Release one pending entry per ``(i, j)`` row (see ``ANNTri.forget``); round i's issued
    count goes down by one."""
    a, b, arr = check_pairs(pairs, p.n_items, 2, "pairs")
    if len(arr) == 0:
        return
    est.sync()
    pending, issued = est.pending, rounds.issued
    for i, j in zip(a.tolist(), b.tolist(), strict=False):
        v = int(pending[i, j])
        if v <= 0:
            continue
        pending[i, j] = v - 1
        est.touched.add(i)
        if p.symmetric:
            pending[j, i] = v - 1
            est.touched.add(j)
        if issued[i] > 0:
            issued[i] -= 1
