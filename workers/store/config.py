"""A study's configuration: its schema, defaults and validation with researcher-readable errors.

Loaded from YAML or JSON (CLI ``create``) or from a dict (API); stored as JSON in the
study hash. A study runs one or more algorithms, each with its parameters, the kind of
question it asks and its share of the raters. Must never import Flask or the engine's
numerical modules (only the numpy-free algorithm table, :mod:`engine.registry`).
"""
from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

import jsonschema
import yaml

from engine import kinds as _kinds
from engine.kinds import DEFAULT_KIND, KINDS, QUESTION_KINDS, SCREEN_PARAMS, get_kind
from engine.registry import ALGORITHMS as _TABLE
from engine.registry import DEFAULT_NN_ALGORITHM, default_algorithm  # noqa: F401 (re-exported)
from workers.store.translations import DEFAULT_LANGUAGE, LANGUAGES, check_texts  # the rater pages' catalogues

if TYPE_CHECKING:
    from engine.kinds import QuestionKind
    from engine.registry import Algorithm


#: The algorithms a study may run, as declared once in :mod:`engine.registry` (numpy-free).
ALGORITHM_TABLE = _TABLE
#: Algorithms that learn a nearest-neighbour graph from distance samples (pairs, or triplets adapted).
DISTANCE_ALGORITHMS = tuple(n for n, e in _TABLE.items() if e.pair_over_triplets)
#: Algorithms that need a label for every item.
LABELLED_ALGORITHMS = tuple(n for n, e in _TABLE.items() if e.needs_labels)
ALGORITHMS = tuple(_TABLE)
LABEL_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,31}$"

TRIPLET_PROMPT = KINDS[DEFAULT_KIND].prompt
SKIP_LABEL = "I can't decide"

#: name -> {parameter: JSON schema} of every algorithm (the table's, without the defaults).
PARAMS_SCHEMAS = {n: e.schema()["properties"] for n, e in _TABLE.items()}

ALGORITHM_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["algorithm"],
    "properties": {
        "algorithm": {"enum": list(ALGORITHMS)},
        "label": {"type": "string", "pattern": LABEL_PATTERN},
        "share": {"type": "number", "exclusiveMinimum": 0, "maximum": 1000},
        "question_kind": {"enum": list(QUESTION_KINDS)},
        "params": {"type": "object"},
        "budget": {"type": ["integer", "null"], "minimum": 1},
    },
}

#: One practice question of any kind (each kind's entry says what one of its own looks like).
PRACTICE_SCHEMA = {"type": "array", "maxItems": 20, "items": {"oneOf": [k.practice_schema for k in KINDS.values()]}}
#: The sections of kinds that take settings (``rank: {n_reference, n_select}``, the rating scale
#: ``rating: {min, max, step, widget, ...}``), named after the kind.
KIND_SETTINGS_SCHEMAS = {k.name: k.settings_schema() for k in KINDS.values() if k.settings_schema()}
LIMITS_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "max_questions_per_rater": {"type": ["integer", "null"], "minimum": 1, "maximum": 100000},
        "min_response_ms": {"type": ["integer", "null"], "minimum": 0, "maximum": 600000},
        "answer_budget": {"type": ["integer", "null"], "minimum": 1},
        "max_outstanding": {"type": "integer", "minimum": 1, "maximum": 20},
        "min_answers_for_code": {"type": ["integer", "null"], "minimum": 1, "maximum": 100000},
        "anonymous_sessions_per_address": {"type": "integer", "minimum": 1, "maximum": 100000},
    },
}
#: Catch trials: a screen of one of the question kinds built from a near-certain comparison (each kind's
#: ``catch_screen``), or "auto": the kind every algorithm asks (the default kind in a mixed study).
ATTENTION_KINDS = ("auto", *QUESTION_KINDS)
#: What a flag does, each including the ones before it but "mark": "mark" (shown on the dashboard, nothing
#: else), "no_code" (no completion code), "stop" (no code and no more questions), "exclude" (also left out
#: of learning from then on: the update pass skips the rater's answers).
FLAG_ACTIONS = ("mark", "no_code", "stop", "exclude")
ATTENTION_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "rate": {"anyOf": [{"type": "number", "minimum": 0, "maximum": 1}, {"const": "auto"}]},
        "kind": {"enum": list(ATTENTION_KINDS)},
        "misses_allowed": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 1000}, {"const": "auto"}]},
        "max_failure_share": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
        "min_checks": {"type": "integer", "minimum": 1, "maximum": 1000},
        "stop_flagged": {"type": "boolean"},
        "validation_repeats": {"type": "integer", "minimum": 0, "maximum": 100},
        "min_self_agreement": {"type": "number", "minimum": 0, "maximum": 1},
        "answer_check": {"type": "boolean"},
        "false_flag_rate": {"type": "number", "exclusiveMinimum": 0, "maximum": 0.5},
        "flag_action": {"enum": list(FLAG_ACTIONS)},
        "crowd_raters": {"type": "integer", "minimum": 1, "maximum": 1000},
    },
}
COMPLETION_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "prolific_redirect_url": {"type": ["string", "null"], "pattern": "^https?://", "maxLength": 2000},
        "debrief_question": {"type": ["string", "null"], "maxLength": 1000},
        "message": {"type": ["string", "null"], "maxLength": 5000},
        "partial_code": {"type": "boolean"},
        "stopped_message": {"type": ["string", "null"], "maxLength": 5000},
    },
}

