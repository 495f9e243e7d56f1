"""The one table of algorithms: every planner a study can run is declared here once.

The platform (study configs, the worker, exports, dashboard, CLI) and the benchmarks read this
table instead of comparing names. Importing it must stay cheap: it must never import numpy,
Flask, Redis, RQ, ``webapp`` or ``workers`` (planner classes are resolved on first use).
"""
from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from .kinds import DEFAULT_KIND, KINDS, QUESTION_KINDS, SCREEN_ASKS, SCREEN_PARAMS, QuestionKind, kinds_asking
from .tables import entry_of, object_schema, without_default

if TYPE_CHECKING:
    from .graph import NeighborGraph


#: The algorithm a triplet study runs when its config names none (the one place that says so):
#: the best on benchmarks/real_crowds.py (recorded human-like answers, alien eggs, clusters).
DEFAULT_NN_ALGORITHM = "duels"
#: ... and what a rating study runs: pooled ratings, on ratings as noisy as people's
#: (``benchmarks/rating_learners.py``, 30 items, hit@3 at 25 / 100 / 200 / 800 ratings per item: .33 / .62 /
#: .85 / .96 against .26 / .45 / .61 / .86 for uniformly random pairs and .14 throughout for ANNTri).
DEFAULT_RATING_ALGORITHM = "pooled"

ASKS = ("pair", "triplet")
LEARNS = ("graph", "forest", "embedding")


@dataclass(frozen=True)
class Memory:
    """What a learner holds in a worker's memory, as bytes per item pair (n x n arrays), per item and
    per answer: its peak while driven as a live pool, measured by ``benchmarks/engine_memory.py``
    (n = 2,000 and 4,000 items, 5 answers per item; the per-pair figure is the growth between them,
    and duels' per-item figure is an upper bound: at 20,000 items it held 300 MB against 700; the
    embeddings' per-answer figure is the growth from 5 to 20 answers per item at 4,000 items). A model, not a
    promise: the platform refuses a study whose learner would not fit the machine by it."""

    per_pair: float = 0.0
    per_item: float = 0.0
    per_answer: float = 0.0
    fixed: float = 0.0

    def bytes(self, n_items: int, answers: int) -> float:
        return (self.fixed + self.per_pair * float(n_items) ** 2 + self.per_item * n_items
                + self.per_answer * answers)

    def max_items(self, budget: float, answers_per_item: float) -> int:
        """The most items whose learner fits in ``budget`` bytes at ``answers_per_item``."""
        a, b, c = self.per_pair, self.per_item + self.per_answer * answers_per_item, self.fixed - budget
        if c >= 0:
            return 0
        if a <= 0:
            return int(-c / b) if b > 0 else 10**12
        return int((-b + (b * b - 4 * a * c) ** 0.5) / (2 * a))

    def describe(self) -> str:
        parts = []
        if self.per_pair:
            parts.append(f"{self.per_pair:g} B per item pair (n\u00b2)")
        if self.per_item:
            parts.append(f"{self.per_item / 1000:g} kB per item")
        if self.per_answer:
            parts.append(f"{self.per_answer:g} B per answer")
        if self.fixed:
            parts.append(f"{self.fixed / 1e6:g} MB besides")
        return ", ".join(parts) or "little"


