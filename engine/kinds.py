"""The one table of question kinds: every kind of question a study can ask is declared here once.

Like :mod:`engine.registry` for algorithms: the platform (study configs, the question pools, the answer
log, the worker's learners, the rater pages, exports, the CLI) reads an entry of this table instead of
comparing a kind's name. An entry says how a screen (the question document a pool holds) is built from a
planner's proposal, which items it shows, how an answer is checked and turned into what the engine
learns from, its fallback, catch, practice and repeat questions, its widget on the rater page, its
simulated rater and its too-fast threshold. Importing it must stay cheap: it must never import numpy,
Flask, Redis, RQ, ``webapp`` or ``workers``, nor the engine's numpy modules (the triplets an answer
implies come from the plain :mod:`engine.implied_triplets`).

Screens (plain JSON-safe dicts, without the ``qid``, ``algorithm`` and ``fallback`` the pools add):

- headed kinds (``triplet``, ``rank``): ``{"kind", "head": h, "candidates": [c1, ...]}``, ``rank`` also
  ``"select": k``; a triplet-derived distance question (a pair planner in a triplet study) adds ``"probe"``;
- unheaded kinds (``rating``, ``odd_one_out``): ``{"kind", "items": [i, j, ...]}``.

An answer is the screen's ``shown`` items (every item, in the order shown) and its ``picks`` (the items
chosen, in the order chosen), or for a kind answered with a number its ``value`` (a rating on the study's
scale; ``same_different``: 1 the same, 0 different) and no picks. What a value means is the kind's: its
``check_value`` checks it and its ``sample`` turns it into the distance sample a pair learner observes.
"""
from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .implied_triplets import odd_one_out_triplets, pick_triplets, rank_triplets
from .tables import entry_of, object_schema

#: A rank study's settings (its ``rank:`` section), which the engine's rank screens take: how many
#: references a screen shows and how many a rater picks, by default "8-rank-2" (PsiZ's trial).
RANK_SETTINGS: Mapping[str, Mapping[str, Any]] = MappingProxyType({
    "n_reference": MappingProxyType({"type": "integer", "minimum": 3, "maximum": 12, "default": 8}),
    "n_select": MappingProxyType({"type": "integer", "minimum": 1, "maximum": 11, "default": 2}),
})
#: A rating study's settings (its ``rating:`` section), its scale: the values from ``min`` (very different) to
#: ``max`` (very similar) in steps of ``step`` (null: any value), the page's widget and labels and the prompt.
RATING_WIDGETS = ("buttons", "slider")
RATING_PROMPT = "How similar are these two?"
RATING_SETTINGS: Mapping[str, Mapping[str, Any]] = MappingProxyType({
    "min": MappingProxyType({"type": "number", "default": 1}),
    "max": MappingProxyType({"type": "number", "default": 5}),
    "step": MappingProxyType({"type": ["number", "null"], "exclusiveMinimum": 0, "default": 1}),
    "widget": MappingProxyType({"enum": list(RATING_WIDGETS), "default": "buttons"}),
    "low_label": MappingProxyType({"type": "string", "maxLength": 100, "default": "very different"}),
    "high_label": MappingProxyType({"type": "string", "maxLength": 100, "default": "very similar"}),
    "prompt": MappingProxyType({"type": "string", "minLength": 1, "maxLength": 500, "default": RATING_PROMPT}),
})
#: The most buttons a scale drawn as buttons shows (min 1, max 5, step 1: five)
MAX_BUTTONS = 11
MIN_REFERENCES = RANK_SETTINGS["n_reference"]["minimum"]
MAX_REFERENCES = RANK_SETTINGS["n_reference"]["maximum"]
DEFAULT_SELECT = RANK_SETTINGS["n_select"]["default"]
#: What a screen planner of the engine (:mod:`engine.screens`) proposes over a triplet learner: a triple
#: (odd-one-out) or a grid (rank). A kind asking one of these is a screen kind (:data:`SCREEN_KINDS`).
SCREEN_ASKS = ("triple", "grid")
#: How a screen planner chooses screens, the parameter every screen kind takes beside the algorithm's:
#: "adaptive" (from the learner's model) or "random" (the random-screen baseline); the algorithm entry's
#: ``screens`` when not given.
SCREENS_PARAM: Mapping[str, Any] = MappingProxyType({"enum": ["adaptive", "random"]})

#: The kind a study asks when its config names none (and the kind of a mixed study's catch trials).
DEFAULT_KIND = "triplet"

