"""Screens of more than one triplet: odd-one-out triples and ranked grids, over any triplet learner.

Two question kinds show a rater several items at once and each answer implies several anchored
triplets ``(head, x, y, winner)`` ("head is more like winner than the other"):

- ``odd_one_out``: three items, no head; the rater picks the one least like the other two. With
  x, y the two left, "x and y belong together" implies (x; y, odd) -> y and (y; x, odd) -> x
  (:func:`engine.implied_triplets.odd_one_out_triplets`). This is the THINGS / SPoSE reading of an
  answer.
- ``rank``: a head and n references (3 <= n <= 12); the rater picks the k most alike, most alike
  first (PsiZ's "8-rank-2" for n = 8, k = 2). Each pick s_t beats every later pick and every
  unpicked reference: (head; s_t, s_u) and (head; s_t, x), winner s_t
  (:func:`engine.implied_triplets.rank_triplets`); 8-rank-2 gives 13 triplets a screen.

:class:`OddOneOutScreens` and :class:`RankScreens` wrap any triplet learner (as
:class:`engine.adapters.PairTripletAdapter` wraps pair planners): they propose whole screens,
convert each answer with the two functions above and feed the learner's ``observe`` with the
implied ``(head, a, b, winner)`` rows. Numpy only; must never import Flask, Redis, RQ,
``webapp`` or ``workers``.
"""
from __future__ import annotations

import heapq
import numbers
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from .graph import RefitsBeside
from .implied_triplets import odd_one_out_triplets, pick_triplets, rank_triplets
from .registry import restore_bare_planner
from .utils import RandomState, check_random_state, check_state, generator_from_state, generator_state, take_one

if TYPE_CHECKING:
    from .graph import NeighborGraph, Progress

#: Smallest and largest number of references a rank screen shows.
MIN_REFERENCES, MAX_REFERENCES = 3, 12
#: How a wrapper chooses screens: "adaptive" (from the learner's model) or "random".
SCREEN_MODES = ("adaptive", "random")


# ---------------------------------------------------------------------------------------------- checks
def _index(x: Any, n_items: int, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, (numbers.Integral, np.integer)):
        raise ValueError(f"{what} must be an item index (an integer), got {x!r}")
    if not 0 <= int(x) < n_items:
        raise ValueError(f"{what} {int(x)} is not an item of this study (items are numbered 0..{n_items - 1})")
    return int(x)


def check_odd_one_out(a: Any, b: Any, c: Any, odd: Any, n_items: int) -> tuple[int, int, int, int]:
    """Validate one odd-one-out answer (three different items, ``odd`` one of them); returns it as ints.

    Raises ValueError saying what is wrong in words a researcher understands."""
    a, b, c = (_index(x, n_items, "a shown item") for x in (a, b, c))
    odd = _index(odd, n_items, "the odd one")
    if len({a, b, c}) != 3:
        raise ValueError(f"an odd-one-out screen shows three different items, got {a}, {b}, {c}")
    if odd not in (a, b, c):
        raise ValueError(f"the odd one ({odd}) must be one of the three items shown ({a}, {b}, {c})")
    return a, b, c, odd


def check_rank(head: Any, references: Any, picks: Any, n_items: int,
               n_select: int | None = None) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """Validate one rank answer: a head, 3..12 different references (not the head), and the
    references picked as most alike, most alike first, all different (exactly ``n_select`` of
    them when given). Returns ``(head, references, picks)`` as ints; ValueError otherwise."""
    head = _index(head, n_items, "the head")
    if isinstance(references, (str, bytes)) or not isinstance(references, (Sequence, np.ndarray)):
        raise ValueError(f"the references must be a list of item indices, got {references!r}")
    refs = tuple(_index(r, n_items, "a reference") for r in references)
    if not MIN_REFERENCES <= len(refs) <= MAX_REFERENCES:
        raise ValueError(f"a rank screen shows {MIN_REFERENCES} to {MAX_REFERENCES} references, got {len(refs)}")
    if len(set(refs)) != len(refs):
        raise ValueError(f"the references of a rank screen must all be different, got {list(refs)}")
    if head in refs:
        raise ValueError(f"the head ({head}) cannot also be one of its references")
    if isinstance(picks, (str, bytes)) or not isinstance(picks, (Sequence, np.ndarray)):
        raise ValueError(f"the picks must be a list of item indices, most alike first, got {picks!r}")
    sel = tuple(_index(s, n_items, "a pick") for s in picks)
    if n_select is not None and len(sel) != n_select:
        raise ValueError(f"this screen asks for {n_select} pick{'s' if n_select != 1 else ''}, got {len(sel)}")
    if not 1 <= len(sel) < len(refs):
        raise ValueError(f"a rank answer picks at least one and fewer than all {len(refs)} references, "
                         f"got {len(sel)}")
    if len(set(sel)) != len(sel):
        raise ValueError(f"a reference can be picked only once, got {list(sel)}")
    stray = [s for s in sel if s not in refs]
    if stray:
        raise ValueError(f"picked item{'s' if len(stray) > 1 else ''} {stray} "
                         f"{'are' if len(stray) > 1 else 'is'} not among the references shown")
    return head, refs, sel


