"""Learners: one algorithm of a study with its engine planner, and the translation between the
platform's question/answer documents and the engine's index tuples.

This is the one place that knows both. Must never import Flask.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from engine import anntri
from engine.adapters import draw_third, pair_sample
from engine.comparison_tree import ComparisonForest, ForestRoute
from engine.kinds import KINDS, kind_of
from engine.registry import (
    ALGORITHMS,
    SCREEN_PARAMS,
    common_progress,
    drive_as_pool,
    entry_for_state,
    make_planner,
    neighbor_graph,
    restore_planner,
)
from workers.store.answers import Answer
from workers.store.config import AlgorithmConfig, StudyConfig
from workers.store.questions import derived_triplet_question, pooled

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

    from engine.registry import Algorithm

#: Answers imported from a file carry this algorithm label.
IMPORTED = "import"
#: A comparison forest's saved state: the forest plus the searches routing items added later.
FOREST_STATE = "ForestStudy"
#: Algorithms whose planner grows a forest the researcher exports as JSON.
FOREST_ALGORITHMS = tuple(n for n, e in ALGORITHMS.items() if e.learns == "forest")
#: Algorithms that learn an embedding (exported as coordinates, drawn as a scatter).
EMBEDDING_ALGORITHMS = tuple(n for n, e in ALGORITHMS.items() if e.learns == "embedding")


#: A learned k-NN graph; learners without distance estimates (triplet win rates, forests) fill
#: ``estimates``/``lower``/``upper`` with NaN and ``neighbors`` with -1 where an item has none yet.
Graph = anntri.NeighborGraph


def _seed(config: StudyConfig, index: int):
    return None if config.random_state is None else int(config.random_state) + index


class Learner:
    """One algorithm of a study: builds questions for its pool and applies its answers."""

    def __init__(self, algorithm: AlgorithmConfig, config: StudyConfig, planner: Any,
                 routes: Mapping[int, ForestRoute] | None = None) -> None:
        self.algorithm = algorithm
        self.config = config
        # a pool holds questions for every rater at once and an update pass must stay short
        self.planner = drive_as_pool(planner)
        #: comparison forests: item added after the forest was built -> its search down the trees
        self.routes: dict[int, ForestRoute] = dict(routes or {})
        #: questions of the latest ``plan`` that repeat an arm still pending (``_least_asked``)
        self.repeats_planned = 0
        #: the latest ``plan`` planned nothing but put a finished refit in place
        self.fit_settled = False

    # ------------------------------------------------------------------ construction
    @property
    def entry(self) -> Algorithm:
        """The algorithm's entry of the table (:mod:`engine.registry`)."""
        return ALGORITHMS[self.algorithm.algorithm]

    @classmethod
    def new(cls, algorithm: AlgorithmConfig, config: StudyConfig, n_items: int,
            labels: Sequence[str | None] | None = None) -> Learner:
        index = config.algorithms.index(algorithm)
        entry = ALGORITHMS[algorithm.algorithm]
        # parameters stored before an algorithm dropped one (e.g. a window for Random) are ignored
        params = {k: v for k, v in algorithm.params.items()
                  if k in entry.params or k in SCREEN_PARAMS.get(algorithm.question_kind, {})}
        seed = _seed(config, index)
        unlabelled = labels is None or any(x is None for x in labels)
        if entry.needs_labels and unlabelled:
            raise ValueError(f"{entry.name} needs a label for every item (a 'label' column in the items CSV)")
        if params.get("supervised") and unlabelled:
            raise ValueError(f"a supervised {entry.name} needs a label for every item "
                             "(a 'label' column in the items CSV)")
        # The platform drives each planner in its native shape (pair planners get pairs and build
        # the triplet around them here, keeping which item was the probe in the answer document);
        # every other planner proposes whole screens of the study's kind (a grid takes its n and k).
        kind = algorithm.kind
        if entry.asks == "pair":
            kind = next(k for k in KINDS.values() if k.asks == "pair" and k.name in entry.question_kinds)
            kind_params = {}
        else:
            kind_params = kind.planner_params(config.settings_of(kind))
        planner = make_planner(entry.name, n_items, question_kind=kind.name, random_state=seed,
                               labels=None if unlabelled else list(labels), **kind_params, **params)
        return cls(algorithm, config, planner)

    @classmethod
    def from_state(cls, algorithm: AlgorithmConfig, config: StudyConfig, state: dict) -> Learner:
        entry_for_state(state)  # raises for a state no algorithm of the table restores
        if state.get("class") == FOREST_STATE:
            planner = ComparisonForest.from_state(state["forest"])
            routes = {int(r["item"]): ForestRoute.from_state(r, planner) for r in state["routes"]}
            return cls(algorithm, config, planner, routes)
        return cls(algorithm, config, restore_planner(state))

    @property
    def label(self) -> str:
        return self.algorithm.label

    def fit_beside(self, fitter: Any) -> None:
        """Hand the planner's refits to ``fitter`` (the worker's fit process; None: inside the pass)."""
        drive_as_pool(self.planner, fitter)

    @property
    def learns_graph(self) -> bool:
        return self.algorithm.learns_graph

    @property
    def is_forest(self) -> bool:
        """A triplet forest: takes only answers to triplets it asked, routes items added later."""
        return self.entry.asks == "triplet" and self.entry.learns == "forest"

    def sync_items(self, n_items: int) -> None:
        """Start routing items added to the study after its forest was built."""
        if not self.is_forest or not self.planner.done:
            return
        for item in range(int(self.planner.n_items), n_items):
            if item not in self.routes:
                self.routes[item] = self.planner.route(item)

    # ------------------------------------------------------------------ answers
    def engine_answers(self, answers: list[Answer]) -> list[tuple]:
        """The engine tuples of the answers this learner uses (its own, including its fallbacks)."""
        rows = []
        answers = [a for a in answers if not a.skipped]
        if self.learns_graph:
            scale = self.config.rating
            for a in answers:
                if a.algorithm != self.label:
                    continue
                if a.question_kind.asks == "pair" and a.value is not None:
                    rows.append((a.head, a.a, scale.distance(a.value)))
                elif a.probe is not None and a.picks:
                    rows.append(pair_sample(a.head, a.probe, a.picks[0]))
        elif self.entry.asks == "triplet" and not self.is_forest:
            # learners of any triplet (win rates, duels, embeddings) also learn from imported answers of
            # their kind; each answer becomes the planner's observation through its kind's entry
            kind = self.algorithm.kind
            rows = [kind.observation(a.shown, a.picks) for a in answers
                    if a.question_kind is kind and a.algorithm in (self.label, IMPORTED) and a.picks]
        elif self.entry.asks == "pair":  # rating-only pair learners (similarities)
            scale = self.config.rating
            rows = [(a.head, a.a, 1.0 - scale.distance(a.value)) for a in answers
                    if a.question_kind.asks == "pair" and a.algorithm == self.label and a.value is not None]
        else:
            n, kind = int(self.planner.n_items), self.algorithm.kind
            mine = [kind.observation(a.shown, a.picks) for a in answers
                    if a.question_kind is kind and a.algorithm == self.label and not a.fallback and a.head < n
                    and a.picks]
            # A forest only takes answers to triplets it asked (a rebuild without some raters
            # grows different trees, so older answers may no longer match any question).
            if mine:
                asked = self.planner.asked([r[:3] for r in mine])
                rows = [r for r, ok in zip(mine, asked, strict=True) if ok]
        return rows

    def _route_answers(self, answers: list[Answer]) -> dict[int, list[tuple]]:
        by_item: dict[int, list[tuple]] = {}
        kind = self.algorithm.kind
        for a in answers:
            if (a.question_kind is kind and a.algorithm == self.label and not a.fallback and a.head in self.routes
                    and not a.skipped):
                by_item.setdefault(a.head, []).append(kind.observation(a.shown, a.picks))
        return by_item

    def observe(self, answers: list[Answer]) -> int:
        """Apply the answers this learner uses; returns how many it used.

        A skipped question ("can't decide") carries no answer: it is released like an expired one,
        so the planner may ask it again (another rater may well decide)."""
        skipped = [a.question() for a in answers if a.skipped and a.algorithm == self.label]
        if skipped:
            self.forget(skipped)
        rows = self.engine_answers(answers)
        if rows:
            self.planner.observe(rows)
        used = len(rows)
        for item, item_rows in self._route_answers(answers).items():
            route = self.routes[item]
            known = [r for r, ok in zip(item_rows, route.asked([r[:3] for r in item_rows]), strict=True) if ok]
            if known:
                route.observe(known)
                used += len(known)
        return used

    def closed_round_answers(self, answers: list[Answer]) -> int:
        """How many of the answers this learner uses were asked for a round that is closed by now
        (before they are applied): still used for the estimates, but no longer for that round."""
        if not self.entry.rounds or not hasattr(self.planner, "status_"):  # no state before its first call
            return 0
        status = self.planner.status_
        return sum(1 for a in answers if a.algorithm == self.label and not a.fallback and not a.skipped
                   and 0 <= a.head < len(status) and status[a.head] != anntri.ROUND_OPEN)

    def forget(self, questions: list[dict]) -> None:
        """Release this learner's questions that expired unanswered, so they can be asked again."""
        mine = [q for q in questions if q.get("algorithm") == self.label and not q.get("fallback") and "kind" in q]
        if not mine:
            return
        if self.entry.asks == "pair":
            pairs = [kind_of(q).proposal(q) if kind_of(q).asks == "pair" else (q["head"], q["probe"]) for q in mine]
            self.planner.forget(pairs)
            return
        n = int(self.planner.n_items)
        own = [kind_of(q).proposal(q) for q in mine if kind_of(q).shown(q)[0] < n]
        if own:
            self.planner.forget(own)
        for q in mine:
            if q.get("head") in self.routes:
                self.routes[q["head"]].forget([kind_of(q).proposal(q)])

    # ------------------------------------------------------------------ questions
    def plan(self, budget: int, n_items: int, window: int | None = None) -> list[dict]:
        """Up to ``budget`` questions for the pool. Distance learners open more rounds (up to
        ``window`` and beyond, as needed) when their open rounds have too few distinct questions."""
        self.repeats_planned = 0
        if budget <= 0:
            # nothing to plan: a refit that finished beside the passes is still put in place (the
            # learned graph and the next questions use it), and the state is saved with it
            settle = getattr(self.planner, "settle_fit", None)
            self.fit_settled = bool(settle and settle())
            return []
        self.fit_settled = False
        planner = self.planner
        if window is not None and self.entry.rounds:
            planner.window = max(int(window), 1)
        planned = list(planner.next_questions(budget))
        if self.entry.rounds:
            # More raters than the open rounds have distinct questions: open more rounds (up to one
            # per wanted question; repeats would spend the rounds' sample caps), and only then ask
            # the open rounds' least-asked arms again.
            cap = min(n_items, max(int(window or 1), budget))
            while len(planned) < budget and planner.window < cap and not planner.done:
                planner.window = min(cap, max(planner.window + 1, math.ceil(planner.window * 1.5)))
                planned.extend(planner.next_questions(budget - len(planned)))
            if len(planned) < budget:
                repeats = _least_asked(planner, budget - len(planned))
                self.repeats_planned = len(repeats)
                planned.extend(repeats)
        for route in self.routes.values():
            if len(planned) < budget and not route.done:
                planned.extend(route.next_questions(budget - len(planned)))
        # The third item of a triplet-derived question is drawn from a generator seeded by the study's
        # random_state and the planner's question count, so a seeded study asks the same questions again.
        seed = _seed(self.config, self.config.algorithms.index(self.algorithm))
        rng = np.random.default_rng(None if seed is None else [seed, int(getattr(planner, "n_issued_", 0))])
        return [self._question(q, n_items, rng) for q in planned]

    def _question(self, planned: tuple, n_items: int, rng: np.random.Generator) -> dict:
        kind = self.algorithm.kind
        if self.entry.asks == "pair" and kind.asks != "pair":
            i, j = planned  # a pair asked as a triplet-derived question
            return derived_triplet_question(i, j, draw_third(i, j, n_items, rng), self.label)
        return pooled(kind.screen(planned, self.config.settings_of(kind)), self.label)

    def stale(self, questions: list[dict]) -> list[dict]:
        """Pooled questions no longer worth asking: their round has been certified (or has not
        opened: a rebuilt planner).

        Questions of a round closed by its sample cap are kept: the cap counts issued questions,
        so a refill can close a round with every question it may still get sitting in the pool;
        its answers still sharpen the round's empirical best (throwing them away made most of
        a busy study's questions random fallbacks). Questions of arms the latest answers decided
        inside an open round are kept too: taking them back would not give back their place
        under the cap, so rounds would reach the cap unanswered."""
        if not self.entry.rounds or not hasattr(self.planner, "status_"):
            return []
        # settle the rounds the latest answers decided (progress() did it too, with O(n²) counts per call)
        settle = getattr(self.planner, "settle", None)
        if settle is not None:
            settle()
        else:
            self.planner.progress()
        status = self.planner.status_
        live = (anntri.ROUND_OPEN, anntri.ROUND_CAPPED)
        return [q for q in questions if status[kind_of(q).shown(q)[0]] not in live]

    # ------------------------------------------------------------------ results
    @property
    def finished(self) -> bool:
        done = getattr(self.planner, "done", False)
        return bool(done) and all(route.done for route in self.routes.values())

    def progress(self) -> dict:
        progress = common_progress(self.planner)  # the common keys under their common names
        if self.routes:
            progress = {**progress, "added_items": len(self.routes),
                        "added_items_routed": sum(route.done for route in self.routes.values())}
        return progress

    def graph(self, k: int | None = None) -> Graph:
        """The learned nearest-neighbour graph (for forests: most frequent leaf-mates)."""
        planner = self.planner
        if not self.entry.yields_graph:
            n_all = int(planner.n_items)
            nan = np.full((n_all, k or 1), np.nan)
            return Graph(np.full((n_all, k or 1), -1, np.int64), np.zeros(n_all, bool), nan, nan, nan,
                         np.zeros((n_all, k or 1), np.int64))
        if not self.routes:
            # pair planners: their own k neighbours unless a k is asked for (then cut or -1-filled)
            if self.learns_graph and k is None:
                g = planner.result()
                return Graph(g.neighbors, g.certified, g.estimates, g.lower, g.upper, g.samples)
            return neighbor_graph(planner, k or 1)
        k = k or 1
        ng = planner.neighbor_graph(k=k)
        n_all = int(planner.n_items) + len(self.routes)
        neighbors = np.full((n_all, k), -1, np.int64)
        neighbors[: int(planner.n_items)] = ng.neighbors
        for item, route in self.routes.items():
            found = route.result().neighbors[:k]
            neighbors[item, : len(found)] = found
        nan = np.full(neighbors.shape, np.nan)
        return Graph(neighbors, np.zeros(n_all, bool), nan, nan, nan, np.zeros(neighbors.shape, np.int64))

    def embedding(self) -> np.ndarray | None:
        """The learned coordinates (n_items, dim) of an embedding learner, None before its first fit
        (read from ``embedding()`` or the fitted attribute ``embedding_``)."""
        if self.entry.learns != "embedding":
            return None
        get = getattr(self.planner, "embedding", None)
        X = get() if callable(get) else getattr(self.planner, "embedding_", None)
        return None if X is None else np.asarray(X, dtype=np.float64)

    def fitted_coordinates(self) -> np.ndarray | None:
        """Coordinates (n_items, dim) the learner has fitted to its answers, to draw the items by: an
        embedding learner's embedding, or the embedding duels fits to pick its shortlists; None for a
        learner without one (or before its first fit)."""
        if self.entry.learns == "embedding":
            return self.embedding()
        X = getattr(self.planner, "embedding_", None)
        return None if X is None else np.asarray(X, dtype=np.float64)

    @property
    def ranks_candidates(self) -> bool:
        """Whether the learner ranks each item's candidates in duels (``candidate_evidence``)."""
        return callable(getattr(self.planner, "candidates", None)) and not self.routes

    def candidate_evidence(self, item: int, limit: int) -> list[dict] | None:
        """The item's best ``limit`` candidates for nearest neighbour with the duels behind each
        (``{"item", "win_share", "duels"}``), for a learner that ranks candidates in duels; None for
        the others (a bounds learner's candidates are read from its bounds)."""
        if not self.ranks_candidates:
            return None
        items, share, duels = self.planner.candidates(item)
        return [{"item": int(j), "win_share": round(float(w), 6), "duels": int(c)}
                for j, w, c in zip(items[:limit], share[:limit], duels[:limit], strict=True)]

    def summary(self) -> dict:
        """What the dashboard shows of a learner: its progress and each item's current neighbour."""
        g = self.graph()
        first = g.neighbors[:, 0]
        if self.entry.asks == "pair":  # a pair no answer has touched is no neighbour ("no data yet")
            first = np.where(np.asarray(g.samples)[:, 0] > 0, first, -1)
        return {"label": self.label, "algorithm": self.algorithm.algorithm,
                "question_kind": self.algorithm.question_kind, "progress": self.progress(),
                "finished": self.finished, "neighbors": [int(x) for x in first]}

    def to_state(self) -> dict:
        if self.is_forest:
            return {"class": FOREST_STATE, "forest": self.planner.to_state(),
                    "routes": [route.to_state() for _, route in sorted(self.routes.items())]}
        if isinstance(self.planner, anntri._NeighborGraphPlanner):
            # the planner's own arrays, no copy (callers lift or encode them at once): the update pass
            # diffs only the rows they report changed since the previous state (engine_state.advance_delta)
            return self.planner.to_state(copy=False)
        return self.planner.to_state()