#: The share of each learner's questions asked as uniformly random held-out questions by default: their answers
#: are never learned from, and the Learning tab scores every learner's model on them
#: (``workers.jobs.heldout``). A study's ``heldout_share`` sets its own, 0 none.
HELDOUT_SHARE = 0.05
#: ... at most (every held-out question is one the learner does not learn from)
MAX_HELDOUT_SHARE = 0.5
#: How a study mixing ratings and triplets shares its questions between its algorithms: "fixed", by each
#: algorithm's ``share``; "learner", as its pooled rating learner's split of rater time says after each update
#: pass (``workers.jobs.learned_split``; the configured shares divide each kind's side among its algorithms).
SPLITS = ("fixed", "learner")

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 200},
        "algorithm": {"enum": list(ALGORITHMS)},
        "params": {"type": "object"},
        "algorithms": {"type": "array", "minItems": 1, "maxItems": 10, "items": ALGORITHM_SCHEMA},
        "question_kind": {"enum": list(QUESTION_KINDS)},
        **KIND_SETTINGS_SCHEMAS,
        "instructions": {"type": "string", "maxLength": 20000},
        "question": {"type": "string", "minLength": 1, "maxLength": 500},
        "allow_skip": {"type": "boolean"},
        "accept_late_answers": {"type": "boolean"},
        "skip_label": {"type": "string", "minLength": 1, "maxLength": 100},
        "pool_size": {"type": "integer", "minimum": 1, "maximum": 10000},
        "token_ttl_seconds": {"type": "integer", "minimum": 10, "maximum": 7 * 24 * 3600},
        "random_state": {"type": ["integer", "null"], "minimum": 0},
        "heldout_share": {"type": "number", "minimum": 0, "maximum": MAX_HELDOUT_SHARE},
        "split": {"enum": list(SPLITS)},
        "consent": {"type": ["string", "null"], "maxLength": 20000},
        "practice": PRACTICE_SCHEMA,
        "limits": LIMITS_SCHEMA,
        "attention": ATTENTION_SCHEMA,
        "completion": COMPLETION_SCHEMA,
        "language": {"enum": list(LANGUAGES)},
        # its keys (TEXT_KEYS) are checked by check_texts, which names the known ones
        "rater_texts": {"type": "object",
                        "additionalProperties": {"type": "string", "minLength": 1, "maxLength": 2000}},
    },
}


class ConfigError(ValueError):
    """A study config that cannot be used; the message names the field and what is allowed."""


@dataclass(frozen=True)
class Limits:
    """Server-enforced limits: questions per rater, the too-fast threshold, answers per study."""

    max_questions_per_rater: int | None = None
    #: answers faster than this are flagged ``too_fast`` (None: each question kind's own threshold,
    #: ``engine.kinds``; 0: never)
    min_response_ms: int | None = None
    answer_budget: int | None = None
    #: questions a rater session may hold unanswered at once (the page prefetches one)
    max_outstanding: int = 2
    #: answers a rater must give before a completion code (None: max_questions_per_rater, else 1)
    min_answers_for_code: int | None = None
    #: anonymous rater sessions one address may open in a study per hour
    anonymous_sessions_per_address: int = 20

    def to_dict(self) -> dict:
        return {"max_questions_per_rater": self.max_questions_per_rater, "min_response_ms": self.min_response_ms,
                "answer_budget": self.answer_budget, "max_outstanding": self.max_outstanding,
                "min_answers_for_code": self.min_answers_for_code,
                "anonymous_sessions_per_address": self.anonymous_sessions_per_address}

    @property
    def answers_for_code(self) -> int:
        """The answers a rater must have given to be shown a completion code: ``min_answers_for_code``,
        else the study's per-rater question count (a code means the work was done), else 1."""
        return int(self.min_answers_for_code or self.max_questions_per_rater or 1)


