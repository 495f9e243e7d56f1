"""The planner contract holds (engine/graph.py): every planner of the table has everything the
platform calls, no file outside the two tables (engine/registry.py, engine/kinds.py) branches on an
algorithm's or a question kind's name, a planner class or a guessed planner attribute, and
docs/architecture.md's "Adding an algorithm" and "Adding a question kind" are true as written: one engine
module and one ``_ENTRIES`` line make an algorithm a study runs end to end, and one entry of the kinds table
and one widget a kind a study asks."""
from __future__ import annotations

import ast
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from engine import planners, registry
from engine.graph import PROGRESS_KEYS, NeighborGraph, Planner, Progress, RoundPlanner
from engine.kinds import QUESTION_KINDS

ROOT = Path(__file__).resolve().parents[1]
#: The two tables: the only files that may tell algorithms or kinds apart by name or class.
TABLES = {"engine/registry.py", "engine/kinds.py"}
#: What the platform is made of (its Python source).
PLATFORM = ("engine", "simulation", "workers", "webapp", "proxima")

#: The names a branch must not compare: algorithm names, question kind names and the state class
#: names of the table (``state["class"] == "ForestStudy"`` is a name test too).
NAMES = (set(registry.ALGORITHMS) | set(QUESTION_KINDS)
         | {c for entry in registry.ALGORITHMS.values() for c in entry.state_classes})
#: Entry fields whose values are a vocabulary of their own (``entry.asks == "triplet"`` asks the
#: entry a question: "pair" or "triplet"; ``learns``: graph, forest, embedding; ``screens``: adaptive
#: or random), so comparing them with a word that is also a name is no name test.
ENTRY_FIELDS = {"asks", "learns", "screens"}
#: Variables holding another vocabulary in which a word may also be a name: ``what`` is an export's
#: name ("graph", "embedding", "odd_one_out" the SPoSE/VICE layout, ...), not an algorithm or a kind.
OTHER_VOCABULARIES = {"what", "screens", "vote"}
#: ... and a JSON document's own type (``doc["kind"] == "comparison_forest"``: the forest export's schema).
DOCUMENT_TYPE = re.compile(r"""^doc(?:\.get\(|\[)['"]kind['"]""")


def _planner_classes() -> set[str]:
    """Every planner class of the table, the engine's wrappers and their engine base classes."""
    import engine.adapters
    import engine.forest_study
    import engine.screens

    classes = {entry.planner_class() for entry in registry.ALGORITHMS.values()}
    classes |= {engine.adapters.PairTripletAdapter, engine.screens.OddOneOutScreens,
                engine.screens.RankScreens, engine.forest_study.ForestStudy}
    return {base.__name__ for cls in classes for base in cls.__mro__ if base.__module__.startswith("engine.")}


PLANNER_CLASSES = _planner_classes()
#: Every key a planner's progress may have that the platform reads (engine.graph.Progress).
PROGRESS_DECLARED = set(Progress.__annotations__)


def _holds_planner(node: ast.AST) -> bool:
    """``planner``, ``self.planner``, ``learner.planner``, ``inner`` ...: an expression naming a planner."""
    text = ast.unparse(node)
    return bool(re.search(r"(?:^|[._])(?:planner|inner)(?:$|\b)", text))


def _names_in(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value] if node.value in NAMES else []
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [n for elt in node.elts for n in _names_in(elt)]
    return []


def _entry_field(node: ast.AST) -> bool:
    return ((isinstance(node, ast.Attribute) and node.attr in ENTRY_FIELDS | OTHER_VOCABULARIES)
            or (isinstance(node, ast.Name) and node.id in OTHER_VOCABULARIES)
            or bool(DOCUMENT_TYPE.match(ast.unparse(node))))


def _holds_progress(node: ast.AST) -> bool:
    return "progress" in ast.unparse(node)


