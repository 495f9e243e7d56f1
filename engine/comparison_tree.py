"""Comparison trees and comparison-based random forests (CompRF) as a triplet question planner.

Builds trees from "is x more similar to p1 or to p2?" answers alone (Haghiri et al. 2017,
2018), routes new items, classifies, regresses and finds neighbours. The forest is a facade: its
growing (open, draw pivots, resolve, finish) is :mod:`engine.comparison_growth`, the questions to its
trees (leaf members, leaf-mates) :mod:`engine.comparison_queries`, functions over its arrays. Pure
numpy/scipy: must never import Flask, Redis, RQ, scikit-learn or anything from ``webapp``/``workers``.

Conventions used throughout (documented once, referred to elsewhere):

- items are ``0..n_items-1``; a *question* is ``(x, p1, p2)``; an *answer* is
  ``(x, p1, p2, winner)`` with ``winner`` equal to ``p1`` or ``p2``. The two pivots may come
  back in either order: ``(x, p1, p2)`` and ``(x, p2, p1)`` are the same triplet.
- nodes of all trees share one global numbering; ``node_tree_[v]`` says which tree node ``v``
  belongs to and node ``t`` is the root of tree ``t``.
- ``item_node_ : ndarray of shape (n_trees, n_items)`` is the deepest node each item has
  reached in each tree; once a tree is built it is the item's leaf.
- a triplet is keyed by the int64 code ``(x * n + a) * n + b`` with ``a < b`` its pivots.
- sentinels: ``NO_NODE``, ``NO_ITEM`` and :data:`engine.graph.NO_NEIGHBOR` (all ``-1``).
"""
from __future__ import annotations

import numbers
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from . import comparison_growth as growth
from .comparison_growth import (
    FILLING,
    LEAF,
    NO_CODE,
    NO_ITEM,
    NO_NODE,
    NODE_ARRAYS,
    READY,
    SPLIT,
    SPLITTING,
    STATUS_NAMES,
    SUPERVISED_DRAWS,
    ranges,
)
from .comparison_queries import descends, leaf_index, leaf_mates_graph
from .graph import NeighborGraph
from .utils import (
    CodeTable,
    RandomState,
    array_from_state,
    check_int,
    check_random_state,
    check_state,
    check_triplets,
    counters_state,
    find_sorted,
    group_starts,
    load_counters,
    lowest_per_code,
    mix64,
    read_forest_doc,
    store_params,
)

__all__ = [
    "FILLING",
    "LEAF",
    "NO_ITEM",
    "NO_NODE",
    "READY",
    "SPLIT",
    "SPLITTING",
    "STATUS_NAMES",
    "SUPERVISED_DRAWS",
    "ComparisonForest",
    "ForestResult",
    "ForestRoute",
    "RouteResult",
    "VoteRule",
    "run_with_oracle",
]

STATE_VERSION = 1
MAX_ITEMS = 2_000_000  # triplet codes x*n*n + a*n + b must fit in int64

ADAPTIVE = "adaptive"
ADAPTIVE_MARGIN = 2  # adaptive voting stops when one side leads by this many answers ...
ADAPTIVE_CAP = 5  # ... or when this many answers were counted (then a strict majority wins)


# ----------------------------------------------------------------------------------------
# voting on noisy triplets
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class VoteRule:
    """When a triplet's answers are decisive, given the votes ``va`` for pivot a and ``vb`` for b.

    ``redundancy = r`` (odd int): a strict majority of r decides; only the fewest copies that
    could still reach it are asked (r = 3: two copies, a third only if they disagree).
    ``redundancy = "adaptive"``: ask until one side leads by ``ADAPTIVE_MARGIN`` (2) answers,
    at most ``ADAPTIVE_CAP`` (5) counted answers, then the majority (a sequential test: agreeing
    pairs stop at 2 answers, contested triplets get up to 5).
    """

    redundancy: int | str = 1

    def __post_init__(self) -> None:
        r = self.redundancy
        if isinstance(r, str):
            if r != ADAPTIVE:
                raise ValueError(f"redundancy must be an odd positive int or {ADAPTIVE!r}, not {r!r}")
            return
        if isinstance(r, bool) or not isinstance(r, (numbers.Integral, np.integer)) or r < 1 or r % 2 == 0:
            raise ValueError(f"redundancy must be an odd positive int or {ADAPTIVE!r}, not {r!r}")
        object.__setattr__(self, "redundancy", int(r))

    def decided(self, va: np.ndarray, vb: np.ndarray) -> np.ndarray:
        va, vb = np.asarray(va), np.asarray(vb)
        if self.redundancy == ADAPTIVE:
            lead = np.abs(va - vb)
            return (lead >= ADAPTIVE_MARGIN) | ((va + vb >= ADAPTIVE_CAP) & (lead > 0))
        majority = self.redundancy // 2 + 1
        return (np.maximum(va, vb) >= majority) & (va != vb)

    def needed(self, va: np.ndarray, vb: np.ndarray) -> np.ndarray:
        """Fewest further answers that could decide an undecided triplet (at least 1)."""
        va, vb = np.asarray(va), np.asarray(vb)
        if self.redundancy == ADAPTIVE:
            lead = np.abs(va - vb)
            need = np.minimum(ADAPTIVE_MARGIN - lead, ADAPTIVE_CAP - (va + vb))
        else:
            need = self.redundancy // 2 + 1 - np.maximum(va, vb)
        return np.maximum(need, 1)