def _least_asked(planner, budget: int) -> list[tuple[int, int]]:
    """SETri with questions in flight counted as samples: for each open round in turn, the
    undecided arm with the fewest answers + pending questions. Used once every arm of the open
    rounds is pending, so raters get a useful repeat rather than a uniformly random fallback."""
    cap = planner.max_samples_per_round
    rounds = []
    for j in np.flatnonzero(planner.status_ == anntri.ROUND_OPEN).tolist():
        undecided = planner._decide_round(j)  # the round's undecided arms (indices), None once closed
        if undecided is not None:
            arms = np.asarray(undecided, dtype=np.int64)
            arms = arms[arms != j]
            if len(arms):
                rounds.append((j, arms))
    out: list[tuple[int, int]] = []
    while len(out) < budget and rounds:
        for j, arms in list(rounds):
            if len(out) >= budget:
                break
            if cap is not None and planner.round_issued_[j] >= cap:
                rounds.remove((j, arms))
                continue
            a = int(arms[np.argmin(planner.count_[j, arms] + planner.pending_[j, arms])])
            out.append((j, a))
            planner.pending_[j, a] += 1
            touched = [j]
            if planner.symmetric:  # head-based planners keep row j only (forget releases only that one)
                planner.pending_[a, j] += 1
                touched.append(a)
            planner.mark_rows(touched)
            planner.round_issued_[j] += 1
    planner.n_issued_ += len(out)
    return out


def new_learners(config: StudyConfig, n_items: int, labels: Sequence[str | None] | None = None) -> dict[str, Learner]:
    return {alg.label: Learner.new(alg, config, n_items, labels) for alg in config.algorithms}