def _undeclared_key(node: ast.AST) -> str | None:
    """A string constant that is no key of :class:`engine.graph.Progress` (a guessed progress key)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value not in PROGRESS_DECLARED:
        return node.value
    return None


def _prefix_of_a_name(node: ast.AST) -> str | None:
    """A string constant (or one of a tuple of them) that begins or ends an algorithm's or kind's name."""
    values = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    for value in values:
        if isinstance(value, ast.Constant) and isinstance(value.value, str) and len(value.value) >= 2:
            if any(n.startswith(value.value) or n.endswith(value.value) for n in NAMES):
                return value.value
    return None


#: Module tables of another vocabulary in which a word may also be a name, each with what it holds: a
#: membership test or lookup in them is no name test.
OTHER_TABLES = {"MODELS": "the offline models 'proxima train' fits (workers.results.models)",
                "FORMATS": "the exports a study offers, by name and format (workers.results.exports)",
                "_INTEGER": "the data package's integer columns (workers.results.package)",
                "SCREEN_MODES": "how screens are chosen: adaptive or random (engine.screens)"}
_COLLECTIONS = ("frozenset", "set", "tuple", "list", "sorted")
_MAPPINGS = ("dict", "MappingProxyType")


class _Names:
    """Which expressions of a module hold names (data flow, not patterns): a name constant, a tuple, list or
    set holding one, ``frozenset(...)``/``tuple(...)`` of one, and every variable or attribute assigned such an
    expression anywhere in the module (``FORESTS = ("comparison_forest", ...)`` then ``x in FORESTS``), to a
    fixed point; and which are tables keyed by names (a dict literal, ``dict(...)`` or ``MappingProxyType``
    of one, and what is assigned one), so that a lookup in them with a computed key is a dispatch on a name."""

    def __init__(self, tree: ast.AST) -> None:
        self.bound: set[str] = set()
        self.tables: set[str] = set()
        assignments = [(t, n.value) for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AnnAssign))
                       and n.value is not None for t in (n.targets if isinstance(n, ast.Assign) else [n.target])]
        changed = True
        while changed:
            changed = False
            for target, value in assignments:
                key = self._key(target)
                if key is None or key in OTHER_TABLES or key.split(".")[-1] in OTHER_TABLES:
                    continue
                if key not in self.bound and self.names(value):
                    self.bound.add(key)
                    changed = True
                if key not in self.tables and self.table(value):
                    self.tables.add(key)
                    changed = True

    @staticmethod
    def _key(node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Attribute):
            return ast.unparse(node)
        return None

    def names(self, node: ast.AST) -> list[str]:
        """The names ``node`` holds or may evaluate to."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value] if node.value in NAMES else []
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return [n for elt in node.elts for n in self.names(elt)]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _COLLECTIONS:
            return [n for arg in node.args for n in self.names(arg)]
        key = self._key(node)
        return [f"{key} (holds names)"] if key in self.bound else []

    def table(self, node: ast.AST) -> bool:
        """Whether ``node`` is a table keyed by names."""
        if isinstance(node, ast.Dict):
            return any(self.names(k) for k in node.keys if k is not None)
        if isinstance(node, ast.DictComp):
            return bool(self.names(node.key))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _MAPPINGS:
            return any(self.table(arg) for arg in node.args)
        return self._key(node) in self.tables


def _computed(node: ast.AST) -> bool:
    """A key that is not written in the code (a lookup with it chooses by whatever it holds)."""
    return not (isinstance(node, ast.Constant) or _entry_field(node))


def _looks_up_variables(node: ast.AST) -> str | None:
    """``vars(x)[...]``, ``globals()[...]``, ``vars(x).get(...)``: a name turned into code."""
    call = node.value if isinstance(node, ast.Subscript) else (
        node.func.value if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get" else None)
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in ("vars", "globals", "locals"):
        return f"looks a name up among variables ({call.func.id}())"
    return None


def offences(source: str, rel: str = "<source>") -> list[str]:
    """The branches of ``source`` on an algorithm or kind name (however it reaches the branch: a constant,
    a tuple or set of them, a variable or attribute holding them, a table keyed by them and looked up with a
    computed key, a prefix through ``startswith``, a lookup among variables), a planner class, a guessed
    planner attribute or a guessed progress key, as ``file:line: code``."""
    found = []
    tree = ast.parse(source)
    names = _Names(tree)
    for node in ast.walk(tree):
        why = None
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for op, (left, right) in zip(node.ops, zip(operands, operands[1:], strict=False), strict=True):
                if not isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn, ast.Is, ast.IsNot)):
                    continue
                for named, other in ((right, left), (left, right)):
                    hit = names.names(named)
                    if hit and not _entry_field(other) and not names.names(other):
                        why = f"compares with the name {hit[0]!r}"
                if isinstance(op, (ast.In, ast.NotIn)) and names.table(right) and _computed(left):
                    why = "tests membership in a table keyed by names"
                if isinstance(op, (ast.In, ast.NotIn)) and _holds_progress(right) and _undeclared_key(left):
                    why = f"guesses the progress key {_undeclared_key(left)!r}"
        elif isinstance(node, ast.Subscript) and names.table(node.value) and _computed(node.slice):
            why = "dispatches through a table keyed by names"
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "pop")
              and names.table(node.func.value) and node.args and _computed(node.args[0])):
            why = "dispatches through a table keyed by names"
        elif _looks_up_variables(node):
            why = _looks_up_variables(node)
        elif isinstance(node, ast.MatchValue):
            hit = names.names(node.value)
            if hit:
                why = f"matches the name {hit[0]!r}"
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("startswith", "endswith") and node.args and _prefix_of_a_name(node.args[0])
              and not _entry_field(node.func.value)):
            why = f"tests a name by its {node.func.attr[:-4]} {_prefix_of_a_name(node.args[0])!r}"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
            if node.func.id in ("isinstance", "issubclass") and len(node.args) == 2:
                target = node.args[1]
                parts = target.elts if isinstance(target, ast.Tuple) else [target]
                named = [p.attr if isinstance(p, ast.Attribute) else getattr(p, "id", None) for p in parts]
                hit = [n for n in named if n in PLANNER_CLASSES]
                if hit:
                    why = f"tests for the planner class {hit[0]}"
            elif node.func.id in ("hasattr", "getattr") and _holds_planner(node.args[0]):
                why = f"guesses an attribute of a planner ({node.func.id})"
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and node.args and _holds_progress(node.func.value) and _undeclared_key(node.args[0])):
            why = f"guesses the progress key {_undeclared_key(node.args[0])!r}"
        elif (isinstance(node, ast.For) and isinstance(node.iter, (ast.Tuple, ast.List))
              and any(_undeclared_key(e) for e in node.iter.elts)
              and any(_holds_progress(n) for n in ast.walk(ast.Module(body=node.body, type_ignores=[])))):
            why = "tries progress keys in turn"
        if why:
            found.append(f"{rel}:{node.lineno}: {why}: {ast.get_source_segment(source, node)}")
    return found