class _TripletTable(CodeTable):
    """Votes and outstanding copies of the triplets a planner wants, keyed by int64 codes.

    *Live* triplets (wanted, undecided) are the rows of the table, sorted by code; *decided*
    triplets are kept forever (sorted main part plus a small sorted buffer merged geometrically),
    so a late answer is recognised and a decision is shared by every tree that needs the same
    triplet.
    """

    # votes column 0: votes for a (the smaller pivot), 1: for b
    COLUMNS = {"votes": (np.int64, (2,), 0), "outstanding": (np.int64, (), 0)}
    WHAT = "triplet"

    def __init__(self):
        super().__init__()
        self.dec_codes = np.empty(0, np.int64)
        self.dec_a_wins = np.empty(0, bool)
        self.buf_codes = np.empty(0, np.int64)
        self.buf_a_wins = np.empty(0, bool)

    # -- lookups -------------------------------------------------------------------------
    def find_decided(self, codes: np.ndarray):
        """(found, a_wins) for every code."""
        found = np.zeros(codes.shape, bool)
        a_wins = np.zeros(codes.shape, bool)
        for keys, wins in ((self.dec_codes, self.dec_a_wins), (self.buf_codes, self.buf_a_wins)):
            pos, hit = find_sorted(keys, codes)
            found |= hit
            a_wins[hit] = wins[pos[hit]]
        return found, a_wins

    @property
    def n_decided(self) -> int:
        return int(self.dec_codes.size + self.buf_codes.size)

    # -- changes -------------------------------------------------------------------------
    def add_live(self, codes: np.ndarray, priority: np.ndarray) -> None:
        """Start tracking ``codes`` (not decided ones); a code already live keeps the lower priority."""
        codes, priority = lowest_per_code(codes, priority)
        pos, live = self.find(codes)
        if live.any():
            self.priority[pos[live]] = np.minimum(self.priority[pos[live]], priority[live])
        self.insert(codes[~live], priority[~live])

    def _add_decided(self, codes: np.ndarray, a_wins: np.ndarray) -> None:
        buf = np.concatenate([self.buf_codes, codes])
        wins = np.concatenate([self.buf_a_wins, a_wins])
        order = np.argsort(buf, kind="stable")
        self.buf_codes, self.buf_a_wins = buf[order], wins[order]
        if self.buf_codes.size > max(4096, self.dec_codes.size // 4):
            both = np.concatenate([self.dec_codes, self.buf_codes])
            wins = np.concatenate([self.dec_a_wins, self.buf_a_wins])
            order = np.argsort(both, kind="stable")
            self.dec_codes, self.dec_a_wins = both[order], wins[order]
            self.buf_codes = np.empty(0, np.int64)
            self.buf_a_wins = np.empty(0, bool)

    def check_known(self, codes: np.ndarray) -> np.ndarray:
        """Boolean mask of codes that are neither live nor decided (never asked)."""
        _, live = self.find(codes)
        unknown = ~live
        if unknown.any():
            found, _ = self.find_decided(codes[unknown])
            unknown[np.flatnonzero(unknown)[found]] = False
        return unknown

    def record(self, codes: np.ndarray, a_wins: np.ndarray, rule: VoteRule):
        """Apply answers in arrival order; returns (decided codes, their a_wins, counted, late).

        An answer counts while its triplet is undecided; the first answer that makes the votes
        decisive decides it; answers after that (same batch or later) are *late* and ignored.
        The caller has checked that every code is known.
        """
        pos, live = self.find(codes)
        rows = np.flatnonzero(live)
        n_late = int(codes.size - rows.size)
        if rows.size == 0:
            return np.empty(0, np.int64), np.empty(0, bool), 0, n_late
        order = rows[np.argsort(codes[rows], kind="stable")]  # grouped by triplet, arrival order kept
        slot = pos[order]
        ga = a_wins[order].astype(np.int64)
        gb = 1 - ga
        starts = group_starts(slot)
        gid = np.cumsum(np.r_[True, slot[1:] != slot[:-1]]) - 1
        ca, cb = np.cumsum(ga), np.cumsum(gb)
        base_a = (ca[starts] - ga[starts])[gid]
        base_b = (cb[starts] - gb[starts])[gid]
        va = self.votes[slot, 0] + ca - base_a
        vb = self.votes[slot, 1] + cb - base_b
        dec = rule.decided(va, vb)
        idx = np.arange(slot.size)
        first = np.minimum.reduceat(np.where(dec, idx, slot.size), starts)
        counted = idx <= first[gid]
        n_late += int((~counted).sum())
        group_rows = slot[starts]
        self.votes[group_rows, 0] += np.add.reduceat(ga * counted, starts)
        self.votes[group_rows, 1] += np.add.reduceat(gb * counted, starts)
        used = np.add.reduceat(counted.astype(np.int64), starts)
        self.outstanding[group_rows] = np.maximum(self.outstanding[group_rows] - used, 0)
        done_rows = group_rows[first < slot.size]
        done_codes = self.codes[done_rows]
        done_a = self.votes[done_rows, 0] > self.votes[done_rows, 1]
        self.drop(done_rows)
        self._add_decided(done_codes, done_a)
        return done_codes, done_a, int(counted.sum()), n_late

    def plan(self, budget: int, rule: VoteRule) -> np.ndarray:
        """Rows to issue (a row repeated once per copy), by priority then age; marks them outstanding."""
        if budget <= 0 or self.codes.size == 0:
            return np.empty(0, np.int64)
        need = rule.needed(self.votes[:, 0], self.votes[:, 1]) - self.outstanding
        rows = np.flatnonzero(need > 0)
        rows = self.by_urgency(rows)
        issued = np.repeat(rows, need[rows])[:budget]
        np.add.at(self.outstanding, issued, 1)
        return issued

    def release(self, codes: np.ndarray) -> int:
        pos, live = self.find(codes)
        released = 0
        if live.any():
            rows, counts = np.unique(pos[live], return_counts=True)
            before = self.outstanding[rows].copy()
            self.outstanding[rows] = np.maximum(before - counts, 0)
            released = int((before - self.outstanding[rows]).sum())
        return released

    # -- state ---------------------------------------------------------------------------
    def to_state(self, prefix: str) -> dict:
        codes = np.concatenate([self.dec_codes, self.buf_codes])
        wins = np.concatenate([self.dec_a_wins, self.buf_a_wins])
        order = np.argsort(codes, kind="stable")
        state = super().to_state(prefix, "live_")
        state[f"{prefix}decided_codes"] = codes[order]
        state[f"{prefix}decided_a_wins"] = wins[order]
        return state

    @classmethod
    def from_state(cls, state: dict, prefix: str) -> _TripletTable:
        table = super().from_state(state, prefix, "live_")
        table.dec_codes = np.asarray(state[f"{prefix}decided_codes"], np.int64).copy()
        table.dec_a_wins = np.asarray(state[f"{prefix}decided_a_wins"], bool).copy()
        if table.dec_codes.size != table.dec_a_wins.size:
            raise ValueError("inconsistent decided triplets in state")
        return table


# ----------------------------------------------------------------------------------------
# boundary checks
# ----------------------------------------------------------------------------------------
def _check_answers(answers, n_items: int, x_range=None):
    """(rows of shape (m, 4), a_wins) after checking indices and winners; ``x_range=(lo, hi)`` bounds x."""
    rows = check_triplets(answers, n_items, "answer", width=4, head_range=x_range)
    a_wins = rows[:, 3] == np.minimum(rows[:, 1], rows[:, 2])
    return rows, a_wins


def _oriented(x, a, b, codes, copy) -> list[tuple[int, int, int]]:
    """Questions with the pivots in a pseudo-random order, so screen position carries no index bias."""
    swap = (mix64(codes.astype(np.uint64) ^ mix64(copy)) & np.uint64(1)).astype(bool)
    first, second = np.where(swap, b, a), np.where(swap, a, b)
    return [tuple(q) for q in np.column_stack([x, first, second]).tolist()]


def _apply_answers(planner, rows: np.ndarray, codes: np.ndarray, a_wins: np.ndarray, asker: str):
    """Record checked answers (``rows`` of shape (m, 4) and their triplet ``codes``) in the
    ``table_`` and counters of ``planner``; returns the codes decided now and their a_wins.

    Raises ValueError, changing nothing, when a triplet was never asked by this ``asker``.
    """
    unknown = planner.table_.check_known(codes)
    if unknown.any():
        r = tuple(rows[np.argmax(unknown), :3].tolist())
        raise ValueError(f"question {r} was never asked by this {asker} ({int(unknown.sum())} such answers)")
    done_codes, done_a, counted, late = planner.table_.record(codes, a_wins, planner.rule_)
    planner.n_answers_ += counted
    planner.n_late_ += late
    return done_codes, done_a


def _copy_index(rows: np.ndarray) -> np.ndarray:
    """0, 1, 2, ... for repeated rows in a sorted run (to vary the orientation of extra copies)."""
    if rows.size == 0:
        return rows
    starts = group_starts(rows)
    gid = np.cumsum(np.r_[True, rows[1:] != rows[:-1]]) - 1
    return np.arange(rows.size) - starts[gid]


# ----------------------------------------------------------------------------------------
# results
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ForestResult:
    """The trees of a forest as flat node arrays (one global node numbering, root of tree t = t).

    ``node_pivots``/``node_children`` are of shape (n_nodes, 2), ``NO_ITEM``/``NO_NODE`` where
    a node is a leaf or not split yet; ``item_node`` is of shape (n_trees, n_items).
    """

    n_items: int
    n_trees: int
    node_tree: np.ndarray
    node_parent: np.ndarray
    node_depth: np.ndarray
    node_status: np.ndarray
    node_size: np.ndarray
    node_pivots: np.ndarray
    node_children: np.ndarray
    item_node: np.ndarray
    done: bool

    def members(self, node: int) -> np.ndarray:
        """Items that sit in ``node`` (for a leaf: its members), ascending."""
        return np.flatnonzero(self.item_node[self.node_tree[node]] == node)

    def leaves(self, tree: int) -> np.ndarray:
        nodes = np.flatnonzero((self.node_tree == tree) & (self.node_status == LEAF))
        return nodes

    def depth(self, tree: int | None = None) -> int:
        mask = self.node_tree == tree if tree is not None else slice(None)
        return int(self.node_depth[mask].max()) if self.node_depth.size else 0


@dataclass(frozen=True)
class RouteResult:
    """Where a new item landed: ``leaves`` (one node per tree; an inner node while still routing),
    ``neighbors`` (candidate items, best first) with ``counts`` (in how many reached leaves each
    one sits), the predicted ``label``/``value`` (None without labels/values) and ``done``."""

    item: int
    leaves: np.ndarray
    neighbors: np.ndarray
    counts: np.ndarray
    label: object
    value: float | None
    done: bool
    n_answers: int


# ----------------------------------------------------------------------------------------
# the forest
# ----------------------------------------------------------------------------------------
class ComparisonForest:
    """A comparison-based random forest built from triplet answers, as a question planner.

    Parameters
    ----------
    n_items : number of training items (``0..n_items-1``).
    n_trees : number of trees M; every tree gets its own integer seed.
    leaf_size : n0; a node with at most n0 items is a leaf.
    labels : optional array-like of length n_items (ints or strings); makes pivots supervised
        (two items with different labels) and enables ``label`` predictions by majority vote.
    redundancy : odd int r or ``"adaptive"``, see :class:`VoteRule`.
    random_state : None, int or numpy Generator, drawn once for the tree seeds.
    values : optional float array-like of length n_items; enables ``value`` predictions (mean
        over the pooled leaf members). Pivots stay unsupervised for values, as in the paper.

    Life cycle: ``next_questions(budget)`` -> ask -> ``observe(answers)`` until ``done``.
    Every pending node of every tree asks its questions at once. A triplet needed by several
    trees is asked once and its decision shared; answers after a triplet is decided are
    counted as late and ignored; answers to questions never asked raise ``ValueError``;
    ``forget(questions)`` releases issued copies that expired unanswered.
    """

    _COUNTERS = ("n_issued", "n_answers", "n_late", "n_released")
    #: the arrays of one entry per node (:data:`engine.comparison_growth.NODE_ARRAYS`)
    _NODE_ARRAYS = NODE_ARRAYS
    #: (number of nodes, :func:`engine.comparison_queries.leaf_index`) when it was last built
    _leaf_cache: tuple | None = None

    def __init__(self, n_items: int, n_trees: int = 10, leaf_size: int = 1, labels: ArrayLike | None = None,
                 redundancy: int | str = 1, random_state: RandomState = None, values: ArrayLike | None = None) -> None:
        store_params(self, locals())

    # -- validation and set-up ----------------------------------------------------------
    def _check_params(self) -> None:
        n = check_int("n_items", self.n_items, 2)
        if n > MAX_ITEMS:
            raise ValueError(f"n_items must be <= {MAX_ITEMS}, got {n}")
        check_int("n_trees", self.n_trees, 1)
        check_int("leaf_size", self.leaf_size, 1)
        self.rule_ = VoteRule(self.redundancy)
        self.classes_, self.label_codes_ = _encode_labels(self.labels, n)
        self.values_ = _check_values(self.values, n)

    def _ensure_init(self) -> None:
        if hasattr(self, "item_node_"):
            return
        self._check_params()
        rng = check_random_state(self.random_state)
        seeds = rng.integers(0, 2**63 - 1, size=int(self.n_trees), dtype=np.int64).astype(np.uint64)
        growth.plant(self, seeds, _TripletTable())
        load_counters(self, self._COUNTERS)
        growth.advance(self)

    # -- triplet codes (the growing: engine.comparison_growth) ------------------------------
    def _code(self, x, a, b) -> np.ndarray:
        return growth.triplet_codes(self.n_items, x, a, b)

    def _decode(self, codes: np.ndarray):
        n = np.int64(self.n_items)
        return codes // (n * n), (codes // n) % n, codes % n

    # -- the planner interface ------------------------------------------------------------
    def next_questions(self, budget: int) -> list[tuple[int, int, int]]:
        """Up to ``budget`` questions ``(x, p1, p2)``; issued copies count as pending until
        answered or released with :meth:`forget`. A triplet appears several times only when
        its redundancy needs several copies at once."""
        budget = check_int("budget", budget, 0)
        self._ensure_init()
        rows = self.table_.plan(budget, self.rule_)
        self.n_issued_ += int(rows.size)
        codes = self.table_.codes[rows]
        x, a, b = self._decode(codes)
        copy = self.table_.outstanding[rows] + self.table_.votes[rows].sum(axis=1) + _copy_index(rows)
        return _oriented(x, a, b, codes, copy)

    def observe(self, answers: Iterable[Sequence[int]]) -> None:
        """Apply a batch of answers ``(x, p1, p2, winner)`` in order.

        Raises ValueError (and changes nothing) for a bad index, a winner that is neither
        pivot, or a triplet this forest never asked. Answers to triplets already decided are
        counted in ``progress()["late_answers"]`` and otherwise ignored.
        """
        self._ensure_init()
        rows, a_wins = _check_answers(answers, int(self.n_items))
        if rows.shape[0] == 0:
            return
        codes = self._code(rows[:, 0], rows[:, 1:3].min(axis=1), rows[:, 1:3].max(axis=1))
        done_codes, done_a = _apply_answers(self, rows, codes, a_wins, "forest")
        if done_codes.size:
            flat = self.slot_code_.reshape(-1)
            waiting = np.flatnonzero(flat != NO_CODE)
            order = np.argsort(done_codes)
            sorted_codes, sorted_a = done_codes[order], done_a[order]
            pos, hit = find_sorted(sorted_codes, flat[waiting])
            growth.resolve(self, waiting[hit], sorted_a[pos[hit]])
            growth.advance(self)

    def asked(self, questions: Iterable[Sequence[int]]) -> np.ndarray:
        """Bool per ``(x, p1, p2)``: whether this forest asked that triplet (pending or decided)."""
        self._ensure_init()
        rows = check_triplets(questions, int(self.n_items), "question")
        if rows.shape[0] == 0:
            return np.zeros(0, bool)
        codes = self._code(rows[:, 0], rows[:, 1:3].min(axis=1), rows[:, 1:3].max(axis=1))
        return ~self.table_.check_known(codes)

    def forget(self, questions: Iterable[Sequence[int]]) -> int:
        """Release issued copies that expired unanswered, one per listed ``(x, p1, p2)``, so they
        are handed out again. Questions not pending (decided, unknown) are ignored. Returns the
        number of copies released."""
        self._ensure_init()
        rows = check_triplets(questions, int(self.n_items), "question")
        if rows.shape[0] == 0:
            return 0
        codes = self._code(rows[:, 0], rows[:, 1:3].min(axis=1), rows[:, 1:3].max(axis=1))
        released = self.table_.release(codes)
        self.n_released_ += released
        return released

    @property
    def done(self) -> bool:
        """True once every node of every tree is split or a leaf."""
        self._ensure_init()
        return bool(np.all(self.node_status_[: self.n_nodes_] >= SPLIT))

    def result(self) -> ForestResult:
        self._ensure_init()
        k = self.n_nodes_
        return ForestResult(
            n_items=int(self.n_items), n_trees=int(self.n_trees),
            node_tree=self.node_tree_[:k].copy(), node_parent=self.node_parent_[:k].copy(),
            node_depth=self.node_depth_[:k].copy(), node_status=self.node_status_[:k].copy(),
            node_size=self.node_size_[:k].copy(), node_pivots=self.node_pivots_[:k].copy(),
            node_children=self.node_children_[:k].copy(), item_node=self.item_node_.copy(),
            done=self.done,
        )

    def progress(self) -> dict:
        """Numbers for a dashboard (JSON-safe)."""
        self._ensure_init()
        k, m = self.n_nodes_, int(self.n_trees)
        tree, status = self.node_tree_[:k], self.node_status_[:k]
        built = np.bincount(tree[status >= SPLIT], minlength=m)
        pending = np.bincount(tree[status < SPLIT], minlength=m)
        depth = np.zeros(m, np.int64)
        np.maximum.at(depth, tree, self.node_depth_[:k])
        return {
            "n_trees": m,
            "n_items": int(self.n_items),
            "trees_built": int((pending == 0).sum()),
            "nodes_built": built.tolist(),
            "nodes_pending": pending.tolist(),
            "depth": depth.tolist(),
            "leaves": int((status == LEAF).sum()),
            "questions_issued": int(self.n_issued_),
            "answers_counted": int(self.n_answers_),
            "answers": int(self.n_answers_ + self.n_late_),
            "items_certified": 0,
            "late_answers": int(self.n_late_),
            "released_questions": int(self.n_released_),
            "pending_questions": int(self.table_.outstanding.sum()),
            "open_triplets": int(self.table_.codes.size),
            "decided_triplets": self.table_.n_decided,
            "waiting_items": int((self.slot_code_ != NO_CODE).sum()),
            "done": self.done,
        }

    # -- using a built forest ------------------------------------------------------------
    def route(self, item: int, refine: int = 8, vote: str = "pooled",
              redundancy: int | str | None = None) -> ForestRoute:
        """A planner that routes a new item (any int id; answers must use it as x) down every
        tree, one triplet per level in all trees at once, then ranks the candidates; see
        :class:`ForestRoute`."""
        return ForestRoute(self, item, refine=refine, vote=vote, redundancy=redundancy)

    def leaf_members(self, node: int) -> np.ndarray:
        self._ensure_init()
        keys, items = leaf_index(self)
        lo, hi = np.searchsorted(keys, node, "left"), np.searchsorted(keys, node, "right")
        return items[lo:hi]

    def neighbor_graph(self, k: int = 1, max_group: int = 64) -> NeighborGraph:
        """Each item's most frequent leaf-mates across trees: an approximate k-NN graph.

        In each tree an item's neighbourhood is its leaf, or the leaf's parent when the leaf
        holds only the item (n0 = 1). A mate j of i scores Σ_trees 1/(|neighbourhood| − 1): the
        expected number of trees in which j is a random neighbourhood-mate of i. Neighbourhoods
        larger than ``max_group`` are skipped (they say little and cost |N|²). The graph's
        ``estimates`` are distance-like (smaller = closer): 1 − score / n_trees, the chance that
        j is *not* the mate of i drawn from a random tree; NaN where an item has fewer than k mates.
        """
        self._ensure_init()
        return leaf_mates_graph(self, check_int("k", k, 1), max_group)

    # -- state ---------------------------------------------------------------------------
    def to_state(self) -> dict:
        """Plain arrays plus JSON-safe scalars (version ``STATE_VERSION``); see docs/forest-schema.md."""
        self._ensure_init()
        k = self.n_nodes_
        state = {
            "class": type(self).__name__,
            "version": STATE_VERSION,
            "n_items": int(self.n_items),
            "n_trees": int(self.n_trees),
            "leaf_size": int(self.leaf_size),
            "redundancy": self.rule_.redundancy,
            "label_classes": None if self.classes_ is None else self.classes_.copy(),
            "label_codes": None if self.label_codes_ is None else self.label_codes_.copy(),
            "values": None if self.values_ is None else self.values_.copy(),
            "tree_seeds": self.tree_seeds_.copy(),
            "n_nodes": int(k),
            **{name: getattr(self, name + "_")[:k].copy() for name in self._NODE_ARRAYS},
            "item_node": self.item_node_.copy(),
            "slot_code": self.slot_code_.copy(),
            **counters_state(self, self._COUNTERS),
        }
        state.update(self.table_.to_state("triplets_"))
        return state

    @classmethod
    def from_state(cls, state: dict) -> ComparisonForest:
        check_state(state, cls.__name__, (STATE_VERSION,))
        labels = None
        if state["label_classes"] is not None:
            labels = np.asarray(state["label_classes"])[np.asarray(state["label_codes"], np.int64)]
        forest = cls(int(state["n_items"]), n_trees=int(state["n_trees"]), leaf_size=int(state["leaf_size"]),
                     labels=labels, redundancy=state["redundancy"], random_state=None,
                     values=state["values"])
        forest._check_params()
        k = int(state["n_nodes"])
        forest.tree_seeds_ = np.asarray(state["tree_seeds"], np.uint64).copy()
        forest.n_nodes_ = k
        for name, (dtype, shape, _) in cls._NODE_ARRAYS.items():
            setattr(forest, name + "_", array_from_state(state[name], dtype, shape))
        forest.item_node_ = np.asarray(state["item_node"], np.int64).copy()
        forest.slot_code_ = np.asarray(state["slot_code"], np.int64).copy()
        shape = (forest.n_trees, forest.n_items)
        if forest.item_node_.shape != shape or forest.slot_code_.shape != shape:
            raise ValueError(f"item_node and slot_code must have shape {shape}")
        if any(getattr(forest, name + "_").shape[0] != k for name in cls._NODE_ARRAYS):
            raise ValueError("node arrays in state disagree with n_nodes")
        forest.table_ = _TripletTable.from_state(state, "triplets_")
        load_counters(forest, cls._COUNTERS, state)
        return forest

    def to_json(self) -> dict:
        """The forest as a JSON document (docs/forest-schema.md, ``schema_version`` 1)."""
        return forest_to_json(self)


def _encode_labels(labels, n: int):
    if labels is None:
        return None, None
    arr = np.asarray(labels)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"labels must be an array-like of length n_items={n}, got shape {arr.shape}")
    if arr.dtype == object or arr.dtype.kind not in "biufUS":
        raise ValueError("labels must be ints or strings (one type)")
    if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
        raise ValueError("labels must be finite")
    classes, codes = np.unique(arr, return_inverse=True)
    return classes, codes.astype(np.int64).ravel()