def _checked(answers: Iterable[Sequence[Any]], width: int, rows: str, check: Callable[..., Any],
             **given: Any) -> list:
    """Every answer row as ``check(*row, **given)`` returns it; ValueError saying what the ``rows`` are
    when one has not ``width`` fields."""
    checked = []
    for r in answers:
        if len(r) != width:
            raise ValueError(f"{rows}, got {r!r}")
        checked.append(check(*r, **given))
    return checked


# ---------------------------------------------------------------------------------------------- planners
@runtime_checkable
class ScreenSource(Protocol):
    """What a learner offers the screen planners beside the :class:`engine.graph.Planner` life cycle
    (duels and the embeddings do; random triplets do not): ``screen_candidates(h)`` h's likely
    neighbours, best first, and whether h is certified; ``refresh_if_due()`` the refit it would do
    before planning its own questions; ``screen_of_tests(h, size)`` a screen of up to ``size`` items the
    learner asks to be shown as it is (no picks kept, no explorers: duels tests trusted features so), or
    None."""

    def screen_candidates(self, h: int) -> tuple[np.ndarray, bool]: ...

    def refresh_if_due(self) -> None: ...

    def screen_of_tests(self, h: int, size: int) -> np.ndarray | None: ...


def _ranked_candidates(inner: Any, h: int) -> tuple[np.ndarray, bool]:
    """h's likely neighbours, best first, from the learner's model, and whether h is certified;
    nothing is known of a learner that is no :class:`ScreenSource`."""
    if not isinstance(inner, ScreenSource):
        return np.empty(0, np.int64), False
    cands, certified = inner.screen_candidates(h)
    return np.asarray(cands, np.int64), bool(certified)