def _platform_files():
    for folder in PLATFORM:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel not in TABLES:
                yield rel, path


def test_no_platform_file_branches_on_an_algorithm_a_kind_or_a_planner_class():
    """What an algorithm or a kind does is read from its table entry or the planner contract, never
    decided by its name, its class or a guessed attribute in a caller."""
    found = [o for rel, path in _platform_files() for o in offences(path.read_text(encoding="utf-8"), rel)]
    assert not found, ("ask the table entry or the planner contract (engine/graph.py) instead:\n"
                       + "\n".join(found))


@pytest.mark.parametrize("line", [
    'if algorithm in ("anntri", "ann"):\n    pass',
    'if config.algorithm == "duels":\n    pass',
    'x = "rating" != question_kind',
    'if state.get("class") == "ForestStudy":\n    pass',
    'if isinstance(self.planner, anntri._NeighborGraphPlanner):\n    pass',
    'if isinstance(p, (RandomTriplets, CandidateDuels)):\n    pass',
    'settle = getattr(self.planner, "settle", None)',
    'if hasattr(planner, "status_"):\n    pass',
    'window = getattr(learner.planner, "window", None)',
    'match name:\n    case "comparison_forest":\n        pass',
    'FOREST_STATE = "ForestStudy"\nif state.get("class") == FOREST_STATE:\n    pass',
    'if "samples" in progress and progress.get("n_items"):\n    pass',
    'x = summary["progress"].get("answers_counted", 0)',
    'for name in ("samples", "answers"):\n    value = progress.get(name)',
    # dispatch however written: a table keyed by names, a prefix, a tuple constant, a lookup among variables
    'HANDLERS = {"duels": plan_duels, "anntri": plan_anntri}\nHANDLERS[config.algorithm](study)',
    'handler = {"rating": rate, "triplet": compare}.get(kind)',
    'TABLE = MappingProxyType({"odd_one_out": 3, "rank": 9})\nsize = TABLE[question_kind]',
    'if question_kind in {"rank": 1, "odd_one_out": 2}:\n    pass',
    'if algorithm.startswith("ann"):\n    pass',
    'if state["class"].endswith(("Screens", "Forest")):\n    pass',
    'PAIR_LEARNERS = ("anntri", "ann", "random")\nif name in PAIR_LEARNERS:\n    pass',
    'def f(a):\n    forests = frozenset({"comparison_forest", "simforest"})\n    return a.algorithm in forests',
    'class C:\n    def __init__(self):\n        self.kinds = ("rank", "odd_one_out")\n'
    '    def f(self, kind):\n        return kind in self.kinds',
    'plan = vars(planners)["plan_" + name]',
    'plan = globals().get(f"_plan_{question_kind}")',
])
def test_the_branch_check_catches_the_branches_it_looks_for(line):
    assert offences(line), line


@pytest.mark.parametrize("line", [
    'if entry.asks == "triplet":\n    pass',
    'if kind.asks == "pair":\n    pass',
    'if self.entry.learns == "embedding":\n    pass',
    'if entry.screens == "random":\n    pass',
    'if name == "smerf":\n    pass',
    'if what == "embedding":\n    pass',
    'if doc.get("kind") != "comparison_forest":\n    pass',
    'ok = getattr(self, "_radius_list", None)',
    'if isinstance(planner, RoundPlanner):\n    pass',
    # a record with a field that shares a name, read by that field; other vocabularies; file suffixes
    'state = {"embedding": X, "duels": 3}\ny = state["embedding"]',
    'if path.endswith(".csv"):\n    pass',
    'if what in FORMATS:\n    pass',
    'if screens not in SCREEN_MODES:\n    pass',
])
def test_the_branch_check_lets_questions_to_the_entry_through(line):
    assert not offences(line), line


