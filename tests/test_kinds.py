"""The table of question kinds (engine/kinds.py): every entry is complete and consistent, its screens,
answer checks, catch trials, repeats and practice questions hold together, and no platform file
compares a question kind's name (new entries and files are checked automatically)."""
from __future__ import annotations

import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from engine import registry
from engine.kinds import DEFAULT_KIND, KINDS, QUESTION_KINDS, AnswerError, get_kind, kind_of
from workers.store.config import ATTENTION_KINDS, PRACTICE_SCHEMA, ConfigError, StudyConfig

ROOT = Path(__file__).resolve().parents[1]
N = 30
#: The files that may name kinds in comparisons: the table itself and the engine half that implements
#: what the table delegates to (planners, conversions, simulated raters).
TABLE_FILES = {"engine/kinds.py", "engine/screens.py", "simulation/oracles.py", "engine/registry.py"}
PLATFORM_DIRS = ("workers", "webapp", "templates", "static", "docs", "engine", "simulation")
PLATFORM_FILES = ("benchmarks/load.py", "benchmarks/load_common.py")


def _settings(kind):
    return kind.check_settings(None)


def test_question_kinds_are_defined_once_and_agree_with_the_algorithm_table():
    assert QUESTION_KINDS == tuple(KINDS) and DEFAULT_KIND in KINDS
    assert registry.QUESTION_KINDS is QUESTION_KINDS  # the algorithm table reads the kinds table's list
    assert ATTENTION_KINDS == ("auto", *QUESTION_KINDS)
    for entry in registry.ALGORITHMS.values():
        assert set(entry.question_kinds) <= set(QUESTION_KINDS)


@pytest.mark.parametrize("name", QUESTION_KINDS)
def test_entry_is_complete(name):
    kind = get_kind(name)
    assert kind.name == name and kind.description and kind.prompt and kind.instructions
    prompt, instructions = kind.texts(_settings(kind))
    assert "{" not in prompt + instructions, "a text placeholder the settings did not fill"
    assert (ROOT / "templates" / "raters" / "widgets" / f"{kind.widget}.html").is_file()
    widget_js = (ROOT / "static" / "js" / "widgets" / f"{kind.widget}.js").read_text()
    assert f"W.{kind.widget} = " in widget_js, "the widget's script registers under the widget's name"
    module, _, cls = kind.oracle.partition(":")
    assert module == "simulation.oracles" and cls
    assert kind.screen_seconds(_settings(kind)) > 0 and kind.too_fast(_settings(kind)) >= 0
    assert kind.practice_schema in PRACTICE_SCHEMA["items"]["oneOf"]


@pytest.mark.parametrize("name", QUESTION_KINDS)
def test_random_screens_show_distinct_items_and_round_trip_their_proposal(name):
    kind, rng = get_kind(name), random.Random(0)
    settings = _settings(kind)
    for _ in range(50):
        screen = kind.random_screen(N, settings, rng)
        shown = kind.shown(screen)
        assert kind_of(screen) is kind and len(set(shown)) == len(shown) >= 2
        assert all(0 <= i < N for i in shown) and len(shown) <= kind.items_needed(settings)
        assert kind.screen(kind.proposal(screen), settings) == screen


@pytest.mark.parametrize("name", [k for k in QUESTION_KINDS if KINDS[k].asks != "pair"])
def test_answer_checks_take_what_was_offered_and_name_what_was_not(name):
    kind = get_kind(name)
    settings = _settings(kind)
    screen = kind.random_screen(N, settings, random.Random(1))
    offered = kind.shown(screen)[1:] if kind.headed else kind.shown(screen)
    want = screen.get("select", 1)
    picks = offered[:want]
    assert kind.check_answer(screen, picks, None) == tuple(picks)
    stray = next(i for i in range(N) if i not in kind.shown(screen))
    with pytest.raises(AnswerError, match=str(stray)):
        kind.check_answer(screen, [stray, *picks[1:]], None)
    with pytest.raises(AnswerError):
        kind.check_answer(screen, [], None)
    if want > 1:
        with pytest.raises(AnswerError, match="once"):
            kind.check_answer(screen, [picks[0]] * want, None)