class _Screens:
    """What both screen planners share: the inner learner, pool mode, the issued screens."""

    VERSION = 1

    def __init__(self, planner: Any, random_state: RandomState = None, screens: str = "adaptive") -> None:
        if screens not in SCREEN_MODES:
            raise ValueError(f"screens must be one of {', '.join(SCREEN_MODES)}, got {screens!r}")
        self.planner = planner
        self.n_items = int(planner.n_items)
        self.screens = screens
        self.random_state = random_state
        self.rng_ = check_random_state(random_state)
        self.issued_: dict[tuple, int] = {}
        self.n_issued_ = 0
        self.n_answers_ = 0
        self.n_triplets_ = 0
        self._pool = False

    # -- the inner learner
    @property
    def k(self) -> int:
        return 1  # the triplet learners behind a screen learn one neighbour per item

    @property
    def done(self) -> bool:
        return bool(self.planner.done)

    # live pool and refits (engine.graph.RefitsBeside), passed on to a learner that refits
    @property
    def pool(self) -> bool:
        """Live-pool mode (see ``engine.registry.drive_as_pool``), passed on to the learner."""
        return self._pool

    @pool.setter
    def pool(self, value: bool) -> None:
        self._pool = bool(value)
        if isinstance(self.planner, RefitsBeside):
            self.planner.pool = bool(value)

    @property
    def fitter(self) -> Any:
        return self.planner.fitter if isinstance(self.planner, RefitsBeside) else None

    @fitter.setter
    def fitter(self, value: Any) -> None:
        if isinstance(self.planner, RefitsBeside):
            self.planner.fitter = value

    def settle_fit(self) -> bool:
        return bool(self.planner.settle_fit()) if isinstance(self.planner, RefitsBeside) else False

    def fit_ready(self) -> bool | None:
        return self.planner.fit_ready() if isinstance(self.planner, RefitsBeside) else None

    def neighbor_graph(self, k: int = 1) -> NeighborGraph:
        return self.planner.neighbor_graph(k)

    def result(self) -> Any:
        return self.planner.result()

    def current_neighbors(self) -> np.ndarray:
        return self.neighbor_graph(1).neighbors[:, 0]

    def progress(self) -> Progress:
        inner = self.planner.progress()
        return {**inner, "answers": int(self.n_answers_), "questions_issued": int(self.n_issued_),
                "done": self.done, "triplets": int(self.n_triplets_),
                "pending_screens": int(sum(self.issued_.values()))}

    def _check_budget(self, budget: Any) -> int:
        if isinstance(budget, bool) or not isinstance(budget, (numbers.Integral, np.integer)):
            raise ValueError(f"budget must be an integer, got {budget!r}")
        return max(0, int(budget))

    def _random_others(self, exclude: set[int], count: int) -> list[int]:
        """``count`` different random items outside ``exclude`` (in the order drawn)."""
        n = self.n_items
        out: list[int] = []
        if n - len(exclude) < count:
            raise ValueError(f"{n} items cannot fill a screen of {count} more besides {len(exclude)}")
        seen = set(exclude)
        while len(out) < count:
            if len(seen) > n // 2:  # dense: draw from what is left
                left = np.setdiff1d(np.arange(n), np.fromiter(seen, np.int64))
                out.extend(int(x) for x in self.rng_.choice(left, size=count - len(out), replace=False))
                break
            x = int(self.rng_.integers(n))
            if x not in seen:
                seen.add(x)
                out.append(x)
        return out

    def _feed(self, rows: list[tuple[int, int, int, int]], n_screens: int) -> None:
        if rows:
            self.planner.observe(rows)
        self.n_triplets_ += len(rows)
        self.n_answers_ += n_screens

    def _base_state(self) -> dict:
        return {"class": type(self).__name__, "version": self.VERSION, "planner": self.planner.to_state(),
                "rng": generator_state(self.rng_), "screens": self.screens,
                "n_issued": int(self.n_issued_), "n_answers": int(self.n_answers_),
                "n_triplets": int(self.n_triplets_)}

    def _restore_base(self, state: dict) -> None:
        self.rng_ = generator_from_state(state["rng"])
        self.n_issued_ = int(state["n_issued"])
        self.n_answers_ = int(state["n_answers"])
        self.n_triplets_ = int(state["n_triplets"])