#: The platform's questions about a shape (``.asks``: what a kind or an algorithm proposes) outside the two
#: tables, in its Python source and its templates, by file, each with why it is still asked there. What a kind
#: or an algorithm does with its answers, which kind its planner is built with and what its progress reports are
#: its entry's declared capabilities and methods (engine/kinds.py: ``one_triplet``, ``on_scale``, ...;
#: engine/registry.py: ``adapted``, ``native_kind``, ``reports_trees``, ...): a branch on ``asks == "pair"``
#: taken as "is this a rating" served a second pair kind the rating scale and learned it backwards. None is
#: left (there were 27 ``asks == "pair"`` alone); tests/engine/test_entry_capabilities.py holds the
#: capabilities that replaced the last ones to the shape answers they replaced, for every entry.
SHAPE_QUESTIONS: dict[str, int] = {}


def _shape_reads(source: str) -> int:
    """How often Python ``source`` reads a shape: the attribute ``asks`` and the string "asks" (``getattr(x,
    "asks")``, ``vars(x)["asks"]``, ``attrgetter("asks")``, ``asdict(x)["asks"]``)."""
    return sum((isinstance(n, ast.Attribute) and n.attr == "asks")
               or (isinstance(n, ast.Constant) and n.value == "asks") for n in ast.walk(ast.parse(source)))


#: a template's shape reads: ``x.asks``, ``x["asks"]``, ``selectattr("asks", ...)``, ``attribute="asks"``
TEMPLATE_SHAPE = re.compile(r"""\.asks\b|["']asks["']""")


def _shape_questions(root=ROOT) -> dict[str, int]:
    """Shapes read outside the two tables: in the platform's Python (:func:`_shape_reads`) and its templates."""
    found = {}
    for folder in PLATFORM:
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            count = 0 if rel in TABLES else _shape_reads(path.read_text(encoding="utf-8"))
            if count:
                found[rel] = count
    for path in sorted((root / "templates").rglob("*.html")):
        count = len(TEMPLATE_SHAPE.findall(path.read_text(encoding="utf-8")))
        if count:
            found[path.relative_to(root).as_posix()] = count
    return found


def test_no_platform_file_asks_a_shape():
    """What a kind or an algorithm does is asked of its entry's methods and declared capabilities
    (``check_value``, ``sample``, ``on_scale``, ``one_triplet``, ``observes_samples``, ``adapted``,
    ``reports_trees``, ...), not decided by its shape in a caller."""
    found = _shape_questions()
    grown = {f: n for f, n in found.items() if n > SHAPE_QUESTIONS.get(f, 0)}
    assert not grown, f"ask the kind's or the algorithm's entry instead of its shape (asks): {grown}"
    assert found == SHAPE_QUESTIONS, f"a shape question went away: shrink SHAPE_QUESTIONS to {found}"


@pytest.mark.parametrize("where,line", [
    ("workers/x.py", 'if kind.asks == "triplet":\n    pass'),
    ("webapp/x.py", 'if getattr(entry, "asks") != "pair":\n    pass'),
    ("workers/x.py", 'shape = vars(kind)["asks"]'),
    ("webapp/x.py", 'shape = operator.attrgetter("asks")(entry)'),
    ("engine/x.py", 'pair = {"pair": 1}.get(entry.asks)'),
    ("templates/x.html", '{% if alg.entry.asks == "triplet" %}x{% endif %}'),
    ("templates/x.html", '{% for a in algs|selectattr("asks", "equalto", "pair") %}x{% endfor %}'),
    ("templates/x.html", '{% if alg.entry["asks"] == "pair" %}x{% endif %}'),
])
def test_the_shape_check_catches_a_shape_read_however_written(tmp_path, where, line):
    """A shape read written into a platform file or a template of a copy of the tree is found."""
    for folder in (*PLATFORM, "templates"):
        (tmp_path / folder).mkdir()
    (tmp_path / where).write_text(line + "\n", encoding="utf-8")
    assert _shape_questions(tmp_path) == {where: 1}


def test_the_dashboard_reads_only_declared_progress_keys():
    """The dashboard's script reads a learner's progress by the keys of engine.graph.Progress (the
    keys every planner has, and the optional ones of planners in rounds and of forests)."""
    script = (ROOT / "static" / "js" / "dashboard.js").read_text(encoding="utf-8")
    read = set(re.findall(r"\b(?:p|progress)\.([a-z_]+)\b", script))
    assert read and {"answers", "rounds_certified", "nodes_built"} <= read
    assert read <= PROGRESS_DECLARED, sorted(read - PROGRESS_DECLARED)


# ---------------------------------------------------------------------------- the contract itself
def _cases():
    for name, entry in registry.ALGORITHMS.items():
        for kind in entry.question_kinds:
            yield name, kind


