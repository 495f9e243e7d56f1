"""The example systemd units in deploy/ run as written: each unit's ExecStart, Environment,
EnvironmentFile and WorkingDirectory are read from the file, the documented placeholders are
replaced by this checkout, a scratch instance folder and a free port, and the commands are started
for real (no systemd: nothing calls systemctl) against a redis-server configured with
deploy/redis-proxima.conf. A rater's answer must be taken over HTTP and applied by the worker."""
from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import redis
import requests
from helpers import healthy, wait_for

from webapp import ROOT
from webapp.cli.embedded import free_port, redis_server_binary
from webapp.cli.serve import GUNICORN_HOOKS, GUNICORN_LIMITS, GUNICORN_THREADS
from workers.store import keys

DEPLOY = ROOT / "deploy"
UNITS = ("proxima-web.service", "proxima-worker@.service", "proxima-sweep.service")
VENV_BIN = "/opt/proxima/.venv/bin/"


def read_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """Sections of a unit file: {section: {key: [values in order]}} (keys may repeat, e.g. Environment)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current = None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def read_env_file(path: Path) -> dict[str, str]:
    env = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            env[key.strip()] = value.strip()
    return env


class Placeholders:
    """The paths deploy/README.md documents as placeholders, mapped to this test's."""

    def __init__(self, tmp_path: Path, redis_url: str, port: int):
        self.instance = tmp_path / "var-lib-proxima"
        self.instance.mkdir()
        self.port = port
        settings = read_env_file(DEPLOY / "proxima.env")
        settings.update(REDIS_URL=redis_url, PROXIMA_INSTANCE_PATH=str(self.instance),
                        PROXIMA_SECRET_KEY="a deployment's own secret key")
        self.env_file = tmp_path / "proxima.env"
        self.env_file.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))

    def __call__(self, text: str) -> str:
        # the virtualenv first (it may live outside the checkout, e.g. in CI), then the checkout
        return (text.replace(VENV_BIN, str(Path(sys.executable).parent) + "/")
                .replace("/opt/proxima", str(ROOT))
                .replace("/etc/proxima/proxima.env", str(self.env_file))
                .replace("/var/lib/proxima", str(self.instance))
                .replace("127.0.0.1:8000", f"127.0.0.1:{self.port}")
                .replace("%i", "1"))


def unit_process(unit: str, place: Placeholders, log: Path) -> subprocess.Popen:
    service = read_unit(DEPLOY / unit)["Service"]
    [exec_start] = service["ExecStart"]
    args = [place(a) for a in shlex.split(exec_start)]
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")}
    for file in service.get("EnvironmentFile", []):
        env.update(read_env_file(Path(place(file.lstrip("-")))))
    for assignment in service.get("Environment", []):
        for pair in shlex.split(assignment):
            key, _, value = pair.partition("=")
            env[key] = place(value)
    [cwd] = service.get("WorkingDirectory", [str(ROOT)])
    with log.open("w") as out:
        return subprocess.Popen(args, env=env, cwd=place(cwd), start_new_session=True,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)


@pytest.fixture
def deploy_redis(tmp_path):
    """A redis-server started with deploy/redis-proxima.conf (Debian's, else the bundled one) and a password."""
    binary = shutil.which("redis-server") or redis_server_binary()
    port, password = free_port(), "deploy-test-password"
    data = tmp_path / "redis"
    data.mkdir()
    proc = subprocess.Popen([binary, str(DEPLOY / "redis-proxima.conf"), "--port", str(port), "--dir", str(data),
                             "--requirepass", password, "--daemonize", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"redis://:{password}@127.0.0.1:{port}/0"
    conn = redis.Redis.from_url(url)

    def answering():
        assert proc.poll() is None, "redis-server did not start with deploy/redis-proxima.conf"
        try:
            return conn.ping()
        except redis.ConnectionError:
            return False

    wait_for(answering, 20, what="redis-server with deploy/redis-proxima.conf answering")
    yield url, conn
    conn.close()
    proc.terminate()
    proc.wait(20)


def test_every_unit_restarts_its_process_and_gives_up_on_a_crash_loop():
    for unit in UNITS:
        sections = read_unit(DEPLOY / unit)
        assert sections["Service"]["Restart"] == ["always"], unit
        assert sections["Unit"]["StartLimitBurst"] and sections["Unit"]["StartLimitIntervalSec"], unit
        assert sections["Service"]["EnvironmentFile"] == ["/etc/proxima/proxima.env"], unit
        assert sections["Install"]["WantedBy"] == ["multi-user.target"], unit
    # the web unit runs gunicorn as 'proxima serve' does
    web = shlex.split(read_unit(DEPLOY / "proxima-web.service")["Service"]["ExecStart"][0])
    command = " ".join(web)
    assert " ".join(GUNICORN_THREADS) in command and " ".join(GUNICORN_LIMITS) in command
    assert " ".join(GUNICORN_HOOKS) in command
    assert web[-1] == "webapp:create_app()"


def test_the_units_serve_an_answer_that_the_worker_applies(tmp_path, deploy_redis):
    from helpers import colour_items

    from workers.store.config import StudyConfig
    from workers.store.queue import schedule_update
    from workers.store.studies import create_study

    url, conn = deploy_redis
    assert conn.config_get("appendfsync")["appendfsync"] == "always"
    assert conn.config_get("appendonly")["appendonly"] == "yes"
    create_study(conn, StudyConfig(name="Deployed", pool_size=8, random_state=0), colour_items(), study_id="deployed")
    schedule_update(conn, "deployed")
    place = Placeholders(tmp_path, url, free_port())
    procs = {unit: unit_process(unit, place, tmp_path / f"{unit}.log") for unit in UNITS}
    base = f"http://127.0.0.1:{place.port}"

    def logs():
        return "\n".join(f"--- {u}\n{(tmp_path / f'{u}.log').read_text(errors='replace')}" for u in UNITS)

    try:
        wait_for(lambda: healthy(base) or any(p.poll() is not None for p in procs.values()), 60,
                 what="the web unit answering /api/health")
        assert all(p.poll() is None for p in procs.values()), logs()
        rater = requests.Session()
        rater.get(f"{base}/s/deployed", params={"rater": "r-deployed"}, timeout=5)
        question = rater.get(f"{base}/api/studies/deployed/questions/next", timeout=5).json()["question"]
        response = rater.post(f"{base}/api/studies/deployed/answers", timeout=5,
                              json={"token": question["token"], "choice": question["candidates"][0]["handle"]})
        assert response.status_code == 201, response.text
        answer_id = response.json()["answer"]["id"]
        wait_for(lambda: conn.get(keys.cursor("deployed")) == answer_id.encode(), 30,
                 what="the worker unit applying the answer")
        # the web unit signs with the env file's secret key (deploy/proxima.env sets one)
        from webapp.tokens import verify_question
        assert verify_question("a deployment's own secret key", question["token"], max_age=600)["s"] == "deployed"
        assert all(p.poll() is None for p in procs.values()), logs()
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    # SIGTERM (what systemd sends) stops each cleanly
    assert {unit: proc.returncode for unit, proc in procs.items()} == dict.fromkeys(UNITS, 0), logs()
    assert "Sweeping every 10 s" in (tmp_path / "proxima-sweep.service.log").read_text()