#: Repeated questions a rater must have answered before a low self-agreement can flag them: fewer never
#: flag (with 5 repeats an honest rater agreeing 80% of the time falls below 0.6 one time in 15).
MIN_REPEATS_TO_FLAG = 8
#: ``attention.rate: auto``: the sparsest schedule of catch trials (one in every ``e`` questions of a
#: rater, ``e`` at least CATCH_MIN_EVERY) for which the allowed misses keep a careful rater's flag rate (at
#: the catch kind's careful miss rate per catch trial, ``engine.kinds`` ``catch_rates``) within
#: ``false_flag_rate`` and a responder answering catch trials at random (the kind's random pass rate) passes
#: at most CATCH_RANDOM_PASS of the time; planned on ``max_questions_per_rater`` (else
#: CATCH_PLANNED_QUESTIONS). Triplets at 40 questions: one in 3 (13 or 14 trials, 3 misses allowed: careful
#: flagged 0.8%, random passing 4.6%); 100: one in 6; 200: one in 13 (tests/test_catch_rule.py).
CATCH_MIN_EVERY = 3
CATCH_PLANNED_QUESTIONS = 100
CATCH_RANDOM_PASS = 0.05
#: A triplet catch trial's careful miss rate (engine.kinds states every kind's).
CATCH_MISS_RATE = _kinds.CATCH_MISS_RATE
#: ``attention.rate: auto`` where the catch trials are judged by the crowd (labels alone,
#: ``StudyConfig.crowd_catch_every``): this many catch trials per rater over the planned questions, one in
#: every 2 questions at most. Comparisons of mixed quality tell random raters from careful ones only over
#: many trials: in benchmarks/catch_fairness.py --crowd-wired at 40 questions, one in 3 (13 or 14 trials) paid
#: 7-14% of random raters in triplet and rating studies; 20 trials 0-3.36% in every kind, careful raters
#: flagged 0-1.07% (12 studies per row).
CROWD_CATCH_TRIALS = 20
CROWD_CATCH_MIN_EVERY = 2


@functools.lru_cache(maxsize=65536)
def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X > k) for X ~ Binomial(n, p) (standard library: the web processes load no scipy; remembered,
    since every rater request asks for the study's catch schedule)."""
    return float(sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k + 1, n + 1)))


#: Labels of the answers that are not any algorithm's (attention checks, validation repeats).
RESERVED_LABELS = ("catch", "repeat", "import")