@pytest.mark.parametrize("name,kind", list(_cases()), ids=[f"{n}-{k}" for n, k in _cases()])
def test_every_planner_of_the_table_has_the_whole_contract(name, kind):
    entry = registry.ALGORITHMS[name]
    labels = ["ab"[i % 2] for i in range(12)] if entry.needs_labels or entry.takes_labels else None
    planner = planners.make_planner(name, 12, question_kind=kind, random_state=0, labels=labels)
    assert isinstance(planner, Planner)
    progress = planner.progress()
    assert set(PROGRESS_KEYS) <= set(progress)
    assert isinstance(progress["done"], bool) and progress["done"] is planner.done is False
    assert progress["answers"] == 0 and progress["questions_issued"] == 0
    graph = planner.neighbor_graph(2)
    assert isinstance(graph, NeighborGraph) and graph.neighbors.shape == (12, 2)
    # planners that work in rounds say so in the table, and have the capability (wrapped or not)
    if entry.rounds:
        assert isinstance(planner, RoundPlanner)
        heads = [q[0] for q in planner.next_questions(3)]
        assert heads and not planner.stale(heads).any() and not planner.closed(heads).any()
    # the state round-trips through the class the contract names
    progress = planner.progress()
    again = type(planner).from_state(planner.to_state())
    assert type(again) is type(planner)
    assert json.dumps(again.progress(), sort_keys=True) == json.dumps(progress, sort_keys=True)
    assert type(planners.restore_planner(planner.to_state())) is type(planner)


# ---------------------------------------------------------------------------- adding an algorithm
#: A whole algorithm, as docs/architecture.md's "Adding an algorithm" describes: a triplet planner that
#: asks each item about two others in turn and calls the candidate that won most often its neighbour.
TOY_MODULE = '''
"""A toy algorithm: each item in turn is asked about two other items; its neighbour is the item that
won most often with it. Numpy only."""
from __future__ import annotations

import numpy as np

from .graph import NO_NEIGHBOR, NeighborGraph


class ToyNearest:
    VERSION = 1

    def __init__(self, n_items, random_state=None, rounds=3):
        self.n_items = int(n_items)
        self.random_state = random_state
        self.rounds = int(rounds)
        self.wins_ = np.zeros((self.n_items, self.n_items), np.int64)
        self.next_ = 0
        self.n_issued_ = 0
        self.n_answers_ = 0

    @property
    def done(self):
        return self.n_answers_ >= self.rounds * self.n_items * (self.n_items - 1)

    def next_questions(self, budget):
        out = []
        n = self.n_items
        while len(out) < budget and not self.done and self.next_ < self.rounds * n * (n - 1):
            step = self.next_
            head, offset = step % n, 1 + (step // n) % (n - 1)
            a = (head + offset) % n
            b = (a + 1) % n if (a + 1) % n != head else (a + 2) % n
            out.append((head, a, b))
            self.next_ += 1
        self.n_issued_ += len(out)
        return out

    def observe(self, answers):
        for head, a, b, winner in answers:
            self.wins_[int(head), int(winner)] += 1
            self.n_answers_ += 1

    def forget(self, questions):
        return 0

    def progress(self):
        return {"answers": int(self.n_answers_), "questions_issued": int(self.n_issued_),
                "done": bool(self.done), "items_certified": 0}

    def neighbor_graph(self, k=1):
        order = np.argsort(-self.wins_, axis=1, kind="stable")[:, :k]
        seen = np.take_along_axis(self.wins_, order, axis=1) > 0
        return NeighborGraph.from_neighbors(np.where(seen, order, NO_NEIGHBOR))

    def result(self):
        return self.neighbor_graph(1)

    def to_state(self):
        return {"class": "ToyNearest", "version": self.VERSION, "n_items": self.n_items, "rounds": self.rounds,
                "wins": self.wins_, "next": self.next_, "n_issued": self.n_issued_, "n_answers": self.n_answers_}

    @classmethod
    def from_state(cls, state):
        planner = cls(state["n_items"], rounds=state["rounds"])
        planner.wins_ = np.asarray(state["wins"], np.int64).reshape(planner.n_items, planner.n_items).copy()
        planner.next_, planner.n_issued_ = int(state["next"]), int(state["n_issued"])
        planner.n_answers_ = int(state["n_answers"])
        return planner
'''
#: The one line of the table.
TOY_ENTRY = ('    Algorithm("toy_nearest", "engine.toy_nearest:ToyNearest", ("triplet",), "triplet", "graph",'
             ' "Toy: the candidate that won most often", {"rounds": {"type": "integer", "minimum": 1,'
             ' "default": 3}}, ("ToyNearest",)),\n')