@dataclass(frozen=True)
class Algorithm:
    """One entry of the table.

    ``planner`` is a dotted path ``"module:Class"`` (resolved by :meth:`planner_class`);
    ``question_kinds`` the kinds of question it can ask on the platform (first = default);
    ``asks`` its native question shape ("pair": ``(i, j)``, "triplet": ``(head, a, b)``);
    ``learns`` "graph", "forest" (also yields a graph) or "embedding" (also yields a graph);
    ``needs_labels`` a label for every item is required; ``takes_labels`` the constructor takes
    ``labels`` (required then only when the parameter ``supervised`` is true); ``params`` name ->
    JSON-schema fragment whose ``"default"`` is the planner's default; ``state_classes`` the
    ``state["class"]`` names it restores; ``description`` one line for researchers; ``rounds``
    the planner works in rounds (:class:`engine.graph.RoundPlanner`), so the platform may widen its
    window, retire questions of closed rounds and ask least-asked repeats; ``grows`` items added to a
    study after its learner was built are taken in (a comparison forest routes each down its built
    trees: :func:`engine.planners.make_planner` wraps the planner in
    :class:`engine.forest_study.ForestStudy`);
    ``triplet_defaults`` the parameters a pair-asking planner gets in a triplet study unless given
    (see :func:`defaults_for`); ``memory`` what it holds in a worker's memory (:class:`Memory`);
    ``screens`` how it chooses the screens of odd-one-out and rank studies ("adaptive": from its
    model, "random": uniformly random screens; see :mod:`engine.screens`); ``warning`` a sentence a
    researcher must read before choosing it (e.g. it loses to random questions), with its figures;
    ``state_in_place`` its ``to_state(copy=False)`` hands out its own arrays and reports the rows
    changed since the previous state, so the update pass saves only those (the pair planners);
    ``rating_warning`` the same as ``warning`` for studies of a rated (not triplet-derived) kind;
    ``takes_raters`` its ``observe`` takes rating rows ``(i, j, d, rater)`` (any hashable id of who
    answered), so the platform passes the rater with each rating; ``takes_triplets`` its planner also
    learns from the anchored triplets of the study's other questions (``observe_triplets`` of ``(head, a,
    b, winner)`` rows: one model from a study asking ratings and triplets of the same items);
    ``coordinates`` its planner fits
    coordinates of the items (:func:`fitted_coordinates` returns them once fitted): its embedding is
    exported and offered for download; ``similarities`` a pair planner whose ``observe`` takes ``(i, j,
    similarity)`` rows (1 − each answer's distance sample: SimForest) rather than ``(i, j, distance)``;
    ``counts_samples`` its graph's ``samples`` count the answers behind each edge, so an edge with none is a
    guess and no neighbour yet (the exports, the map and the dashboard leave it out; a planner whose graph
    holds no counts, e.g. one built by ``NeighborGraph.from_neighbors``, leaves it False); ``splits_time`` the
    question kinds, its own first, between which its planner's ``time_shares(seconds)`` splits the raters'
    time (a study of ``split: learner`` lets it set the shares of the algorithms asking them); ``delegates`` its
    planner asks the questions the study's learner that splits the raters' time (``splits_time``) proposes of the
    planner's kind (``next_triplets``) and learns nothing itself: the platform links it to that learner
    (``planner.source``) before each planning, and its answers teach that learner (``takes_triplets``);
    ``reports_trees`` its planner grows trees node by node and its ``progress()`` reports each tree's
    ``nodes_built``, ``nodes_pending`` and ``depth`` (:class:`engine.graph.Progress`; a comparison forest): the
    dashboard plots them (a forest that does not, SimForest, leaves it False).
    """

    name: str
    planner: str
    question_kinds: tuple[str, ...]
    asks: str
    learns: str
    description: str
    params: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    state_classes: tuple[str, ...] = ()
    needs_labels: bool = False
    takes_labels: bool = False
    rounds: bool = False
    grows: bool = False
    state_in_place: bool = False
    triplet_defaults: Mapping[str, Any] = field(default_factory=dict)
    memory: Memory = Memory()
    screens: str = "adaptive"
    warning: str = ""
    rating_warning: str = ""
    takes_raters: bool = False
    takes_triplets: bool = False
    coordinates: bool = False
    similarities: bool = False
    counts_samples: bool = False
    splits_time: tuple[str, ...] = ()
    delegates: bool = False
    reports_trees: bool = False

    def __post_init__(self) -> None:
        if self.asks not in ASKS or self.learns not in LEARNS:
            raise ValueError(f"{self.name}: asks must be one of {ASKS} and learns one of {LEARNS}")
        if self.reports_trees and self.learns != "forest":
            raise ValueError(f"{self.name}: only a forest reports trees (reports_trees)")
        if not self.question_kinds or any(k not in QUESTION_KINDS for k in self.question_kinds):
            raise ValueError(f"{self.name}: question_kinds must be a non-empty subset of {QUESTION_KINDS}")
        if self.screens not in ("adaptive", "random"):
            raise ValueError(f"{self.name}: screens must be 'adaptive' or 'random'")
        object.__setattr__(self, "params", MappingProxyType({k: MappingProxyType(dict(v))
                                                             for k, v in self.params.items()}))
        object.__setattr__(self, "triplet_defaults", MappingProxyType({k: v for k, v in self.triplet_defaults.items()
                                                                       if k in self.params}))

    @property
    def yields_graph(self) -> bool:
        """Every learner yields a k-NN graph except the label-driven forests (SimForest)."""
        return not self.needs_labels

    @property
    def pair_over_triplets(self) -> bool:
        """Asks pairs natively but can run a triplet study (through :mod:`engine.adapters`)."""
        return self.asks == "pair" and any(KINDS[k].asks == "triplet" for k in self.question_kinds)

    @property
    def observes_samples(self) -> bool:
        """Its planner observes one sample per pair, ``(i, j, distance)`` (``similarities``: ``(i, j,
        similarity)``): an answer's value through its kind's ``sample``, or a triplet-derived question's
        winner; the others observe their kind's ``observation`` of each answer."""
        return self.asks == "pair"

    def native_kind(self, question_kind: str) -> str:
        """The kind this algorithm's planner is built with in a study asking ``question_kind``: that kind,
        unless the planner proposes pairs and the kind asks triplets (the platform then drives the bare pair
        planner and asks each pair as a triplet-derived question itself), then its first kind asking pairs."""
        if self.asks == KINDS[question_kind].asks or not self.pair_over_triplets:
            return question_kind
        return next(k for k in self.question_kinds if KINDS[k].asks == self.asks)

    def adapted(self, question_kind: str) -> bool:
        """Whether its planner is built with another kind than a study's ``question_kind`` (:meth:`native_kind`):
        a pair planner in a study asking triplets, whose pairs are asked as triplet-derived questions (through
        :class:`engine.adapters.PairTripletAdapter` in :func:`engine.planners.make_planner`), so it learns from
        triplet-derived samples and runs with its ``triplet_defaults``."""
        return self.native_kind(question_kind) != question_kind

    @property
    def defaults(self) -> dict:
        return {k: v["default"] for k, v in self.params.items() if "default" in v}

    def schema(self) -> dict:
        """The JSON schema of this algorithm's ``params`` object (without the defaults)."""
        return object_schema(self.params)

    def planner_class(self) -> type:
        module, _, cls = self.planner.partition(":")
        return getattr(importlib.import_module(module), cls)


