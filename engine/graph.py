"""The one nearest-neighbour graph type every learner returns, and the planner contract.

Every algorithm of the table in :mod:`engine.registry` yields a :class:`NeighborGraph` from
``planner.neighbor_graph(k)``, and follows :class:`Planner`. Numpy only; must never import
Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypedDict, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike

#: ``neighbors`` entry of an item with no neighbour yet (no evidence at all).
NO_NEIGHBOR = -1


class _Common(TypedDict):
    answers: int
    questions_issued: int
    done: bool
    items_certified: int


class Progress(_Common, total=False):
    """What every planner's ``progress()`` reports (JSON-safe; the dashboard reads these keys).

    Required of every planner: ``answers`` answers applied, ``questions_issued`` questions handed
    out so far, ``done`` nothing left to ask, ``items_certified`` items whose neighbour is certain
    (confidence bounds; 0 for learners without a certificate). ``n_items`` is the number of items.
    A planner adds its own numbers beside them; the optional keys below are the ones the platform
    reads when they are there: a :class:`RoundPlanner` reports its rounds, a forest growing trees by
    triplets its trees (one entry per tree), a forest routing items added later how many it routes, a
    learner with item features as a prior how well they agree with the answers.
    """

    n_items: int
    # planners that work in rounds (RoundPlanner)
    rounds_certified: int
    rounds_open: int
    rounds_waiting: int
    # forests growing trees by triplets
    n_trees: int
    trees_built: int
    nodes_built: list[int]
    nodes_pending: list[int]
    depth: list[int]
    # forests routing items added after they were built (engine.forest_study)
    added_items: int
    added_items_routed: int
    # learners with item features as a prior (engine.duels.priors): whether they still use them, and how often
    # an item's feature neighbour beat another item in the answers (None before any such answer)
    features_used: bool
    feature_agreement: float | None
    # the rating learner (engine.ratings): the share of the space's prior spread the features' map got in its
    # last fit (None before a fit)
    feature_share: float | None


#: The keys every planner's ``progress()`` has (:class:`Progress`'s required keys, in order).
PROGRESS_KEYS = tuple(_Common.__annotations__)


@dataclass(frozen=True)
class NeighborGraph:
    """A k-NN graph with its certainty. All arrays have shape (n_items, k) unless noted.

    ``neighbors`` int item indices (closest first), :data:`NO_NEIGHBOR` where an item has none
    yet; ``certified`` bool of shape (n_items,); ``estimates`` the learner's distance-like score
    of each edge (smaller = closer; NaN where the learner has none); ``lower``/``upper`` its
    confidence bounds (NaN where none); ``samples`` the number of answers behind each edge.
    """

    neighbors: np.ndarray
    certified: np.ndarray
    estimates: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    samples: np.ndarray

    @classmethod
    def from_neighbors(cls, neighbors: ArrayLike, estimates: ArrayLike | None = None, samples: ArrayLike | None = None,
                       certified: ArrayLike | None = None) -> NeighborGraph:
        """A graph with only what a learner without bounds knows (NaN bounds)."""
        nb = np.asarray(neighbors, dtype=np.int64)
        if nb.ndim == 1:
            nb = nb[:, None]
        nan = np.full(nb.shape, np.nan)
        est = nan.copy() if estimates is None else np.asarray(estimates, dtype=np.float64).reshape(nb.shape)
        est = np.where(nb == NO_NEIGHBOR, np.nan, est)
        cnt = np.zeros(nb.shape, np.int64) if samples is None else np.asarray(samples, np.int64).reshape(nb.shape)
        cert = np.zeros(len(nb), bool) if certified is None else np.asarray(certified, bool)
        return cls(nb, cert, est, nan, nan.copy(), cnt)


@runtime_checkable
class Planner(Protocol):
    """The life cycle of every question planner: everything the platform (the worker, exports, the
    dashboard, ``proxima plan``) and the benchmarks call.

    ``next_questions(budget)`` returns at most ``budget`` questions (tuples of item indices: a
    triplet ``(head, a, b)`` "is head more like a or b?", a pair ``(i, j)`` for pair-asking
    planners, or a screen of the study's kind) and counts them as pending; ``observe(rows)`` applies
    answers in any order and batch size; ``forget(questions)`` releases questions that will never be
    answered; ``done`` nothing is left to ask; ``progress()`` the numbers of :class:`Progress`;
    ``neighbor_graph(k)`` the learned :class:`NeighborGraph` with ``k`` columns (a learner without
    one, e.g. a label-driven forest, gives every item :data:`NO_NEIGHBOR`); ``result()`` the learned
    object in the learner's own terms (a graph with bounds, win rates, a forest); ``to_state()`` /
    ``from_state(state)`` round-trip through plain arrays + JSON scalars.
    """

    n_items: int

    @property
    def done(self) -> bool: ...

    def next_questions(self, budget: int) -> list[tuple[Any, ...]]: ...

    def observe(self, answers: Sequence[Sequence[Any]]) -> None: ...

    def forget(self, questions: Sequence[Sequence[Any]]) -> Any: ...

    def progress(self) -> Progress: ...

    def neighbor_graph(self, k: int = 1) -> NeighborGraph: ...

    def result(self) -> Any: ...

    def to_state(self) -> dict: ...

    @classmethod
    def from_state(cls, state: dict) -> Planner: ...


@runtime_checkable
class RoundPlanner(Planner, Protocol):
    """The capability of planners that work in rounds (SETri: one round per head item, a window of
    rounds open at once), declared by their table entry (``Algorithm.rounds``).

    ``window`` how many rounds may be open at once (the platform widens it when the open rounds have
    too few distinct questions for the raters waiting); ``settle()`` closes the rounds the answers so
    far have decided; ``stale(heads)`` (bool array, one per head) questions of these heads are no
    longer worth asking: their round is certified, or not open (a rebuilt planner), while a round
    closed by its sample cap keeps its questions; ``closed(heads)`` (bool array) the round of these
    heads is no longer open, so their answers come late for it; ``repeat_questions(budget)`` up to
    ``budget`` useful repeats once every question of the open rounds is pending (counted as issued).
    Before its first call a planner has no rounds: nothing is stale or closed.
    """

    window: int

    def settle(self) -> None: ...

    def stale(self, heads: ArrayLike) -> np.ndarray: ...

    def closed(self, heads: ArrayLike) -> np.ndarray: ...

    def repeat_questions(self, budget: int) -> list[tuple[int, ...]]: ...


def refill_rounds(planner: RoundPlanner, budget: int, window: int | None = None) -> tuple[list[tuple[Any, ...]], int]:
    """Up to ``budget`` questions of a planner that works in rounds, as a live study's pool refill
    plans them (the worker and ``proxima plan`` both call this): its window set to ``window`` (kept
    when None); while its open rounds have too few distinct questions, more rounds open (up to one
    per wanted question, at most ``n_items``: repeats would spend the rounds' sample caps); only then
    are the open rounds' least-asked questions asked again. Returns (questions, how many repeat)."""
    if window is not None:
        planner.window = max(int(window), 1)
    planned = list(planner.next_questions(budget))
    cap = min(int(planner.n_items), max(int(window or 1), budget))
    while len(planned) < budget and planner.window < cap and not planner.done:
        planner.window = min(cap, max(planner.window + 1, math.ceil(planner.window * 1.5)))
        planned.extend(planner.next_questions(budget - len(planned)))
    repeats = planner.repeat_questions(budget - len(planned)) if len(planned) < budget else []
    return planned + list(repeats), len(repeats)


@runtime_checkable
class RefitsBeside(Protocol):
    """The capability of planners that refit a model (``engine.duels``): ``pool`` live-pool mode
    (the whole budget per call; :func:`engine.registry.drive_as_pool`), ``fitter`` where refits run
    (None: inside the call that starts them), ``fit_ready()`` True once a refit that ran beside the
    calls is ready (False: still running, None: none handed over), ``settle_fit()`` put a finished
    refit in place (True if one was)."""

    pool: bool
    fitter: Any

    def fit_ready(self) -> bool | None: ...

    def settle_fit(self) -> bool: ...
