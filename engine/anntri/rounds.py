"""ANNTri's rounds and decisions: SETri's active sets, top-k racing, the window of open rounds.

Round j finds item j's k nearest neighbours; rounds open in the random order ``order_``, at most
``window`` at once, and close certified (or capped by ``max_samples_per_round``). Numpy only; must
never import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from .. import triangle as tri
from ..graph import NO_NEIGHBOR
from .estimates import exact_mean

if TYPE_CHECKING:
    from .estimates import Estimates

#: ``status_`` values of a round.
ROUND_WAITING = 0
ROUND_OPEN = 1
ROUND_CERTIFIED = 2
ROUND_CAPPED = 3  # hit max_samples_per_round: empirical best, not certified

#: Above this many items the O(n³) full pass is never run (row refreshes only).
FULL_PASS_MAX_ITEMS = 1024
#: Active sets of at most this many arms are checked with scalar reads.
SMALL_ACTIVE = 16
#: A score beyond every estimate: arms without an answer rank after the sampled ones.
FAR = 1e12


def setri_active(upper_row: np.ndarray, lower_row: np.ndarray, j: int) -> tuple[np.ndarray, int, np.ndarray]:
    """SETri's active set for 1-NN round j: {a != j : L*[j, a] < min_b U*[j, b]}, as
    (U* of the row in float64 with U*[j] = inf, argmin U*, the active mask)."""
    U = upper_row.astype(np.float64)
    U[j] = np.inf
    best = int(U.argmin())
    active = lower_row < U[best]
    active[j] = False
    return U, best, active


def racing_decision(upper_row: np.ndarray, lower_row: np.ndarray, j: int,
                    k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k racing for one round: (accepted, undecided) boolean masks over items.

    a is accepted once fewer than k others can still be closer (#{b: L[b] < U[a]} < k),
    rejected once at least k others are surely closer (#{b: U[b] <= L[a]} >= k). With
    k = 1 the undecided set is exactly SETri's active set.
    """
    U = upper_row.astype(np.float64, copy=True)
    L = lower_row.astype(np.float64, copy=True)
    U[j] = np.inf
    L[j] = np.inf
    sL = np.sort(L)
    sU = np.sort(U)
    below = np.searchsorted(sL, U, side="left") - (L < U)  # others with L[b] < U[a]
    surely = np.searchsorted(sU, L, side="right") - (U <= L)  # others with U[b] <= L[a]
    accepted = below < k
    rejected = (surely >= k) & ~accepted
    accepted[j] = False
    rejected[j] = True
    undecided = ~(accepted | rejected)
    return accepted, undecided


def drop_stale_active(cache: dict, i: int, j: int) -> None:
    """After an answer for (i, j): a cached active set stays exact while only its own arms change
    (see :func:`decide_1nn`), so round i's is dropped unless j is among its arms, and j's
    unless i is."""
    if i in cache and j not in cache[i][2]:
        del cache[i]
    if j in cache and i not in cache[j][2]:
        del cache[j]