_ROUNDS = {
    "k": {"type": "integer", "minimum": 1, "default": 1},
    "delta": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1, "default": 0.1},
    "sigma": {"type": "number", "exclusiveMinimum": 0, "default": 0.5},
    "bound": {"enum": ["lil", "hoeffding", "bernstein", "kl"], "default": "lil"},
    "max_samples_per_round": {"type": ["integer", "null"], "minimum": 1, "default": None},
    "window": {"type": "integer", "minimum": 1, "maximum": 100000, "default": 1},
    "stagger": {"type": "boolean", "default": False},
    "symmetric": {"type": "boolean", "default": True},
    "triangle": {"type": "boolean", "default": True},
}
#: What a pair planner runs in a triplet study unless its config says otherwise: the samples are
#: triplet-derived ("is i more like j or a random k?"), which are head-based (not symmetric) and
#: not a metric, so no pooling of Q(i, j) with Q(j, i) and no triangle bounds; the KL bound and
#: every round open at once (``benchmarks/anntri_derived.py``: the window-1 paper defaults stay
#: at ~.95 NN error through 2,000 answers per item). See ``engine.anntri.DERIVED_DEFAULTS``.
_DERIVED = {"symmetric": False, "triangle": False, "bound": "kl", "window": 100000, "stagger": False}
_PAIR_STATES = ("PairTripletAdapter",)
#: the screen planners wrapping a triplet learner (engine.screens); their state names the learner
_SCREEN_STATES = tuple(dict.fromkeys(k.screen_planner for k in KINDS.values() if k.screen_planner))
#: The kinds an algorithm asks follow from what it proposes (the kinds table's ``asks``): a pair planner
#: asks rated pairs, and triplets through the adapter (engine.adapters); a triplet learner asks its
#: triplets, and screens of several items through a screen planner (engine.screens).
_PAIR_KINDS = kinds_asking("pair", "triplet")
_TRIPLET_KINDS = kinds_asking("triplet", *SCREEN_ASKS)


