"""The documentation site (mkdocs.yml, docs/) builds with warnings as errors, loads nothing from other sites,
and its reference pages hold every command and option of the command line, every field of the study config
and every algorithm parameter, and every route of the HTTP API, each read here from the code itself. README
stays a short door into the site: at most 150 lines, every link of it to a file that exists."""
from __future__ import annotations

import html
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
import yaml
from helpers import require

from engine.registry import ALGORITHMS
from webapp.cli import main
from workers.store.config import SCHEMA

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    installed = all(importlib.util.find_spec(m) for m in ("mkdocs", "material", "mkdocs_click"))
    require(installed, "mkdocs with the Material theme", 'pip install -e ".[docs]"')
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    assert "WARNING" not in done.stderr, done.stderr[-4000:]
    return out


def page_text(site: Path, page: str) -> str:
    """A built page's text, tags dropped and entities decoded (what a reader sees)."""
    return html.unescape(re.sub(r"<[^>]+>", " ", (site / page / "index.html").read_text(encoding="utf-8")))


def commands(group: click.Group, prefix: str = "proxima") -> list[tuple[str, click.Command]]:
    out = []
    for name, command in group.commands.items():
        out.append((f"{prefix} {name}", command))
        if isinstance(command, click.Group):
            out.extend(commands(command, f"{prefix} {name}"))
    return out


def config_fields(schema: dict, prefix: str = "") -> list[str]:
    found = []
    for name, sub in schema.get("properties", {}).items():
        found.append(prefix + name)
        found += config_fields(sub, f"{prefix}{name}.")
        items = sub.get("items", {})
        for alternative in [items, *items.get("oneOf", [])]:
            found += config_fields(alternative, f"{prefix}{name}[].")
    return list(dict.fromkeys(found))


def test_the_site_builds_strict_and_loads_nothing_from_other_sites(site):
    for page in site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        for outside in ("fonts.googleapis", "fonts.gstatic", "cdn.jsdelivr", "unpkg.com", "cdnjs"):
            assert outside not in text, f"{page.relative_to(site)} loads {outside}"
    for title in ("Catch trials and what they catch, per kind", "Rating studies: which learner",
                  "Features: when they help"):
        assert title in (site / "index.html").read_text(encoding="utf-8"), f"no page '{title}' in the navigation"


def test_every_command_and_option_is_in_the_command_line_reference(site):
    text = page_text(site, "reference/cli")
    missing = []
    for name, command in commands(main):
        if name not in text:
            missing.append(name)
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                missing += [f"{name} {opt}" for opt in param.opts if opt not in text]
    assert not missing, f"not in the command-line reference: {missing}"
    assert len(commands(main)) > 20


def test_every_config_field_and_algorithm_parameter_is_in_the_config_reference(site):
    text = page_text(site, "reference/config")
    fields = config_fields(SCHEMA)
    assert {"name", "limits.answer_budget", "attention.flag_action", "algorithms[].share", "practice[].answer",
            "rank.n_select"} <= set(fields)
    assert not [f for f in fields if f not in text], "config fields missing from the reference"
    built = (site / "reference" / "config" / "index.html").read_text(encoding="utf-8")
    for algorithm, entry in ALGORITHMS.items():
        start = built.index(f'id="{algorithm}"')
        following = re.search(r'<h3 id="', built[start + 1:])
        section = built[start:start + 1 + following.start()] if following else built[start:]
        missing = [p for p in entry.params if f"<code>{p}</code>" not in section]
        assert not missing, f"{algorithm}: parameters missing from the reference: {missing}"


def test_every_route_of_the_api_description_is_in_the_http_reference(site):
    spec = yaml.safe_load((ROOT / "docs" / "openapi.yaml").read_text(encoding="utf-8"))
    text = page_text(site, "reference/http-api")
    routes = [f"{method.upper()} {path}" for path, item in spec["paths"].items() for method in item
              if method in ("get", "put", "post", "patch", "delete")]
    assert routes and not [r for r in routes if r not in text]


def test_the_readme_is_short_and_its_links_lead_somewhere():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 150
    assert "mkdocs serve" in readme
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme):
        if not target.startswith(("http://", "https://")):
            assert (ROOT / target).exists(), f"README links to {target}, which does not exist"
