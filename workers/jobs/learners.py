"""Learners: one algorithm of a study with its engine planner, and the translation between the
platform's question/answer documents and the engine's index tuples.

This is the one place that knows both. Must never import Flask.
"""
from __future__ import annotations

import random
from typing import TYPE_CHECKING, cast

import numpy as np

from engine.adapters import draw_third, pair_sample
from engine.features import check_features
from engine.graph import NeighborGraph, Progress, RefitsBeside, RoundPlanner, refill_rounds
from engine.kinds import KINDS, SCREEN_PARAMS, kind_of
from engine.planners import make_planner, restore_planner, takes_features
from engine.registry import ALGORITHMS, candidate_duels, drive_as_pool, fitted_coordinates, wrapped_learner
from workers.store.answers import CATCH_ALGORITHM, HELDOUT, REPEAT_ALGORITHM, Answer
from workers.store.config import AlgorithmConfig, StudyConfig, split_learner
from workers.store.questions import asks_derived, derived_triplet_question, pooled
from workers.store.studies import StudyError, feature_matrix, get_items, initial_item_count

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from typing import Any

    from redis import Redis

    from engine.forest_study import ForestStudy
    from engine.graph import Planner
    from engine.registry import Algorithm
    from workers.store.studies import Study

#: Answers imported from a file carry this algorithm label.
IMPORTED = "import"
#: The stream of a seeded study's draws that chooses its held-out questions (apart from the planners').
HELDOUT_STREAM = 7


#: A learned k-NN graph; learners without distance estimates (triplet win rates, forests) fill
#: ``estimates``/``lower``/``upper`` with NaN and ``neighbors`` with -1 where an item has none yet.
Graph = NeighborGraph


def _seed(config: StudyConfig, index: int):
    return None if config.random_state is None else int(config.random_state) + index