def _loses_to_random(name: str, recorded: str) -> str:
    """The warning of a pair planner in triplet studies, with its measured figures: the outside check
    on held-out human triplets, and ``benchmarks/real_crowds.py --kinds triplet --datasets recorded
    --methods anntri,ann,random,duels --budgets 50,100,300 --seeds 2`` (85 items, one recorded answer
    per triplet, lapse 0.03 / 0.1; hit@3 at 300 answers per item)."""
    return (f"In triplet studies {name} loses to random questions: on held-out human triplets ANNTri reached "
            f"hit@3 .24 at 300 answers per item, against .68 for random triplets + an embedding; on simulated "
            f"recorded answers {name} reached {recorded} at 300 answers per item, against .88 / .82 for random "
            f"triplets + an embedding and .97 / .86 for duels (the default). Use it for rating studies, or "
            f"choose duels.")
def _stalls_on_ratings(name: str) -> str:
    """The warning of a pair planner with certificates in rating studies, with its measured figures: the
    outside check on real ratings (30 items, 1-9, one recorded rating of 253 per asked pair) and
    ``benchmarks/rating_learners.py --items 30 --seeds 8 --live`` (ratings as noisy as people's)."""
    return (f"In rating studies {name} stalls on ratings as noisy as people's: with its defaults it opens one "
            f"round at a time and spends the ratings on the first item, so on real ratings (30 items, 1-9) it "
            f"stayed at hit@3 .13 from 25 to 800 ratings per item, against .17 / .45 / .85-.89 for uniformly "
            f"random pairs at 25 / 100 / 800; on simulated ratings .14 at every budget, against .26 / .45 / .86 "
            f"for random pairs and .33 / .62 / .96 for pooled (the default). Choose pooled, unless the ratings "
            f"are far less noisy than people's and you need certified neighbours.")
#: ANNTri and its baselines keep bound matrices over every pair (mean, count, pending, bounds)
_BOUNDS = Memory(per_pair=72.0, fixed=300e6)
_EMBEDDING = {
    "kernel": {"enum": ["tste", "ste", "human"], "default": "tste"},
    "dim": {"type": "integer", "minimum": 1, "maximum": 50, "default": 2},
    "refit_share": {"type": "number", "minimum": 0, "default": 0.1},
    "refit_min": {"type": ["integer", "null"], "minimum": 1, "default": None},
    "l2": {"type": "number", "minimum": 0, "default": 1e-3},
}