class OddOneOutScreens(_Screens):
    """A triplet learner asking odd-one-out triples.

    Each screen is a triplet question of the learner, ``(h, a, b)``, shown as the three items in a
    random order: for an adaptive learner (duels: a head with two of its close candidates, or an
    exploring triplet) an answer naming a or b as the odd one decides that duel; for a learner
    asking random triplets it is a uniformly random triple (the THINGS workflow). The learner's
    question stays pending until the screen is answered or forgotten.

    ``next_questions(budget) -> [(a, b, c), ...]``; ``observe([(a, b, c, odd), ...])`` with odd one
    of a, b, c (screens never issued are accepted too); ``forget(screens)``.
    """

    def __init__(self, planner: Any, random_state: RandomState = None, screens: str = "adaptive") -> None:
        super().__init__(planner, random_state=random_state, screens=screens)
        # sorted triple -> the learner's questions it was issued for (a multiset, in issue order)
        self.proposals_: dict[tuple[int, int, int], list[tuple[int, int, int]]] = {}

    def next_questions(self, budget: int) -> list[tuple[int, int, int]]:
        budget = self._check_budget(budget)
        if budget == 0:
            return []
        if self.screens == "random":
            n = self.n_items
            qs = []
            for _ in range(budget):
                h = int(self.rng_.integers(n))
                qs.append((h, *self._random_others({h}, 2)))
            own = False
        else:
            qs = [tuple(int(x) for x in q) for q in self.planner.next_questions(budget)]
            own = True
        out = []
        for q in qs:
            shown = tuple(int(q[i]) for i in self.rng_.permutation(3))
            key = tuple(sorted(shown))
            self.issued_[key] = self.issued_.get(key, 0) + 1
            if own:
                self.proposals_.setdefault(key, []).append(q)
            out.append(shown)
        self.n_issued_ += len(out)
        return out

    def _release(self, key: tuple[int, int, int]) -> tuple[int, int, int] | None:
        if not take_one(self.issued_, key):
            return None
        props = self.proposals_.get(key)
        if not props:
            return None
        q = props.pop(0)
        if not props:
            del self.proposals_[key]
        return q

    def observe(self, answers: Iterable[Sequence[int]]) -> None:
        checked = _checked((tuple(r) for r in answers), 4, "odd-one-out answers are rows (a, b, c, odd)",
                           check_odd_one_out, n_items=self.n_items)
        rows: list[tuple[int, int, int, int]] = []
        released = []
        for a, b, c, odd in checked:
            q = self._release(tuple(sorted((a, b, c))))
            if q is not None:
                released.append(q)
            rows.extend(odd_one_out_triplets(a, b, c, odd))
        if released:
            # the learner's question is answered through the implied triplets, which it takes as
            # any other answer: releasing it first keeps its load counts exact
            self.planner.forget(released)
        self._feed(rows, len(checked))

    def forget(self, questions: Iterable[Sequence[int]]) -> None:
        """Release issued screens that will never be answered (unknown ones are ignored)."""
        released = []
        for s in questions:
            a, b, c = (int(x) for x in s)
            q = self._release(tuple(sorted((a, b, c))))
            if q is not None:
                released.append(q)
        if released:
            self.planner.forget(released)

    def to_state(self) -> dict:
        rows = [(*key, *q) for key, props in sorted(self.proposals_.items()) for q in props]
        issued = np.array([(*key, c) for key, c in sorted(self.issued_.items())], np.int64).reshape(-1, 4)
        return {**self._base_state(), "issued": issued, "proposals": np.array(rows, np.int64).reshape(-1, 6)}

    @classmethod
    def from_state(cls, state: dict) -> OddOneOutScreens:
        check_state(state, cls.__name__, (cls.VERSION,))
        self = cls(restore_bare_planner(state["planner"]), screens=state["screens"])
        self._restore_base(state)
        self.issued_ = {(a, b, c): n for a, b, c, n in np.asarray(state["issued"], np.int64).reshape(-1, 4).tolist()}
        for a, b, c, h, x, y in np.asarray(state["proposals"], np.int64).reshape(-1, 6).tolist():
            self.proposals_.setdefault((a, b, c), []).append((h, x, y))
        return self