@pytest.mark.parametrize("name", QUESTION_KINDS)
def test_repeats_show_the_same_items_in_another_order(name):
    kind = get_kind(name)
    screen = kind.random_screen(N, _settings(kind), random.Random(2))
    again = kind.repeat_screen(screen, random.Random(3))
    assert kind.shown(again) != kind.shown(screen) and sorted(kind.shown(again)) == sorted(kind.shown(screen))
    if kind.headed:
        assert again["head"] == screen["head"]


@pytest.mark.parametrize("name", [k for k in QUESTION_KINDS if KINDS[k].asks != "pair"])
def test_catch_trials_are_ordinary_screens_expecting_what_a_look_says(name):
    """A catch trial has the shape of any screen of its kind (distinct items, the settings' size), and
    its expected first pick passes the kind's own judge of catch trials (a restore's), while another
    pick fails it."""
    kind = get_kind(name)
    settings = _settings(kind)
    head, similar, different, others = 0, 1, 2, tuple(range(3, 15))
    alike = {frozenset((head, similar))}

    def judge(i, j):
        return frozenset((i, j)) in alike

    screen, expect = kind.catch_screen(head, similar, different, others, settings, random.Random(4))
    shown = kind.shown(screen)
    assert len(set(shown)) == len(shown) == len(kind.shown(kind.random_screen(N, settings, random.Random(0))))
    assert kind.check_answer(screen, [expect, *[i for i in shown[1:] if i != expect]][: screen.get("select", 1)],
                             None)
    assert kind.catch_passes(shown, [expect], judge)
    wrong = next(i for i in (shown[1:] if kind.headed else shown) if i != expect)
    assert not kind.catch_passes(shown, [wrong], judge)


def test_a_grid_catch_trial_needs_enough_unlike_items():
    kind = get_kind("rank")
    assert kind.catch_screen(0, 1, 2, (3, 4), _settings(kind), random.Random(0)) is None


@pytest.mark.parametrize("config, words", [
    ({"question_kind": "rank", "rank": {"n_reference": 13}}, ["rank.n_reference"]),
    ({"question_kind": "rank", "rank": {"n_reference": 4, "n_select": 4}}, ["n_select", "smaller"]),
    ({"question_kind": "rank", "rank": {"n_refs": 4}}, ["n_refs", "n_reference"]),
    ({"question_kind": "odd_one_out", "algorithm": "simforest"}, ["simforest", "same_different questions, not odd"]),
    ({"question_kind": "odd_one_out", "practice": [{"kind": "odd_one_out", "items": ["a", "b", "c"],
                                                    "answer": "d"}]}, ["practice.0.answer", "'d'"]),
])
def test_kind_settings_and_practice_are_validated_in_the_researchers_words(config, words):
    with pytest.raises(ConfigError) as err:
        StudyConfig.from_dict({"name": "s", **config})
    for word in words:
        assert word in str(err.value)


def test_a_rank_study_keeps_its_n_and_k_through_storage():
    config = StudyConfig.from_dict({"name": "s", "question_kind": "rank", "rank": {"n_reference": 6, "n_select": 1},
                                    "limits": {"max_questions_per_rater": 10}})
    again = StudyConfig.from_stored(config.to_dict())
    assert again.settings_of("rank") == {"n_reference": 6, "n_select": 1} == config.settings_of("rank")
    assert StudyConfig.from_dict(config.to_dict()).settings_of("rank") == config.settings_of("rank")
    assert "one of the 6" in config.instructions and config.catch_kind == "rank"
    # the too-fast threshold grows with the references and picks of a grid; an explicit one wins
    assert 0 < config.too_fast_ms("rank") < StudyConfig.from_dict(
        {"name": "s", "question_kind": "rank", "rank": {"n_reference": 12, "n_select": 3}}).too_fast_ms("rank")
    assert StudyConfig.from_dict({"name": "s", "question_kind": "rank",
                                  "limits": {"min_response_ms": 0}}).too_fast_ms("rank") == 0