_ENTRIES = (
    Algorithm("anntri", "engine.anntri:ANNTri", _PAIR_KINDS, "pair", "graph",
              "ANNTri: adaptive pair distances with triangle-inequality pruning; certifies each neighbour",
              _ROUNDS, ("ANNTri",) + _PAIR_STATES, rounds=True, state_in_place=True, triplet_defaults=_DERIVED,
              counts_samples=True,
              memory=_BOUNDS, warning=_loses_to_random("ANNTri", ".20 / .22"),
              rating_warning=_stalls_on_ratings("ANNTri")),
    Algorithm("ann", "engine.anntri:ANN", _PAIR_KINDS, "pair", "graph",
              "ANN: adaptive pair distances without the triangle bounds (the paper's baseline)",
              {k: v for k, v in _ROUNDS.items() if k != "triangle"}, ("ANN",) + _PAIR_STATES, rounds=True,
              state_in_place=True, counts_samples=True, triplet_defaults=_DERIVED, memory=_BOUNDS,
              warning=_loses_to_random("ANN", ".20 / .22"), rating_warning=_stalls_on_ratings("ANN")),
    Algorithm("random", "engine.anntri:RandomSampling", _PAIR_KINDS, "pair", "graph",
              "Random: uniformly random pairs until the confidence bounds certify every neighbour",
              {k: v for k, v in _ROUNDS.items()
               if k not in ("window", "max_samples_per_round", "stagger", "triangle")},
              ("RandomSampling",) + _PAIR_STATES, state_in_place=True, triplet_defaults=_DERIVED, memory=_BOUNDS,
              counts_samples=True,
              warning=_loses_to_random("Random sampling", ".15 / .11")),
    Algorithm("pooled", "engine.ratings:PooledRatings", kinds_asking("pair"), "pair", "graph",
              "Pooled ratings: a fitted space of the items and each rater's use of the scale; asks the pairs "
              "most likely to change an item's best neighbour",
              {"dim": {"type": "integer", "minimum": 1, "maximum": 20, "default": 4},
               "warmup": {"type": "number", "minimum": 0, "maximum": 1000, "default": 3.0},
               "explore": {"type": "number", "minimum": 0, "maximum": 1, "default": 0.1},
               "shortlist": {"type": "integer", "minimum": 2, "maximum": 1000, "default": 10},
               "refit_growth": {"type": "number", "exclusiveMinimum": 0, "default": 0.25}},
              # (estimated from its arrays, not yet measured by benchmarks/engine_memory.py: per-pair counts and
              # sums, the estimates' temporaries; the log of ratings and a refit's copy of it)
              ("PooledRatings",), takes_raters=True, takes_triplets=True, coordinates=True, counts_samples=True,
              splits_time=("rating", "triplet"), memory=Memory(per_pair=64.0, per_answer=100.0, fixed=60e6)),
    # triplets asked by the pooled learner's choosing (``next_triplets``): one model learns from the ratings and
    # the triplets and chooses both (a study asking pooled ratings; its graph is the pooled learner's)
    Algorithm("pooled_triplets", "engine.delegated:DelegatedTriplets", kinds_asking("triplet"), "triplet", "graph",
              "Pooled triplets: the triplets the study's pooled rating learner chooses (its graph is pooled's)",
              {}, ("DelegatedTriplets",), delegates=True, memory=Memory(fixed=1e6)),
    Algorithm("random_triplets", "engine.random_triplets:RandomTriplets", _TRIPLET_KINDS, "triplet", "graph",
              "Random triplets: uniformly random triplets, neighbour = highest win rate (no certificate)",
              {}, ("RandomTriplets",) + _SCREEN_STATES, memory=Memory(per_pair=54.0, fixed=10e6), screens="random"),
    Algorithm("duels", "engine.duels:CandidateDuels", _TRIPLET_KINDS, "triplet", "graph",
              "Candidate duels: each item's shortlisted candidates duel in triplets until a winner is certain",
              {"shortlist": {"type": "integer", "minimum": 2, "maximum": 1000, "default": 12},
               "min_shortlist": {"type": "integer", "minimum": 2, "maximum": 1000, "default": 6},
               "shrink_at": {"type": "number", "exclusiveMinimum": 0, "default": 100.0},
               "warmup": {"oneOf": [{"type": "number", "minimum": 0, "maximum": 1000}, {"const": "auto"}],
                          "default": "auto"},
               "explore": {"type": "number", "minimum": 0, "maximum": 1, "default": 0.1},
               "refit_growth": {"type": "number", "exclusiveMinimum": 0, "default": 0.25},
               "dim": {"oneOf": [{"type": "integer", "minimum": 1, "maximum": 50}, {"const": "auto"}],
                       "default": "auto"},
               "delta": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1, "default": 0.05},
               "fit_work": {"type": "integer", "minimum": 1, "default": 1_000_000},
               "explore_pairs": {"type": "integer", "minimum": 0, "maximum": 10000, "default": 0}},
              ("CandidateDuels",) + _SCREEN_STATES, coordinates=True,
              memory=Memory(per_item=30_000.0, per_answer=400.0, fixed=60e6)),
    Algorithm("embedding", "engine.embedding:EmbeddingLearner", _TRIPLET_KINDS, "triplet", "embedding",
              "Embedding: uniformly random triplets and a t-STE ordinal embedding; neighbours = nearest points",
              _EMBEDDING, ("EmbeddingLearner",) + _SCREEN_STATES, coordinates=True,
              memory=Memory(per_item=1_200.0, per_answer=170.0, fixed=50e6), screens="random"),
    Algorithm("active_embedding", "engine.embedding:ActiveEmbedding", _TRIPLET_KINDS, "triplet", "embedding",
              "Active embedding: t-STE embedding asking the most uncertain triplets near each item",
              {**_EMBEDDING,
               "warmup": {"type": ["integer", "null"], "minimum": 0, "default": None},
               "n_candidates": {"type": "integer", "minimum": 1, "maximum": 10000, "default": 50}},
              ("ActiveEmbedding",) + _SCREEN_STATES, coordinates=True,
              memory=Memory(per_item=1_200.0, per_answer=170.0, fixed=56e6)),
    # triplet studies only: a forest's splits take the answers of the triplets it asked (``observe`` refuses
    # others), and an odd-one-out or rank screen implies triplets no split asked
    Algorithm("comparison_forest", "engine.comparison_tree:ComparisonForest", kinds_asking("triplet"), "triplet",
              "forest",
              "Comparison forest: random trees split by triplets; neighbours = frequent leaf-mates",
              {"n_trees": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 10},
               "leaf_size": {"type": "integer", "minimum": 1, "default": 1},
               "redundancy": {"oneOf": [{"type": "integer", "minimum": 1}, {"const": "adaptive"}], "default": 1},
               "supervised": {"type": "boolean", "default": False}},
              ("ComparisonForest", "ForestStudy"), takes_labels=True, grows=True, reports_trees=True,
              memory=Memory(per_item=2_500.0, fixed=20e6)),
    Algorithm("simforest", "engine.simforest:ActiveSimilarityForest", kinds_asking("pair"), "pair", "forest",
              "SimForest: a similarity forest classifying items by label, asking only the ratings its splits need",
              {"n_trees": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 10},
               "n_pairs": {"type": "integer", "minimum": 1, "maximum": 100, "default": 1},
               "repeats": {"type": "integer", "minimum": 1, "maximum": 20, "default": 1}},
              ("ActiveSimilarityForest",), needs_labels=True, takes_labels=True, similarities=True,
              counts_samples=True,
              memory=Memory(per_pair=16.0, fixed=50e6)),
)

