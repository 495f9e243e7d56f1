"""ANNTri's rounds and decisions: SETri's active sets, top-k racing, the window of open rounds.

Round j finds item j's k nearest neighbours; rounds open in the random order ``order_``, at most
``window`` at once, and close certified (or capped by ``max_samples_per_round``). Numpy only; must
never import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from .. import triangle as tri
from ..graph import NO_NEIGHBOR
from .estimates import exact_mean

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
    (see ``Rounds._decide_1nn``), so round i's is dropped unless j is among its arms, and j's
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
    active sets of open rounds (``active``, see :meth:`RoundDecisions._decide_1nn`) and the rounds
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


class RoundDecisions:
    """Mixin of the planner (``engine.anntri.planner``): opening, deciding and closing rounds."""

    def _full_pass_period(self) -> int:
        if self.full_pass_every is not None:
            return int(self.full_pass_every)
        n = self.n_items
        if n > FULL_PASS_MAX_ITEMS:
            return 0
        # Keep the O(n³) passes a small share of the work: ~20 at n = 100, ~2 at n = 1000.
        return max(1, math.ceil(n * n / 2000))

    def _flush_triangle(self):
        """Propagate the queued sampled pairs into the triangle bounds (one vectorised step)."""
        if not self.dirty_:
            return
        n = self.n_items
        keys = np.fromiter(self.dirty_, dtype=np.int64, count=len(self.dirty_))
        tri.update_pairs(self.upper_, self.lower_, keys // n, keys % n)
        self._touched_all = True  # mirrored entries: any row may change
        self.dirty_.clear()
        self._active_cache.clear()

    def _refresh(self, j):
        self._flush_triangle()
        tri.refresh_row(self.upper_, self.lower_, j)
        self._touched_all = True
        self.refresh_mark_[j] = self.round_issued_[j]
        self._active_cache.clear()

    def _settle(self):
        """Close the open rounds the answers so far have decided (read methods call this)."""
        for j in list(self.open_rounds_):
            self._decide_round(j)

    def settle(self) -> None:
        """Close the open rounds the answers so far have decided: what :meth:`progress` does
        first, without its O(n²) counts (the update pass calls this before retiring questions).
        Before the planner's first call there are no rounds to close."""
        if self._hot is None:
            return
        self._settle()

    def _decide_round(self, j):
        """Close round j if its neighbours are decided (returns None); else its undecided
        arms, sorted (a list of ints, or an int array when there are many)."""
        if self.k == 1:
            return self._decide_1nn(j)
        accepted, undecided = racing_decision(*self._synced.row_bounds(j), j, self.k)
        n_acc = int(accepted.sum())
        n_und = int(undecided.sum())
        if n_acc < self.k and n_acc + n_und > self.k:
            return np.flatnonzero(undecided)
        cand = np.flatnonzero(accepted) if n_acc >= self.k else np.flatnonzero(accepted | undecided)
        self._certify(j, cand)
        return None

    def _decide_1nn(self, j):
        """SETri's test for round j (k = 1), exact, with a cached active set for open rounds.

        The cache holds the active arms and (min U*, argmin) over the other arms of row j.
        Eliminated arms never come back (U* only falls, L* only rises), and the other
        arms' bounds only change through events that drop the cache (an answer for a pair
        of row j outside the active set, a triangle step, a failed confidence event), so
        the cached decision equals the full O(n) one; a short active set is checked with
        scalar reads.
        """
        cached = self._active_cache.get(j)
        if self._est.derived and cached is not None:
            act = cached[0]
            U, L = np.full(self.n_items, np.inf), np.zeros(self.n_items)
            U[act], L[act] = self._est.bounds_at(j, act)  # the cached branch reads the active arms only
        else:
            U, L = self._synced.row_bounds(j)
        if cached is None:
            Uc, best, active = setri_active(U, L, j)
            act = np.flatnonzero(active)
            if len(act) > 1:
                if self.status_[j] == ROUND_OPEN:
                    Uc[act] = np.inf
                    r = int(Uc.argmin())
                    rest = (float(Uc[r]), r) if np.isfinite(Uc[r]) else (np.inf, self.n_items)
                    self._store_active(j, act, rest)
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
                self._store_active(j, keep, (rmin, ridx))
                return keep if isinstance(keep, list) or len(keep) > SMALL_ACTIVE else keep.tolist()
            cand = list(keep) if isinstance(keep, list) else keep.tolist()
            best = bi
        if best not in cand:
            cand.append(best)
        self._certify(j, np.array(sorted(cand), dtype=np.int64))
        return None

    def _store_active(self, j, act, rest):
        if not isinstance(act, list) and len(act) <= SMALL_ACTIVE:
            act = act.tolist()
        members = set(act) if isinstance(act, list) else frozenset(act.tolist())
        self._active_cache[j] = (act, rest, members)

    def _certify(self, j, cand):
        """Close round j certified, its neighbours the k best of ``cand``."""
        self.neighbors_[j] = self._rank_row(j, cand)
        self._close(j, ROUND_CERTIFIED)

    def _close(self, j, status):
        """Round j leaves the window with ``status`` (certified or capped)."""
        self.status_[j] = status
        self._active_cache.pop(j, None)
        if j in self.open_rounds_:
            self.open_rounds_.remove(j)

    def _rank_row(self, j, cand):
        """The k best of ``cand`` for row j by estimate, filled from the rest if too few."""
        key = self._score_row(j)
        if len(cand) < self.k:
            rest = np.setdiff1d(np.flatnonzero(np.arange(self.n_items) != j), cand)
            rest = rest[np.argsort(key[rest], kind="stable")][: self.k - len(cand)]
            cand = np.concatenate([cand, rest])
        return cand[np.argsort(key[cand], kind="stable")][: self.k]

    def _score_row(self, j):
        sampled = self.count_[j] > 0
        U, L = self._synced.row_bounds(j)
        mid = np.where(np.isfinite(U), 0.5 * (U.astype(np.float64) + L), np.inf)
        key = np.where(sampled, exact_mean(self.mean_[j], self.count_[j]), mid)
        return np.where(np.isfinite(key), key, FAR + L)

    def _open_round(self, j):
        self.status_[j] = ROUND_OPEN
        self.open_rounds_.append(j)
        if self.triangle:
            period = self._full_pass_period()
            self.rounds_since_full_pass_ += 1
            if period and self.rounds_since_full_pass_ >= period and self.n_samples_ > 0:
                self._flush_triangle()
                tri.full_pass(self.upper_, self.lower_)
                self._touched_all = True
                self.rounds_since_full_pass_ = 0
            self._refresh(j)

    def _room(self) -> bool:
        """May another round open now? Below the window and, with ``stagger``, below
        1 + the number of rounds that are closed or past their first layer."""
        if self.next_round_ >= self.n_items:
            return False
        n_open = len(self.open_rounds_)
        if n_open >= self.window:
            return False
        if not self.stagger:
            return True
        ready = self.next_round_ - n_open  # closed rounds
        if n_open + 1 > ready:
            ready += sum(1 for j in self.open_rounds_ if self._past_first_layer(j))
        return n_open < 1 + ready

    def _past_first_layer(self, j: int) -> bool:
        """Has open round j an answer for every arm it has not eliminated? (Monotone: arms
        only leave the undecided set and counts only grow, so it is never stored.)"""
        layered = self._rounds.layered
        if j in layered:
            return True
        cached = self._active_cache.get(j)
        if cached is not None:
            arms = np.asarray(cached[0], dtype=np.int64)
        elif self.k == 1:
            _, _, active = setri_active(*self._synced.row_bounds(j), j)
            arms = np.flatnonzero(active)
        else:
            _, undecided = racing_decision(*self._synced.row_bounds(j), j, self.k)
            arms = np.flatnonzero(undecided)
        if len(arms) and int(self.count_[j, arms].min()) == 0:
            return False
        layered.add(j)
        return True

    def _fill_window(self):
        while self._room():
            j = int(self.order_[self.next_round_])
            self.next_round_ += 1
            self._open_round(j)
            self._decide_round(j)

    def _close_capped(self, j):
        """Close round j at its sample cap: its empirical best stands, not certified."""
        self._close(j, ROUND_CAPPED)

    def stale(self, heads: ArrayLike) -> np.ndarray:
        """Per head: its questions are no longer worth asking (round certified, or not open: a rebuilt
        planner). A round closed by its sample cap keeps its questions (the cap counts issued
        questions, so their answers still sharpen its empirical best). Reads the rounds as they
        are: call :meth:`settle` first to close the ones the latest answers decided."""
        heads = np.asarray(heads, dtype=np.int64).reshape(-1)
        if self._hot is None:  # no rounds before the first call
            return np.zeros(len(heads), bool)
        status = self.status_[heads]
        return (status != ROUND_OPEN) & (status != ROUND_CAPPED)

    def closed(self, heads: ArrayLike) -> np.ndarray:
        """Per head: its round is not open (waiting, certified or capped)."""
        heads = np.asarray(heads, dtype=np.int64).reshape(-1)
        if self._hot is None:
            return np.zeros(len(heads), bool)
        return self.status_[heads] != ROUND_OPEN

    @property
    def done(self) -> bool:
        """True once every round is closed (certified or capped)."""
        self._ensure_state()
        return bool(np.all((self.status_ == ROUND_CERTIFIED) | (self.status_ == ROUND_CAPPED)))

