"""A request line longer than gunicorn takes (8,190 bytes) gets the JSON error shape, not gunicorn's
HTML 414 (issue 26, item 7): the gunicorn worker ``proxima serve`` runs answers its own refusals."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import requests
from helpers import healthy, wait_for

from webapp.cli.embedded import free_port
from webapp.cli.serve import gunicorn_command

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def gunicorn(redis_url, tmp_path_factory):
    """One gunicorn for the module's requests (each test then checks that it still serves)."""
    port = free_port()
    instance = tmp_path_factory.mktemp("long-request-line") / "instance"
    env = {"PATH": "/usr/bin:/bin", "REDIS_URL": redis_url, "PROXIMA_INSTANCE_PATH": str(instance),
           "PROXIMA_SECRET_KEY": "test-secret-key"}
    process = subprocess.Popen(gunicorn_command(f"127.0.0.1:{port}", 1), env=env, cwd=str(ROOT),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: healthy(base) or process.poll() is not None, 30, what="gunicorn answering /api/health")
    if process.poll() is not None:
        pytest.fail(f"gunicorn did not start: {process.stdout.read().decode(errors='replace')[-2000:]}")
    yield base
    process.terminate()
    process.wait(timeout=15)


@pytest.mark.parametrize("length", [8191, 9000, 20000])
def test_a_request_line_over_gunicorns_limit_gets_the_json_error_shape(gunicorn, length):
    path = "/api/studies/x/questions/next?pad="
    request_line_overhead = len("GET  HTTP/1.1")
    url = gunicorn + path + "x" * (length - request_line_overhead - len(path))
    response = requests.get(url, timeout=5)
    assert response.status_code == 414
    assert response.headers["Content-Type"] == "application/json"
    error = response.json()["error"]
    assert error["code"] == "request_uri_too_long" and "8190 bytes" in error["message"]
    # the worker goes on serving
    assert requests.get(f"{gunicorn}/api/health", timeout=5).json()["status"] == "ok"