#: Seconds a careful rater takes per screen, the source of ``proxima plan``'s rater time and money when
#: no pilot's response times are given (``proxima plan --seconds KIND=S``). Triplet: measured, the median
#: response time of the 17,611 human answers of the alien-egg set (../shared/data/alien_eggs, column
#: ``Response.Time..s.``: median 2.0 s, tenth percentile 1.1 s). The others are stated assumptions
#: scaled from it, not measurements: a rating looks at one pair and places a slider or button (as a
#: triplet: 2.0 s); an odd-one-out screen compares three pairs instead of two (1.5 x: 3.0 s); an
#: n-rank-k grid is looked at item by item and picked k times, ``2.0 s x (n + k) / 3`` (8-rank-2: 6.7 s).
#: A pilot's own median replaces them.
SECONDS_TRIPLET = 2.0
SECONDS_RATING = 2.0
SECONDS_ODD = 1.5 * SECONDS_TRIPLET
#: A pick-k screen (probe and a grid of n, k picks in no order): measured, ``a + b n + c k`` fitted by least
#: squares to the median time on screen of Food-100's 15,320 non-catch screens (Wilber et al., HCOMP 2014;
#: ../shared/data/food100, ``timer``) in its twelve cells of n in {2, 4, 8, 12, 16} and k in {1, 2, 4}: the
#: cells' medians run 3.0 s (2 and 1) to 10.0 s (16 and 4), the fit misses a cell by at most 1.2 s (8 and 2:
#: 5.6 s, measured 6.3 s).
SECONDS_PICK_BASE, SECONDS_PICK_PER_REFERENCE, SECONDS_PICK_PER_PICK = 0.66, 0.31, 1.22
#: The share of a triplet catch trial's near-certain comparisons a careful rater misses: half the human
#: lapse rate of 0.1 (a lapse picks at random) and a little more for the comparison itself (the human
#: model on the egg items' comparisons misses 4.6%: tests/test_catch_rule.py measures every kind's rate).
CATCH_MISS_RATE = 0.06
#: An odd-one-out catch's: a lapse picks one of three, so two thirds of the lapse rate miss (6.7%), and a
#: little more for the comparison (measured: 7.6% on the egg items).
CATCH_MISS_RATE_ODD = 0.085
#: A grid catch passes when the like item is among the picks (a careful rater who saw it picks it, not
#: always first: on the egg items 87% of the misses of "first" had it second). A miss needs every pick to
#: miss it: pick t of n references lapses onto an unlike one with chance CAREFUL_LAPSE (n - 1 - t) / (n - t) and
#: otherwise prefers one of the n - 1 - t unlike ones with about CATCH_GRID_CONFUSION each; the product,
#: times CATCH_GRID_SAFETY (misses of later picks go with the harder comparisons), is the stated rate
#: (8-rank-2: 2.0%, measured 1.6-1.7%; 8-rank-1: 18%, measured 12%).
CATCH_GRID_CONFUSION = 0.005
CATCH_GRID_SAFETY = 1.5
#: The share of a careful rater's answers the checks allow to be lapses (given at random): the upper end of
#: people's lapse rates, not their average. The human noise model simulations use lapses on 3% (fitted to
#: the alien-egg crowds, ``simulation.oracles.HUMAN_LAPSE``); single careful people lapse on up to ~10% of
#: triplets (``engine.embedding.FIT_LAPSE``'s note), and a check must pass them too. The one constant of
#: this meaning: the grid catch trials' stated rates here and the answer check's reference model
#: (``engine.rater_checks``) use it. Here, not there, because web processes load this table without numpy.
CAREFUL_LAPSE = 0.1
#: too fast: a quarter of a kind's stated time per screen (the eggs' fastest tenth took 1.1 s, over half
#: the median), so only answers no one could give after a look are flagged; triplets and ratings keep
#: their earlier default (off) so running studies flag as before
TOO_FAST_SHARE = 0.25


#: What an answer of a kind carries (``QuestionKind.answered_by``): items of its screen, or a number.
ANSWERED_BY = ("picks", "value")


class AnswerError(ValueError):
    """An answer that does not fit its question; the message says what the question needs."""


def _item(index: Any) -> int:
    return int(index)