#: name (as in a study config) -> :class:`Algorithm`, in the order researchers see them.
ALGORITHMS: Mapping[str, Algorithm] = MappingProxyType({a.name: a for a in _ENTRIES})
#: Algorithms that grow a forest (the researcher downloads it as JSON).
FOREST_ALGORITHMS = tuple(name for name, entry in ALGORITHMS.items() if entry.learns == "forest")
#: Algorithms that learn an embedding (exported as coordinates, drawn as a scatter).
EMBEDDING_ALGORITHMS = tuple(name for name, entry in ALGORITHMS.items() if entry.learns == "embedding")


def _kind(question_kind: Any) -> QuestionKind | None:
    """The kinds table's entry of ``question_kind``, None for a name it does not hold."""
    return KINDS.get(question_kind) if isinstance(question_kind, str) else None


def default_algorithm(question_kind: str = DEFAULT_KIND) -> str:
    """The algorithm a study asking ``question_kind`` runs when its config names none: the rating
    algorithm where the kind asks rated pairs."""
    kind = _kind(question_kind)
    return DEFAULT_RATING_ALGORITHM if kind is not None and kind.asks == "pair" else DEFAULT_NN_ALGORITHM


def get_algorithm(name: str) -> Algorithm:
    """The entry of ``name``; ValueError listing the choices otherwise."""
    return entry_of(ALGORITHMS, name, "algorithm")


def entry_for_state(state: Mapping) -> Algorithm:
    """The (first) entry whose planner saved ``state`` (by ``state["class"]``)."""
    cls = state.get("class") if isinstance(state, Mapping) else None
    if cls in ("PairTripletAdapter",) + _SCREEN_STATES and isinstance(state.get("planner"), Mapping):
        cls = state["planner"].get("class")  # the adapted planner says which algorithm it is
    for entry in ALGORITHMS.values():
        if cls in entry.state_classes:
            return entry
    raise ValueError(f"no algorithm restores an engine state of class {cls!r}")