class Learner:
    """One algorithm of a study: builds questions for its pool and applies its answers."""

    def __init__(self, algorithm: AlgorithmConfig, config: StudyConfig, planner: Planner) -> None:
        self.algorithm = algorithm
        self.config = config
        # a pool holds questions for every rater at once and an update pass must stay short
        self.planner: Any = drive_as_pool(planner)
        #: questions of the latest ``plan`` that repeat a question still pending (``repeat_questions``)
        self.repeats_planned = 0
        #: the latest ``plan`` planned nothing but put a finished refit in place
        self.fit_settled = False
        #: the study's item count at the latest ``sync_items`` (items added later included)
        self.study_items = int(self.planner.n_items)

    # ------------------------------------------------------------------ construction
    @property
    def entry(self) -> Algorithm:
        """The algorithm's entry of the table (:mod:`engine.registry`)."""
        return ALGORITHMS[self.algorithm.algorithm]

    @classmethod
    def new(cls, algorithm: AlgorithmConfig, config: StudyConfig, n_items: int,
            labels: Sequence[str | None] | None = None, features: Any = None) -> Learner:
        """A learner that has applied no answer yet; ``features`` (n_items rows, one per item) reach the
        algorithms that use them (``engine.planners.takes_features``) as a prior."""
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
        kind = KINDS[entry.native_kind(algorithm.question_kind)]
        kind_params = kind.planner_params(config.settings_of(kind))
        prior = {"features": features} if features is not None and takes_features(entry.name) else {}
        planner = make_planner(entry.name, n_items, question_kind=kind.name, random_state=seed,
                               labels=None if unlabelled else list(labels), **prior, **kind_params, **params)
        return cls(algorithm, config, planner)

    @classmethod
    def from_state(cls, algorithm: AlgorithmConfig, config: StudyConfig, state: dict) -> Learner:
        """The learner whose planner saved ``state`` (ValueError for a state no algorithm restores)."""
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
    def rounds(self) -> RoundPlanner | None:
        """The planner as a :class:`engine.graph.RoundPlanner` when its entry works in rounds."""
        return cast("RoundPlanner", self.planner) if self.entry.rounds else None

    @property
    def window(self) -> int | None:
        """How many rounds the planner may have open at once (None: it works in no rounds)."""
        rounds = self.rounds
        return None if rounds is None else int(rounds.window)

    @property
    def grows(self) -> ForestStudy | None:
        """The planner as a :class:`engine.forest_study.ForestStudy` when its entry takes items added
        to the study later (``Algorithm.grows``: it takes only answers to questions it asked)."""
        return cast("ForestStudy", self.planner) if self.entry.grows else None

    def sync_items(self, n_items: int) -> int:
        """Note the study's item count ``n_items`` (items added after this learner was built count from
        its own ``n_items``) and start routing them into a forest already built; how many started."""
        self.study_items = int(n_items)
        grows = self.grows
        return grows.add_items(n_items) if grows is not None else 0

    def fit_ready(self) -> bool | None:
        """True once a refit that ran beside the passes is ready, False while one runs, None if none
        was handed over (or the planner refits no model: :class:`engine.graph.RefitsBeside`)."""
        return self.planner.fit_ready() if isinstance(self.planner, RefitsBeside) else None

    # ------------------------------------------------------------------ answers
    def engine_answers(self, answers: list[Answer]) -> list[tuple]:
        """The engine tuples of the answers this learner uses (its own, including its fallbacks)."""
        rows = []
        # held-out answers score the learners and teach none of them
        answers = [a for a in answers if not a.skipped and not a.heldout]
        if not self.entry.grows and self.study_items > self.planner.n_items:
            # a learner of a fixed item set learns nothing of items added to the study later (a random
            # fallback may show one): their neighbours are predicted from features (workers.jobs.predicted).
            # An index past the study's items is no added item: the engine refuses it and the answer is set aside
            n = int(self.planner.n_items)
            answers = [a for a in answers if not n <= max(a.shown, default=0) < self.study_items]
        if self.entry.observes_samples:
            return self._pair_samples(answers)
        if not self.entry.grows:
            # learners of any triplet (win rates, duels, embeddings) also learn from imported answers of
            # their kind; each answer becomes the planner's observation through its kind's entry
            kind = self.algorithm.kind
            rows = [kind.observation(a.shown, a.picks) for a in answers
                    if a.question_kind is kind and a.algorithm in (self.label, IMPORTED) and a.picks]
        else:
            kind = self.algorithm.kind
            mine = [kind.observation(a.shown, a.picks) for a in answers
                    if a.question_kind is kind and a.algorithm == self.label and not a.fallback and a.picks]
            # A forest only takes answers to triplets it (or the search of an added item) asked: a
            # rebuild without some raters grows different trees, so older answers may match no question.
            if mine:
                asked = cast("ForestStudy", self.grows).asked([r[:3] for r in mine])
                rows = [r for r, ok in zip(mine, asked, strict=True) if ok]
        return rows

    def _pair_samples(self, answers: list[Answer]) -> list[tuple]:
        """A pair planner's rows of its own answers: ``(i, j, distance)`` from an answer's value through its
        kind at the study's settings of it (``sample``: a rating's place on the scale, same 0 and different 1), with
        the rater where the
        planner models each rater (``takes_raters``), as ``(i, j, similarity)`` where it takes similarities;
        and the sample of a triplet-derived question (a pair asked with a random third item)."""
        settings = {}  # the study's settings of each kind answered (a rating's scale)
        takes_raters, similarities = self.entry.takes_raters, self.entry.similarities
        rows: list[tuple] = []
        for a in answers:
            if a.algorithm != self.label:
                continue
            kind = a.question_kind
            if kind.name not in settings:
                settings[kind.name] = self.config.settings_of(kind)
            d = kind.sample(a.value, settings[kind.name])
            if d is not None:
                value = 1.0 - d if similarities else d
                rows.append((a.head, a.a, value, a.rater) if takes_raters else (a.head, a.a, value))
            elif a.probe is not None and a.picks:
                rows.append(pair_sample(a.head, a.probe, a.picks[0]))
        return rows

    def observe(self, answers: list[Answer]) -> int:
        """Apply the answers this learner uses; returns how many it used.

        A skipped question ("can't decide") carries no answer: it is released like an expired one,
        so the planner may ask it again (another rater may well decide)."""
        skipped = [a.question() for a in answers if a.skipped and a.algorithm == self.label and not a.heldout]
        if skipped:
            self.forget(skipped)
        rows = self.engine_answers(answers)
        if rows:
            self.planner.observe(rows)
        triplets = self.study_triplets(answers) if self.entry.takes_triplets else []
        if triplets:
            self.planner.observe_triplets(triplets)
        return len(rows) + len(triplets)

    def study_triplets(self, answers: list[Answer]) -> list[tuple[int, int, int, int]]:
        """The anchored triplets ``(head, x, y, winner)`` the study's other learners' answers imply (every
        kind's ``triplets``), for a learner that takes them beside its own answers (``takes_triplets``):
        attention checks, repeats, skips and held-out answers left out, as for every learner."""
        own = {self.label, CATCH_ALGORITHM, REPEAT_ALGORITHM}
        n = int(self.planner.n_items)  # (items added to the study after the learner was built are not its)
        return [t for a in answers if a.algorithm not in own and not a.skipped and not a.heldout
                for t in a.triplets() if max(t[:3]) < n]

    def closed_round_answers(self, answers: list[Answer]) -> int:
        """How many of the answers this learner uses were asked for a round that is closed by now
        (before they are applied): still used for the estimates, but no longer for that round."""
        rounds = self.rounds
        if rounds is None:
            return 0
        n = int(rounds.n_items)
        heads = [a.head for a in answers if a.algorithm == self.label and not a.fallback and not a.skipped
                 and not a.heldout and 0 <= a.head < n]
        return int(rounds.closed(heads).sum()) if heads else 0

    def forget(self, questions: list[dict]) -> None:
        """Release this learner's questions that expired unanswered, so they can be asked again."""
        mine = [q for q in questions if q.get("algorithm") == self.label and not q.get("fallback") and "kind" in q
                and not q.get(HELDOUT)]  # a held-out question is none of the planner's
        if not mine:
            return
        # (a triplet-derived question is the planner's pair, its head and probe, asked with a random third item;
        # a planned question shows none of the items added to the study later)
        own = [(q["head"], q["probe"]) if "probe" in q else kind_of(q).proposal(q) for q in mine
               if kind_of(q).shown(q)[0] < int(self.planner.n_items)]
        if own:
            self.planner.forget(own)

    # ------------------------------------------------------------------ questions
    def plan(self, budget: int, n_items: int, window: int | None = None, served: tuple[int, ...] = (0, 0)
             ) -> list[dict]:
        """Up to ``budget`` questions for the pool, about ``heldout_share`` of them held out (see
        ``_heldout``; ``served``: the questions served from the learner's pool and the answers given to them so
        far). Distance learners
        open more rounds (up to ``window`` and beyond, as needed) when their open rounds have too few
        distinct questions."""
        self.repeats_planned = 0
        if budget <= 0:
            # nothing to plan: a refit that finished beside the passes is still put in place (the
            # learned graph and the next questions use it), and the state is saved with it
            self.fit_settled = isinstance(self.planner, RefitsBeside) and bool(self.planner.settle_fit())
            return []
        self.fit_settled = False
        heldout = self._heldout(budget, n_items, served)
        budget -= len(heldout)
        rounds = self.rounds
        if rounds is not None:
            # More raters than the open rounds have distinct questions: open more rounds, then repeats.
            planned, self.repeats_planned = refill_rounds(rounds, budget, window)
        else:
            planned = list(self.planner.next_questions(budget))
        # The third item of a triplet-derived question is drawn from a generator seeded by the study's
        # random_state and the pair planner's count of questions issued (``n_issued_`` of the pair
        # planners, engine.anntri), so a seeded study asks the same questions again.
        seed = _seed(self.config, self.config.algorithms.index(self.algorithm))
        derived = asks_derived(self.algorithm)
        rng = np.random.default_rng(None if seed is None else [seed, int(self.planner.n_issued_) if derived else 0])
        return [self._question(q, n_items, rng) for q in planned] + heldout

    def _heldout(self, budget: int, n_items: int, served: tuple[int, ...]) -> list[dict]:
        """The held-out questions among ``budget`` to plan: each one with probability ``heldout_share``, a
        uniformly random screen of the learner's kind marked ``heldout`` (its answer is never learned from,
        see ``engine_answers``). A learner that yields no graph has no model to score: none. Seeded studies
        draw them from the study's seed, the learner's place, ``served`` (the questions served from its pool
        and the answers it was given so far) and the budget."""
        share = float(self.config.heldout_share)
        # (a learner asking another's questions, ``delegates``, has no model of its own either)
        if share <= 0 or not self.entry.yields_graph or self.entry.delegates:
            return []
        seed = _seed(self.config, self.config.algorithms.index(self.algorithm))
        # a function of what is stored, so a learner kept in memory and one restored draw alike
        rng = np.random.default_rng(None if seed is None else [seed, HELDOUT_STREAM, *served, int(budget)])
        count = int(rng.binomial(int(budget), min(share, 1.0)))
        if not count:
            return []
        kind = self.algorithm.kind
        settings = self.config.settings_of(kind)
        draw = random.Random(int(rng.integers(2**63)))
        return [{**pooled(kind.random_screen(n_items, settings, rng=draw), self.label), HELDOUT: True}
                for _ in range(count)]

    def _question(self, planned: tuple, n_items: int, rng: np.random.Generator) -> dict:
        kind = self.algorithm.kind
        if asks_derived(self.algorithm):
            i, j = planned  # a pair asked as a triplet-derived question
            # the third item is one of the learner's own (items added later are none of its questions)
            third = draw_third(i, j, min(n_items, int(self.planner.n_items)), rng)
            return derived_triplet_question(i, j, third, self.label)
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
        rounds = self.rounds
        questions = [q for q in questions if not q.get(HELDOUT)]  # asked whatever the planner knows
        if rounds is None or not questions:
            return []
        rounds.settle()  # close the rounds the latest answers decided
        stale = rounds.stale([kind_of(q).shown(q)[0] for q in questions])
        return [q for q, old in zip(questions, stale.tolist(), strict=True) if old]

    @property
    def chooser(self) -> str | None:
        """The label of the learner that chooses this learner's questions (``Algorithm.delegates``: the study's
        :func:`~workers.store.config.split_learner`), None for a learner choosing its own."""
        if not self.entry.delegates:
            return None
        chooser = split_learner(self.config.algorithms)
        return None if chooser is None else chooser.label

    # ------------------------------------------------------------------ results
    @property
    def finished(self) -> bool:
        return bool(self.planner.done)

    def progress(self) -> Progress:
        return self.planner.progress()

    def graph(self, k: int | None = None) -> Graph:
        """The learned nearest-neighbour graph (for forests: most frequent leaf-mates)."""
        if self.learns_graph and k is None:
            # pair planners: their own k neighbours unless a k is asked for (then cut or -1-filled)
            g = self.planner.result()
            return Graph(g.neighbors, g.certified, g.estimates, g.lower, g.upper, g.samples)
        return self.planner.neighbor_graph(k or 1)

    def guessed(self, graph: Graph) -> np.ndarray:
        """Which edges of ``graph`` no answer has touched yet (bool, the shape of its ``neighbors``): guesses,
        not neighbours, where the planner's graph counts the answers behind each edge (``counts_samples``:
        a pair planner's untouched estimate reads 0.0, "identical"); none elsewhere."""
        if not self.entry.counts_samples:
            return np.zeros(np.shape(graph.neighbors), bool)
        return np.asarray(graph.samples) == 0

    def embedding(self) -> np.ndarray | None:
        """The learned coordinates (n_items, dim) of an embedding learner, None before its first fit."""
        if self.entry.learns != "embedding":
            return None
        X = fitted_coordinates(self.planner)
        return None if X is None else np.asarray(X, dtype=np.float64)

    def fitted_coordinates(self) -> np.ndarray | None:
        """Coordinates (n_items, dim) the learner has fitted to its answers, to draw the items by: an
        embedding learner's embedding, or the embedding duels fits to pick its shortlists; None for a
        learner without one (or before its first fit)."""
        X = fitted_coordinates(self.planner)
        return None if X is None else np.asarray(X, dtype=np.float64)

    @property
    def ranks_candidates(self) -> bool:
        """Whether the learner ranks each item's candidates in duels (``candidate_evidence``)."""
        return candidate_duels(self.planner) is not None

    def candidate_evidence(self, item: int, limit: int) -> list[dict] | None:
        """The item's best ``limit`` candidates for nearest neighbour with the duels behind each
        (``{"item", "win_share", "duels"}``), for a learner that ranks candidates in duels; None for
        the others (a bounds learner's candidates are read from its bounds)."""
        ranking = candidate_duels(self.planner)
        if ranking is None:
            return None
        items, share, duels = ranking(item)
        return [{"item": int(j), "win_share": round(float(w), 6), "duels": int(c)}
                for j, w, c in zip(items[:limit], share[:limit], duels[:limit], strict=True)]

    def summary(self) -> dict:
        """What the dashboard shows of a learner: its progress and each item's current neighbour."""
        g = self.graph()
        first = np.where(self.guessed(g)[:, 0], -1, g.neighbors[:, 0])  # a guess is no neighbour ("no data yet")
        return {"label": self.label, "algorithm": self.algorithm.algorithm,
                "question_kind": self.algorithm.question_kind, "progress": self.progress(),
                "finished": self.finished, "neighbors": [int(x) for x in first]}

    def to_state(self) -> dict:
        if self.entry.state_in_place:
            # the planner's own arrays, no copy (callers lift or encode them at once): the update pass
            # diffs only the rows they report changed since the previous state (engine_state.advance_delta)
            return self.planner.to_state(copy=False)
        return self.planner.to_state()