@dataclass(frozen=True)
class QuestionKind:
    """One entry of the table.

    ``name`` as in a study config; ``headed`` the screen has a head and candidates (else a list of
    items); ``asks`` what a planner proposes for it ("pair": ``(i, j)``, "triplet": ``(head, a, b)``,
    "triple": ``(a, b, c)``, "grid": ``(head, (r1, ..., rn))``); ``triplet_derived`` its answers imply
    anchored triplets (so triplet learners learn from them and they export as triplets); ``widget`` the
    rater page's renderer (``static/js/widgets/<widget>.js``: ``window.ProximaWidgets[widget]``, its markup in
    ``templates/raters/widgets/<widget>.html``); ``settings`` the JSON-schema fragments of the study's
    ``<name>:`` section with their defaults; ``prompt`` and ``instructions`` the rater's texts (``{k}``,
    ``{n}`` filled from the settings); ``too_fast_ms`` the default too-fast threshold per screen (a
    study's ``limits.min_response_ms`` overrides it); ``seconds`` a careful rater's time per screen
    (``{n}``/``{k}``-scaled by :meth:`screen_seconds`); ``oracle`` the simulated rater (a
    ``simulation.oracles`` class path, loaded when a simulation asks for it: the engine never imports
    ``simulation``); ``repeatable`` a validation repeat can re-ask it; ``practice_schema`` the JSON schema of
    one practice question; ``one_triplet`` each answer implies exactly one anchored triplet, of its screen's
    head and its two candidates as shown (``triplets`` gives one row: a triplet's pick; an odd-one-out or a
    rank screen implies several), so a model of a rater's picks between two candidates judges its answers.
    """

    name: str
    headed: bool
    asks: str
    triplet_derived: bool
    widget: str
    description: str
    prompt: str
    instructions: str
    too_fast_ms: int
    seconds: float
    oracle: str
    practice_schema: Mapping[str, Any]
    settings: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    repeatable: bool = True
    #: where a study words this kind's prompt itself, if it can: a field of the study config (``question``) or
    #: ``<kind>.<setting>``, a setting of a kind's section (``rating.prompt``)
    prompt_field: str = ""
    #: the screen planner that asks a kind of several items (``asks`` in :data:`SCREEN_ASKS`) over a triplet
    #: learner: an :mod:`engine.screens` class name (``engine.screens.SCREEN_CLASSES``), also its state class
    screen_planner: str = ""
    #: what an answer carries: "picks" (items of the screen) or "value" (a number, :meth:`check_value`)
    answered_by: str = "picks"
    #: its value is a point of a scale its settings give (``rating:``: ``min``, ``max``, ``step``, the widget,
    #: labels and prompt): the page draws the scale from them
    on_scale: bool = False
    one_triplet: bool = False

    def __post_init__(self) -> None:
        if self.answered_by not in ANSWERED_BY:
            raise ValueError(f"{self.name}: answered_by must be one of {ANSWERED_BY}")
        if self.one_triplet and not (self.triplet_derived and self.headed):
            raise ValueError(f"{self.name}: a kind implying one triplet (one_triplet) is headed and triplet-derived")
        object.__setattr__(self, "settings", MappingProxyType({k: MappingProxyType(dict(v))
                                                               for k, v in self.settings.items()}))

    # ------------------------------------------------------------------ settings
    def settings_schema(self) -> dict | None:
        """The JSON schema of the study's ``<name>:`` section (None: the kind takes no settings here)."""
        return object_schema(self.settings) if self.settings else None

    def check_settings(self, given: Mapping | None) -> dict:
        """The settings with defaults filled in; ValueError naming the field otherwise."""
        values = {k: v["default"] for k, v in self.settings.items()}
        values.update(given or {})
        return values

    def check_screen_params(self, params: Mapping) -> None:
        """ValueError when a screen planner's parameters for this kind (:data:`SCREEN_PARAMS`, each valid
        on its own, defaults filled in) do not hold together."""

    def planner_params(self, settings: Mapping) -> dict:
        """What ``engine.planners.make_planner`` takes besides ``question_kind`` for this kind."""
        return dict(settings)

    def texts(self, settings: Mapping) -> tuple[str, str]:
        """(prompt, instructions) for the study's settings."""
        return self.prompt.format(**self._fill(settings)), self.instructions.format(**self._fill(settings))

    def _fill(self, settings: Mapping) -> dict:
        return {}

    def screen_seconds(self, settings: Mapping) -> float:
        """A careful rater's seconds per screen at these settings (see the SECONDS_* constants)."""
        return self.seconds

    def too_fast(self, settings: Mapping) -> int:
        """The default too-fast threshold (ms) of one screen at these settings."""
        return int(self.too_fast_ms)

    # ------------------------------------------------------------------ screens
    def screen(self, proposal: Sequence, settings: Mapping) -> dict:
        """The screen for a planner's proposal (its ``next_questions`` element in this kind's shape)."""
        raise NotImplementedError

    def shown(self, screen: Mapping) -> list[int]:
        """Every item a screen shows, in display order."""
        if self.headed:
            return [int(screen["head"]), *(int(c) for c in screen["candidates"])]
        return [int(i) for i in screen["items"]]

    def proposal(self, screen: Mapping) -> tuple:
        """The planner's proposal a screen was built from (what its ``forget`` takes)."""
        return self.proposal_of(self.shown(screen))

    def proposal_of(self, shown: Sequence[int]) -> tuple:
        """The proposal of a screen showing ``shown`` (in display order)."""
        return tuple(int(i) for i in shown)

    def random_screen(self, n_items: int, settings: Mapping, rng: random.Random | None = None) -> dict:
        """A uniformly random screen: a pool's fallback, the random-screen baseline."""
        rng = rng or random
        return self.screen(self._random_proposal(n_items, settings, rng), settings)

    def _random_proposal(self, n_items: int, settings: Mapping, rng) -> tuple:
        raise NotImplementedError

    def items_needed(self, settings: Mapping) -> int:
        """The fewest items a study of this kind needs (one screen's distinct items)."""
        return 3

    # ------------------------------------------------------------------ answers
    def simulated_rater(self, distances: Any, scale: float, lapse: float, settings: Mapping,
                        random_state: Any = None) -> Any:
        """The simulated rater of this kind (``oracle``, a ``simulation.oracles`` class) on a distance matrix
        with the human noise model's logistic ``scale`` and ``lapse`` rate; its ``answer(proposals)``
        gives the observations :meth:`picks_of` reads. None for kinds answered with a value."""
        return None

    def picks_of(self, observation: Sequence) -> tuple[int, ...]:
        """The picks of an observation (what the simulated rater's ``answer`` gives)."""
        raise NotImplementedError

    def value_of(self, observation: Sequence) -> float | None:
        """The value of an observation of a kind answered with one (None for kinds of picks)."""
        return None

    def _oracle_class(self) -> type:
        import importlib

        module, _, cls = self.oracle.partition(":")
        return getattr(importlib.import_module(module), cls)

    def check_answer(self, screen: Mapping, picks: Sequence[int] | None, value: float | None) -> tuple[int, ...]:
        """The picks of an answer to ``screen`` as a tuple of item indices; AnswerError saying what the
        question needs otherwise (a rating's value is checked by the study's scale)."""
        raise NotImplementedError

    def observation(self, shown: Sequence[int], picks: Sequence[int], screen: Mapping | None = None) -> tuple:
        """What a planner asking this kind observes for one answer (its ``observe`` element)."""
        raise NotImplementedError

    def check_value(self, value: Any, settings: Mapping) -> float | None:
        """The ``value`` of an answer, checked (AnswerError saying what the question needs otherwise): None
        for kinds answered with picks (a value sent with them is ignored). ``settings`` are the study's
        settings of this kind (``StudyConfig.settings_of``: a rating's scale)."""
        return None

    def sample(self, value: float | None, settings: Mapping) -> float | None:
        """The distance sample in [0, 1] (0 alike, 1 unlike) a pair learner observes for an answer's
        ``value`` at the study's ``settings`` of this kind; None for kinds answered with picks (and for an
        answer without a value)."""
        return None

    def sample_levels(self, settings: Mapping) -> list[float] | None:
        """Every distance sample an answer can give at these settings (a stepped scale's), in order; None when
        the values are a continuum or the kind has none."""
        return None

    def repeat_answer(self, picks: Sequence[int] | None, value: float | None) -> int | None:
        """What a validation repeat compares with the first answer: the first pick (a repeat shows the items in
        another order, so agreeing is picking the same item first again); None for no answer."""
        return int(picks[0]) if picks else None

    def triplets(self, shown: Sequence[int], picks: Sequence[int]) -> list[tuple[int, int, int, int]]:
        """The anchored triplets ``(head, x, y, winner)`` an answer implies (none for ratings)."""
        return []

    def odd_one_out_row(self, shown: Sequence[int], picks: Sequence[int]) -> tuple[int, int, int] | None:
        """The answer as a row of the layout SPoSE/VICE read (``i j k``, the odd one last), None for
        kinds that are no odd-one-out choice."""
        return None

    def catch_screen(self, head: int, similar: int, different: int, others: Sequence[int],
                     settings: Mapping, rng: random.Random) -> tuple[dict, int] | None:
        """An attention check from a near-certain comparison (``head`` very like ``similar``, very unlike
        ``different``; ``others`` more items very unlike ``head``): (screen, expected first pick), None
        when the comparison cannot fill one. On the wire it is an ordinary screen."""
        return None

    def catch_rates(self, settings: Mapping) -> tuple[float, float]:
        """(careful miss rate, random pass rate) of one of this kind's catch screens at these settings: the
        share a careful rater misses (the human noise model, lapse 0.1, on comparisons with the stated
        distance margin of ``webapp.catches``: ``tests/test_catch_rule.py`` measures it at or below this)
        and the share an item-blind rater picking at random passes. The catch schedule
        (``StudyConfig.catch_every``, ``catch_misses_allowed``) is planned on them."""
        return CATCH_MISS_RATE, 0.5

    def catch_question(self, found: Sequence[Sequence], settings: Mapping, rng: random.Random
                       ) -> tuple[dict, Any] | None:
        """(screen, expect) of an attention check drawn from the study's near-certain comparisons ``found``
        (each ``(head, similar, different, far, others)``: ``far`` the different one is far from the head in
        absolute terms too), None when the one drawn cannot fill a screen. Kinds of picks: a comparison
        drawn, its :meth:`catch_screen`."""
        head, similar, different, _far, others = rng.choice(found)
        return self.catch_screen(head, similar, different, others, settings, rng)

    def catch_answer_passes(self, picks: Sequence[int] | None, expect: int) -> bool:
        """Whether the picks of a catch screen expecting ``expect`` pass it: the expected item picked first."""
        return bool(picks) and picks[0] == expect

    def catch_answered(self, picks: Sequence[int] | None, value: float | None, expect: Any,
                       settings: Mapping) -> bool:
        """Whether an answer (``picks`` or ``value``) to a catch screen expecting ``expect`` (what
        :meth:`catch_question` gave) passes it; ``settings`` the study's of this kind (a rating's scale).
        Kinds of picks: :meth:`catch_answer_passes`."""
        return self.catch_answer_passes(picks, expect)

    def catch_passes(self, shown: Sequence[int], picks: Sequence[int],
                     alike: Callable[[int, int], bool | None], value: float | None = None,
                     settings: Mapping | None = None) -> bool:
        """Whether an attention check was passed, judged from its items alone (a restore, which has no
        ``expect``): ``alike(i, j)`` says whether two items are alike by the study's data. Headed kinds:
        the first pick is like the head."""
        return bool(picks) and bool(alike(shown[0], picks[0]))

    def repeat_screen(self, screen: Mapping, rng: random.Random) -> dict:
        """The same question asked again with its items in another order (a validation repeat)."""
        raise NotImplementedError

    def practice_screen(self, practice: Mapping, index_of: Callable[[str], int],
                        settings: Mapping) -> tuple[dict, Any]:
        """(screen, expected answer in item indices) of a practice question written with item ids."""
        raise NotImplementedError

    def practice_answer(self, answer: Any, handle_of: Callable[[int], str]) -> Any:
        """A practice question's expected answer (from :meth:`practice_screen`) as the page checks it: items
        named by their handles (``handle_of`` of an item index)."""
        return [handle_of(a) for a in answer] if isinstance(answer, list) else handle_of(answer)

    def practice_items(self, practice: Mapping) -> list[tuple[str, str]]:
        """(field, item id) of every item a practice question names, its answer included."""
        named = [("head", practice["head"])] if "head" in practice else []
        named += [(f"candidates.{c}", x) for c, x in enumerate(practice.get("candidates", ()))]
        named += [(f"items.{c}", x) for c, x in enumerate(practice.get("items", ()))]
        answer = practice.get("answer")
        if isinstance(answer, str):
            named.append(("answer", answer))
        elif self.picks_are_items(answer):
            named += [(f"answer.{c}", x) for c, x in enumerate(answer)]
        return named

    @staticmethod
    def picks_are_items(answer: Any) -> bool:
        return isinstance(answer, (list, tuple)) and all(isinstance(x, str) for x in answer)

    def check_practice(self, practice: Mapping, settings: Mapping) -> tuple[str, str] | None:
        """Why a practice question (item ids) cannot be asked, as (its field, what is wrong), None when
        it can."""
        return None