#: A comparison of an expression holding a question kind (``kind``, ``question_kind``, ``["kind"]``,
#: ``.kind``, ``catch_kind``) with a kind's name, in Python, Jinja, JavaScript or Lua; or a membership
#: test of such an expression in a literal list of names.
_NAMES = "|".join(re.escape(k) for k in QUESTION_KINDS)
_HOLDER = r"""(?:kind\b|kind['"]\]|kind\(\))"""
COMPARISONS = [
    re.compile(_HOLDER + r"""\s*\)?\s*(?:==|!=|===|!==|~=)\s*['"](?:""" + _NAMES + r""")['"]"""),
    re.compile(r"""['"](?:""" + _NAMES + r""")['"]\s*(?:==|!=|===|!==)\s*\w*""" + _HOLDER),
    re.compile(_HOLDER + r"""\s+(?:not\s+)?in\s+[(\[{]\s*['"](?:""" + _NAMES + r""")['"]"""),
]


def _platform_files():
    for folder in PLATFORM_DIRS:
        for path in sorted((ROOT / folder).rglob("*")):
            rel = path.relative_to(ROOT).as_posix()
            if path.suffix in (".py", ".js", ".html", ".lua", ".yaml") and rel not in TABLE_FILES \
                    and "/vendor/" not in rel:
                yield rel, path
    for rel in PLATFORM_FILES:
        if (ROOT / rel).is_file():
            yield rel, ROOT / rel


def test_no_platform_file_compares_a_question_kinds_name():
    """What a kind does is read from its entry (engine/kinds.py), never decided by ``kind == "rating"``
    in a caller: adding a kind is one entry and one widget."""
    offences = []
    for rel, path in _platform_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if any(p.search(line) for p in COMPARISONS):
                offences.append(f"{rel}:{number}: {line.strip()}")
    assert not offences, "compare kinds through engine/kinds.py, not by name:\n" + "\n".join(offences)


@pytest.mark.parametrize("line", [
    'if question["kind"] == "rating":', "if (q.kind === 'odd_one_out') {", "kind ~= 'rating'",
    "{% if kind == 'rank' %}", 'if answer.kind in ("triplet", "rating"):', 'if config.catch_kind != "triplet":',
])
def test_the_name_check_catches_the_comparisons_it_looks_for(line):
    assert any(p.search(line) for p in COMPARISONS)


def test_importing_the_table_stays_cheap():
    code = ("import sys\nimport engine.kinds\n"
            "print(sorted(m for m in ('numpy', 'flask', 'redis', 'workers', 'webapp') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_api_description_lists_the_kinds_of_the_table():
    import yaml

    spec = yaml.safe_load((ROOT / "docs" / "openapi.yaml").read_text())
    assert tuple(spec["components"]["schemas"]["Question"]["properties"]["kind"]["enum"]) == QUESTION_KINDS


def test_the_rating_scale_is_the_rating_kinds_settings():
    """The scale is the rating kind's own settings, as rank's n and k are rank's: checked together, read by the
    kind's own methods, and never a planner's parameter."""
    rating = get_kind("rating")
    scale = rating.check_settings(None)
    assert (scale["min"], scale["max"], scale["step"], scale["widget"]) == (1, 5, 1, "buttons")
    assert rating.sample_levels(scale) == [1.0, 0.75, 0.5, 0.25, 0.0]
    slider = rating.check_settings({"min": 0, "max": 1, "step": None, "widget": "slider"})
    assert rating.sample_levels(slider) is None and rating.sample(0.2, slider) == pytest.approx(0.8)
    assert rating.planner_params(slider) == {}
    for given, words in [({"min": 5, "max": 1}, "rating.max"), ({"step": 10}, "rating.step"),
                         ({"min": 0, "max": 100}, "at most 11 buttons")]:
        with pytest.raises(ValueError, match=words):
            rating.check_settings(given)
    assert StudyConfig.from_dict({"name": "s", "question_kind": "rating", "rating": {"max": 7}}).settings_of(
        rating)["max"] == 7
