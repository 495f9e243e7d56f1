"""Candidate duels' parts and parameters: what the module functions (refits, dimensions, shortlists,
scoring, question choice, results, state I/O) work on.

:class:`Parts` holds what one planner learned, each part owning its arrays and its part of the state:
the answers and duel counts (:class:`~.answers.Duels`), the shortlists and eliminations
(:class:`Shortlist`), the fits (:class:`~.embedding.Embedding`), the results kept between looks
(:class:`KeptResults`), the features' prior (:class:`~.priors.FeaturePrior`, or None) and the random
generator (:func:`~.state.start` builds a new planner's, :func:`~.state.parts_of_state` a saved one's).
:class:`Params` is what the functions read of the planner's parameters and its driving (``pool``,
``fitter``), as they are at the call. Imports no module of functions (they import it). Numpy only; must
never import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from ..graph import NO_NEIGHBOR
from .answers import Duels
from .embedding import Embedding
from .priors import FeaturePrior


class Shortlist:
    """Each head's candidates and the ones beaten for good, for a study of ``n`` items and shortlists
    of at most ``width``: ``cands`` (n, width), each head's candidates in shortlist order,
    ``NO_NEIGHBOR`` padding at the end of each row; ``eliminated`` {head: candidates out for good},
    the same as ``log`` rows (h, c) in the order they happened (new ones buffered until read through
    :meth:`elimination_log`); ``filled`` (m, eliminations logged) at the last rebuild of the
    shortlists from the features' nearest (never saved: see :meth:`heads_to_refill`)."""

    def __init__(self, n: int, width: int) -> None:
        self.n = int(n)
        self.cands = np.full((self.n, int(width)), NO_NEIGHBOR, np.int64)
        self.eliminated: dict[int, set[int]] = {}
        self.log = np.empty((0, 2), np.int64)
        self.buffer: list[tuple[int, int]] = []
        self.filled: tuple[int, int] | None = None

    def eliminate(self, h: int, gone: np.ndarray) -> None:
        """Candidates ``gone`` of head h are beaten with confidence: out of its shortlist for good."""
        known = self.eliminated.setdefault(h, set())
        for c in gone.tolist():
            if c not in known:
                known.add(c)
                self.buffer.append((h, c))

    def elimination_log(self) -> np.ndarray:
        """Every elimination as (h, c) rows, in the order they happened (a log that only grows: a
        pass's journal entry carries only its new rows)."""
        if self.buffer:
            self.log = np.concatenate([self.log, np.asarray(self.buffer, np.int64)])
            self.buffer = []
        return self.log

    def eliminated_codes(self) -> np.ndarray:
        """Sorted codes h * n + c of every candidate c eliminated for a head h."""
        log = self.elimination_log()
        return np.unique(log[:, 0] * self.n + log[:, 1])

    def fill(self, h: int, keep: list[int], order: np.ndarray, m: int) -> list[int]:
        """h's dueled leaders ``keep``, then items of ``order`` (nearest first) up to m: neither h, nor
        one eliminated for h, nor one already chosen (nor past the last item: a k-d tree's padding)."""
        gone = self.eliminated.get(h, ())
        chosen = list(keep)
        for c in order:
            if len(chosen) >= m:
                break
            c = int(c)
            if c != h and c not in gone and c not in chosen and c < self.n:
                chosen.append(c)
        return chosen

    def heads_to_refill(self, m: int, logged: int) -> np.ndarray:
        """The heads whose shortlists a rebuild from the features' nearest can change: all of them, unless
        the last rebuild was one too, for the same m (``filled``: m and the eliminations logged then); then
        those that lost candidates since. (Every other head's shortlist is already its kept leaders and its
        nearest in the features after them: a rebuild gives it back unchanged, and at 50,000 items scoring
        every head's leaders again took 0.4 s of the pass that put a refit in place.)"""
        filled = self.filled
        if filled is None or filled[0] != m or filled[1] > logged:
            return np.arange(self.n)
        return np.unique(self.log[filled[1]:logged, 0])

    def to_state(self) -> dict:
        """Their part of the planner's state: ``eliminated`` (the log) and ``cands``."""
        return {"eliminated": self.elimination_log().copy(), "cands": self.cands.copy()}

    @classmethod
    def from_state(cls, n: int, width: int, state: dict) -> Shortlist:
        s = cls(n, width)
        s.log = np.array(state["eliminated"], np.int64).reshape(-1, 2)
        for h, c in s.log.tolist():
            s.eliminated.setdefault(h, set()).add(c)
        s.cands = np.array(state["cands"], np.int64)
        return s


@dataclass(frozen=True)
class _HeadRows:
    """Results per head kept between looks (:func:`refreshed`): what all rows depend
    on (``key``), the shortlists and duel counts they were read from, and the rows themselves."""

    key: tuple
    cands: np.ndarray
    duels: np.ndarray
    rows: tuple


class KeptResults:
    """Per head, results read from its shortlist and duels alone, kept between looks and redone only
    for the heads whose shortlist or duels changed (never saved): ``certified`` (certificates) and
    ``ranked`` (rankings), each a :class:`_HeadRows` or None."""

    def __init__(self) -> None:
        self.certified: _HeadRows | None = None
        self.ranked: _HeadRows | None = None


class Params(NamedTuple):
    """A planner's parameters (:class:`~.planner.CandidateDuels` documents them) and how it is driven."""

    n_items: int
    shortlist: int
    min_shortlist: int
    shrink_at: float
    warmup: float | str
    explore: float
    refit_growth: float
    dim: int | str
    delta: float
    explore_pairs: int
    pool: bool
    fitter: Any


@dataclass
class Parts:
    """What one planner learned: ``duels``, ``short``, ``fit``, ``kept``, ``prior`` (None without
    features) and ``rng`` (the planner's one random stream)."""

    duels: Duels
    short: Shortlist
    fit: Embedding
    kept: KeptResults
    prior: FeaturePrior | None
    rng: np.random.Generator

