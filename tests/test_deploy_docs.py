"""deploy/ is complete and says what the server guide says (issue 28, item 7; docs/operations/https-server.md,
README's "Run a paid study on a server" before the docs site): the settings it tells a server to set are in
proxima.env, Redis's password is set where REDIS_URL uses it, the install block creates the
user before using it, the backup timer the guide suggests is there and runs, and a placeholder secret key is
refused. Read from the files themselves, so a change to one that the other does not follow fails here."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import colour_items
from test_deploy_units import DEPLOY, ROOT, read_env_file, read_unit

from workers.store.config import StudyConfig
from workers.store.studies import create_study

GUIDE = (ROOT / "docs" / "operations" / "https-server.md").read_text(encoding="utf-8")
DEPLOY_README = (DEPLOY / "README.md").read_text(encoding="utf-8")


def test_every_setting_the_server_guide_sets_is_a_line_of_proxima_env():
    guide = GUIDE
    told = set(re.findall(r"`(PROXIMA_[A-Z_]+)=", guide))
    assert {"PROXIMA_SECRET_KEY", "PROXIMA_PUBLIC_URL", "PROXIMA_TRUSTED_PROXIES"} <= told
    assert told <= set(read_env_file(DEPLOY / "proxima.env")), "the server guide sets these in proxima.env"


def test_the_redis_password_of_redis_url_is_the_one_redis_requires():
    url = read_env_file(DEPLOY / "proxima.env")["REDIS_URL"]
    password = re.match(r"redis://:([^@]+)@", url).group(1)
    conf = [line.split(None, 1) for line in (DEPLOY / "redis-proxima.conf").read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    assert ["requirepass", password] in [[k, v.strip()] for k, v in conf]


def test_the_install_block_creates_the_user_before_it_uses_it():
    block = re.search(r"## Install\n\n```sh\n(.*?)```", DEPLOY_README, re.S).group(1)
    lines = block.splitlines()
    uses = [n for n, line in enumerate(lines) if re.search(r"(-[ogu] proxima\b|-g proxima|:proxima\b)", line)]
    created = [n for n, line in enumerate(lines) if "useradd" in line and re.search(r"\bproxima\s", line)]
    assert created and uses and created[0] < uses[0]
    for unit in ("proxima-web.service", "proxima-worker@.service", "proxima-sweep.service", "proxima-backup.service",
                 "proxima-backup.timer"):
        assert unit in block, f"the install block does not copy {unit}"


def test_every_file_of_deploy_is_described_in_its_readme():
    for path in sorted(DEPLOY.iterdir()):
        if path.name != "README.md":
            assert f"`{path.name}`" in DEPLOY_README, path.name


def test_the_backup_timer_readme_suggests_runs_every_night_and_backs_up_every_study(conn, redis_url, tmp_path):
    assert "proxima-backup.timer" in GUIDE
    timer = read_unit(DEPLOY / "proxima-backup.timer")
    assert timer["Timer"]["OnCalendar"] and timer["Timer"]["Persistent"] == ["true"]
    assert timer["Install"]["WantedBy"] == ["timers.target"]
    service = read_unit(DEPLOY / "proxima-backup.service")["Service"]
    assert service["Type"] == ["oneshot"] and service["EnvironmentFile"] == ["/etc/proxima/proxima.env"]
    for study in ("alpha", "beta"):
        create_study(conn, StudyConfig(name=study, random_state=0), colour_items(), study_id=study)
    out = tmp_path / "backups"
    old = out / "alpha-2000-01-01.ndjson"
    out.mkdir()
    old.write_text("an old backup\n")
    [exec_start] = service["ExecStart"]
    args = [a.replace("/opt/proxima/.venv/bin/", str(Path(sys.executable).parent) + "/")
            .replace("/var/backups/proxima", str(out)) for a in shlex.split(exec_start)]
    done = subprocess.run(args, env={"REDIS_URL": redis_url, "PATH": "/usr/bin:/bin",
                                     "PROXIMA_INSTANCE_PATH": str(tmp_path / "instance")},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    written = sorted(p.name for p in out.iterdir())
    assert len(written) == 2 and all(re.fullmatch(r"(alpha|beta)-\d{4}-\d{2}-\d{2}\.ndjson", n) for n in written)
    assert "Backed up 2 of 2 studies" in done.stdout and "deleted 1 backup(s) older than 30 days" in done.stdout


def test_a_placeholder_secret_key_is_refused(tmp_path, monkeypatch):
    from webapp import create_app

    monkeypatch.setenv("PROXIMA_INSTANCE_PATH", str(tmp_path / "instance"))
    placeholder = read_env_file(DEPLOY / "proxima.env")["PROXIMA_SECRET_KEY"]
    with pytest.raises(RuntimeError, match="PROXIMA_SECRET_KEY is still the placeholder"):
        create_app({"TESTING": True, "SECRET_KEY": placeholder})