@dataclass(frozen=True)
class Attention:
    """Catch trials (of the ``kind`` in ATTENTION_KINDS): one in every ``1 / rate`` questions of a rater
    (rounded), at a random place in each such block (``"auto"``: CATCH_TRIALS per rater, see
    ``StudyConfig.catch_every``). A rater who misses more than ``misses_allowed`` of them (``"auto"``:
    ``StudyConfig.catch_misses_allowed``) is flagged; with ``max_failure_share`` set, also only once
    they answered ``min_checks`` and missed more than that share of them (the rule before misses were
    counted, kept for studies that set it)."""

    rate: float | str = "auto"
    misses_allowed: int | str = "auto"
    max_failure_share: float | None = None
    min_checks: int = 1
    stop_flagged: bool = False
    kind: str = "auto"
    #: triplets a rater already answered asked again later (candidates swapped), to measure the rater's
    #: self-agreement; their answers are logged (algorithm ``repeat``) and never given to a learner
    validation_repeats: int = 0
    #: self-agreement is judged once, when the rater has answered ``repeats_to_judge`` repeats: below this
    #: share answered alike flags the rater
    min_self_agreement: float = 0.6
    #: judge every rater's answers against the model learned from the other raters (workers/jobs/
    #: rater_checks.py): a rater whose answers look item-blind is flagged, at most ``false_flag_rate`` of
    #: raters answering like the study's average rater
    answer_check: bool = True
    false_flag_rate: float = 0.01
    #: what a flag does (FLAG_ACTIONS); ``stop_flagged: true`` means at least "stop"
    flag_action: str = "no_code"
    #: catch trials judged by the crowd (labels alone: workers/jobs/rater_checks.py): a rater's misses are
    #: judged once this many raters gave their last catch answer after the rater's, or when the study closes
    crowd_raters: int = 30

    def to_dict(self) -> dict:
        return {"rate": self.rate, "kind": self.kind, "misses_allowed": self.misses_allowed,
                "max_failure_share": self.max_failure_share,
                "min_checks": self.min_checks, "stop_flagged": self.stop_flagged,
                "validation_repeats": self.validation_repeats, "min_self_agreement": self.min_self_agreement,
                "answer_check": self.answer_check, "false_flag_rate": self.false_flag_rate,
                "flag_action": self.flag_action, "crowd_raters": self.crowd_raters}

    @property
    def repeats_to_judge(self) -> int | None:
        """The number of answered repeats at which self-agreement is judged, once: four fifths of
        ``validation_repeats`` (rounded up), as a rater may finish before the last repeats come due;
        None below MIN_REPEATS_TO_FLAG (it never flags: too few to tell a careful rater from a careless one)."""
        count = -(-4 * self.validation_repeats // 5)
        return count if count >= MIN_REPEATS_TO_FLAG else None

    @property
    def stops_flagged(self) -> bool:
        """Whether a flagged rater gets no more questions."""
        return self.stop_flagged or self.flag_action in ("stop", "exclude")

    @property
    def withholds_code(self) -> bool:
        """Whether a flagged rater gets no completion code."""
        return self.flag_action != "mark" or self.stop_flagged


@dataclass(frozen=True)
class Completion:
    """The finish page: a redirect back to Prolific (``{code}`` is replaced by the rater's completion
    code), an optional debrief question and a thank-you message (Markdown). ``partial_code``: a rater
    the study ran out of questions or budget for (or closed on) before they gave the answers a code
    needs is shown a *partial-completion* code (another code, marked partial in the raters export and by
    ``proxima verify-code``) instead of none. ``stopped_message``: what a stopped (flagged) rater reads
    (Markdown; a default says to return the submission or contact the researcher)."""

    prolific_redirect_url: str | None = None
    debrief_question: str | None = None
    message: str | None = None
    partial_code: bool = False
    stopped_message: str | None = None

    def to_dict(self) -> dict:
        return {"prolific_redirect_url": self.prolific_redirect_url, "debrief_question": self.debrief_question,
                "message": self.message, "partial_code": self.partial_code, "stopped_message": self.stopped_message}


@dataclass(frozen=True)
class AlgorithmConfig:
    """One algorithm of a study: what it learns, how it asks, its share of the questions."""

    label: str
    algorithm: str
    question_kind: str
    share: float = 1.0
    params: dict = field(default_factory=dict)
    budget: int | None = None

    @property
    def learns_graph(self) -> bool:
        """Learns distances of pairs (asked as ratings, or as triplets with a random third item)."""
        return _TABLE[self.algorithm].pair_over_triplets

    @property
    def entry(self) -> Algorithm:
        """This algorithm's entry of the table (:class:`engine.registry.Algorithm`)."""
        return _TABLE[self.algorithm]

    @property
    def kind(self) -> QuestionKind:
        """The entry of the question kind it asks (:class:`engine.kinds.QuestionKind`)."""
        return KINDS[self.question_kind]

    def to_dict(self) -> dict:
        return {"label": self.label, "algorithm": self.algorithm, "question_kind": self.question_kind,
                "share": self.share, "params": dict(self.params), "budget": self.budget}


@dataclass(frozen=True)
class StudyConfig:
    """A validated study config. Build it with :meth:`from_dict` (validates) or the constructor
    (trusted values, e.g. tests); ``algorithms`` defaults to one ANNTri asking triplets."""

    name: str
    algorithms: tuple = ()
    question_kind: str = DEFAULT_KIND
    #: kind name -> its settings (``rank: {n_reference, n_select}``, the rating scale ``rating: {min, max,
    #: step, ...}``), defaults filled in for every kind the study asks or gives settings of (``engine.kinds``:
    #: a kind's ``settings``)
    kind_settings: dict = field(default_factory=dict)
    instructions: str | None = None
    #: the triplet prompt (other kinds word theirs from their entry and settings)
    question: str = TRIPLET_PROMPT
    #: offer a "can't decide" button: the skip is logged (flag ``skipped``), engines learn nothing from
    #: it and the question goes back to its planner; it counts towards the rater's limits
    allow_skip: bool = False
    skip_label: str = SKIP_LABEL
    #: once the study is paused or closed, keep answers to questions handed out before (flagged ``late``)
    #: instead of refusing them
    accept_late_answers: bool = False
    pool_size: int = 20
    token_ttl_seconds: int = 900
    random_state: int | None = None
    #: the share of each learner's questions asked as uniformly random held-out questions: answered like any
    #: other, stored marked ``heldout``, never learned from; every learner's model is scored on them
    heldout_share: float = HELDOUT_SHARE
    #: SPLITS: "learner" lets the pooled rating learner set the question shares of ratings and triplets
    split: str = "fixed"
    consent: str | None = None
    practice: tuple = ()
    limits: Limits = field(default_factory=Limits)
    attention: Attention = field(default_factory=Attention)
    completion: Completion = field(default_factory=Completion)
    #: the rater pages' language (workers/store/translations/<language>.po)
    language: str = DEFAULT_LANGUAGE
    #: the study's own words for rater-facing texts, by key (workers/store/translations/en.po)
    rater_texts: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        share = self.heldout_share
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= MAX_HELDOUT_SHARE:
            raise ConfigError(f"field 'heldout_share' must be a number from 0 (no held-out questions) to "
                              f"{MAX_HELDOUT_SHARE:g}, got {share!r}")
        for name, kind in (("limits", Limits), ("attention", Attention), ("completion", Completion)):
            if isinstance(getattr(self, name), dict):
                object.__setattr__(self, name, kind(**getattr(self, name)))
        object.__setattr__(self, "practice", tuple(dict(p) for p in self.practice or ()))
        default = ({"algorithm": default_algorithm(self.question_kind)},)
        algorithms = tuple(a if isinstance(a, AlgorithmConfig) else _algorithm_from_dict(a, i, self.question_kind)
                           for i, a in enumerate(self.algorithms or default))
        object.__setattr__(self, "algorithms", algorithms)
        settings = {}
        for name in dict.fromkeys([self.question_kind, *(a.question_kind for a in algorithms),
                                   *(p.get("kind", DEFAULT_KIND) for p in self.practice), *self.kind_settings]):
            try:
                settings[name] = get_kind(name).check_settings(self.kind_settings.get(name))
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        object.__setattr__(self, "kind_settings", settings)
        for n, p in enumerate(self.practice):
            kind = get_kind(p.get("kind", DEFAULT_KIND))
            problem = kind.check_practice(p, settings[kind.name])
            if problem:
                raise ConfigError(f"field 'practice.{n}.{problem[0]}' {problem[1]}")
        labels = [a.label for a in algorithms]
        if self.attention.validation_repeats and not any(a.kind.repeatable for a in algorithms):
            raise ConfigError("field 'attention.validation_repeats': repeats re-ask a question with its items in "
                              f"another order, and this study asks only {algorithms[0].question_kind} questions, "
                              "which are not repeated (set it to 0)")
        if len(set(labels)) != len(labels):
            dupes = sorted({x for x in labels if labels.count(x) > 1})
            raise ConfigError(f"algorithm labels must be distinct; repeated: {', '.join(dupes)} "
                              "(give each algorithm its own 'label')")
        if self.split == "learner":
            _check_learner_split(algorithms)
        _check_delegates(algorithms)
        if self.instructions is None:
            kinds = {a.question_kind for a in algorithms}
            text = "\n\n".join(self.texts(kind)[1] for kind in KINDS.values() if kind.name in kinds)
            object.__setattr__(self, "instructions", text)

    def settings_of(self, kind: QuestionKind | str) -> dict:
        """The study's settings of a question kind (its defaults when the study does not ask it)."""
        kind = get_kind(kind) if isinstance(kind, str) else kind
        return self.kind_settings.get(kind.name) or kind.check_settings(None)

    @property
    def rating(self) -> MappingProxyType:
        """The rating kind's settings, the study's scale (``rating:``), read-only: kept for callers from before
        the scale became the kind's settings; ask ``settings_of(kind)`` of the kind at hand instead."""
        return MappingProxyType(self.settings_of("rating"))

    def texts(self, kind: QuestionKind) -> tuple[str, str]:
        """(prompt, instructions) of a kind in this study: the configured triplet prompt and the rating
        scale's prompt (``prompt_field``: a field of the config, or of a kind's settings section), else the
        kind's own words for its settings."""
        prompt, instructions = kind.texts(self.settings_of(kind))
        if kind.prompt_field:
            section, _, name = kind.prompt_field.rpartition(".")
            prompt = self.settings_of(section)[name] if section else getattr(self, name)
        return prompt, instructions

    def too_fast_ms(self, kind: QuestionKind | str) -> int:
        """The too-fast threshold of an answer to a question of ``kind``: ``limits.min_response_ms``, else
        the kind's own (``engine.kinds``; it grows with a grid's references and picks)."""
        if self.limits.min_response_ms is not None:
            return int(self.limits.min_response_ms)
        kind = get_kind(kind) if isinstance(kind, str) else kind
        return kind.too_fast(self.settings_of(kind))

    @property
    def catch_kind(self) -> str:
        """The question kind of this study's attention checks: ``attention.kind``, or (auto) the kind every
        algorithm asks (the default kind in a study mixing kinds)."""
        kind = self.attention.kind
        if kind == "auto":
            kinds = {a.question_kind for a in self.algorithms}
            return kinds.pop() if len(kinds) == 1 else DEFAULT_KIND
        return kind

    @property
    def planned_questions(self) -> int:
        """The questions a rater is planned to answer: ``max_questions_per_rater``, else CATCH_PLANNED_QUESTIONS."""
        return int(self.limits.max_questions_per_rater or CATCH_PLANNED_QUESTIONS)

    def _allowed_misses(self, trials: int) -> int:
        """The fewest misses a careful rater (missing CATCH_MISS_RATE of catch trials) exceeds over
        ``trials`` of them with probability at most ``false_flag_rate``."""
        alpha, miss = self.attention.false_flag_rate, self.catch_rates[0]
        return next(m for m in range(trials + 1) if binomial_tail(m, trials, miss) <= alpha)

    @functools.cached_property
    def catch_rates(self) -> tuple[float, float]:
        """(careful miss rate, random pass rate) of one catch trial of the study's catch kind at its
        settings (``engine.kinds``' ``catch_rates``: a grid's like item may be any pick, an odd-one-out's
        lapse picks one of three)."""
        kind = get_kind(self.catch_kind)
        return kind.catch_rates(self.settings_of(kind))

    @functools.cached_property
    def catch_every(self) -> int:
        """One catch trial in every this many questions of a rater, at a random place in each such block
        (0: none); ``attention.rate: auto`` as CATCH_RANDOM_PASS says."""
        rate = self.attention.rate
        if rate != "auto":
            return 0 if rate <= 0 else max(1, round(1 / rate))
        n, coded = self.planned_questions, self.limits.min_answers_for_code or self.planned_questions
        for every in range(max(CATCH_MIN_EVERY, n // CATCH_MIN_EVERY), CATCH_MIN_EVERY - 1, -1):
            fewest, most = min(n, coded) // every, -(-n // every)
            random_miss = 1 - self.catch_rates[1]
            if fewest and 1 - binomial_tail(self._allowed_misses(most), fewest, random_miss) <= CATCH_RANDOM_PASS:
                return every
        return CATCH_MIN_EVERY

    @functools.cached_property
    def crowd_catch_every(self) -> int:
        """``catch_every`` of a study whose catch trials are judged by the crowd (label comparisons: whether
        people agree with one is for the other raters' answers to say): ``attention.rate`` as given, or (auto)
        CROWD_CATCH_TRIALS trials over the planned questions (never sparser than ``catch_every``)."""
        if self.attention.rate != "auto":
            return self.catch_every
        every = max(CROWD_CATCH_MIN_EVERY, self.planned_questions // CROWD_CATCH_TRIALS)
        return min(every, self.catch_every)

    def catch_every_of(self, crowd: bool) -> int:
        """``crowd_catch_every`` where the catch trials are judged by the crowd, else ``catch_every``."""
        return self.crowd_catch_every if crowd else self.catch_every

    @functools.cached_property
    def catch_trials(self) -> tuple[int, int]:
        """(fewest, most) catch trials of a rater shown a code (``min_answers_for_code`` answers, else the
        planned questions) and of one answering every planned question (the last block may be cut short)."""
        every, n = self.catch_every, self.planned_questions
        coded = min(n, self.limits.min_answers_for_code or n)
        return (coded // every, -(-n // every)) if every else (0, 0)

    @functools.cached_property
    def catch_misses_allowed(self) -> int:
        """Catch trials a rater may miss: ``attention.misses_allowed``, or (``"auto"``) the fewest misses a
        careful rater exceeds over the most catch trials planned with probability at most
        ``false_flag_rate``. Misses are counted, not a share: the count only grows, so checking after
        every catch trial flags no more careful raters than checking once at the end."""
        allowed = self.attention.misses_allowed
        return self._allowed_misses(self.catch_trials[1]) if allowed == "auto" else int(allowed)

    def catch_rule(self) -> tuple[int, float, int]:
        """(min_checks, max_failure_share or 0, misses allowed): see ``catch_failing``."""
        attention = self.attention
        share = attention.max_failure_share
        if share is not None:
            return attention.min_checks, float(share), 0 if attention.misses_allowed == "auto" else int(
                attention.misses_allowed)
        return attention.min_checks, 0.0, self.catch_misses_allowed

    def catch_failing(self, checks: int, failed: int) -> bool:
        """Whether ``failed`` missed of ``checks`` catch trials flag a rater (accept.lua applies the same rule)."""
        min_checks, share, misses = self.catch_rule()
        return checks >= min_checks and failed > share * checks and failed > misses

    @property
    def algorithm(self) -> str:
        """The algorithms' labels, for display."""
        return ", ".join(a.label for a in self.algorithms)

    def get_algorithm(self, label: str) -> AlgorithmConfig | None:
        return next((a for a in self.algorithms if a.label == label), None)

    def shares(self) -> dict[str, float]:
        total = sum(a.share for a in self.algorithms)
        return {a.label: a.share / total for a in self.algorithms}

    @classmethod
    def from_dict(cls, data: object) -> StudyConfig:
        """Validate a config mapping; raises ConfigError naming every bad field."""
        if not isinstance(data, dict):
            raise ConfigError("a study config must be a mapping of fields (e.g. name: My study)")
        validator = jsonschema.Draft202012Validator(SCHEMA)
        errors = sorted(validator.iter_errors(data), key=lambda e: [str(p) for p in e.path])
        if errors:
            raise ConfigError("; ".join(_describe(e) for e in errors))
        # checked when a study is made, not when it is loaded: a text a later version renames leaves it working
        problem = check_texts(data.get("rater_texts") or {})
        if problem:
            raise ConfigError(problem)
        data = dict(data)
        if "algorithm" in data or "params" in data:
            if "algorithms" in data:
                raise ConfigError("give either 'algorithm' (with optional 'params') for one algorithm, or an "
                                  "'algorithms' list, not both")
            data["algorithms"] = [{"algorithm": data.pop("algorithm", default_algorithm(data.get("question_kind",
                                                                                                 DEFAULT_KIND))),
                                   "params": data.pop("params", {})}]
        errors = []
        for i, alg in enumerate(data.get("algorithms", [])):
            kind = alg.get("question_kind") or data.get("question_kind", DEFAULT_KIND)
            props = {**PARAMS_SCHEMAS[alg["algorithm"]], **_screen_params(kind)}
            schema = {"type": "object", "additionalProperties": False, "properties": props}
            for e in jsonschema.Draft202012Validator(schema).iter_errors(alg.get("params", {})):
                errors.append(_describe(e, prefix=f"algorithms.{i}.params", allowed=props,
                                        what=f"parameter(s) for {alg['algorithm']}"))
        if errors:
            raise ConfigError("; ".join(errors))
        if "question_kind" in data:
            # a kind the researcher chose is asked: an algorithm that cannot ask it is named, not switched
            asked = data["question_kind"]
            able = ", ".join(n for n, e in _TABLE.items() if asked in e.question_kinds)
            for alg in data.get("algorithms", []):
                kinds = _TABLE[alg["algorithm"]].question_kinds
                if "question_kind" not in alg and asked not in kinds:
                    raise ConfigError(f"{alg['algorithm']} {_asks(kinds)}, not {asked}; choose another "
                                      f"algorithm for this question kind (one of {able})")
        data["algorithms"] = tuple(data.get("algorithms", ()))
        data["kind_settings"] = {name: data.pop(name) for name in KIND_SETTINGS_SCHEMAS if name in data}
        config = cls(**data)
        reserved = [a.label for a in config.algorithms if a.label in RESERVED_LABELS]
        if reserved:
            raise ConfigError(f"algorithm label {reserved[0]!r} is reserved for answers no algorithm asked "
                              f"({', '.join(RESERVED_LABELS)}); give the algorithm another 'label'")
        return config

    @classmethod
    def from_stored(cls, data: dict) -> StudyConfig:
        """Rebuild a config saved by :meth:`to_json` (already validated when it was created)."""
        data = dict(data)
        data["kind_settings"] = {name: data.pop(name) for name in KIND_SETTINGS_SCHEMAS if name in data}
        # a study stored before held-out questions existed held none out, and keeps so (a running study's
        # questions do not change under it with an upgrade); a new study gets the default
        data.setdefault("heldout_share", 0.0)
        return cls(**data)

    def to_dict(self) -> dict:
        return {
            "name": self.name, "algorithms": [a.to_dict() for a in self.algorithms],
            "question_kind": self.question_kind,
            # each kind's settings under its own name, as a config file gives them (``rank: {...}``, the
            # rating scale ``rating: {...}``)
            **{k: dict(v) for k, v in self.kind_settings.items() if k in KIND_SETTINGS_SCHEMAS},
            "instructions": self.instructions, "question": self.question, "allow_skip": self.allow_skip,
            "skip_label": self.skip_label, "accept_late_answers": self.accept_late_answers,
            "pool_size": self.pool_size,
            "token_ttl_seconds": self.token_ttl_seconds, "random_state": self.random_state,
            "heldout_share": self.heldout_share, "split": self.split,
            "consent": self.consent, "practice": [dict(p) for p in self.practice], "limits": self.limits.to_dict(),
            "attention": self.attention.to_dict(), "completion": self.completion.to_dict(),
            "language": self.language, "rater_texts": dict(self.rater_texts),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


def split_learner(algorithms: tuple[AlgorithmConfig, ...]) -> AlgorithmConfig | None:
    """The algorithm that sets a ``split: learner`` study's shares: the first whose table entry splits rater time
    (``Algorithm.splits_time``, e.g. ``pooled``) asking its own kind, the first of those kinds (None: none)."""
    return next((a for a in algorithms if a.entry.splits_time and a.question_kind == a.entry.splits_time[0]), None)


def learner_split_label(algorithms: tuple[AlgorithmConfig, ...]) -> str | None:
    """The label of :func:`split_learner` (None: none)."""
    learner = split_learner(algorithms)
    return None if learner is None else learner.label


def split_kinds(algorithms: tuple[AlgorithmConfig, ...]) -> tuple[str, ...]:
    """The question kinds a ``split: learner`` study's learner splits rater time between, its own first (the keys
    of its ``time_shares``; empty without such a learner)."""
    learner = split_learner(algorithms)
    return () if learner is None else tuple(learner.entry.splits_time)


def _check_learner_split(algorithms: tuple[AlgorithmConfig, ...]) -> None:
    """``split: learner`` needs a learner that splits rater time (``pooled``) asking its own kind (ratings) and an
    algorithm asking each other kind it splits time with (triplets), and nothing else beside them."""
    learner = split_learner(algorithms)
    if learner is None:
        splitters = [a.name for a in _TABLE.values() if a.splits_time]
        raise ConfigError("field 'split': 'learner' lets the pooled rating learner choose how much of the raters' "
                          "time goes to ratings and how much to triplets, and this study has no algorithm "
                          f"{' or '.join(repr(n) for n in splitters)} asking rating questions (add one, or leave "
                          "'split' out for fixed shares)")
    kinds = learner.entry.splits_time
    asked = {a.question_kind for a in algorithms}
    for kind in kinds[1:]:
        if kind not in asked:
            raise ConfigError(f"field 'split': 'learner' splits the raters' time between {' and '.join(kinds)} "
                              f"questions, and no algorithm of this study asks {kind} questions (add one, e.g. "
                              f"random_triplets with question_kind {kind}, or leave 'split' out)")
    other = [a for a in algorithms if a.question_kind not in kinds]
    if other:
        raise ConfigError(f"field 'split': 'learner' splits the raters' time between {' and '.join(kinds)} "
                          f"questions only; algorithm {other[0].label!r} asks {other[0].question_kind} questions "
                          "(remove it, or leave 'split' out for fixed shares)")


def _check_delegates(algorithms: tuple[AlgorithmConfig, ...]) -> None:
    """An algorithm that asks the questions another learner chooses (``Algorithm.delegates``, e.g.
    ``pooled_triplets``) needs that learner in the study: :func:`split_learner` (``pooled`` asking ratings)."""
    delegate = next((a for a in algorithms if a.entry.delegates), None)
    if delegate is None or split_learner(algorithms) is not None:
        return
    splitters = [a.name for a in _TABLE.values() if a.splits_time]
    kinds = next(a.splits_time for a in _TABLE.values() if a.splits_time)
    raise ConfigError(f"algorithm {delegate.label!r} ({delegate.algorithm}) asks the {delegate.question_kind} "
                      f"questions the study's {' or '.join(repr(n) for n in splitters)} learner chooses, and this "
                      f"study has no algorithm {' or '.join(repr(n) for n in splitters)} asking {kinds[0]} "
                      f"questions (add one, or choose another algorithm for the {delegate.question_kind} questions)")


def _screen_params(kind: str) -> dict:
    """The parameters an algorithm takes in a study of ``kind`` besides its own: how a screen kind's
    planner chooses screens (``screens``: adaptive, or random as the baseline; engine.kinds.SCREEN_PARAMS),
    not the screen's size, which is the study's (``rank: {n_reference, n_select}``)."""
    fragments = SCREEN_PARAMS.get(kind, {})
    return {k: {kk: vv for kk, vv in v.items() if kk != "default"} for k, v in fragments.items()
            if k not in KINDS[kind].settings} if kind in KINDS else {}


def _asks(kinds: tuple[str, ...]) -> str:
    return f"asks {kinds[0]} questions only" if len(kinds) == 1 else f"asks {' or '.join(kinds)} questions"


def _algorithm_from_dict(data: dict, index: int, default_kind: str) -> AlgorithmConfig:
    algorithm = data["algorithm"]
    if algorithm not in ALGORITHMS:
        raise ConfigError(f"field 'algorithms.{index}.algorithm' is {algorithm!r}; allowed values: "
                          f"{', '.join(ALGORITHMS)}")
    entry = _TABLE[algorithm]
    kind = data.get("question_kind")
    if kind is not None and kind not in entry.question_kinds:
        raise ConfigError(f"field 'algorithms.{index}.question_kind': {algorithm} {_asks(entry.question_kinds)}, "
                          f"not {kind}")
    if kind is None and default_kind not in entry.question_kinds:
        kind = entry.question_kinds[0]  # a study's kind the algorithm cannot ask: its own (from_dict says so)
    label = data.get("label") or algorithm
    if not re.match(LABEL_PATTERN, label):
        raise ConfigError(f"field 'algorithms.{index}.label' {label!r} must be 1 to 32 lowercase letters, digits, "
                          "'_' or '-'")
    kind = kind or default_kind
    params = dict(data.get("params") or {})
    if entry.adapted(kind):
        # A pair planner learning from triplet-derived samples gets the triplet-study defaults
        # (head-based estimates, no triangle bounds, every round open: engine.registry._DERIVED),
        # written into the study's config when it is created, so a study keeps what it started with
        # whatever later versions choose (configs stored in Redis are loaded by from_stored, unchanged).
        params = {**entry.triplet_defaults, **params}
    return AlgorithmConfig(label=label, algorithm=algorithm, question_kind=kind, share=float(data.get("share", 1.0)),
                           params=params, budget=data.get("budget"))


def _describe(error: jsonschema.ValidationError, prefix: str = "", allowed=None, what: str = "field(s)") -> str:
    where = ".".join([prefix] * bool(prefix) + [str(p) for p in error.path]) or "config"
    if error.validator == "additionalProperties":
        names = allowed if allowed is not None else error.schema.get("properties", {})
        unknown = ", ".join(sorted(set(error.instance) - set(names)))
        place = f" in '{where}'" if where != "config" else ""
        return f"unknown {what} {unknown}{place}; allowed: {', '.join(sorted(names)) or 'none'}"
    if error.validator == "required":
        return f"{where}: {error.message}"
    if error.validator == "enum":
        allowed_values = ", ".join(map(str, error.validator_value))
        return f"field '{where}' is {error.instance!r}; allowed values: {allowed_values}"
    if error.validator == "type":
        return f"field '{where}' must be of type {error.validator_value}, got {error.instance!r}"
    return f"field '{where}': {error.message}"


def load_config_file(path: str | Path) -> StudyConfig:
    """Read a YAML or JSON config file; raises ConfigError naming the file on any problem."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    try:
        data = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"config file {path} is not valid {path.suffix.lstrip('.') or 'YAML'}: {exc}") from None
    try:
        return StudyConfig.from_dict(data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