#: A study of the toy algorithm through the platform: the web API serves its questions and takes the
#: answers, the RQ job function applies them, the dashboard's numbers and the graph export read it.
TOY_STUDY = '''
import json, sys
import numpy as np
import redis

import engine
assert engine.__file__.startswith(sys.argv[2]), engine.__file__
from webapp import create_app
from webapp.stats import study_stats
from workers.jobs.learners import Learner
from workers.results.exports import nn_graph
from workers.store import engine_state
from workers.store.config import StudyConfig
from workers.store.queue import run_queued_jobs
from workers.store.studies import Item, create_study, get_study
from webapp.handles import shown_index

positions = [0.0, 0.05, 1.0, 1.05, 2.0, 2.05]
conn = redis.Redis.from_url(sys.argv[1])
config = StudyConfig.from_dict({"name": "toy", "random_state": 1, "pool_size": 6, "attention": {"rate": 0},
                                "heldout_share": 0,
                                "algorithms": [{"algorithm": "toy_nearest"}]})
items = [Item(id=f"p{i}", kind="text", text=f"point {i}", position=(x,)) for i, x in enumerate(positions)]
sid = create_study(conn, config, items, study_id="toy")
# (one simulated rater answering as fast as the passes allow: exempt from the per-session rate limit,
# as the other tests' app is)
app = create_app({"TESTING": True, "REDIS_URL": sys.argv[1], "SECRET_KEY": "toy-secret",
                  "RATE_LIMIT_EXEMPT_ADDRESSES": ("127.0.0.1", "::1")})
client = app.test_client()
run_queued_jobs(conn)
sent, question = 0, None
while sent < 200:
    if question is None:
        response = client.get(f"/api/studies/{sid}/questions/next")
        if response.status_code == 409:
            break
        question = response.get_json()["question"]
    head = shown_index("toy-secret", sid, question["head"]["handle"])
    a, b = (shown_index("toy-secret", sid, c["handle"]) for c in question["candidates"])
    nearer = 0 if abs(positions[head] - positions[a]) < abs(positions[head] - positions[b]) else 1
    choice = question["candidates"][nearer]
    response = client.post(f"/api/studies/{sid}/answers", json={"token": question["token"], "choice": choice["handle"]})
    assert response.status_code == 201, response.get_json()
    question = response.get_json()["next"]
    sent += 1
    run_queued_jobs(conn)
study = get_study(conn, sid)
learner = Learner.from_state(study.config.algorithms[0], study.config, engine_state.load(conn, sid, "toy_nearest"))
doc = nn_graph(conn, sid)
stats = study_stats(conn, study)
print(json.dumps({"sent": sent, "progress": learner.progress(), "fallback": stats["fallback_rate"],
                  "nn": {e["source_index"]: e["target_index"] for e in doc["edges"] if e["rank"] == 1},
                  "dashboard": [a["progress"] for a in stats["algorithms"]]}))
'''


def _copy_tree(dest: Path) -> None:
    for folder in ("engine", "simulation", "workers", "webapp", "templates", "static"):
        shutil.copytree(ROOT / folder, dest / folder, ignore=shutil.ignore_patterns("__pycache__"))


def _write_into(tree: Path, rel: str, *insertions: tuple[str, str]) -> list[str]:
    """Insert each ``(text, before)`` into the copy's file ``rel``, just before the line that starts with
    ``before``; returns the lines the diff against the source changes (printed whole)."""
    source = (ROOT / rel).read_text(encoding="utf-8")
    text = source
    for added, before in insertions:
        at = text.index("\n" + before) + 1
        text = text[:at] + added + text[at:]
    (tree / rel).write_text(text, encoding="utf-8")
    diff = list(difflib.unified_diff(source.splitlines(keepends=True), text.splitlines(keepends=True),
                                     f"a/{rel}", f"b/{rel}"))
    print("".join(diff))
    return [line for line in diff if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def _made(tree: Path) -> list[str]:
    """The files of the copy that the source does not have."""
    return sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*")
                  if p.is_file() and not (ROOT / p.relative_to(tree)).exists())


def _run(tree: Path, script: str, redis_url: str) -> dict:
    """Run ``script`` on the copy of the source (its last line of output is JSON)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", script, redis_url, str(tree)], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_adding_an_algorithm_is_one_engine_module_and_one_table_line(redis_url, conn, tmp_path):
    """docs/architecture.md, "Adding an algorithm", done to a copy of the source: the diff is one new
    engine module and one added line of engine/registry.py, and a study of the new algorithm runs
    through the web API, the update pass (the RQ job), the dashboard's numbers and the graph export."""
    tree = tmp_path / "tree"
    _copy_tree(tree)
    (tree / "engine" / "toy_nearest.py").write_text(textwrap.dedent(TOY_MODULE).lstrip(), encoding="utf-8")
    # the end of _ENTRIES
    changed = _write_into(tree, "engine/registry.py", (TOY_ENTRY, ")\n\n#: name (as in a study config)"))
    assert changed == ["+" + TOY_ENTRY]
    assert _made(tree) == ["engine/toy_nearest.py"]

    out = _run(tree, TOY_STUDY, redis_url)
    # the toy planner asked its whole plan from the pool (3 rounds of 5 pairs per item); the platform's
    # random fallbacks filled in only while the last pass had not yet applied the last answers
    assert out["progress"]["questions_issued"] == 3 * 6 * 5 and out["progress"]["done"] is True
    assert out["sent"] - 3 * 6 * 5 <= 2 and out["fallback"] * out["sent"] <= 2 + 1e-9
    # every answer applied once (none lost, none counted twice), and the dashboard reads the same
    assert out["progress"]["answers"] == out["sent"] and out["dashboard"][0]["answers"] == out["sent"]
    assert {int(k): v for k, v in out["nn"].items()} == {0: 1, 1: 0, 2: 3, 3: 2, 4: 5, 5: 4}
    shutil.rmtree(tree)  # the toy algorithm is deleted again; the real source never held it
    assert "toy_nearest" not in registry.ALGORITHMS and not (ROOT / "engine" / "toy_nearest.py").exists()