def fresh_learners(conn: Redis, study: Study, algorithms: Iterable[AlgorithmConfig] | None = None
                   ) -> dict[str, Learner]:
    """Learners that have applied no answer yet, by label, for the study's algorithms (all of them, or
    ``algorithms`` in the order given), over the items the study was created with: items added later are
    routed in by ``Learner.sync_items``. Reads nothing when ``algorithms`` is empty."""
    algorithms = list(study.config.algorithms if algorithms is None else algorithms)
    if not algorithms:
        return {}
    n = initial_item_count(conn, study.id, study.n_items)
    items = get_items(conn, study.id)[:n]
    labels = [item.label for item in items]
    try:  # the items' features (``proxima features``), where every item has them and some column varies
        features = check_features(feature_matrix(items)[1], n)
    except (StudyError, ValueError):
        features = None
    return {alg.label: Learner.new(alg, study.config, n, labels, features) for alg in algorithms}


def link_delegates(learners: dict[str, Learner]) -> None:
    """Link each learner whose planner asks the questions another learner chooses (``Algorithm.delegates``) to
    that learner's planner (``source``; None where the study has none): before each planning, since either may
    have been restored since."""
    for learner in learners.values():
        if learner.entry.delegates:
            label = learner.chooser
            source = learners.get(label) if label is not None else None
            wrapped_learner(learner.planner).source = None if source is None else wrapped_learner(source.planner)


def observe_batch(learners: dict[str, Learner], batch: list) -> dict[str, str]:
    """Apply a batch to every learner; an answer a learner refuses is set aside, not retried forever.

    Returns {answer id: reason} of the answers set aside. Engines validate a whole batch before
    changing anything, so on a refusal the batch is applied again one answer at a time.
    """
    poisoned: dict[str, str] = {}
    for learner in learners.values():
        try:
            learner.observe(batch)
        except ValueError:
            for answer in batch:
                try:
                    learner.observe([answer])
                except ValueError as exc:
                    poisoned[answer.id] = f"{learner.label}: {exc}"
    return poisoned