def _check_values(values, n: int):
    if values is None:
        return None
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"values must be an array-like of length n_items={n}, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("values must be finite")
    return arr


def _python_scalar(value):
    return value.item() if isinstance(value, np.generic) else value


# ----------------------------------------------------------------------------------------
# routing a new item
# ----------------------------------------------------------------------------------------
class ForestRoute:
    """Route one new item q through every tree of a built forest, then rank candidates.

    Phase 1 asks ``(q, p1, p2)`` at each tree's current node, all trees at once (one triplet
    per level; a triplet shared by several trees is asked once; when q is itself a pivot it
    follows its own side without asking). Phase 2 takes the ``refine`` candidates most frequent
    in the reached leaves and runs a knock-out tournament of triplets ``(q, c_i, c_j)`` between
    them; the champion is ranked first, the rest by frequency. ``refine <= 1`` skips phase 2.

    ``vote="pooled"``: the label is the majority over the pooled leaf members of all trees;
    ``vote="trees"``: every tree votes with its leaf's majority label, majority of trees wins.
    Ties go to the smallest class.
    """

    _COUNTERS = ("n_issued", "n_answers", "n_late")

    def __init__(self, forest: ComparisonForest, item: int, refine: int = 8, vote: str = "pooled",
                 redundancy: int | str | None = None) -> None:
        if not forest.done:
            raise ValueError("route needs a fully built forest (forest.done is False)")
        self.forest = forest
        self.item = check_int("item", item, 0)
        self.refine = check_int("refine", refine, 0)
        if vote not in ("pooled", "trees"):
            raise ValueError(f"vote must be 'pooled' or 'trees', not {vote!r}")
        self.vote = vote
        self.redundancy = forest.rule_.redundancy if redundancy is None else redundancy
        self.rule_ = VoteRule(self.redundancy)
        self.node_ = np.arange(int(forest.n_trees), dtype=np.int64)
        self.table_ = _TripletTable()
        self.bracket_ = np.empty(0, np.int64)  # contestants of the current tournament round
        self.candidates_ = np.empty(0, np.int64)
        self.counts_ = np.empty(0, np.int64)
        self.phase_ = "trees"
        load_counters(self, self._COUNTERS)
        self._advance()

    def _code(self, a, b):
        return np.asarray(a, np.int64) * np.int64(self.forest.n_items) + b

    def _advance(self) -> None:
        f = self.forest
        while self.phase_ == "trees":
            inner = np.flatnonzero(f.node_status_[self.node_] == SPLIT)
            if inner.size == 0:
                self._start_tournament()
                break
            nodes = self.node_[inner]
            p = f.node_pivots_[nodes]
            codes = self._code(p.min(axis=1), p.max(axis=1))
            known, a_wins = self.table_.find_decided(codes)
            winner = np.where(a_wins, p.min(axis=1), p.max(axis=1))
            winner = np.where(p[:, 0] == self.item, p[:, 0], np.where(p[:, 1] == self.item, p[:, 1], winner))
            move = known | (p[:, 0] == self.item) | (p[:, 1] == self.item)
            if not move.any():
                self.table_.add_live(codes, f.node_depth_[nodes])
                break
            side = (winner != p[:, 0]).astype(np.int64)
            self.node_[inner[move]] = f.node_children_[nodes[move], side[move]]
        while self.phase_ == "refine":
            if self.bracket_.size <= 1:
                self.phase_ = "done"
                break
            a, b = self.bracket_[0:-1:2], self.bracket_[1::2]
            codes = self._code(np.minimum(a, b), np.maximum(a, b))
            known, a_wins = self.table_.find_decided(codes)
            if not known.all():
                self.table_.add_live(codes[~known], np.full(int((~known).sum()), 1 << 30, np.int64))
                break
            winners = np.where(a_wins, np.minimum(a, b), np.maximum(a, b))
            bye = self.bracket_[-1:] if self.bracket_.size % 2 else np.empty(0, np.int64)
            self.bracket_ = np.concatenate([winners, bye])

    def _pooled(self):
        keys, items = leaf_index(self.forest)
        lo = np.searchsorted(keys, self.node_, "left")
        hi = np.searchsorted(keys, self.node_, "right")
        sizes = hi - lo
        return items[np.repeat(lo, sizes) + ranges(sizes)], sizes

    def _ranked_candidates(self):
        """Items of the reached nodes but q, by how many trees hold them; where a tree's node
        holds only q (q is a training item and n0 = 1) its parent stands in."""
        f = self.forest
        nodes = self.node_.copy()
        if self.item < int(f.n_items):
            alone = (f.node_size_[nodes] < 2) & (f.node_parent_[nodes] != NO_NODE)
            nodes[alone] = f.node_parent_[nodes[alone]]
        keys, items = leaf_index(f)
        trees = np.arange(nodes.size)
        members = [items[np.searchsorted(keys, lo):np.searchsorted(keys, lo, "right")] for lo in nodes[
            f.node_status_[nodes] == LEAF]]
        inner = nodes[f.node_status_[nodes] != LEAF]
        for node, t in zip(inner.tolist(), trees[f.node_status_[nodes] != LEAF].tolist(), strict=True):
            members.append(np.flatnonzero(descends(f, f.item_node_[t], node)))
        pooled = np.concatenate(members) if members else np.empty(0, np.int64)
        pooled = pooled[pooled != self.item]
        cand, counts = np.unique(pooled, return_counts=True)
        order = np.lexsort((cand, -counts))
        return cand[order], counts[order]

    def _start_tournament(self) -> None:
        self.candidates_, self.counts_ = self._ranked_candidates()
        self.bracket_ = self.candidates_[: self.refine] if self.refine > 1 else self.candidates_[:1]
        self.phase_ = "refine"

    def next_questions(self, budget: int) -> list[tuple[int, int, int]]:
        budget = check_int("budget", budget, 0)
        rows = self.table_.plan(budget, self.rule_)
        self.n_issued_ += int(rows.size)
        codes = self.table_.codes[rows]
        n = np.int64(self.forest.n_items)
        a, b = codes // n, codes % n
        copy = self.table_.outstanding[rows] + self.table_.votes[rows].sum(axis=1) + _copy_index(rows)
        return _oriented(np.full(rows.size, self.item, np.int64), a, b, codes, copy)

    def observe(self, answers: Iterable[Sequence[int]]) -> None:
        """Answers ``(q, p1, p2, winner)``; same validation and late-answer rule as the forest."""
        rows, a_wins = _check_answers(answers, int(self.forest.n_items), (self.item, self.item + 1))
        if rows.shape[0] == 0:
            return
        codes = self._code(rows[:, 1:3].min(axis=1), rows[:, 1:3].max(axis=1))
        _apply_answers(self, rows, codes, a_wins, "search")
        self._advance()

    def asked(self, questions: Iterable[Sequence[int]]) -> np.ndarray:
        """Bool per ``(q, p1, p2)``: whether this search asked that triplet about its item."""
        # the head may be an item added to the study after the forest was built, as this search's is
        n = int(self.forest.n_items)
        rows = check_triplets(questions, n, "question", head_range=(0, max(n, self.item + 1)))
        if rows.shape[0] == 0:
            return np.zeros(0, bool)
        codes = self._code(rows[:, 1:3].min(axis=1), rows[:, 1:3].max(axis=1))
        return (rows[:, 0] == self.item) & ~self.table_.check_known(codes)

    def forget(self, questions: Iterable[Sequence[int]]) -> int:
        rows = check_triplets(questions, int(self.forest.n_items), "question", head_range=(self.item, self.item + 1))
        if rows.shape[0] == 0:
            return 0
        return self.table_.release(self._code(rows[:, 1:3].min(axis=1), rows[:, 1:3].max(axis=1)))

    @property
    def done(self) -> bool:
        return self.phase_ == "done"

    def progress(self) -> dict:
        return {
            "phase": self.phase_,
            "trees_at_leaf": int((self.forest.node_status_[self.node_] == LEAF).sum()),
            "questions_issued": int(self.n_issued_),
            "answers_counted": int(self.n_answers_),
            "answers": int(self.n_answers_ + self.n_late_),
            "items_certified": 0,
            "late_answers": int(self.n_late_),
            "pending_questions": int(self.table_.outstanding.sum()),
            "done": self.done,
        }

    def result(self) -> RouteResult:
        f = self.forest
        pooled, sizes = self._pooled()
        if self.phase_ == "trees":
            neighbors, counts = self._ranked_candidates()
        else:
            neighbors, counts = self.candidates_, self.counts_
            if self.bracket_.size == 1 and neighbors.size:
                champ = int(self.bracket_[0])
                rest = neighbors != champ
                neighbors = np.r_[champ, neighbors[rest]]
                counts = np.r_[self.counts_[~rest], self.counts_[rest]]
        label = None
        if f.label_codes_ is not None and pooled.size:
            k = f.classes_.size
            if self.vote == "pooled":
                tally = np.bincount(f.label_codes_[pooled], minlength=k)
            else:
                tree_of = np.repeat(np.arange(sizes.size), sizes)
                per_tree = np.zeros((sizes.size, k), np.int64)
                np.add.at(per_tree, (tree_of, f.label_codes_[pooled]), 1)
                votes = np.argmax(per_tree, axis=1)[sizes > 0]
                tally = np.bincount(votes, minlength=k)
            label = _python_scalar(f.classes_[int(np.argmax(tally))])
        value = None
        if f.values_ is not None and pooled.size:
            value = float(f.values_[pooled].mean())
        return RouteResult(item=self.item, leaves=self.node_.copy(), neighbors=np.asarray(neighbors, np.int64),
                           counts=np.asarray(counts, np.int64), label=label, value=value, done=self.done,
                           n_answers=int(self.n_answers_))

    def to_state(self) -> dict:
        """The search's own state (the forest is saved separately)."""
        state = {
            "class": type(self).__name__, "version": STATE_VERSION, "item": self.item, "refine": self.refine,
            "vote": self.vote, "redundancy": self.rule_.redundancy, "phase": self.phase_,
            "node": self.node_.copy(), "bracket": self.bracket_.copy(), "candidates": self.candidates_.copy(),
            "counts": self.counts_.copy(), **counters_state(self, self._COUNTERS),
        }
        state.update(self.table_.to_state("triplets_"))
        return state

    @classmethod
    def from_state(cls, state: dict, forest: ComparisonForest) -> ForestRoute:
        check_state(state, cls.__name__, (STATE_VERSION,))
        search = cls.__new__(cls)
        search.forest = forest
        search.item, search.refine, search.vote = int(state["item"]), int(state["refine"]), state["vote"]
        search.redundancy = state["redundancy"]
        search.rule_ = VoteRule(search.redundancy)
        search.phase_ = state["phase"]
        search.node_ = np.asarray(state["node"], np.int64).copy()
        search.bracket_ = np.asarray(state["bracket"], np.int64).copy()
        search.candidates_ = np.asarray(state["candidates"], np.int64).copy()
        search.counts_ = np.asarray(state["counts"], np.int64).copy()
        load_counters(search, cls._COUNTERS, state)
        search.table_ = _TripletTable.from_state(state, "triplets_")
        return search