class Rounds:
    """The rounds of one planner and their own state: the order they open in (``order``), each
    round's status, questions it issued (``issued``), certified neighbours and row-refresh mark,
    the open window (``open_rounds``, ``next_round``), the counters (answers ``n_samples``,
    questions ``n_issued``, rounds since the last full triangle pass) and, not saved, the cached
    active sets of open rounds (``active``, see :func:`decide_1nn`) and the rounds
    known to be past their first layer (``layered``). Built by :meth:`empty` or :meth:`from_state`,
    saved by :meth:`to_state`."""

    #: the arrays and int counters of the state, by state key
    ARRAYS = ("order", "status", "round_issued", "neighbors", "refresh_mark")
    SCALARS = ("next_round", "n_samples", "n_issued", "rounds_since_full_pass")

    def __init__(self, order: np.ndarray, status: np.ndarray, issued: np.ndarray, neighbors: np.ndarray,
                 refresh_mark: np.ndarray, next_round: int = 0, open_rounds: list | None = None, n_samples: int = 0,
                 n_issued: int = 0, since_full_pass: int = 0) -> None:
        self.order, self.status, self.issued, self.neighbors = order, status, issued, neighbors
        self.refresh_mark = refresh_mark
        self.next_round = next_round
        self.open_rounds = [] if open_rounds is None else open_rounds
        self.n_samples, self.n_issued, self.since_full_pass = n_samples, n_issued, since_full_pass
        self.active: dict = {}
        self.layered: set = set()

    @classmethod
    def empty(cls, n_items: int, k: int, rng: np.random.Generator) -> Rounds:
        """Every round waiting, in a random order drawn from ``rng``."""
        n = n_items
        return cls(rng.permutation(n).astype(np.int64), np.zeros(n, dtype=np.int8), np.zeros(n, dtype=np.int64),
                   np.full((n, k), NO_NEIGHBOR, dtype=np.int64), np.zeros(n, dtype=np.int64))

    def to_state(self) -> dict:
        """The state's round part: ``open_rounds`` (list), the int counters and the arrays (not copied)."""
        state: dict = {"open_rounds": [int(j) for j in self.open_rounds]}
        state.update(zip(self.SCALARS, (int(self.next_round), int(self.n_samples), int(self.n_issued),
                                        int(self.since_full_pass)), strict=True))
        state.update(zip(self.ARRAYS, (self.order, self.status, self.issued, self.neighbors, self.refresh_mark),
                         strict=True))
        return state

    @classmethod
    def from_state(cls, state: dict, n_items: int, k: int) -> Rounds:
        """The rounds a planner's state holds, copied; ValueError on a wrong shape."""
        n = n_items
        dtypes = {"order": np.int64, "status": np.int8, "round_issued": np.int64, "neighbors": np.int64,
                  "refresh_mark": np.int64}
        arrays = []
        for name, dtype in dtypes.items():
            arr = np.array(state[name], dtype=dtype, copy=True)
            if arr.shape != ((n, k) if name == "neighbors" else (n,)):
                raise ValueError(f"state array {name!r} has shape {arr.shape}")
            arrays.append(arr)
        return cls(*arrays, int(state["next_round"]), [int(j) for j in state["open_rounds"]],
                   int(state["n_samples"]), int(state["n_issued"]), int(state["rounds_since_full_pass"]))


def on_rounds(field: str, doc: str) -> property:
    """A planner attribute that is its :class:`Rounds`' ``field`` (AttributeError before the state exists)."""

    def get(self):
        rounds = self.__dict__.get("_rounds")
        if rounds is None:
            raise AttributeError(field)
        return getattr(rounds, field)

    def set(self, value):
        setattr(self._rounds, field, value)

    return property(get, set, doc=doc)


class Params(NamedTuple):
    """The parameters the round and question functions read (a planner's, at the time of the call:
    ``window`` may change on a live planner)."""

    n_items: int
    k: int
    triangle: bool
    window: int
    stagger: bool
    max_samples_per_round: int | None
    lookahead: float
    full_pass_every: int | None
    symmetric: bool


# The functions below decide and open rounds over a planner's Estimates and Rounds. Where they read
# the estimates' arrays (or rounds.issued) they call est.sync() first: a scalar overlay may hold some
# entries (engine.anntri.overlay), as the planner's public arrays do when read.

def full_pass_period(p: Params) -> int:
    """Rounds between O(n³) triangle passes (0 = never)."""
    if p.full_pass_every is not None:
        return int(p.full_pass_every)
    n = p.n_items
    if n > FULL_PASS_MAX_ITEMS:
        return 0
    # Keep the O(n³) passes a small share of the work: ~20 at n = 100, ~2 at n = 1000.
    return max(1, math.ceil(n * n / 2000))