class RankScreens(_Screens):
    """A triplet learner asking rank screens: a head and ``n_reference`` references, of which the
    rater picks the ``n_select`` most alike, most alike first.

    Heads are served least-screened first (ties in a random order; outside a pool at most one screen
    per head a call, as ``CandidateDuels`` does). ``screens="adaptive"``: the references are the
    head's likeliest neighbours under the learner's model (duels: its shortlist by duel score, then
    embedding order; embeddings: the nearest points; duels where near duels are coin flips: a spread of
    its wider neighbourhood), ``n_reference - n_explore`` of them with the head's latest picks kept on
    (``KEEP_PICKS``), plus ``n_explore`` explorers (see :meth:`_references`); a head's first
    ``RANK_WARMUP`` screens, and those of a head the model knows nothing of yet, show random references.
    Heads whose neighbour the learner has certified are left until every other head has been served.
    ``screens="random"``: uniformly random references (the random-grid baseline).

    ``next_questions(budget) -> [(head, (r1, ..., rn)), ...]`` (references in a random order);
    ``observe([(head, (r1, ..., rn), (s1, ..., sk)), ...])``; ``forget(screens)``.
    """

    #: the anchored triplets one answer implies, ``(head, references, picks) -> [(head, x, y, winner)]``
    implied = staticmethod(rank_triplets)

    def __init__(self, planner: Any, random_state: RandomState = None, screens: str = "adaptive",
                 n_reference: int = 8, n_select: int = 2, n_explore: int | None = None) -> None:
        super().__init__(planner, random_state=random_state, screens=screens)
        for name, v in (("n_reference", n_reference), ("n_select", n_select)):
            if isinstance(v, bool) or not isinstance(v, (numbers.Integral, np.integer)):
                raise ValueError(f"{name} must be an integer, got {v!r}")
        if not MIN_REFERENCES <= n_reference <= MAX_REFERENCES:
            raise ValueError(f"n_reference must lie in {MIN_REFERENCES}..{MAX_REFERENCES}, got {n_reference}")
        if not 1 <= n_select < n_reference:
            raise ValueError(f"n_select must lie in 1..{n_reference - 1} (fewer than the references), got {n_select}")
        if self.n_items < n_reference + 1:
            raise ValueError(f"a rank screen of {n_reference} references needs at least {n_reference + 1} items, "
                             f"the study has {self.n_items}")
        self.n_reference = int(n_reference)
        self.n_select = int(n_select)
        if n_explore is None:
            n_explore = default_explorers(self.n_reference)
        if isinstance(n_explore, bool) or not isinstance(n_explore, (numbers.Integral, np.integer)) \
                or not 0 <= n_explore <= self.n_reference:
            raise ValueError(f"n_explore must be an integer in 0..{self.n_reference}, got {n_explore!r}")
        self.n_explore = int(n_explore)
        self.load_ = np.zeros(self.n_items, np.int64)  # screens per head, answered or pending
        self.answered_ = np.zeros(self.n_items, np.int64)  # answered screens per head
        # per head, the picks of its latest answered screen (-1: none yet)
        self.last_picks_ = np.full((self.n_items, self.n_select), -1, np.int64)

    def _references(self, h: int, cands: np.ndarray) -> list[int]:
        """The head's ``n_reference - n_explore`` likeliest neighbours, then explorers: alternately one
        of its next likeliest (past those shown, where the model may have misplaced the true neighbour)
        and a uniformly random item (the model's blind spots); random items fill what is left."""
        if not len(cands):
            return self._random_others({h}, self.n_reference)
        take = self.n_reference - self.n_explore
        refs = [int(c) for c in cands[:take] if c != h]
        if KEEP_PICKS:
            # the head's latest picks stay on its next screen, ahead of the model's weakest likely
            # neighbours: a pick the model has not placed near yet (an explorer) keeps being tested
            kept = [int(p) for p in self.last_picks_[h] if p >= 0 and p != h and int(p) not in refs]
            if kept:
                refs = refs[: max(0, take - len(kept))] + kept
        tail = [int(c) for c in cands[take:] if c != h and int(c) not in refs]
        near = self.rng_.permutation(len(tail)).tolist()
        for e in range(self.n_reference - len(refs)):
            if e % 2 == 0 and near:
                refs.append(tail[near.pop()])
            else:
                refs.extend(self._random_others({h, *refs}, 1))
        return refs

    def next_questions(self, budget: int) -> list[tuple[int, tuple[int, ...]]]:
        budget = self._check_budget(budget)
        if budget == 0:
            return []
        if isinstance(self.planner, ScreenSource):  # the learner's refits happen as when it plans its own questions
            self.planner.refresh_if_due()
        n = self.n_items
        tie = self.rng_.permutation(n)
        heap = [(0, int(self.load_[h]), int(tie[h]), h) for h in range(n)]
        heapq.heapify(heap)
        once = not self._pool
        out: list[tuple[int, tuple[int, ...]]] = []
        known: dict[int, tuple[np.ndarray, bool]] = {}
        while len(out) < budget and heap:
            parked, load, t, h = heapq.heappop(heap)
            if self.screens == "adaptive":
                if h not in known:
                    known[h] = (_ranked_candidates(self.planner, h) if self.answered_[h] >= RANK_WARMUP
                                else (np.empty(0, np.int64), False))
                cands, certified = known[h]
                if certified and not parked:
                    heapq.heappush(heap, (1, load, t, h))
                    continue
                # (candidates come only from a ScreenSource: none means the learner knows nothing of h yet)
                tests = self.planner.screen_of_tests(h, self.n_reference) if len(cands) else None
            else:
                cands, tests = np.empty(0, np.int64), None
            if tests is not None:  # shown as the learner asks (its tests), random items filling what is left
                refs = [int(x) for x in tests if x != h][: self.n_reference]
                refs += self._random_others({h, *refs}, self.n_reference - len(refs))
            else:
                refs = self._references(h, cands)
            shown = tuple(refs[i] for i in self.rng_.permutation(len(refs)))
            key = (h, *sorted(shown))
            self.issued_[key] = self.issued_.get(key, 0) + 1
            self.load_[h] += 1
            out.append((h, shown))
            if not once:
                heapq.heappush(heap, (parked, load + 1, t, h))
        self.n_issued_ += len(out)
        return out

    def _release(self, head: int, refs: Sequence[int]) -> bool:
        if take_one(self.issued_, (head, *sorted(refs))):
            self.load_[head] -= 1
            return True
        return False

    def observe(self, answers: Iterable[Sequence[Any]]) -> None:
        checked = _checked(answers, 3, "rank answers are rows (head, references, picks)", check_rank,
                           n_items=self.n_items, n_select=self.n_select)
        rows: list[tuple[int, int, int, int]] = []
        for head, refs, picks in checked:
            self._release(head, refs)
            self.load_[head] += 1
            self.answered_[head] += 1
            self.last_picks_[head] = picks
            rows.extend(self.implied(head, refs, picks))
        self._feed(rows, len(checked))

    def forget(self, questions: Iterable[Sequence[Any]]) -> None:
        """Release issued screens ``(head, references)`` that will never be answered (unknown ones are ignored)."""
        for q in questions:
            head, refs = q
            self._release(int(head), [int(r) for r in refs])

    def to_state(self) -> dict:
        width = self.n_reference + 2
        issued = np.array([(*key, c) for key, c in sorted(self.issued_.items())], np.int64).reshape(-1, width)
        return {**self._base_state(), "n_reference": self.n_reference, "n_select": self.n_select,
                "n_explore": self.n_explore, "issued": issued, "load": self.load_.copy(),
                "answered": self.answered_.copy(), "last_picks": self.last_picks_.copy()}

    @classmethod
    def from_state(cls, state: dict) -> RankScreens:
        check_state(state, cls.__name__, (cls.VERSION,))
        self = cls(restore_bare_planner(state["planner"]), screens=state["screens"],
                   n_reference=int(state["n_reference"]), n_select=int(state["n_select"]),
                   n_explore=int(state["n_explore"]))
        self._restore_base(state)
        width = self.n_reference + 2
        self.issued_ = {tuple(r[:-1]): r[-1] for r in np.asarray(state["issued"], np.int64).reshape(-1, width).tolist()}
        self.load_ = np.asarray(state["load"], np.int64).copy()
        self.answered_ = np.asarray(state["answered"], np.int64).copy()
        self.last_picks_ = np.asarray(state["last_picks"], np.int64).reshape(self.n_items, self.n_select).copy()
        return self


class PickScreens(RankScreens):
    """A triplet learner asking pick-k screens: a head and ``n_reference`` references, of which the rater
    picks the ``n_select`` most alike, in no order (Wilber et al.'s grid, HCOMP 2014). The screens are
    chosen as :class:`RankScreens` chooses them; an answer implies each pick beats each unpicked reference
    and nothing between two picks (:func:`engine.implied_triplets.pick_triplets`)."""

    implied = staticmethod(pick_triplets)


#: Screens of random references a head gets before its screens follow the learner's model
RANK_WARMUP = 1
#: Show a head its latest picks again on its next screen (see ``RankScreens._references``)
KEEP_PICKS = True


def default_explorers(n_reference: int) -> int:
    """Random references an adaptive rank screen shows beside the head's likeliest neighbours."""
    return max(1, n_reference // 4)


#: state["class"] -> the wrapper class restoring it
SCREEN_CLASSES = {cls.__name__: cls for cls in (OddOneOutScreens, RankScreens, PickScreens)}