# ----------------------------------------------------------------------------------------
# offline driver
# ----------------------------------------------------------------------------------------
def run_with_oracle(planner: ComparisonForest | ForestRoute, oracle: Callable, batch: int = 100_000,
                    max_rounds: int = 100_000) -> int:
    """Drive a planner with a simulated rater until it is done; returns the answers given.

    ``oracle`` is anything with ``answer(questions) -> [(x, p1, p2, winner)]`` (e.g.
    :class:`simulation.oracles.TripletOracle`) or a callable taking the same list.
    """
    answer = getattr(oracle, "answer", oracle)
    asked = 0
    for _ in range(max_rounds):
        if planner.done:
            return asked
        questions = planner.next_questions(batch)
        if not questions:
            raise RuntimeError("planner is not done but has nothing to ask")
        asked += len(questions)
        planner.observe(answer(questions))
    raise RuntimeError(f"planner not done after {max_rounds} rounds")


# ----------------------------------------------------------------------------------------
# the researcher's JSON document (docs/forest-schema.md); ``engine.forest_export`` names it
# ----------------------------------------------------------------------------------------
SCHEMA_VERSION = 1
KIND = "comparison_forest"


def forest_to_json(forest: ComparisonForest) -> dict:
    """A JSON-safe dict (``json.dumps`` it as is) describing every tree of ``forest``.

    Node ids are local to their tree and numbered in creation order, the root being 0.
    """
    res = forest.result()
    progress = forest.progress()
    labels = None
    if forest.classes_ is not None:
        labels = [v.item() for v in forest.classes_[forest.label_codes_]]
    trees = []
    for t in range(res.n_trees):
        nodes = np.flatnonzero(res.node_tree == t)  # ascending global id = creation order
        local = {int(g): i for i, g in enumerate(nodes.tolist())}
        members = res.item_node[t]
        order = np.argsort(members, kind="stable")
        keys = members[order]
        out = []
        for g in nodes.tolist():
            status = int(res.node_status[g])
            entry = {
                "id": local[g],
                "parent": None if res.node_parent[g] == NO_NODE else local[int(res.node_parent[g])],
                "depth": int(res.node_depth[g]),
                "status": STATUS_NAMES[status],
                "size": int(res.node_size[g]) if status >= SPLITTING else None,
            }
            if status in (SPLITTING, SPLIT):
                entry["pivots"] = [int(p) for p in res.node_pivots[g]]
                entry["children"] = [local[int(c)] for c in res.node_children[g]]
            if status != SPLIT:
                lo, hi = np.searchsorted(keys, g, "left"), np.searchsorted(keys, g, "right")
                entry["members"] = sorted(int(i) for i in order[lo:hi])
            out.append(entry)
        trees.append({"tree": t, "seed": str(int(forest.tree_seeds_[t])), "nodes": out})
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": KIND,
        "n_items": res.n_items,
        "n_trees": res.n_trees,
        "leaf_size": int(forest.leaf_size),
        "redundancy": forest.rule_.redundancy,
        "labels": labels,
        "values": None if forest.values_ is None else [float(v) for v in forest.values_],
        "done": res.done,
        "questions_issued": progress["questions_issued"],
        "answers_counted": progress["answers_counted"],
        "trees": trees,
    }