def flush_triangle(est: Estimates, rounds: Rounds) -> None:
    """Propagate the queued sampled pairs into the triangle bounds (one vectorised step)."""
    if not est.dirty:
        return
    n = est.n_items
    keys = np.fromiter(est.dirty, dtype=np.int64, count=len(est.dirty))
    est.sync()
    tri.update_pairs(est.upper, est.lower, keys // n, keys % n)
    est.touched_all = True  # mirrored entries: any row may change
    est.dirty.clear()
    rounds.active.clear()


def refresh(est: Estimates, rounds: Rounds, j: int) -> None:
    """Row j's triangle bounds brought up to date (queued pairs first)."""
    flush_triangle(est, rounds)
    est.sync()
    tri.refresh_row(est.upper, est.lower, j)
    est.touched_all = True
    rounds.refresh_mark[j] = rounds.issued[j]
    rounds.active.clear()


def settle(est: Estimates, rounds: Rounds, p: Params) -> None:
    """Close the open rounds the answers so far have decided."""
    for j in list(rounds.open_rounds):
        decide_round(est, rounds, p, j)


def sweep_uncertified(est: Estimates, rounds: Rounds, p: Params) -> None:
    """Decide every round not yet certified, after geometrically growing numbers of new answers
    (``refresh_mark[0]`` remembers the answers at the last sweep; an O(n² log n) sweep, rows never
    refreshed): how :class:`engine.anntri.RandomSampling` certifies, its questions steered by no round."""
    mark = int(rounds.refresh_mark[0])
    if rounds.n_samples > 0 and rounds.n_samples - mark < max(p.n_items, mark // 10):
        return
    rounds.refresh_mark[0] = rounds.n_samples
    for j in np.flatnonzero(rounds.status != ROUND_CERTIFIED):
        decide_round(est, rounds, p, int(j))


def decide_round(est: Estimates, rounds: Rounds, p: Params, j: int) -> list | np.ndarray | None:
    """Close round j if its neighbours are decided (returns None); else its undecided
    arms, sorted (a list of ints, or an int array when there are many)."""
    if p.k == 1:
        return decide_1nn(est, rounds, p, j)
    accepted, undecided = racing_decision(*est.sync().row_bounds(j), j, p.k)
    n_acc = int(accepted.sum())
    n_und = int(undecided.sum())
    if n_acc < p.k and n_acc + n_und > p.k:
        return np.flatnonzero(undecided)
    cand = np.flatnonzero(accepted) if n_acc >= p.k else np.flatnonzero(accepted | undecided)
    certify(est, rounds, p, j, cand)
    return None


def decide_1nn(est: Estimates, rounds: Rounds, p: Params, j: int) -> list | np.ndarray | None:
    """SETri's test for round j (k = 1), exact, with a cached active set for open rounds.

    The cache holds the active arms and (min U*, argmin) over the other arms of row j.
    Eliminated arms never come back (U* only falls, L* only rises), and the other
    arms' bounds only change through events that drop the cache (an answer for a pair
    of row j outside the active set, a triangle step, a failed confidence event), so
    the cached decision equals the full O(n) one; a short active set is checked with
    scalar reads.
    """
    n = p.n_items
    cached = rounds.active.get(j)
    if est.derived and cached is not None:
        act = cached[0]
        U, L = np.full(n, np.inf), np.zeros(n)
        U[act], L[act] = est.bounds_at(j, act)  # the cached branch reads the active arms only
    else:
        U, L = est.sync().row_bounds(j)
    if cached is None:
        Uc, best, active = setri_active(U, L, j)
        act = np.flatnonzero(active)
        if len(act) > 1:
            if rounds.status[j] == ROUND_OPEN:
                Uc[act] = np.inf
                r = int(Uc.argmin())
                rest = (float(Uc[r]), r) if np.isfinite(Uc[r]) else (np.inf, n)
                store_active(rounds, j, act, rest)
            return act.tolist() if len(act) <= SMALL_ACTIVE else act
        cand = act.tolist()
    else:
        act, rest, _ = cached
        rmin, ridx = rest
        if isinstance(act, list):
            bu, bi = rmin, ridx
            us = [float(U[a]) for a in act]
            for a, ua in zip(act, us, strict=True):
                if ua < bu or (ua == bu and a < bi):
                    bu, bi = ua, a
            keep = []
            for a, ua in zip(act, us, strict=True):
                if L[a] < bu:
                    keep.append(a)
                elif ua < rmin or (ua == rmin and a < ridx):
                    rmin, ridx = ua, a
        else:
            Ua = U[act].astype(np.float64)
            t = int(Ua.argmin())
            if Ua[t] < rmin or (Ua[t] == rmin and act[t] < ridx):
                bu, bi = float(Ua[t]), int(act[t])
            else:
                bu, bi = rmin, ridx
            keepmask = L[act] < bu
            gone = np.flatnonzero(~keepmask)
            if len(gone):
                g = gone[int(Ua[gone].argmin())]
                if Ua[g] < rmin or (Ua[g] == rmin and act[g] < ridx):
                    rmin, ridx = float(Ua[g]), int(act[g])
            keep = act[keepmask]
        if len(keep) > 1:
            store_active(rounds, j, keep, (rmin, ridx))
            return keep if isinstance(keep, list) or len(keep) > SMALL_ACTIVE else keep.tolist()
        cand = list(keep) if isinstance(keep, list) else keep.tolist()
        best = bi
    if best not in cand:
        cand.append(best)
    certify(est, rounds, p, j, np.array(sorted(cand), dtype=np.int64))
    return None


def store_active(rounds: Rounds, j: int, act: list | np.ndarray, rest: tuple) -> None:
    """Cache open round j's active arms ``act`` and (min U*, argmin) over its other arms."""
    if not isinstance(act, list) and len(act) <= SMALL_ACTIVE:
        act = act.tolist()
    members = set(act) if isinstance(act, list) else frozenset(act.tolist())
    rounds.active[j] = (act, rest, members)


def certify(est: Estimates, rounds: Rounds, p: Params, j: int, cand: np.ndarray) -> None:
    """Close round j certified, its neighbours the k best of ``cand``."""
    rounds.neighbors[j] = rank_row(est, p, j, cand)
    close(rounds, j, ROUND_CERTIFIED)


def close(rounds: Rounds, j: int, status: int) -> None:
    """Round j leaves the window with ``status`` (certified or capped: its empirical best stands)."""
    rounds.status[j] = status
    rounds.active.pop(j, None)
    if j in rounds.open_rounds:
        rounds.open_rounds.remove(j)


def rank_row(est: Estimates, p: Params, j: int, cand: np.ndarray) -> np.ndarray:
    """The k best of ``cand`` for row j by estimate, filled from the rest if too few."""
    key = score_row(est, j)
    if len(cand) < p.k:
        rest = np.setdiff1d(np.flatnonzero(np.arange(p.n_items) != j), cand)
        rest = rest[np.argsort(key[rest], kind="stable")][: p.k - len(cand)]
        cand = np.concatenate([cand, rest])
    return cand[np.argsort(key[cand], kind="stable")][: p.k]


def score_row(est: Estimates, j: int) -> np.ndarray:
    """Row j's ranking key: D̂ where sampled, else the middle of the bounds, else FAR + L*."""
    est.sync()
    sampled = est.count[j] > 0
    U, L = est.row_bounds(j)
    mid = np.where(np.isfinite(U), 0.5 * (U.astype(np.float64) + L), np.inf)
    key = np.where(sampled, exact_mean(est.mean[j], est.count[j]), mid)
    return np.where(np.isfinite(key), key, FAR + L)


def open_round(est: Estimates, rounds: Rounds, p: Params, j: int) -> None:
    """Round j joins the window (with triangle bounds: its row refreshed, a full pass when due)."""
    rounds.status[j] = ROUND_OPEN
    rounds.open_rounds.append(j)
    if p.triangle:
        period = full_pass_period(p)
        rounds.since_full_pass += 1
        if period and rounds.since_full_pass >= period and rounds.n_samples > 0:
            flush_triangle(est, rounds)
            est.sync()
            tri.full_pass(est.upper, est.lower)
            est.touched_all = True
            rounds.since_full_pass = 0
        refresh(est, rounds, j)


def room(est: Estimates, rounds: Rounds, p: Params) -> bool:
    """May another round open now? Below the window and, with ``stagger``, below
    1 + the number of rounds that are closed or past their first layer."""
    if rounds.next_round >= p.n_items:
        return False
    n_open = len(rounds.open_rounds)
    if n_open >= p.window:
        return False
    if not p.stagger:
        return True
    ready = rounds.next_round - n_open  # closed rounds
    if n_open + 1 > ready:
        ready += sum(1 for j in rounds.open_rounds if past_first_layer(est, rounds, p, j))
    return n_open < 1 + ready


def past_first_layer(est: Estimates, rounds: Rounds, p: Params, j: int) -> bool:
    """Has open round j an answer for every arm it has not eliminated? (Monotone: arms
    only leave the undecided set and counts only grow, so it is never stored.)"""
    layered = rounds.layered
    if j in layered:
        return True
    cached = rounds.active.get(j)
    if cached is not None:
        arms = np.asarray(cached[0], dtype=np.int64)
    elif p.k == 1:
        _, _, active = setri_active(*est.sync().row_bounds(j), j)
        arms = np.flatnonzero(active)
    else:
        _, undecided = racing_decision(*est.sync().row_bounds(j), j, p.k)
        arms = np.flatnonzero(undecided)
    if len(arms) and int(est.sync().count[j, arms].min()) == 0:
        return False
    layered.add(j)
    return True


def fill_window(est: Estimates, rounds: Rounds, p: Params) -> None:
    """Open rounds in order while there is room, deciding each at once."""
    while room(est, rounds, p):
        j = int(rounds.order[rounds.next_round])
        rounds.next_round += 1
        open_round(est, rounds, p, j)
        decide_round(est, rounds, p, j)
