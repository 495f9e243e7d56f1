"""`proxima serve` as a real subprocess: embedded Redis, an RQ worker and gunicorn, stopped cleanly."""
from __future__ import annotations

import re

import requests
from click.testing import CliRunner
from helpers import RESEARCHER, RESEARCHER_PASSWORD, Serve, healthy, http_log_in, wait_for

from webapp.cli import main
from webapp.cli.connection import running_web_url
from webapp.handles import shown_index


def test_serve_demo_answers_over_http_and_stops_cleanly(tmp_path, monkeypatch):
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.setenv("PROXIMA_INSTANCE_PATH", str(tmp_path / "instance"))
    assert CliRunner().invoke(main, ["user", "add", RESEARCHER, "--password-stdin"],
                              input=RESEARCHER_PASSWORD + "\n").exit_code == 0
    serve = Serve(tmp_path / "instance", "--demo")  # no REDIS_URL: its own embedded Redis
    base = serve.base
    try:
        serve.wait_healthy()
        # where 'proxima --instance F simulate' goes without --url
        assert running_web_url(tmp_path / "instance") == base
        researcher = http_log_in(base, RESEARCHER, RESEARCHER_PASSWORD)
        rater = requests.Session()
        # the demo asks for consent first, as a real study does
        page = rater.get(f"{base}/s/demo-colours", timeout=5).text
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
        rater.post(f"{base}/s/demo-colours/consent", data={"decision": "agree", "csrf_token": csrf}, timeout=5)
        question = rater.get(f"{base}/api/studies/demo-colours/questions/next", timeout=5).json()["question"]
        response = rater.post(f"{base}/api/studies/demo-colours/answers", timeout=5,
                              json={"token": question["token"], "choice": question["candidates"][1]["handle"]})
        assert response.status_code == 201
        # the real RQ worker process applies the answer
        stats = wait_for(lambda: (s := researcher.get(f"{base}/api/studies/demo-colours/stats", timeout=5).json())
                         ["engine"]["answers_applied"] == 1 and s)
        assert stats["answers"] == 1 and stats["pool_depth"] > 0
        assert "/s/demo-colours" in researcher.get(f"{base}/studies/demo-colours", timeout=5).text
    finally:
        returncode = serve.stop()
    output = serve.output()
    assert returncode == 0, output
    assert "Rater link: " in output and "Proxima stopped." in output
    assert not healthy(base)
    # the answer survived the shutdown in the AOF: a fresh embedded server sees it
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.setenv("PROXIMA_INSTANCE_PATH", str(tmp_path / "instance"))
    result = CliRunner().invoke(main, ["export", "demo-colours"])
    assert result.exit_code == 0
    rows = result.stdout.strip().splitlines()
    secret = (tmp_path / "instance" / "secret_key").read_text().strip()  # the server's: it reads handles
    chosen = shown_index(secret, "demo-colours", question["candidates"][1]["handle"])
    assert len(rows) == 2 and f"-{chosen:02d}," in rows[1]  # demo item ids end in their index


def test_serve_on_a_busy_port_says_so_before_printing_links_or_a_password(tmp_path, monkeypatch):
    import socket

    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.setenv("PROXIMA_INSTANCE_PATH", str(tmp_path / "instance"))
    with socket.socket() as other:  # another program owns the port
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        result = CliRunner().invoke(main, ["serve", "--demo", "--port", str(port)])
    assert result.exit_code != 0
    assert f"port {port} on 127.0.0.1 is in use" in result.output and "--port 0" in result.output
    assert "password" not in result.output and "http://" not in result.output
    # nothing was started and the instance is free again: the lock was released
    assert not (tmp_path / "instance" / "redis" / "proxima.aof").exists()
    from webapp.cli.supervise import InstanceLock

    lock = InstanceLock(tmp_path / "instance")
    assert lock.acquire() == []
    lock.release()