def _one_choice(picks, offered, needs: str) -> tuple[int]:
    """The one item an answer chose, checked to be one of those ``offered``; ``needs`` says what the
    question kind wants when it is missing."""
    if not picks or len(picks) != 1:
        raise AnswerError(needs)
    if picks[0] not in offered:
        raise AnswerError(f"choice {picks[0]} was not one of the offered items {list(offered)}")
    return (int(picks[0]),)


def _distinct(items: Sequence[int], what: str) -> None:
    if len(set(items)) != len(items):
        raise AnswerError(f"a {what} shows distinct items")


class _OneOfThree(QuestionKind):
    """A kind that shows three items and takes one of them as the answer (triplet, odd-one-out): its
    random question is any three distinct items, its observation the items shown and the one chosen."""

    def _random_proposal(self, n_items, settings, rng):
        return tuple(rng.sample(range(n_items), 3))

    def observation(self, shown, picks, screen=None):
        return (*shown, picks[0])


class _Triplet(_OneOfThree):
    def screen(self, proposal, settings):
        head, a, b = (_item(x) for x in proposal)
        return {"kind": self.name, "head": head, "candidates": [a, b]}

    def check_answer(self, screen, picks, value):
        return _one_choice(picks, screen["candidates"], "a triplet question needs 'choice', the index of the "
                           "chosen item")

    def triplets(self, shown, picks):
        head, a, b = shown
        return [(head, a, b, picks[0])]

    def simulated_rater(self, distances, scale, lapse, settings, random_state=None):
        return self._oracle_class()(distances, noise=scale, model="human", lapse=lapse, random_state=random_state)

    def picks_of(self, observation):
        return (int(observation[3]),)

    def catch_screen(self, head, similar, different, others, settings, rng):
        candidates = [similar, different] if rng.random() < 0.5 else [different, similar]
        return {"kind": self.name, "head": head, "candidates": candidates}, similar

    def repeat_screen(self, screen, rng):
        return {"kind": self.name, "head": screen["head"], "candidates": list(screen["candidates"])[::-1]}

    def practice_screen(self, practice, index_of, settings):
        screen = {"kind": self.name, "head": index_of(practice["head"]),
                  "candidates": [index_of(c) for c in practice["candidates"]]}
        return screen, index_of(practice["answer"])

    def check_practice(self, practice, settings):
        if practice["answer"] not in practice["candidates"]:
            return "answer", f"({practice['answer']!r}) must be one of its candidates {practice['candidates']}"
        return None


def _on_step(value: float, low: float, step: float | None) -> float:
    """A rating taken as within 1e-6 of a step (the scale's ``check_value``), stored exactly on it."""
    if step is None:
        return value
    # rounded to 12 places: 0 + 3 * 0.1 is stored as 0.3, not 0.30000000000000004
    return round(low + round((value - low) / step) * step, 12)


