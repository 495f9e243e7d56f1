"""ANNTri's planner: the parameters and the state of one planner, made of one collaborator per concern.

Estimates and bounds (:mod:`.estimates`), answers (:mod:`.observe`), rounds and decisions
(:mod:`.rounds`), question choice (:mod:`.questions`), results (:mod:`.results`), state I/O
(:mod:`.state`) and the scalar fast path (:mod:`.overlay`) are mixins of
:class:`_NeighborGraphPlanner`; they share its attributes (``mean_``, ``count_``, ... below).
Numpy only; must never import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

import math
import numbers

import numpy as np
from numpy.typing import ArrayLike

from ..bounds import check_bound
from ..utils import RandomState, check_int, check_n_items, check_random_state, store_params
from .estimates import Estimates
from .observe import AnswerUpdates
from .overlay import ScalarOverlay, overlaid
from .questions import QuestionChoice
from .results import Results
from .rounds import RoundDecisions, Rounds, on_rounds
from .state import StateIO


class _NeighborGraphPlanner(StateIO, Results, QuestionChoice, RoundDecisions, AnswerUpdates, ScalarOverlay):
    """The pair planners' parameters and state (:class:`engine.anntri.ANNTri` documents them)."""

    # The pair arrays and round_issued_ are properties: in long duels (few active arms) the
    # exact SETri fast path keeps the entries of its arms as Python scalars (the overlay,
    # engine.anntri.overlay) and writes them back the moment anything reads these attributes.
    mean_ = overlaid("mean_", "D̂, shape (n, n)")
    count_ = overlaid("count_", "answers per pair, shape (n, n)")
    pending_ = overlaid("pending_", "issued, unanswered questions per pair, shape (n, n)")
    upper_ = overlaid("upper_", "U*, shape (n, n)")
    lower_ = overlaid("lower_", "L*, shape (n, n)")
    round_issued_ = overlaid("round_issued_", "questions each round has issued, shape (n,)")
    # The rounds' state is the planner's Rounds (``_rounds``); these attributes read and write it.
    order_ = on_rounds("order", "the order the rounds open in, shape (n,)")
    status_ = on_rounds("status", "ROUND_WAITING/OPEN/CERTIFIED/CAPPED per round, shape (n,)")
    neighbors_ = on_rounds("neighbors", "certified neighbours per round, shape (n, k)")
    refresh_mark_ = on_rounds("refresh_mark", "questions round j had issued at its row's last refresh, shape (n,)")
    next_round_ = on_rounds("next_round", "rounds opened so far")
    open_rounds_ = on_rounds("open_rounds", "the open rounds (list of ints)")
    n_samples_ = on_rounds("n_samples", "answers observed")
    n_issued_ = on_rounds("n_issued", "questions issued")
    rounds_since_full_pass_ = on_rounds("since_full_pass", "rounds opened since the last full triangle pass")
    _active_cache = on_rounds("active", "cached active sets of open rounds")
    #: The pair estimates (D̂, answers, pending questions, U*, L*) live in ``_est``, an
    #: :class:`engine.anntri.estimates.Estimates` with its own state; None until the state exists.
    _est = None
    _rounds = None

    @property
    def dirty_(self) -> dict:
        """Pairs ``i * n + j`` (i < j) sampled since the last triangle step (the estimates' queue)."""
        if self._est is None:
            raise AttributeError("dirty_")
        return self._est.dirty

    @dirty_.setter
    def dirty_(self, value: dict) -> None:
        self._est.dirty = value

    def __init__(self, n_items: int, k: int = 1, delta: float = 0.1, sigma: float = 0.5, bound: str = "lil",
                 triangle: bool = True, max_samples_per_round: int | None = None, window: int = 1,
                 random_state: RandomState = None, full_pass_every: int | None = None, lookahead: float = 0.0,
                 stagger: bool = False, symmetric: bool = True) -> None:
        store_params(self, locals())

    def _check_params(self):
        n = check_n_items(self.n_items)
        check_int("k", self.k)
        if self.k > n - 1:
            raise ValueError(f"k must be at most n_items - 1 = {n - 1}, got {self.k}")
        if not (isinstance(self.delta, numbers.Real) and 0 < self.delta < 1):
            raise ValueError(f"delta must lie in (0, 1), got {self.delta!r}")
        if not (isinstance(self.sigma, numbers.Real) and self.sigma > 0 and math.isfinite(self.sigma)):
            raise ValueError(f"sigma must be a positive number, got {self.sigma!r}")
        check_bound(self.bound)
        if not isinstance(self.triangle, (bool, np.bool_)):
            raise ValueError(f"triangle must be True or False, not {self.triangle!r}")
        check_int("max_samples_per_round", self.max_samples_per_round, allow_none=True)
        check_int("window", self.window)
        check_int("full_pass_every", self.full_pass_every, allow_none=True, minimum=0)
        if not (isinstance(self.lookahead, numbers.Real) and 0 <= self.lookahead < math.inf):
            raise ValueError(f"lookahead must be a number >= 0, got {self.lookahead!r}")
        if not isinstance(self.stagger, (bool, np.bool_)):
            raise ValueError(f"stagger must be True or False, not {self.stagger!r}")
        if not isinstance(self.symmetric, (bool, np.bool_)):
            raise ValueError(f"symmetric must be True or False, not {self.symmetric!r}")
        if not self.symmetric and self.triangle:
            # Head-based (asymmetric) estimates are not distances of a metric: triangle
            # bounds built from them would be invalid and could eliminate the true neighbour.
            raise ValueError("triangle=True needs symmetric=True: triangle bounds are only valid "
                             "for a metric; pass triangle=False with symmetric=False")

    def bounds_of(self, rows: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """(U*, L*) of the given rows, shape (len(rows), n), float64: what ``upper_``/``lower_`` hold
        for them, without building the whole matrices of a head-based planner (O(len(rows) x n))."""
        return self._synced.rows_bounds(np.asarray(rows, dtype=np.int64))

    def _ensure_state(self):
        if self._hot is not None:
            return
        self._check_params()
        n = self.n_items
        self.rng_ = check_random_state(self.random_state)
        self._est = Estimates.empty(n, self.delta, self.sigma, self.bound, self.symmetric)
        self._rounds = Rounds.empty(n, self.k, self.rng_)
        self._start_overlay()
        self._start_tracking()

    @property
    def initialized(self) -> bool:
        """The state (pair arrays, rounds) exists: created by the first call that needs it."""
        return self._hot is not None
