"""Which instance a ``proxima`` command acts on: ``--instance PATH`` (before or after the command's name) or
PROXIMA_INSTANCE_PATH; every command says on standard error which Redis or folder it uses (a piped export
stays clean); and a command that would start a private Redis in the default folder while a ``proxima serve``
runs for another folder refuses and names that folder."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from webapp import ROOT
from webapp.cli import main
from webapp.cli.connection import running_serves, running_web_url

NO_INSTANCE = {"REDIS_URL": None, "PROXIMA_INSTANCE_PATH": None}


def invoke(*args, **env):
    # CliRunner puts back the variables it is given: --instance sets PROXIMA_INSTANCE_PATH for the command
    return CliRunner().invoke(main, [str(a) for a in args], env={**NO_INSTANCE, **env})


@pytest.fixture
def texts(tmp_path) -> Path:
    (tmp_path / "study.yaml").write_text("name: Sentences\nalgorithm: random_triplets\n")
    (tmp_path / "items.csv").write_text("text\nalpha\nbeta\ngamma\ndelta\n")
    return tmp_path


@pytest.mark.parametrize("where", ["before", "after"])
def test_instance_option_picks_the_folder_and_the_command_says_so(tmp_path, texts, where):
    inst = tmp_path / "lab"
    create = ["create", texts / "study.yaml", "--items", texts / "items.csv", "--id", "s1"]
    args = ["--instance", inst, *create] if where == "before" else [*create, "--instance", inst]
    made = invoke(*args)
    assert made.exit_code == 0, made.output
    assert (inst / "redis" / "proxima.aof").exists() or (inst / "redis" / "appendonlydir").exists()
    assert f"instance folder {inst.resolve()}" in made.stderr
    # the same folder through the environment variable: the study is there
    listed = invoke("studies", PROXIMA_INSTANCE_PATH=str(inst))
    assert listed.exit_code == 0 and listed.stdout.startswith("s1\t"), listed.output
    assert f"instance folder {inst}" in listed.stderr
    # another folder holds no such study
    other = invoke("--instance", tmp_path / "elsewhere", "studies")
    assert other.exit_code == 0 and other.stdout == ""


def test_the_acted_on_line_goes_to_standard_error_so_a_piped_export_stays_clean(cli, texts, redis_url):
    assert cli("create", texts / "study.yaml", "--items", texts / "items.csv", "--id", "s2").exit_code == 0
    exported = cli("export", "s2", "--what", "items")
    assert exported.stdout.startswith("index\tid") and "Redis" not in exported.stdout
    port = redis_url.rsplit(":", 1)[-1].split("/")[0]
    assert f"Redis: redis://127.0.0.1:{port}/0 (REDIS_URL)" in exported.stderr
    assert "@" not in exported.stderr  # the password is not printed


@pytest.fixture
def serve_elsewhere(tmp_path):
    """A process holding another instance folder's serve lock, as a running 'proxima serve' does."""
    folder = tmp_path / "served"
    folder.mkdir()
    code = textwrap.dedent(f"""
        import sys, time
        from webapp.cli.supervise import InstanceLock
        InstanceLock({str(folder)!r}).acquire()
        print("locked", flush=True)
        time.sleep(120)
    """)
    holder = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        yield holder.pid, folder
    finally:
        holder.kill()
        holder.wait()


def test_running_serves_are_found_by_their_instance_lock(serve_elsewhere):
    pid, folder = serve_elsewhere
    assert (pid, folder) in {(s.pid, s.instance) for s in running_serves()}


def test_a_private_redis_in_the_default_folder_is_refused_while_a_serve_runs_for_another(serve_elsewhere, texts):
    pid, folder = serve_elsewhere
    before = set((ROOT / "instance").glob("**/*")) if (ROOT / "instance").exists() else set()
    started = time.monotonic()
    refused = invoke("create", texts / "study.yaml", "--items", texts / "items.csv")
    assert refused.exit_code != 0
    assert f"pid {pid} for {folder}" in refused.output and f"--instance {ROOT / 'instance'}" in refused.output
    assert "never reads" in refused.output
    assert time.monotonic() - started < 10
    after = set((ROOT / "instance").glob("**/*")) if (ROOT / "instance").exists() else set()
    assert after == before  # no Redis was started in the code folder
    # nor is a completion code checked with the default folder's secret key
    code = invoke("verify-code", "s", "r", "ABCD")
    assert code.exit_code != 0 and f"pid {pid} for {folder}" in code.output and "secret key of" in code.output
    # naming a folder is a choice: the command runs there (and says so)
    named = invoke("--instance", texts / "mine", "studies")
    assert named.exit_code == 0, named.output
    assert f"private one for this command, on instance folder {(texts / 'mine').resolve()}" in named.stderr


def test_worker_without_a_serve_for_the_folder_names_the_folder(tmp_path):
    result = invoke("--instance", tmp_path / "none", "worker", "--burst")
    assert result.exit_code != 0
    assert f"no 'proxima serve' runs for the instance folder {(tmp_path / 'none').resolve()}" in result.output


def test_every_command_takes_instance_after_its_name_too():
    # (the commands of 'user' and 'token' take it after the group's name: proxima user --instance PATH add ...)
    without = [name for name, command in main.commands.items()
               if "--instance" not in {option for param in command.params for option in param.opts}]
    assert not without and {"serve", "export", "create", "worker", "verify-code"} <= set(main.commands)


def test_simulate_goes_to_the_web_server_of_the_named_instance(serve_elsewhere, tmp_path):
    # 'proxima --instance F simulate' tried port 5000 whatever port F's serve was on
    from webapp.cli.embedded import free_port

    _, folder = serve_elsewhere
    (tmp_path / "truth.csv").write_text("id,x1\na,0\nb,1\nc,2\nd,3\n")
    truth = f"points:{tmp_path / 'truth.csv'}"
    served = f"http://127.0.0.1:{free_port()}"
    (folder / "web.url").write_text(served + "\n")  # what 'proxima serve' writes beside its lock
    reached = invoke("--instance", folder, "simulate", "s", "--oracle", truth)
    assert reached.exit_code != 0 and f"cannot reach a Proxima server at {served} " in reached.output
    assert f"Server: {served} (the running 'proxima serve' of instance folder {folder})" in reached.stderr
    # a URL left by a serve that stopped is not used (simulate then tries the default port)
    stopped = tmp_path / "stopped"
    stopped.mkdir()
    (stopped / "web.url").write_text(served)
    assert running_web_url(folder) == served and running_web_url(stopped) is None