class _ValuedPair(QuestionKind):
    """A pair of items answered with a number (its ``value``), no picks: its screens, fallback, repeat and
    practice questions. A pair learner observes the value's distance sample (:meth:`sample`); an attention
    check expects a value at the alike end ("high") or, for a pair far apart, at the unlike end ("low")."""

    #: an attention check's alike pair is an item against a copy of itself (else against its like item)
    _copy_alike = False
    #: what an answer needs, in words (the answer check's messages)
    _needs = "this question needs 'value'"

    def screen(self, proposal, settings):
        i, j = (_item(x) for x in proposal)
        return {"kind": self.name, "items": [i, j]}

    def _random_proposal(self, n_items, settings, rng):
        return tuple(rng.sample(range(n_items), 2))

    def items_needed(self, settings):
        return 2

    def check_answer(self, screen, picks, value):
        # the value itself is checked by check_value (a rating's against the study's scale)
        if value is None:
            raise AnswerError(f"{self._needs}; got no 'value'")
        return ()

    def observation(self, shown, picks, screen=None):
        raise AnswerError(f"a {self.name} answer is observed through its value's distance sample (sample)")

    def catch_question(self, found, settings, rng):
        head, similar, different, _far, others = rng.choice(found)
        far = [c for c in found if c[3]]
        alike = not far or rng.random() < 0.5
        if not alike:  # an unlike answer is expected only of a pair far apart in absolute terms
            head, similar, different, _far, others = rng.choice(far)
        other = (head if self._copy_alike else similar) if alike else different
        screen, _ = self.catch_screen(head, other, different, others, settings, rng)
        return screen, "high" if alike else "low"

    def catch_screen(self, head, similar, different, others, settings, rng):
        pair = [head, similar]
        rng.shuffle(pair)
        return {"kind": self.name, "items": pair}, similar

    def catch_answered(self, picks, value, expect, settings):
        return value is not None and self._at_end(value, expect != "low", settings)

    def _at_end(self, value: float, alike: bool, settings: Mapping) -> bool:
        """Whether ``value`` is an answer at the alike end (``alike``) or the unlike end of the kind's values."""
        raise NotImplementedError

    def catch_passes(self, shown, picks, alike, value=None, settings=None):
        # an item against its copy is alike; another pair as the study's data say (the like end unless unlike)
        like = True if shown[0] == shown[1] else alike(shown[0], shown[1])
        return self.catch_answered(picks, value, "low" if like is False else "high",
                                   self.check_settings(None) if settings is None else settings)

    def repeat_screen(self, screen, rng):
        return {"kind": self.name, "items": list(screen["items"])[::-1]}

    def repeat_answer(self, picks, value):
        return None if value is None else int(value)

    def practice_answer(self, answer, handle_of):
        return answer  # a value (or a rating's range), no items

    def practice_items(self, practice):
        return [(f"items.{c}", x) for c, x in enumerate(practice["items"])]