def defaults_for(name: str, question_kind: str = DEFAULT_KIND) -> dict:
    """The parameters ``name`` runs with when a study asking ``question_kind`` gives none: the
    table's defaults, overridden in studies of a triplet-derived kind by the entry's ``triplet_defaults``
    (pair planners learning from triplet-derived samples)."""
    entry = get_algorithm(name)
    kind = _kind(question_kind)
    return {**entry.defaults, **(entry.triplet_defaults if kind is not None and kind.triplet_derived else {})}


def check_params(name: str, params: Mapping) -> dict:
    """Validate ``params`` against the entry; returns them with the defaults filled in.

    Raises ValueError naming the parameter (unknown name or a value outside its schema)."""
    import jsonschema

    entry = get_algorithm(name)
    for key, value in params.items():
        if key not in entry.params:
            allowed = ", ".join(entry.params) or "none"
            raise ValueError(f"unknown parameter {key!r} for {name}; allowed: {allowed}")
        fragment = without_default(entry.params[key])
        try:
            jsonschema.validate(value, fragment)
        except jsonschema.ValidationError as exc:
            raise ValueError(f"parameter {key!r} of {name}: {exc.message}") from None
    return {**entry.defaults, **params}


def check_screen_params(name: str, question_kind: str, params: Mapping) -> dict:
    """Validate the screen parameters of a ``question_kind`` study running ``name`` (``n_reference``,
    ``n_select``, ``screens``: see :data:`SCREEN_PARAMS`); returns them with the defaults filled in
    (``screens`` from the entry). ValueError naming the parameter otherwise."""
    import jsonschema

    entry = get_algorithm(name)
    allowed = SCREEN_PARAMS.get(question_kind, {})
    for key, value in params.items():
        if key not in allowed:
            raise ValueError(f"{key!r} is a parameter of "
                             f"{' and '.join(k for k, v in SCREEN_PARAMS.items() if key in v)} studies, "
                             f"not of {question_kind!r} studies")
        fragment = without_default(allowed[key])
        try:
            jsonschema.validate(value, fragment)
        except jsonschema.ValidationError as exc:
            raise ValueError(f"parameter {key!r} of a {question_kind} study: {exc.message}") from None
    out = {k: v["default"] for k, v in allowed.items() if "default" in v}
    if "screens" in allowed:
        out["screens"] = entry.screens
    out.update(params)
    kind = _kind(question_kind)
    if kind is not None:
        kind.check_screen_params(out)
    return out


def warning_for(name: str, question_kind: str = DEFAULT_KIND) -> str:
    """The warning a researcher choosing ``name`` for a ``question_kind`` study must read ("" for none):
    the entry's ``warning`` holds for the triplet-derived kinds, its ``rating_warning`` for the rated ones."""
    entry = get_algorithm(name)
    kind = _kind(question_kind)
    return entry.rating_warning if kind is not None and not kind.triplet_derived else entry.warning


def drive_as_pool(planner: Any, fitter: Any = None) -> Any:
    """Put ``planner`` in live-pool mode where it refits a model (:class:`engine.graph.RefitsBeside`,
    e.g. ``CandidateDuels.pool``: the whole budget per call) and return it. A live study's worker and
    ``proxima plan`` drive planners this way; a script observing between calls keeps the default.
    ``fitter`` (an object whose ``fit(task)`` returns a future of ``task.run()``, e.g. the worker's
    fit process) is where a planner that refits a model runs its refits, beside the calls; None runs
    them inside the call that starts them."""
    from .graph import RefitsBeside

    if isinstance(planner, RefitsBeside):
        planner.pool = True
        planner.fitter = fitter
    return planner


def wrapped_learner(planner: Any) -> Any:
    """The learner inside the platform's wrappers (a triplet adapter, a screen planner: each holds it as
    ``planner``), or the planner itself."""
    while getattr(planner, "planner", None) is not None:
        planner = planner.planner
    return planner


def fitted_coordinates(planner: Any) -> Any | None:
    """The coordinates (n_items, dim) a planner has fitted to its answers, None for a planner without
    them (or before its first fit): an embedding learner's ``embedding()``, or the ``embedding_``
    candidate duels fits to pick its shortlists; looked for in the learner inside the platform's wrappers
    (:func:`wrapped_learner`)."""
    planner = wrapped_learner(planner)
    get = getattr(planner, "embedding", None)
    return get() if callable(get) else getattr(planner, "embedding_", None)


