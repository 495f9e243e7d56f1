"""The distributions: the server's (pyproject.toml, ``proxima-similarity``) and the light client's
(client/pyproject.toml, ``proxima-similarity-client``) have names that are not other projects' on PyPI, and the
client takes none of the server. (Installing it in a clean venv and reading a live study with it:
tests/test_researcher_loop.py, beside the live server it needs.)"""
from __future__ import annotations

import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_distributions_are_named_apart_from_other_projects_and_the_client_takes_nothing_of_the_server():
    server = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    client = tomllib.loads((ROOT / "client" / "pyproject.toml").read_text())["project"]
    # "proxima" on PyPI is an unrelated Makefile tool; proxima-sdk and proxima-cli are other products
    assert server["name"] == "proxima-similarity" and client["name"] == "proxima-similarity-client"
    assert "client" not in server.get("optional-dependencies", {})  # the client is its own distribution
    wanted = {dep.split(">")[0].split("=")[0].split("[")[0].strip().lower() for dep in client["dependencies"]}
    assert wanted == {"requests", "numpy", "pandas", "networkx"}
    # the quick pointer, the researcher's page and the dashboard's Account page
    for guide in ("README.md", "docs/researcher/results.md", "templates/dashboard/_api_tokens.html"):
        text = (ROOT / guide).read_text()
        assert "pip install ./client" in text and "proxima[client]" not in text, guide
    assert sys.version_info >= tuple(int(p) for p in client["requires-python"].lstrip(">=").split("."))