class _Rating(_ValuedPair):
    """Two items rated on the study's scale, its settings (``rating:``, :data:`RATING_SETTINGS`): higher values
    mean more similar. A pair learner observes the value's place on the scale, 0 at ``max``, 1 at ``min``; an
    attention check passes in the top quarter of the scale for an alike pair, the bottom quarter for an unlike one."""

    _needs = "a rating question needs 'value', a number on the study's scale"

    def check_settings(self, given):
        values = super().check_settings(given)
        low, high, step = values["min"], values["max"], values["step"]
        if not high > low:
            raise ValueError(f"field '{self.name}.max' ({high}) must be greater than '{self.name}.min' ({low})")
        if step is not None and step > high - low:
            raise ValueError(f"field '{self.name}.step' ({step}) is larger than the scale {low}..{high}")
        if values["widget"] == "buttons" and (step is None or (high - low) / step > MAX_BUTTONS - 1):
            raise ValueError(f"a {self.name} with widget 'buttons' needs a step giving at most {MAX_BUTTONS} buttons "
                             "(e.g. min 1, max 5, step 1); use widget 'slider' for finer scales")
        return {k: values[k] for k in self.settings}

    def planner_params(self, settings):
        return {}  # the scale is the page's and the answer's: a planner learns from distance samples

    def check_value(self, value, settings):
        low, high, step = settings["min"], settings["max"], settings["step"]
        if value is None:
            raise AnswerError(f"a rating question needs 'value', a number from {low:g} to {high:g}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            raise AnswerError(f"'value' must be a number from {low:g} to {high:g}")
        if not low <= value <= high:
            raise AnswerError(f"'value' {value!r} is outside the scale {low:g} to {high:g}")
        if step is not None:
            steps = (value - low) / step
            if abs(steps - round(steps)) > 1e-6:
                raise AnswerError(f"'value' {value!r} is not on the scale's steps of {step:g} from {low:g}")
        return _on_step(float(value), low, step)

    def sample(self, value, settings):
        if value is None:
            return None
        low, high = settings["min"], settings["max"]
        return float(min(1.0, max(0.0, 1.0 - (value - low) / (high - low))))

    def sample_levels(self, settings):
        low, step = settings["min"], settings["step"]
        if not step:
            return None
        steps = int(round((settings["max"] - low) / step))
        return [self.sample(low + k * step, settings) for k in range(steps + 1)]

    def _at_end(self, value, alike, settings):
        low, high = settings["min"], settings["max"]
        if alike:
            return value >= low + 0.75 * (high - low)
        return value <= low + 0.25 * (high - low)

    def repeat_answer(self, picks, value):
        return None  # a rating is not repeated (``repeatable``): two ratings of a pair rarely match exactly

    def practice_screen(self, practice, index_of, settings):
        return {"kind": self.name, "items": [index_of(i) for i in practice["items"]]}, list(practice["answer"])


#: A same-or-different answer's values: 1 the two are the same, 0 they are different.
SAME, DIFFERENT = 1, 0


class _SameDifferent(_ValuedPair):
    """Two items, "the same or different?": ``value`` 1 (:data:`SAME`) or 0 (:data:`DIFFERENT`). A pair
    learner observes the distance sample 0 for "same" and 1 for "different" (a rating's two ends), so what it
    estimates of a pair is the share of raters calling it different, which grows with the pair's distance."""

    _copy_alike = True
    _needs = "a same-or-different question needs 'value', 1 (the same) or 0 (different)"

    def check_value(self, value, settings):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value not in (SAME, DIFFERENT):
            got = "no 'value'" if value is None else f"{value!r}"
            raise AnswerError(f"{self._needs}; got {got}")
        return int(value)

    def sample(self, value, settings):
        return None if value is None else (0.0 if int(value) == SAME else 1.0)

    def _at_end(self, value, alike, settings):
        return int(value) == (SAME if alike else DIFFERENT)

    def simulated_rater(self, distances, scale, lapse, settings, random_state=None):
        return self._oracle_class()(distances, scale=scale, lapse=lapse, random_state=random_state)

    def value_of(self, observation):
        # the simulated rater answers as a pair planner observes: the distance sample (0 the same)
        return SAME if float(observation[2]) == 0.0 else DIFFERENT

    def practice_screen(self, practice, index_of, settings):
        screen = {"kind": self.name, "items": [index_of(i) for i in practice["items"]]}
        return screen, SAME if practice["answer"] == "same" else DIFFERENT


class _OddOneOut(_OneOfThree):
    def screen(self, proposal, settings):
        items = [_item(x) for x in proposal]
        return {"kind": self.name, "items": items}

    def check_answer(self, screen, picks, value):
        return _one_choice(picks, screen["items"], "an odd-one-out question needs 'choice', the index of the item "
                           "least like the other two")

    def triplets(self, shown, picks):
        a, b, c = shown
        return [tuple(int(x) for x in t) for t in odd_one_out_triplets(a, b, c, picks[0])]

    def simulated_rater(self, distances, scale, lapse, settings, random_state=None):
        return self._oracle_class()(distances, scale=scale, lapse=lapse, random_state=random_state)

    def picks_of(self, observation):
        return (int(observation[3]),)

    def catch_rates(self, settings):
        return CATCH_MISS_RATE_ODD, 1 / 3

    def catch_screen(self, head, similar, different, others, settings, rng):
        items = [head, similar, different]
        rng.shuffle(items)
        return {"kind": self.name, "items": items}, different

    def odd_one_out_row(self, shown, picks):
        x, y = (int(i) for i in shown if i != picks[0])
        return (x, y, int(picks[0]))

    def catch_passes(self, shown, picks, alike, value=None, settings=None):
        # the two left are alike and the odd one is unlike them
        x, y = (i for i in shown if i != picks[0])
        return bool(alike(x, y)) and alike(x, picks[0]) is False

    def repeat_screen(self, screen, rng):
        items = list(screen["items"])
        while items == list(screen["items"]):
            rng.shuffle(items)
        return {"kind": self.name, "items": items}

    def practice_screen(self, practice, index_of, settings):
        return {"kind": self.name, "items": [index_of(i) for i in practice["items"]]}, index_of(practice["answer"])

    def check_practice(self, practice, settings):
        if practice["answer"] not in practice["items"]:
            return "answer", f"({practice['answer']!r}) must be one of its items {practice['items']}"
        return None


class _Rank(QuestionKind):
    #: how the picks of an answer are ordered, in a researcher's words
    _order = ", most similar first"

    def _fill(self, settings):
        n, k = int(settings["n_reference"]), int(settings["n_select"])
        return {"n": n, "k": k, "k_words": "the one" if k == 1 else f"the {k}",
                "first": "" if k == 1 else ", most similar first", "is_are": "is" if k == 1 else "are",
                "order": "" if k == 1 else ", the most similar first",
                "undo": "" if k == 1 else "Click a picked item again to take it back. "}

    def check_settings(self, given):
        values = super().check_settings(given)
        n, k = int(values["n_reference"]), int(values["n_select"])
        if not k < n:
            raise ValueError(f"field '{self.name}.n_select' ({k}) must be smaller than '{self.name}.n_reference' "
                             f"({n}): a rater picks some of the references, not all")
        return {"n_reference": n, "n_select": k}

    def check_screen_params(self, params):
        if not 1 <= params["n_select"] < params["n_reference"]:
            raise ValueError(f"a {self.name} study picks fewer references than it shows: n_select "
                             f"({params['n_select']}) must be less than n_reference ({params['n_reference']})")

    def screen_seconds(self, settings):
        # looked at item by item and picked k times, on the triplet's measured time (SECONDS_TRIPLET)
        return SECONDS_TRIPLET * (int(settings["n_reference"]) + int(settings["n_select"])) / 3

    def too_fast(self, settings) -> int:
        return int(1000 * TOO_FAST_SHARE * self.screen_seconds(settings))

    def items_needed(self, settings):
        return int(settings["n_reference"]) + 1

    def screen(self, proposal, settings):
        head, references = proposal
        return {"kind": self.name, "head": _item(head), "candidates": [_item(r) for r in references],
                "select": int(settings["n_select"])}

    def proposal_of(self, shown):
        return (int(shown[0]), tuple(int(c) for c in shown[1:]))

    def _random_proposal(self, n_items, settings, rng):
        drawn = rng.sample(range(n_items), int(settings["n_reference"]) + 1)
        return (drawn[0], tuple(drawn[1:]))

    def check_answer(self, screen, picks, value):
        k = int(screen.get("select", DEFAULT_SELECT))
        want = f"'picks', the {k} item indices most like the one on top, most similar first"
        if not picks or len(picks) != k:
            raise AnswerError(f"this question needs {want}; got {len(picks or ())} pick(s)")
        offered = [int(c) for c in screen["candidates"]]
        stray = [p for p in picks if p not in offered]
        if stray:
            raise AnswerError(f"pick {stray[0]} was not one of the offered items {offered}")
        if len(set(picks)) != len(picks):
            raise AnswerError("each item can be picked once")
        return tuple(int(p) for p in picks)

    def observation(self, shown, picks, screen=None):
        return (shown[0], tuple(shown[1:]), tuple(picks))

    def triplets(self, shown, picks):
        return [tuple(int(x) for x in t) for t in rank_triplets(shown[0], tuple(shown[1:]), tuple(picks))]

    def simulated_rater(self, distances, scale, lapse, settings, random_state=None):
        return self._oracle_class()(distances, scale=scale, lapse=lapse, n_select=int(settings["n_select"]),
                                    random_state=random_state)

    def picks_of(self, observation):
        return tuple(int(p) for p in observation[2])

    def catch_rates(self, settings):
        n, k = int(settings["n_reference"]), int(settings["n_select"])
        miss = CATCH_GRID_SAFETY
        for t in range(k):
            left = n - 1 - t  # unlike references not yet picked
            miss *= CAREFUL_LAPSE * left / (n - t) + (1 - CAREFUL_LAPSE) * CATCH_GRID_CONFUSION * left
        return min(1.0, miss), k / n

    def catch_answer_passes(self, picks, expect):
        # the like item among the picks, in any place: what a careful rater does (one who saw it may
        # still rank an unlike item first when the grid's unlike items are not far)
        return bool(picks) and expect in picks

    def catch_passes(self, shown, picks, alike, value=None, settings=None):
        return any(alike(shown[0], p) for p in picks)

    def catch_screen(self, head, similar, different, others, settings, rng):
        # one reference very like the head among n - 1 very unlike it: the like one must be among the picks
        n = int(settings["n_reference"])
        fillers = [o for o in dict.fromkeys([different, *others]) if o not in (head, similar)]
        if len(fillers) < n - 1:
            return None
        references = [similar, *rng.sample(fillers, n - 1)]
        rng.shuffle(references)
        return {"kind": self.name, "head": head, "candidates": references,
                "select": int(settings["n_select"])}, similar

    def repeat_screen(self, screen, rng):
        references = list(screen["candidates"])
        while references == list(screen["candidates"]):
            rng.shuffle(references)
        return {"kind": self.name, "head": screen["head"], "candidates": references,
                "select": int(screen.get("select", DEFAULT_SELECT))}

    def practice_screen(self, practice, index_of, settings):
        screen = {"kind": self.name, "head": index_of(practice["head"]),
                  "candidates": [index_of(c) for c in practice["candidates"]],
                  "select": len(practice["answer"])}
        return screen, [index_of(a) for a in practice["answer"]]

    def check_practice(self, practice, settings):
        n, k = int(settings["n_reference"]), int(settings["n_select"])
        if len(practice["candidates"]) != n:
            given = len(practice["candidates"])
            return "candidates", f"must list the study's {n} references ({self.name}.n_reference), not {given}"
        if len(practice["answer"]) != k:
            return "answer", f"must list the {k} most similar references ({self.name}.n_select){self._order}"
        if not set(practice["answer"]) <= set(practice["candidates"]) or len(set(practice["answer"])) != k:
            return "answer", f"{practice['answer']} must be {k} distinct items of its candidates"
        return None


class _PickK(_Rank):
    """Rank's grid (a head and n references, k picks, its screens, catch trials and repeats), with the picks
    in no order: Wilber et al.'s "pick the k most similar" (HCOMP 2014, the Food-100 screens). Each pick beats
    each unpicked reference; nothing is said between two picks."""

    _order = ", in any order"

    def _fill(self, settings):
        n, k = int(settings["n_reference"]), int(settings["n_select"])
        return {"n": n, "k": k, "k_words": "the one" if k == 1 else f"the {k}", "is_are": "is" if k == 1 else "are",
                "them": "it" if k == 1 else "them",
                "numbers": "its number" if k == 1 else "their numbers", "order": "" if k == 1 else " (in any order)"}

    def screen_seconds(self, settings):
        n, k = int(settings["n_reference"]), int(settings["n_select"])
        return SECONDS_PICK_BASE + SECONDS_PICK_PER_REFERENCE * n + SECONDS_PICK_PER_PICK * k

    def check_answer(self, screen, picks, value):
        k = int(screen.get("select", DEFAULT_SELECT))
        want = f"'picks', the {k} item indices most like the one on top, in any order"
        if not picks or len(picks) != k:
            raise AnswerError(f"this question needs {want}; got {len(picks or ())} pick(s)")
        offered = [int(c) for c in screen["candidates"]]
        stray = [p for p in picks if p not in offered]
        if stray:
            raise AnswerError(f"pick {stray[0]} was not one of the offered items {offered}")
        if len(set(picks)) != len(picks):
            raise AnswerError(f"each item can be picked once: this question needs {k} different items")
        # kept in item order: the same set is the same answer however the screen was laid out, so a
        # validation repeat (which compares the first pick) agrees whenever the first-listed pick is picked again
        return tuple(sorted(int(p) for p in picks))

    def triplets(self, shown, picks):
        return pick_triplets(shown[0], tuple(shown[1:]), tuple(picks))


_ITEM_ID = {"type": "string", "minLength": 1, "maxLength": 200}
_EXPLANATION = {"type": "string", "maxLength": 2000}


def _item_ids(least: int, most: int) -> dict:
    """The schema of a practice question's list of ``least`` to ``most`` item ids."""
    return {"type": "array", "items": _ITEM_ID, "minItems": least, "maxItems": most}


def _practice(kind: str, **fields: Mapping[str, Any]) -> dict:
    """The schema of a practice question of ``kind`` with these ``fields`` (all required; so is its
    ``kind``, but for the default kind's), and an optional explanation."""
    required = list(fields) if kind == DEFAULT_KIND else ["kind", *fields]
    return {"type": "object", "additionalProperties": False, "required": required,
            "properties": {"kind": {"const": kind}, **fields, "explanation": _EXPLANATION}}


_ENTRIES = (
    _Triplet(
        "triplet", headed=True, asks="triplet", triplet_derived=True, widget="pick",
        description="an item on top and two below: which of the two is more similar to the one on top?",
        prompt="Which of these two is more similar to the one on top?",
        instructions=("You will see one item on top and two items below it. Click the one of the two that is "
                      "more similar to the item on top (or press the ← / → key). There are no right or wrong "
                      "answers: go with your first impression."),
        too_fast_ms=0, seconds=SECONDS_TRIPLET, oracle="simulation.oracles:TripletOracle", prompt_field="question",
        one_triplet=True,
        practice_schema=_practice("triplet", head=_ITEM_ID, candidates=_item_ids(2, 2), answer=_ITEM_ID)),
    _Rating(
        "rating", headed=False, asks="pair", triplet_derived=False, widget="rating",
        description="two items: how similar are they, on a scale?",
        prompt="How similar are these two?",
        instructions=("You will see two items. Say how similar they are, from very different to very similar "
                      "(click a button or press the keys 1–5, or move the slider and press Enter). There are no "
                      "right or wrong answers: go with your first impression."),
        too_fast_ms=0, seconds=SECONDS_RATING, oracle="simulation.oracles:DistanceMatrixOracle", repeatable=False,
        # the study's scale: its settings (``rating:``), its prompt the study's own words when it words one
        settings=RATING_SETTINGS, prompt_field="rating.prompt", answered_by="value", on_scale=True,
        practice_schema=_practice("rating", items=_item_ids(2, 2),
                                  answer={"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2})),
    _SameDifferent(
        "same_different", headed=False, asks="pair", triplet_derived=False, widget="same",
        description="two items: the same or different? (value 1 the same, 0 different)",
        prompt="Are these two the same, or different?",
        instructions=("You will see two items. Say whether they are the same or different: click Same or "
                      "Different (or press 1 for the same, 2 for different). There are no right or wrong "
                      "answers: go with your first impression."),
        # a yes-or-no look at one pair: a stated assumption, at most a rating's time (SECONDS_RATING)
        too_fast_ms=0, seconds=SECONDS_RATING, oracle="simulation.oracles:SameDifferentOracle", answered_by="value",
        practice_schema=_practice("same_different", items=_item_ids(2, 2),
                                  answer={"enum": ["same", "different"]})),
    _OddOneOut(
        "odd_one_out", headed=False, asks="triple", triplet_derived=True, widget="odd",
        description="three items, no head: which one is least like the other two? (THINGS, SPoSE/VICE)",
        prompt="Which one is the odd one out?",
        instructions=("You will see three items. Click the one that is least like the other two — the odd one "
                      "out (or press 1, 2 or 3). There are no right or wrong answers: go with your first "
                      "impression."),
        too_fast_ms=int(1000 * TOO_FAST_SHARE * SECONDS_ODD), seconds=SECONDS_ODD,
        oracle="simulation.oracles:OddOneOutOracle", screen_planner="OddOneOutScreens",
        practice_schema=_practice("odd_one_out", items=_item_ids(3, 3), answer=_ITEM_ID)),
    _Rank(
        "rank", headed=True, asks="grid", triplet_derived=True, widget="grid",
        description="an item on top and n references: pick the k most similar, most similar first (PsiZ 8-rank-2)",
        prompt="Pick {k_words} most similar to the one on top{first}.",
        instructions=("You will see one item on top and {n} items below it. Pick {k_words} of the {n} that "
                      "{is_are} most similar to the item on top{order}: click or tap them, or press their "
                      "numbers (1–{n}). {undo}Then press Confirm (or Enter). There are no right or wrong "
                      "answers: go with your first impression."),
        # both scaled by n and k: screen_seconds, too_fast
        too_fast_ms=0, seconds=SECONDS_TRIPLET, oracle="simulation.oracles:RankOracle", screen_planner="RankScreens",
        # the study's n and k, as the engine's screen planners take them (SCREEN_PARAMS)
        settings=RANK_SETTINGS,
        practice_schema=_practice("rank", head=_ITEM_ID, candidates=_item_ids(MIN_REFERENCES, MAX_REFERENCES),
                                  answer=_item_ids(1, MAX_REFERENCES - 1))),
    _PickK(
        "pick_k", headed=True, asks="grid", triplet_derived=True, widget="choose",
        description="an item on top and n references: pick the k most similar, in any order (Food-100's grid)",
        prompt="Pick {k_words} most similar to the one on top{order}.",
        instructions=("You will see one item on top and {n} items below it. Pick {k_words} of the {n} that "
                      "{is_are} most similar to the item on top{order}: click or tap {them}, or press "
                      "{numbers} (1–{n}). Click a picked item again to take it back. Then press Confirm (or Enter). "
                      "There are no right or wrong answers: go with your first impression."),
        # both scaled by n and k, measured on Food-100's screens: screen_seconds, too_fast
        too_fast_ms=0, seconds=SECONDS_TRIPLET, oracle="simulation.oracles:PickOracle", screen_planner="PickScreens",
        settings=RANK_SETTINGS,
        practice_schema=_practice("pick_k", head=_ITEM_ID, candidates=_item_ids(MIN_REFERENCES, MAX_REFERENCES),
                                  answer=_item_ids(1, MAX_REFERENCES - 1))),
)


#: name (as in a study config) -> :class:`QuestionKind`, in the order researchers see them.
KINDS: Mapping[str, QuestionKind] = MappingProxyType({k.name: k for k in _ENTRIES})
#: Every question kind, one entry each: the one list of them (the algorithm table reads it too).
QUESTION_KINDS: tuple[str, ...] = tuple(KINDS)
#: The kinds whose screens show several items at once and imply anchored triplets (:mod:`engine.screens`):
#: triplet learners ask them through a screen planner.
SCREEN_KINDS: tuple[str, ...] = tuple(k.name for k in _ENTRIES if k.asks in SCREEN_ASKS)
#: The parameters a screen kind takes beside the algorithm's (JSON-schema fragments with defaults): its
#: settings (the study's, e.g. rank's ``n_reference`` and ``n_select``) and ``screens``.
SCREEN_PARAMS: Mapping[str, Mapping[str, Mapping[str, Any]]] = MappingProxyType({
    name: MappingProxyType({**KINDS[name].settings, "screens": SCREENS_PARAM}) for name in SCREEN_KINDS})


def kinds_asking(*shapes: str) -> tuple[str, ...]:
    """The kinds whose planners propose one of ``shapes`` (a kind's ``asks``: "pair", "triplet",
    "triple", "grid"), in the table's order: the kinds an algorithm can ask, by what it proposes."""
    return tuple(k.name for k in _ENTRIES if k.asks in shapes)


def get_kind(name: str) -> QuestionKind:
    """The entry of ``name``; ValueError listing the choices otherwise."""
    return entry_of(KINDS, name, "question kind")


def kind_of(screen: Mapping) -> QuestionKind:
    """The entry of a screen (question document) or an answer row with a ``kind``."""
    return get_kind(screen.get("kind", DEFAULT_KIND))