def feature_placement(planner: Any) -> Any | None:
    """A planner's ``place_by_features(rows) -> (its items' coordinates, the rows' coordinates) | None``
    where it learns a map from item features to the space its answers give (candidate duels' prior), looked
    for inside the platform's wrappers; None for the others (an added item's neighbours are then predicted in
    the features themselves, ``engine.features.predicted_neighbors``)."""
    place = getattr(wrapped_learner(planner), "place_by_features", None)
    return place if callable(place) else None


def distance_model(planner: Any) -> tuple[str, Any] | None:
    """What a planner's current model holds about how far apart any two items are (to score it on answers
    it never saw, ``engine.heldout``), looked for in the learner inside the platform's wrappers (a triplet
    adapter, a screen planner: each holds it as ``planner``): ``("estimates", matrix)`` of every pair
    (pooled ratings), ``("coordinates", X)`` fitted (duels, the embeddings), ``("samples", (mean, count))``
    of the pairs sampled (ANNTri and its baselines), ``("win_rates", (wins, shown))`` (random triplets),
    else ``("ranks", neighbors)``, each item's nearest ``RANKED_NEIGHBOURS`` in order (forests); None for a
    planner with none of these."""
    planner = wrapped_learner(planner)
    estimates = getattr(planner, "estimates", None)
    if callable(estimates):
        return "estimates", estimates()[0]
    X = fitted_coordinates(planner)
    if X is not None:
        return "coordinates", X
    if getattr(planner, "mean_", None) is not None and getattr(planner, "count_", None) is not None:
        return "samples", (planner.mean_, planner.count_)
    result = planner.result() if callable(getattr(planner, "result", None)) else None
    if getattr(result, "wins", None) is not None and getattr(result, "shown", None) is not None:
        return "win_rates", (result.wins, result.shown)
    graph = getattr(planner, "neighbor_graph", None)
    if not callable(graph):
        return None
    return "ranks", graph(min(int(planner.n_items) - 1, RANKED_NEIGHBOURS)).neighbors


#: A learner without a distance model (a forest) is scored by the rank of each item among the head's
#: nearest this many (an item beyond them is no nearer than another): :func:`distance_model`.
RANKED_NEIGHBOURS = 20


def candidate_duels(planner: Any) -> Any | None:
    """A planner's ``candidates(h) -> (items, win shares, duels)`` where it ranks each item's
    candidates in duels (candidate duels), None for the others."""
    ranking = getattr(planner, "candidates", None)
    return ranking if callable(ranking) else None


def run_fit_task(task: Any) -> Any:
    """Run a planner's fit task (``engine.duels.FitTask``) where it was sent: a pure function of it."""
    return task.run()


def restore_bare_planner(state: Mapping) -> Any:
    """The planner of the table that saved ``state``, restored by its own class and not wrapped: what a
    wrapper (:mod:`engine.adapters`, :mod:`engine.screens`) holds. A study's whole planner, wrapped as
    it was made, comes back from :func:`engine.planners.restore_planner`."""
    return entry_for_state(state).planner_class().from_state(dict(state))


def neighbor_graph(planner: Any, k: int = 1) -> NeighborGraph:
    """The :class:`engine.graph.NeighborGraph` of any planner of the table, ``k`` columns (the
    contract's ``planner.neighbor_graph(k)``)."""
    return planner.neighbor_graph(k)


#: Functions that moved to :mod:`engine.planners` (above this table, which it builds planners from) and keep
#: their old import path here: ``from engine.registry import make_planner`` is how outside harnesses wrote it.
MOVED_TO_PLANNERS = ("make_planner", "restore_planner")


def __getattr__(name: str) -> Any:
    """The old path of a function that moved to :mod:`engine.planners`, looked up when first asked for. An
    alias for callers, not a dependency of this table (nothing here calls it), so no import of
    ``engine.planners`` is written here: that module builds on this one."""
    if name in MOVED_TO_PLANNERS:
        from importlib import import_module

        return getattr(import_module("engine.planners"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