# ---------------------------------------------------------------------------- adding a question kind
#: A whole question kind, as docs/architecture.md's "Adding a question kind" describes: an item on top and
#: two below, and the rater picks the one LESS like the one on top (the nearer one wins the triplet).
TOY_KIND = '''class _Farther(QuestionKind):
    """A toy kind: the rater picks which of two items is less like the one on top."""

    def screen(self, proposal, settings):
        head, *candidates = (_item(x) for x in proposal)
        return {"kind": self.name, "head": head, "candidates": candidates}

    def _random_proposal(self, n_items, settings, rng):
        return tuple(rng.sample(range(n_items), 3))

    def check_answer(self, screen, picks, value):
        return _one_choice(picks, screen["candidates"], "a farther question needs 'choice', the index of the "
                           "item less like the one on top")

    def observation(self, shown, picks, screen=None):
        head, a, b = shown
        return (head, a, b, b if picks[0] == a else a)

    def triplets(self, shown, picks):
        return [self.observation(shown, picks)]

    def picks_of(self, observation):
        head, a, b, nearer = observation
        return (b if nearer == a else a,)

    def repeat_screen(self, screen, rng):
        return {"kind": self.name, "head": screen["head"], "candidates": list(screen["candidates"])[::-1]}

    def practice_screen(self, practice, index_of, settings):
        screen = self.screen([index_of(x) for x in (practice["head"], *practice["candidates"])], settings)
        return screen, index_of(practice["answer"])


'''
#: ... its entry of the table
TOY_KIND_ENTRY = '''    _Farther(
        "farther", headed=True, asks="triplet", triplet_derived=True, widget="far",
        description="an item on top and two below: which of the two is less like the one on top?",
        prompt="Which of these two is less like the one on top?",
        instructions="Click the one of the two items below that is less like the item on top.",
        too_fast_ms=0, seconds=SECONDS_TRIPLET, oracle="simulation.oracles:TripletOracle",
        practice_schema=_practice("farther", head=_ITEM_ID, candidates=_item_ids(2, 2), answer=_ITEM_ID)),
'''
#: ... and its widget on the rater page: the markup and the script.
TOY_WIDGET = {
    "templates/raters/widgets/far.html": '''{# widget "far" (the toy kind farther): a head, two to pick from #}
<div id="far" class="question" hidden><h2 id="far-prompt" class="prompt"></h2><div class="head" id="far-head"></div>
<p class="candidates"><button type="button" class="candidate" id="far-0"></button> <button type="button"
class="candidate" id="far-1"></button></p></div>
''',
    "static/js/widgets/far.js": '''// Widget "far" (the toy kind farther): click the one less like the head, or 1 / 2.
// One choice: ctx.oneChoice gives it hide, setDisabled, keydown and isRight.
(function (W) {
  "use strict";
  const byId = (id) => document.getElementById(id);
  W.far = {
    init(ctx) {
      ctx.oneChoice(this, { el: byId("far"), buttons: [byId("far-0"), byId("far-1")],
                            offered: (q) => q.candidates, keys: ["1", "2"] });
    },
    items(q) { return [q.head, ...q.candidates]; },
    show(q) {
      this.q = q;
      byId("far-prompt").textContent = q.prompt;
      this.items(q).forEach((item, n) => this.ctx.renderItem(byId(n ? "far-" + (n - 1) : "far-head"), item));
      this.el.hidden = false;
    },
  };
})(window.ProximaWidgets = window.ProximaWidgets || {});
''',
}