def forest_from_json(doc: dict) -> ComparisonForest:
    """Rebuild a forest from :func:`forest_to_json` output (structure and item positions).

    Votes on undecided triplets are not part of the export: a forest still being built comes
    back with its pending nodes re-asking their open triplets.
    """
    if doc.get("kind") != KIND:
        raise ValueError(f"not a comparison forest document (kind={doc.get('kind')!r})")
    version = doc.get("schema_version")
    if not isinstance(version, int) or version < 1 or version > SCHEMA_VERSION:
        raise ValueError(f"unsupported schema_version {version!r} (this code reads 1..{SCHEMA_VERSION})")
    n, m = int(doc["n_items"]), int(doc["n_trees"])
    if len(doc["trees"]) != m:
        raise ValueError("n_trees disagrees with the number of trees")
    forest = ComparisonForest(n, n_trees=m, leaf_size=int(doc["leaf_size"]), labels=doc.get("labels"),
                              redundancy=doc["redundancy"], values=doc.get("values"))
    forest._check_params()
    nodes, arrays = read_forest_doc(doc["trees"], n, STATUS_NAMES)
    total = arrays["node_tree"].size
    node_size = np.zeros(total, np.int64)
    node_pivots = np.full((total, 2), -1, np.int64)
    for g, node in nodes:
        node_size[g] = node["size"] or 0
        if "pivots" in node:
            node_pivots[g] = node["pivots"]
    node_tree, node_depth, node_status = arrays["node_tree"], arrays["node_depth"], arrays["node_status"]
    item_node = arrays["item_node"]
    slot_code = np.full((m, n), -1, np.int64)
    waiting = np.zeros(total, np.int64)
    splitting = np.flatnonzero(node_status == SPLITTING)
    for g in splitting:
        t = node_tree[g]
        items = np.flatnonzero(item_node[t] == g)
        a, b = node_pivots[g].min(), node_pivots[g].max()
        slot_code[t, items] = (items * n + a) * n + b
        waiting[g] = items.size
    state = {
        "class": "ComparisonForest", "version": 1, "n_items": n, "n_trees": m,
        "leaf_size": int(doc["leaf_size"]), "redundancy": forest.rule_.redundancy,
        "label_classes": forest.classes_, "label_codes": forest.label_codes_, "values": forest.values_,
        "tree_seeds": arrays["tree_seeds"], "n_nodes": total, "node_tree": node_tree,
        "node_parent": arrays["node_parent"], "node_depth": node_depth, "node_key": arrays["node_key"],
        "node_status": node_status, "node_size": node_size, "node_waiting": waiting, "node_pivots": node_pivots,
        "node_children": arrays["node_children"], "item_node": item_node, "slot_code": slot_code,
        "n_issued": int(doc.get("questions_issued", 0)), "n_answers": int(doc.get("answers_counted", 0)),
        "n_late": 0, "n_released": 0, **_TripletTable().to_state("triplets_"),
    }
    rebuilt = ComparisonForest.from_state(state)
    codes = slot_code[slot_code >= 0]
    if codes.size:
        rebuilt.table_.add_live(codes, node_depth[item_node[slot_code >= 0]])
    return rebuilt
