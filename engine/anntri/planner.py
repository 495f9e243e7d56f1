"""ANNTri's planner: the parameters of one planner and the parts that own its state.

The pair estimates are an :class:`.estimates.Estimates` (``_est``), the rounds a
:class:`.rounds.Rounds` (``_rounds``), each with its own arrays and its own part of the saved
state, and the scalar fast path a :class:`.overlay.ScalarOverlay` (``_overlay``) over both. The
decisions (:mod:`.rounds`), question choice (:mod:`.questions`), answers (:mod:`.observe`),
results (:mod:`.results`) and state I/O (:mod:`.state`) are functions over them;
:class:`_NeighborGraphPlanner` is the facade that implements ``engine.graph.Planner`` by calling
them. Its public arrays (``mean_``, ``status_``, ``n_issued_``, ...) are properties reading the
parts. Numpy only; must never import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence
from typing import Self

import numpy as np
from numpy.typing import ArrayLike

from ..bounds import check_bound
from ..graph import NeighborGraph
from ..utils import RandomState, check_int, check_n_items, check_random_state, check_state, store_params
from . import observe as answers_
from . import questions, results
from . import rounds as decisions
from .estimates import Estimates
from .overlay import ScalarOverlay, overlaid
from .rounds import ROUND_CAPPED, ROUND_CERTIFIED, ROUND_OPEN, Params, Rounds, on_rounds
from .state import PARAM_NAMES, STATE_VERSION, params_state, parts_from_state, parts_state


class _NeighborGraphPlanner:
    """The pair planners' facade: parameters (:class:`engine.anntri.ANNTri` documents them), and the
    parts holding the state, set up by the first call that needs them (``__init__`` stores the
    parameters only)."""

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
    #: the scalar fast path's entries (engine.anntri.overlay); ``_fast_ok``: whether it applies
    _overlay = None
    _fast_ok = False
    #: planners that never take the fast paths (RandomSampling) set this False
    _overlay_capable = True

    @property
    def _synced(self) -> Estimates:
        """The estimates with the overlay written back (what the public arrays read)."""
        return self._est.sync()

    #: False for the planners whose constructor fixes ``triangle`` (ANN, RandomSampling)
    _takes_triangle = True
    #: the state arrays as planner attributes (benchmarks/anntri_speed.py sums their sizes)
    _ARRAYS = ("mean_", "count_", "pending_", "upper_", "lower_", "order_", "status_",
               "round_issued_", "neighbors_", "refresh_mark_")

    def _start_overlay(self) -> None:
        self._overlay = ScalarOverlay(self._est, self._rounds, self, self._overlay_capable)
        self._fast_ok = self._overlay.fast_ok

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
        if self._est is not None:
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
        return self._est is not None

    def _params_now(self) -> Params:
        """The parameters the round and question functions read, as they are now."""
        return Params(self.n_items, self.k, self.triangle, self.window, self.stagger, self.max_samples_per_round,
                      self.lookahead, self.full_pass_every, self.symmetric)

    # ------------------------------------------------------------------ answers (engine.anntri.observe)
    def observe(self, answers: Iterable[Sequence[float]] | np.ndarray) -> None:
        """Apply noisy distance samples ``(i, j, value)``: any order, any batch size.

        Answers for rounds already closed still tighten the estimates; each answer clears
        one pending entry of its pair. Raises ``ValueError`` (state unchanged) on bad
        indices, i == j or non-finite values (or values outside [0, 1] for the bounded
        ``bound="bernstein"``/``"kl"``).

        Triangle bounds are not propagated here: the sampled pairs are queued (``dirty_``)
        and propagated in one vectorised step before a round reads its row again (a round
        opening, or every n new samples), so a short batch costs a few scalar updates.
        """
        if self._fast_ok and self._overlay.observe(answers, self):
            return
        self._ensure_state()
        answers_.observe_general(self._est, self._rounds, self._params_now(), answers)

    # ------------------------------------------------------------------ questions (engine.anntri.questions)
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
            out = self._overlay.next_questions(budget, self, self._next_general)
            if out is not None:
                return out
        return self._next_general(budget)

    def _next_general(self, budget: int) -> list[tuple[int, int]]:
        self._ensure_state()
        budget = check_int("budget", budget, minimum=0)
        # ``window`` may be changed on a live planner (the platform adapts it to its raters).
        self.window = check_int("window", self.window)
        return questions.next_general(self._est, self._rounds, self._params_now(), budget, self._eligible)

    def _eligible(self, j: int) -> list | None:
        """Round j's arms worth asking (:func:`engine.anntri.questions.eligible`; a subclass may ask others)."""
        return questions.eligible(self._est, self._rounds, self._params_now(), j)

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
        return questions.repeat_questions(self._est, self._rounds, self._params_now(), budget)

    def forget(self, pairs: Iterable[Sequence[int]] | np.ndarray) -> None:
        """Release pending entries of questions that expired unanswered, one per ``(i, j)`` row.

        The platform calls this when an issued question times out (or is taken back unasked, or
        skipped), so the pair can be asked again; an answer that still arrives later is used as
        usual. A released question no longer counts towards its round's sample cap: ``(i, j)``
        was issued by round ``i``, whose ``round_issued_`` goes down by one.
        """
        self._ensure_state()
        questions.forget(self._est, self._rounds, self._params_now(), pairs)

    # ------------------------------------------------------------------ rounds (engine.anntri.rounds)
    def _decide_round(self, j: int) -> list | np.ndarray | None:
        """Close round j if decided (None), else its undecided arms (:func:`engine.anntri.rounds.decide_round`)."""
        return decisions.decide_round(self._est, self._rounds, self._params_now(), j)

    def _room(self) -> bool:
        return decisions.room(self._est, self._rounds, self._params_now())

    def _close_capped(self, j: int) -> None:
        """Close round j at its sample cap: its empirical best stands, not certified."""
        decisions.close(self._rounds, j, ROUND_CAPPED)

    def _settle(self) -> None:
        """Close the open rounds the answers so far have decided (read methods call this)."""
        decisions.settle(self._est, self._rounds, self._params_now())

    def settle(self) -> None:
        """Close the open rounds the answers so far have decided: what :meth:`progress` does
        first, without its O(n²) counts (the update pass calls this before retiring questions).
        Before the planner's first call there are no rounds to close."""
        if self._est is None:
            return
        self._settle()

    def stale(self, heads: ArrayLike) -> np.ndarray:
        """Per head: its questions are no longer worth asking (round certified, or not open: a rebuilt
        planner). A round closed by its sample cap keeps its questions (the cap counts issued
        questions, so their answers still sharpen its empirical best). Reads the rounds as they
        are: call :meth:`settle` first to close the ones the latest answers decided."""
        heads = np.asarray(heads, dtype=np.int64).reshape(-1)
        if self._est is None:  # no rounds before the first call
            return np.zeros(len(heads), bool)
        status = self._rounds.status[heads]
        return (status != ROUND_OPEN) & (status != ROUND_CAPPED)

    def closed(self, heads: ArrayLike) -> np.ndarray:
        """Per head: its round is not open (waiting, certified or capped)."""
        heads = np.asarray(heads, dtype=np.int64).reshape(-1)
        if self._est is None:
            return np.zeros(len(heads), bool)
        return self._rounds.status[heads] != ROUND_OPEN

    @property
    def done(self) -> bool:
        """True once every round is closed (certified or capped)."""
        self._ensure_state()
        status = self._rounds.status
        return bool(np.all((status == ROUND_CERTIFIED) | (status == ROUND_CAPPED)))

    # ------------------------------------------------------------------ results (engine.anntri.results)
    def current_neighbors(self) -> np.ndarray:
        """Current best k neighbours of every item, shape (n_items, k): the certified answer
        where a round is certified, else the best estimates among the not-eliminated.

        A row's best depends on that row alone: rows not written since the previous call are
        taken from then (the dashboard asks every second; O(changed rows x n), not O(n²))."""
        self._ensure_state()
        self._settle()
        best, self._best_cache = results.current_neighbors(self._synced, self._rounds, self.k, self._best_cache)
        return best

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
        est, rounds = self._synced, self._rounds
        if rounds.status[j] == ROUND_CERTIFIED:
            return rounds.neighbors[j].astype(np.int64), int(rounds.issued[j])
        # Row j of current_neighbors, in O(n) instead of O(n²).
        best = results.best_rows(est, self.k, np.array([j]))[0]
        return best.astype(np.int64), int(rounds.issued[j])

    def result(self) -> NeighborGraph:
        """The k-NN graph now: certified rows are final, the others are best estimates."""
        nb = self.current_neighbors()
        return results.graph(self._synced, self._rounds, nb)

    def progress(self) -> dict:
        """Numbers for the dashboard (all plain Python scalars)."""
        self._ensure_state()
        self._settle()
        per_item, pending_rows, self._sums_cache = results.row_sums(self._synced, self._sums_cache)
        return results.progress(self._rounds, self.n_items, self.k, per_item, pending_rows, self.symmetric, self.done)

    def neighbor_graph(self, k: int = 1) -> NeighborGraph:
        """:meth:`result` with ``k`` columns: fewer are cut, more are filled with :data:`NO_NEIGHBOR`
        (the planner has no estimate beyond its own ``k``); an item no answer has touched has no
        neighbour yet (not the argmin of zeros)."""
        k = int(k)
        if k < 1:
            raise ValueError(f"k must be a positive integer, got {k}")
        g = self.result()
        blind = self._synced.count.sum(axis=1) == 0
        return results.with_columns(g, blind, k)

    # ------------------------------------------------------------------ state (engine.anntri.state)
    def _start_tracking(self) -> None:
        """The results' caches, recomputed where rows changed since (the estimates track the rows
        written: ``Estimates.fold``, :class:`engine.anntri.RowChanges`)."""
        self._best_cache = None  # (tick, rows' best) of current_neighbors
        self._sums_cache = None  # (tick, count and pending row sums) of progress

    def mark_rows(self, rows: ArrayLike) -> None:
        """Tell the planner that rows of its (n, n) arrays were written from outside (e.g. a caller
        adding to ``pending_``), so the next ``to_state(copy=False)`` reports them as changed and
        :meth:`current_neighbors` recomputes them. Writers from outside must call it: an unreported
        write is missing from a row-limited diff and from the cached neighbours."""
        if self._est is not None:
            self._est.touched.update(int(r) for r in np.atleast_1d(rows).tolist())

    def to_state(self, copy: bool = True) -> dict:
        """Plain numpy arrays + JSON-safe values (never pickle); see :func:`planner_from_state`.

        Layout: ``{"version", "class", "params": {...constructor arguments},
        "initialized": bool}`` and, once initialized, ``"rng"`` (JSON generator state),
        ``"open_rounds"`` (list of ints), the int scalars ``next_round``, ``n_samples``,
        ``n_issued``, ``rounds_since_full_pass`` and the arrays ``mean``, ``count``,
        ``pending``, ``upper``, ``lower`` (n, n), ``order``, ``status``, ``round_issued``,
        ``refresh_mark`` (n,: questions round j had issued at its row's last refresh),
        ``neighbors`` (n, k) and ``dirty`` (m,): the pairs ``i * n + j`` (i < j) sampled since
        the last triangle step, oldest first. ``params["window"]`` is the live window, changed or
        not since construction. A head-based planner (``symmetric=False``) has no ``upper``/``lower``:
        its bounds follow from ``mean`` and ``count`` except at the pairs ``tight_keys``
        (``i * n + j``, sorted) whose running intersection is tighter, given by ``tight_upper``
        and ``tight_lower``; its ``mean`` is float32 above ``FLOAT64_MAX_ITEMS`` items while every
        answer is 0 or 1 (read back exactly as k / count).

        ``copy=False`` hands out the planner's own arrays (no copy: they change with the planner,
        so use them before the next call), the (n, n) ones as :class:`RowTracked` views whose
        ``row_changes`` tell which rows changed since an earlier such state of this planner.
        """
        state = {
            "version": STATE_VERSION,
            "class": type(self).__name__,
            "params": params_state({name: getattr(self, name) for name in PARAM_NAMES}),
            "initialized": self._est is not None,
        }
        if state["initialized"]:
            state.update(parts_state(self._synced, self._rounds, self.rng_, copy))
        return state

    @classmethod
    def from_state(cls, state: dict) -> Self:
        """Rebuild a planner saved by :meth:`to_state` (it continues exactly where it was)."""
        check_state(state, cls.__name__, (STATE_VERSION,))
        params = dict(state["params"])
        if not cls._takes_triangle:
            params.pop("triangle", None)
        planner = cls(**params)
        planner._check_params()
        if state.get("initialized"):
            planner._est, planner._rounds, planner.rng_ = parts_from_state(
                state, planner.n_items, planner.k, planner.delta, planner.sigma, planner.bound, planner.symmetric)
            planner._start_overlay()
            planner._start_tracking()
        return planner