#: A study of the toy kind through the platform: its config (the kind's default algorithm), the rater page
#: with the widget, screens served and answers taken by the web API, the log, the update job applying the
#: answers, and the implied triplets' export.
TOY_KIND_STUDY = '''
import json, sys
import redis

import engine
assert engine.__file__.startswith(sys.argv[2]), engine.__file__
from webapp import create_app
from workers.jobs.learners import Learner
from workers.results.exports import export
from workers.store import engine_state
from workers.store.answers import read_answers
from workers.store.config import StudyConfig
from workers.store.queue import run_queued_jobs
from workers.store.studies import Item, create_study
from webapp.handles import shown_index

positions = [0.0, 0.05, 1.0, 1.1, 2.3, 2.45]  # no item equally far from two others: no ties
conn = redis.Redis.from_url(sys.argv[1])
config = StudyConfig.from_dict({"name": "far", "question_kind": "farther", "random_state": 1, "pool_size": 6,
                                "attention": {"rate": 0}})
items = [Item(id=f"p{i}", kind="text", text=f"point {i}", position=(x,)) for i, x in enumerate(positions)]
sid = create_study(conn, config, items, study_id="far")
app = create_app({"TESTING": True, "REDIS_URL": sys.argv[1], "SECRET_KEY": "toy-secret",
                  "RATE_LIMIT_EXEMPT_ADDRESSES": ("127.0.0.1", "::1")})
client = app.test_client()
page = client.get(f"/s/{sid}").get_data(as_text=True)
question, served, statuses = client.get(f"/api/studies/{sid}/questions/next").get_json()["question"], [], []
for n in range(12):
    served.append({k: question[k] for k in ("kind", "widget", "prompt")})
    head = shown_index("toy-secret", sid, question["head"]["handle"])
    a, b = (shown_index("toy-secret", sid, c["handle"]) for c in question["candidates"])
    farther = a if abs(positions[head] - positions[a]) > abs(positions[head] - positions[b]) else b
    pick = question["candidates"][0 if farther == a else 1]["handle"]
    response = client.post(f"/api/studies/{sid}/answers", json={"token": question["token"], "choice": pick})
    statuses.append(response.status_code)
    question = response.get_json()["next"]
    if n % 4 == 3:
        run_queued_jobs(conn)
algorithm = config.algorithms[0]
learner = Learner.from_state(algorithm, config, engine_state.load(conn, sid, algorithm.label))
print(json.dumps({"algorithm": algorithm.algorithm, "kind": algorithm.question_kind,
                  "widget": 'id="far-head"' in page and "js/widgets/far.js" in page,
                  "served": served, "statuses": statuses, "answers": learner.progress()["answers"],
                  "log": [[a.kind, a.shown, a.picks] for a in read_answers(conn, sid)],
                  "triplets": "".join(export(conn, sid, "triplets", "csv").chunks)}))
'''


def test_adding_a_question_kind_is_one_table_entry_and_one_widget(redis_url, conn, tmp_path):
    """docs/architecture.md, "Adding a question kind", done to a copy of the source: the diff is one class and
    one entry of engine/kinds.py and the widget's two new files, and a study of the new kind runs: its config
    takes the kind, the rater page carries the widget, the web API serves its screens and takes its answers,
    the log keeps them, the update job applies them and the triplets they imply export."""
    tree = tmp_path / "tree"
    _copy_tree(tree)
    changed = _write_into(tree, "engine/kinds.py", (TOY_KIND, "_ITEM_ID = "),
                          (TOY_KIND_ENTRY, ")\n\n\n#: name (as in a study config)"))
    added = (TOY_KIND + TOY_KIND_ENTRY).splitlines(keepends=True)
    assert all(line[:1] == "+" for line in changed) and sorted(line[1:] for line in changed) == sorted(added)
    for rel, text in TOY_WIDGET.items():
        (tree / rel).write_text(text, encoding="utf-8")
    assert _made(tree) == sorted(TOY_WIDGET)

    out = _run(tree, TOY_KIND_STUDY, redis_url)
    assert out["kind"] == "farther" and out["algorithm"] == registry.default_algorithm("triplet")
    assert out["widget"] is True
    assert out["served"] == [{"kind": "farther", "widget": "far",
                              "prompt": "Which of these two is less like the one on top?"}] * 12
    assert out["statuses"] == [201] * 12 and out["answers"] == 12
    assert len(out["log"]) == 12 and all(kind == "farther" and len(shown) == 3 and len(picks) == 1
                                          for kind, shown, picks in out["log"])
    # each answer implies one triplet (cblearn's list order: i closer to j than to k), the picked one far
    expected = "".join(f"{head},{b if picks[0] == a else a},{picks[0]}\n" for _, (head, a, b), picks in out["log"])
    assert out["triplets"] == expected
    positions = [0.0, 0.05, 1.0, 1.1, 2.3, 2.45]
    assert all(abs(positions[i] - positions[j]) < abs(positions[i] - positions[k])
               for i, j, k in (map(int, row.split(",")) for row in expected.split()))
    shutil.rmtree(tree)  # the toy kind is deleted again; the real source never held it
    assert "farther" not in QUESTION_KINDS and not (ROOT / "static" / "js" / "widgets" / "far.js").exists()

if __name__ == "__main__":
    # ``python tests/test_planner_contract.py [REV]``: the branches the scan finds in the platform's
    # source at a git revision (the working tree without one), and how many
    rev = sys.argv[1] if len(sys.argv) > 1 else None
    found = []
    if rev is None:
        found = [o for rel, path in _platform_files() for o in offences(path.read_text(encoding="utf-8"), rel)]
    else:
        listed = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev, *PLATFORM], cwd=ROOT,
                                capture_output=True, text=True, check=True).stdout.split()
        for rel in listed:
            if rel.endswith(".py") and rel not in TABLES:
                source = subprocess.run(["git", "show", f"{rev}:{rel}"], cwd=ROOT, capture_output=True, text=True,
                                        check=True).stdout
                found += offences(source, rel)
    print("\n".join(found))
    print(f"{len(found)} branches on a name, a planner class, a guessed planner attribute or progress key "
          f"at {rev or 'the working tree'}")
