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
        layered = self.__dict__.setdefault("_layered", set())
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

