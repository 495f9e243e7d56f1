"""The ``proxima`` command: serve the platform, run a worker, create and export studies.

Every command prints a clear message and exits non-zero on bad input. Without
``REDIS_URL`` the commands use the instance folder's embedded Redis: the one a running
``proxima serve`` started, or a temporary one started for the command.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import click
import redis

from engine.registry import DEFAULT_NN_ALGORITHM, DEFAULT_RATING_ALGORITHM, default_algorithm
from workers.store.config import ALGORITHM_TABLE, ConfigError, load_config_file
from workers.store.studies import StudyError, StudyNotFound

from .. import ROOT
from ..embedded import EmbeddedRedis, EmbeddedRedisError, running_url

#: The models ``proxima train`` fits (workers.results.models.MODELS; listed here so --help needs no numpy).
MODEL_NAMES = ("smerf", "treerank", "ranking_forest", "simforest")
#: Algorithms a simulated study can run: the graph learners (label-driven forests need real labels).
SIMULATED_ALGORITHMS = tuple(name for name, entry in ALGORITHM_TABLE.items() if entry.yields_graph)
#: Threaded gunicorn workers that keep connections alive across a rater's think time: a sync worker
#: holds each connection until the client closes it. Measured (benchmarks/load.py, n = 1000, 1000
#: raters, 2 workers): 218 answers/s with sync workers, 449 with these.
GUNICORN_THREADS = ("--worker-class", "gthread", "--threads", "8", "--keep-alive", "75")
#: gunicorn worker processes ``proxima serve`` starts: on a 2-core machine 3 x 8 threads served 15-55%
#: more answers/s at 1,000 raters than 2 x 8 (less GIL contention; benchmarks/load.py --compare).
SERVE_WEB_WORKERS = 3
#: gunicorn's longest request line (its own default, 4094, answers longer URLs with an HTML 414): the
#: app answers URLs over ``errors.MAX_URL_LENGTH`` with the JSON error shape on /api/.
GUNICORN_LIMITS = ("--limit-request-line", "8190")
#: Seconds ``proxima serve`` waits for the web server's first healthy answer.
STARTUP_TIMEOUT_S = 60.0


def instance_path() -> Path:
    return Path(os.environ.get("PROXIMA_INSTANCE_PATH") or ROOT / "instance")


@contextlib.contextmanager
def redis_connection():
    """A Redis client: REDIS_URL, else the running embedded server, else a temporary one."""
    url = os.environ.get("REDIS_URL") or running_url(instance_path())
    if url:
        conn = redis.Redis.from_url(url)
        try:
            conn.ping()
        except (redis.RedisError, OSError) as exc:
            raise click.ClickException(f"cannot reach Redis at REDIS_URL: {exc}") from None
        yield conn
        return
    server = EmbeddedRedis(instance_path())
    try:
        url = server.start()
    except EmbeddedRedisError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        yield redis.Redis.from_url(url)
    finally:
        server.stop()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main():
    """Proxima: learn which items people find most alike, asking as few questions as possible."""


# --- researcher accounts -------------------------------------------------------------


@main.group()
def user():
    """Researcher accounts: add, remove, change a password, list."""


def _read_new_password(password_stdin: bool, generate: bool) -> tuple[str, bool]:
    """(password, generated): typed twice, read from stdin, or generated."""
    from ..accounts import AccountError, check_password, generate_password

    if password_stdin and generate:
        raise click.UsageError("use either --password-stdin or --generate, not both")
    if generate:
        return generate_password(), True
    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = click.prompt("Password", hide_input=True, confirmation_prompt="Repeat the password")
    try:
        return check_password(password), False
    except AccountError as exc:
        raise click.ClickException(str(exc)) from None


def _password_options(command):
    command = click.option("--generate", is_flag=True, help="Generate a random password and print it once.")(command)
    return click.option("--password-stdin", is_flag=True,
                        help="Read the password from the first line of standard input.")(command)


@user.command("add")
@click.argument("name")
@_password_options
def user_add(name: str, password_stdin: bool, generate: bool):
    """Create a researcher account NAME (asks for the password twice)."""
    from ..accounts import AccountError, check_name, create_user, user_key

    try:
        name = check_name(name)
    except AccountError as exc:
        raise click.ClickException(str(exc)) from None
    with redis_connection() as conn:
        if conn.exists(user_key(name)):
            raise click.ClickException(f"account {name!r} already exists "
                                       f"(change its password with 'proxima user passwd {name}')")
        password, generated = _read_new_password(password_stdin, generate)
        try:
            create_user(conn, name, password)
        except AccountError as exc:
            raise click.ClickException(str(exc)) from None
    click.echo(f"Created account {name}.")
    if generated:
        click.echo(f"Password: {password}\n(shown only now; change it with: proxima user passwd {name})")


@user.command("remove")
@click.argument("name")
def user_remove(name: str):
    """Delete the researcher account NAME; its open sessions end at their next request."""
    from ..accounts import AccountError, count_users, remove_user

    with redis_connection() as conn:
        try:
            remove_user(conn, name)
        except AccountError as exc:
            raise click.ClickException(str(exc)) from None
        left = count_users(conn)
    click.echo(f"Removed account {name.strip().lower()}.")
    if not left:
        click.echo("No accounts are left: the next 'proxima serve' creates an 'admin' account.", err=True)


@user.command("passwd")
@click.argument("name")
@_password_options
def user_passwd(name: str, password_stdin: bool, generate: bool):
    """Change the password of NAME and log out its sessions."""
    from ..accounts import set_password, user_key

    name = name.strip().lower()
    with redis_connection() as conn:
        if not conn.exists(user_key(name)):
            raise click.ClickException(f"there is no account {name!r} (see 'proxima user list')")
        password, generated = _read_new_password(password_stdin, generate)
        set_password(conn, name, password)
    click.echo(f"Changed the password of {name}; its sessions are logged out.")
    if generated:
        click.echo(f"Password: {password}\n(shown only now)")


@user.command("list")
def user_list():
    """List the researcher accounts."""
    from ..accounts import list_users

    with redis_connection() as conn:
        users = list_users(conn)
    if not users:
        click.echo("No accounts yet. Create one with: proxima user add NAME", err=True)
    for account in users:
        created = time.strftime("%Y-%m-%d %H:%M", time.localtime(account["created_at"]))
        click.echo(f"{account['name']}\tcreated {created}")


def _create_first_account(conn) -> None:
    """On an instance without accounts, create 'admin' and print its one-time password once."""
    from ..accounts import FIRST_ACCOUNT, ensure_first_account

    password = ensure_first_account(conn)
    if password:
        click.echo(f"Created the first researcher account: {FIRST_ACCOUNT}\n"
                   f"  one-time password: {password}\n"
                   f"  (shown only now; change it with: proxima user passwd {FIRST_ACCOUNT})")


def _port_free(host: str, port: int) -> bool:
    """True when a server could listen on ``host:port`` now (bound and released at once)."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gunicorn does
        try:
            sock.bind((host or "0.0.0.0", port))
        except OSError:
            return False
    return True


@main.command()
@click.option("--demo", is_flag=True, help="Create the demo colour study (once) and print its links.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address the web server listens on.")
@click.option("--port", default=5000, show_default=True, type=click.IntRange(0, 65535),
              help="Port of the web server (0: any free port).")
@click.option("--web-workers", default=SERVE_WEB_WORKERS, show_default=True, type=click.IntRange(1, 64),
              help="gunicorn worker processes.")
@click.option("--workers", "n_workers", default=1, show_default=True, type=click.IntRange(0, 64),
              help="RQ worker processes that update the engines.")
@click.option("--max-restarts", default=5, show_default=True, type=click.IntRange(0, 1000),
              help="Restarts of one process within 60 s before serve gives up on it (a crash loop).")
@click.option("--sweep-interval", default=10.0, show_default=True, type=click.FloatRange(0.1, 3600),
              help="Seconds between checks for studies whose answers wait for an update nobody queued.")
def serve(demo: bool, host: str, port: int, web_workers: int, n_workers: int, max_restarts: int,
          sweep_interval: float):
    """Start Redis (unless REDIS_URL is set), RQ workers and the web app under gunicorn, and keep
    them running: a crashed child is restarted with backoff (a crash loop stops serve, saying why),
    children die with serve, and only one serve runs per instance folder."""
    from ..embedded import free_port
    from ..supervise import Child, CrashLoop, InstanceBusy, InstanceLock, Sweeper, popen

    inst = instance_path()
    inst.mkdir(parents=True, exist_ok=True)
    lock = InstanceLock(inst)
    try:
        leftovers = lock.acquire()
    except InstanceBusy as exc:
        raise click.ClickException(str(exc)) from None
    if leftovers:
        click.echo(f"Took over from a serve that died: stopped its leftover processes {leftovers}")
    if port and not _port_free(host, port):
        # before any link or password is printed: they would open whatever else owns the port
        lock.release()
        raise click.ClickException(f"port {port} on {host} is in use by another program; "
                                   f"try --port {port + 1}, or --port 0 for any free port")
    server = None
    url = os.environ.get("REDIS_URL")
    children: list[Child] = []
    if not url:
        server = EmbeddedRedis(inst)
        try:
            url = server.start()
        except EmbeddedRedisError as exc:
            lock.release()
            raise click.ClickException(str(exc)) from None
        click.echo(f"Redis: embedded redis-server, data in {inst / 'redis'} (AOF, appendfsync always)")

        def start_redis():
            server.start()
            return server.process

        redis_child = Child("embedded Redis", start_redis, max_restarts)
        redis_child.process = server.process
        children.append(redis_child)
    else:
        click.echo("Redis: using REDIS_URL")
    stopping = False

    def stop(*_):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        conn = redis.Redis.from_url(url)
        _create_first_account(conn)
        study_id = None
        if demo:
            from workers.store.queue import schedule_update

            from ..demo import ensure_demo_study

            study_id = ensure_demo_study(conn)
            schedule_update(conn, study_id)
        if port == 0:
            port = free_port()
        env = dict(os.environ, REDIS_URL=url, PROXIMA_INSTANCE_PATH=str(inst))
        for n in range(n_workers):
            children.append(Child(f"RQ worker {n + 1}", lambda: popen([sys.executable, "-m", "webapp", "worker"],
                                                                      env=env, start_new_session=True),
                                  max_restarts))
        children.append(Child("web server", lambda: popen(
            [sys.executable, "-m", "gunicorn", "--bind", f"{host}:{port}", "--workers", str(web_workers),
             *GUNICORN_THREADS, *GUNICORN_LIMITS, "--graceful-timeout", "10", "--log-level", "warning",
             "webapp:create_app()"],
            env=env, cwd=str(ROOT), start_new_session=True), max_restarts))
        for child in children:
            if child.process is None:
                child.start()
        lock.record([c.pid for c in children if c.pid])
        shown_host = "127.0.0.1" if host in ("0.0.0.0", "") else host
        base = f"http://{shown_host}:{port}"
        sweeper = Sweeper(url, sweep_interval)
        started, announced = time.monotonic(), False
        while not stopping:
            now = time.monotonic()
            pids = [c.pid for c in children]
            for child in children:
                try:
                    child.check(now, lambda message: click.echo(message, err=True))
                except CrashLoop as exc:
                    raise click.ClickException(str(exc)) from None
            if [c.pid for c in children] != pids:
                lock.record([c.pid for c in children if c.pid])
            if not announced:
                # a child crashing while the others start is restarted like any other crash
                if _healthy(f"{base}/api/health"):
                    announced = True
                    click.echo(f"Dashboard:  {base}/")
                    if study_id:
                        click.echo(f"Rater link: {base}/s/{study_id}")
                        click.echo(f"Study dashboard: {base}/studies/{study_id}")
                    click.echo("Press Ctrl-C to stop.", err=False)
                elif now - started > STARTUP_TIMEOUT_S:
                    raise click.ClickException(f"the web server did not answer {base}/api/health within "
                                               f"{STARTUP_TIMEOUT_S:.0f} s; see the messages above")
            for queued in sweeper.maybe_sweep(now):
                click.echo(f"study {queued}: answers were waiting for an update; queued one", err=True)
            time.sleep(0.2)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        # the embedded Redis is stopped last, by its own object (it flushes the AOF)
        _stop_children([c.process for c in children
                        if isinstance(c.process, subprocess.Popen) and c.name != "embedded Redis"])
        if server is not None:
            server.stop()
        lock.release()
        click.echo("Proxima stopped.")


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _stop_children(children: list[subprocess.Popen], timeout: float = 15.0) -> None:
    # web first (stop taking answers), then workers (finish the batch in hand)
    for child in reversed(children):
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for child in reversed(children):
        try:
            child.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


@main.command()
@click.option("--interval", default=10.0, show_default=True, type=click.FloatRange(0.1, 3600),
              help="Seconds between checks.")
def sweep(interval: float):
    """Queue an update for every study whose answers wait for one nobody queued (a web process died
    between storing an answer and queueing its update). 'proxima serve' does this itself; run this
    beside web and worker processes started another way (systemd units, a Procfile runner)."""
    from ..supervise import Sweeper

    url = os.environ.get("REDIS_URL") or running_url(instance_path())
    if not url:
        raise click.ClickException("no Redis to sweep: set REDIS_URL or start 'proxima serve' first")
    sweeper = Sweeper(url, interval)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    click.echo(f"Sweeping every {interval:g} s for studies whose answers wait for an update.")
    try:
        while not stopping:
            for queued in sweeper.maybe_sweep(time.monotonic()):
                click.echo(f"study {queued}: answers were waiting for an update; queued one", err=True)
            time.sleep(min(1.0, interval / 2))
    except KeyboardInterrupt:
        pass


@main.command()
def demo():
    """Same as 'serve --demo'."""
    ctx = click.get_current_context()
    ctx.invoke(serve, demo=True)


@main.command()
@click.option("--burst", is_flag=True, help="Process the queued jobs, then exit.")
def worker(burst: bool):
    """Run an RQ worker that applies answers to the engines (needs REDIS_URL).

    Jobs run in the worker's own process (RQ's SimpleWorker, no fork per job), so a busy study's
    learners and their journal state stay in memory from one job to the next instead of being read
    back from Redis by every job."""
    from rq import SimpleWorker

    try:
        import workers.jobs.update  # noqa: F401  (import numpy and the engine once)
    except ValueError as exc:  # a malformed PROXIMA_FAULT (crash testing)
        raise click.ClickException(str(exc)) from None
    from workers.store.queue import get_queue, schedule_stale_studies

    url = os.environ.get("REDIS_URL") or running_url(instance_path())
    if not url:
        raise click.ClickException("no Redis to work for: set REDIS_URL or start 'proxima serve' first")
    conn = redis.Redis.from_url(url)
    try:
        conn.ping()
    except (redis.RedisError, OSError) as exc:
        raise click.ClickException(f"cannot reach Redis: {exc}") from None
    schedule_stale_studies(conn)
    SimpleWorker([get_queue(conn)], connection=conn).work(burst=burst, logging_level="WARNING")


@main.command()
@click.argument("config_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--items", "items_path", required=True, type=click.Path(path_type=Path),
              help="A folder of images/audio/video and/or HTML items (.html), or a CSV of texts with a 'text' column.")
@click.option("--id", "study_id", default=None, help="Study id (default: from the name).")
@click.option("--stylesheet", "stylesheet_path", default=None, type=click.Path(dir_okay=False, path_type=Path),
              help="A CSS file applied to the study's rater pages (after Proxima's own; no @import, no url() but "
                   "data:image/, no script).")
def create(config_file: Path, items_path: Path, study_id: str | None, stylesheet_path: Path | None = None):
    """Create a study from a YAML/JSON config and a folder of media or a CSV of texts.

    \b
    The config (every field optional but name; README "The rater's page" explains each):
      name: My study
      algorithm: anntri            # or algorithms: [{algorithm, question_kind, share, params, budget}]
      question_kind: triplet       # or rating (with rating: {min, max, step, widget, prompt})
      instructions: Markdown, ![an example](item:ITEM_ID)
      consent: Markdown shown first
      practice: [{head: ID, candidates: [ID, ID], answer: ID, explanation: ...}]
      limits: {max_questions_per_rater: 50, answer_budget: 20000, min_response_ms: 800}
      attention: {rate: 0.05, stop_flagged: true, validation_repeats: 10, min_self_agreement: 0.6}
      completion: {prolific_redirect_url: https://app.prolific.com/submissions/complete?cc={code},
                   message: Markdown, debrief_question: Anything unclear?}
    The full JSON schema is SCHEMA in workers/store/config.py.
    """
    from workers.store.queue import schedule_update
    from workers.store.studies import check_stylesheet, config_warnings, create_study, items_from_path

    try:
        config = load_config_file(config_file)
        items, media = items_from_path(items_path)
        stylesheet = None
        if stylesheet_path is not None:
            try:
                stylesheet = check_stylesheet(str(stylesheet_path), stylesheet_path.read_bytes())
            except OSError as exc:
                raise StudyError(f"cannot read stylesheet {stylesheet_path}: {exc.strerror or exc}") from None
    except (ConfigError, StudyError) as exc:
        raise click.ClickException(str(exc)) from None
    with redis_connection() as conn:
        try:
            study_id = create_study(conn, config, items, media, study_id=study_id, stylesheet=stylesheet)
        except StudyError as exc:
            raise click.ClickException(str(exc)) from None
        schedule_update(conn, study_id)
    click.echo(f"Created study {study_id} with {len(items)} items. Rater page: /s/{study_id}")
    for warning in config_warnings(config):
        click.echo(f"Warning: {warning}.", err=True)


@main.command("add-items")
@click.argument("study_id")
@click.option("--items", "items_path", required=True, type=click.Path(path_type=Path),
              help="A folder of images/audio/video, or a CSV of texts with a 'text' column.")
def add_items_command(study_id: str, items_path: Path):
    """Add items to a comparison-forest study; once its forests are built, each is routed down the trees."""
    from workers.store.queue import schedule_update
    from workers.store.studies import add_items, items_from_path

    try:
        items, media = items_from_path(items_path)
    except StudyError as exc:
        raise click.ClickException(str(exc)) from None
    with redis_connection() as conn:
        try:
            total = add_items(conn, study_id, items, media)
        except (StudyError, StudyNotFound) as exc:
            raise click.ClickException(str(exc)) from None
        schedule_update(conn, study_id)
    click.echo(f"Added {len(items)} items to study {study_id} ({total} items now).")


@main.command()
@click.argument("study_id")
@click.option("--what", type=click.Choice(["answers", "triplets", "raters", "graph", "forest", "model", "embedding"]),
              default="answers",
              show_default=True, help="answers: one row per answer; triplets: cblearn list-order; raters: one row per "
              "rater (checks, flags, skips, debrief answers); graph: the learned "
              "nearest-neighbour graph; forest: a comparison forest (docs/forest-schema.md) or SimForest; model: a "
              "model made by 'proxima train' (with --model); embedding: an embedding learner's coordinates "
              "(docs/exports.md).")
@click.option("--format", "fmt", type=click.Choice(["csv", "jsonl", "json", "graphml"]), default=None,
              help="answers: csv (default) or jsonl; triplets and raters: csv; graph: json (default), csv or graphml; "
              "forest and model: json; embedding: csv (default) or json.")
@click.option("--algorithm", default=None, metavar="LABEL",
              help="Which algorithm's graph, forest or embedding (default: the study's first that has one).")
@click.option("--model", default=None, type=click.Choice(MODEL_NAMES),
              help="Which trained model to export with --what model.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True, path_type=Path), default=None,
              help="Write to this file instead of standard output.")
def export(study_id: str, what: str, fmt: str | None, algorithm: str | None, model: str | None,
           output: Path | None):
    """Export a study's answers, triplets, learned graph or forest (same code as the dashboard)."""
    from workers.results.exports import ExportError
    from workers.results.exports import export as make_export

    fmt = fmt or {"answers": "csv", "triplets": "csv", "raters": "csv", "graph": "json", "forest": "json",
                  "model": "json", "embedding": "csv"}[what]
    with redis_connection() as conn:
        try:
            result = make_export(conn, study_id, what, fmt, algorithm, model=model)
            chunks = iter(result.chunks)
            first = next(chunks, "")  # surfaces errors before anything is written
        except (StudyNotFound, ExportError) as exc:
            raise click.ClickException(str(exc)) from None
        if output is None:
            click.echo(first, nl=False)
            for chunk in chunks:
                click.echo(chunk, nl=False)
        else:
            with output.open("w", encoding="utf-8", newline="") as fh:
                fh.write(first)
                for chunk in chunks:
                    fh.write(chunk)
            click.echo(f"Wrote {output}", err=True)


@main.command("features")
@click.argument("study_id")
@click.argument("features_file", type=click.Path(dir_okay=False, path_type=Path))
def features_command(study_id: str, features_file: Path):
    """Give every item of a study numeric features, from a CSV with an 'id' column and one column per
    feature (SMERF and TreeRank learn over them). All items at once, or nothing changes."""
    from workers.store.studies import features_from_csv_text, set_features

    try:
        text = features_file.read_bytes().decode("utf-8-sig")
        features = features_from_csv_text(text, str(features_file))
    except FileNotFoundError:
        raise click.ClickException(f"features file {features_file} does not exist") from None
    except UnicodeDecodeError:
        raise click.ClickException(f"{features_file} is not UTF-8 text; save it as CSV UTF-8") from None
    except StudyError as exc:
        raise click.ClickException(str(exc)) from None
    with redis_connection() as conn:
        try:
            n = set_features(conn, study_id, features)
        except (StudyError, StudyNotFound) as exc:
            raise click.ClickException(str(exc)) from None
    names = next(iter(features.values()))
    click.echo(f"Set {len(names)} feature(s) ({', '.join(names)}) on {n} items of study {study_id}.")


def _parse_params(pairs: tuple[str, ...]) -> dict:
    import yaml

    params = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise click.BadParameter(f"{pair!r} is not NAME=VALUE (e.g. n_trees=50)", param_hint="--param")
        try:
            params[name.strip()] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise click.BadParameter(f"{pair!r}: cannot read the value {value!r}", param_hint="--param") from None
    return params


@main.command()
@click.argument("study_id")
@click.option("--model", "name", required=True, type=click.Choice(MODEL_NAMES),
              help="smerf: a distance over item features; treerank / ranking_forest: which pairs of items are alike; "
              "simforest: item classes from the crowd's similarities.")
@click.option("--algorithm", default=None, metavar="LABEL",
              help="The distance algorithm whose estimates to learn from (default: the study's first).")
@click.option("--threshold", type=click.FloatRange(0, 1), default=None,
              help="treerank/ranking_forest: call a pair alike when its crowd distance is at most this (default: "
              "pairs of items with the same label are alike).")
@click.option("--param", "params", multiple=True, metavar="NAME=VALUE",
              help="A parameter of the model, e.g. --param n_trees=100 (repeatable).")
@click.option("--seed", type=int, default=None, help="Random seed (default: the study's random_state, else 0).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True, path_type=Path), default=None,
              help="Also write the model's JSON export to this file.")
def train(study_id, name, algorithm, threshold, params, seed, output):
    """Fit a model on what a study collected, report held-out figures and store it (export it with
    'proxima export STUDY --what model --model NAME'; predict with 'proxima predict')."""
    import json

    from workers.results.models import ModelError, model_export
    from workers.results.models import train as fit

    parsed = _parse_params(params)
    with redis_connection() as conn:
        try:
            meta = fit(conn, study_id, name, algorithm=algorithm, params=parsed, threshold=threshold,
                       random_state=seed)
        except (ModelError, StudyError, StudyNotFound) as exc:
            raise click.ClickException(str(exc)) from None
        except ValueError as exc:  # the estimator refused a parameter value
            raise click.ClickException(f"{name}: {exc}") from None
        if output is not None:
            output.write_text(json.dumps(model_export(conn, study_id, name)), encoding="utf-8")
    summary = meta["summary"]
    click.echo(f"Trained {name} on study {study_id}.")
    for key, value in summary.items():
        if key == "feature_importances":
            click.echo("  feature importances:")
            for row in value:
                click.echo(f"    {row['feature']:<24} {row['importance']:.4f}")
        elif isinstance(value, float):
            click.echo(f"  {key.replace('_', ' ')}: {value:.4f}")
        elif isinstance(value, list):
            click.echo(f"  {key.replace('_', ' ')}: {', '.join(map(str, value))}")
        elif value is not None:
            click.echo(f"  {key.replace('_', ' ')}: {value}")
    if output is not None:
        click.echo(f"Wrote {output}", err=True)


@main.command()
@click.argument("study_id")
@click.option("--model", "name", required=True, type=click.Choice(["smerf", "treerank", "ranking_forest"]),
              help="A model trained with 'proxima train'.")
@click.option("--items", "items_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="A CSV of new items: 'text' (and 'id') plus the same feature columns as the study's items.")
@click.option("--k", default=5, show_default=True, type=click.IntRange(min=1),
              help="How many of the study's items to list per new item, nearest first.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True, path_type=Path), default=None,
              help="Write the CSV to this file instead of standard output.")
def predict(study_id, name, items_path, k, output):
    """For new items (by their features), the study's items a trained model puts nearest: a CSV of
    new_item, item, rank and the predicted distance (smerf) or similarity score (treerank)."""
    import csv
    import io

    import numpy as np

    from workers.results.models import ModelError, predict_for_items
    from workers.store.studies import items_from_csv

    try:
        new_items = items_from_csv(items_path)
    except StudyError as exc:
        raise click.ClickException(str(exc)) from None
    with redis_connection() as conn:
        try:
            new_ids, study_ids, values = predict_for_items(conn, study_id, name, new_items)
        except (ModelError, StudyNotFound) as exc:
            raise click.ClickException(str(exc)) from None
    column = "distance" if name == "smerf" else "score"
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["new_item", "item", "rank", column])
    for row, new_id in enumerate(new_ids):
        order = np.argsort(values[row] if name == "smerf" else -values[row], kind="stable")[:k]
        for rank, j in enumerate(order.tolist(), start=1):
            writer.writerow([new_id, study_ids[j], rank, f"{float(values[row, j]):.6g}"])
    if output is None:
        click.echo(buf.getvalue(), nl=False)
    else:
        output.write_text(buf.getvalue(), encoding="utf-8")
        click.echo(f"Wrote {output}", err=True)


@main.command("import-triplets")
@click.argument("study_id")
@click.argument("triplets_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--rater", default="import", show_default=True, help="Rater id recorded for the imported answers.")
def import_triplets_command(study_id: str, triplets_file: Path, rater: str):
    """Append triplets in cblearn's list-order format (CSV rows i,j,k: i closer to j than to k)."""
    from workers.results.exports import import_triplets

    try:
        text = triplets_file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise click.ClickException(f"triplets file {triplets_file} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise click.ClickException(f"cannot read {triplets_file}: {exc}") from None
    with redis_connection() as conn:
        try:
            count = import_triplets(conn, study_id, text, source=str(triplets_file), rater=rater)
        except (StudyNotFound, StudyError) as exc:
            raise click.ClickException(str(exc)) from None
    click.echo(f"Imported {count} triplets into study {study_id}.")


@main.command()
@click.argument("study_id")
@click.option("--exclude-rater", "exclude", multiple=True, metavar="ID",
              help="Leave this rater's answers out of the engine (repeatable; remembered for later updates).")
def rebuild(study_id: str, exclude: tuple[str, ...]):
    """Replay the answer log into fresh engine state and report how the learned graph changed."""
    from workers.jobs.rebuild import rebuild_study
    from workers.store import keys

    with redis_connection() as conn:
        try:
            known = {r.decode() for r in conn.smembers(keys.raters(study_id))}
            unknown = sorted(set(exclude) - known)
            report = rebuild_study(conn, study_id, exclude)
        except StudyNotFound as exc:
            raise click.ClickException(str(exc)) from None
    for rater in unknown:
        click.echo(f"warning: rater {rater} has no answers in study {study_id}", err=True)
    click.echo(f"Replayed {report.answers_replayed} answers ({report.answers_excluded} excluded from "
               f"{len(report.excluded_raters)} rater(s)) in {report.seconds:.2f} s.")
    if report.answers_set_aside:
        click.echo(f"{report.answers_set_aside} answer(s) could not be used by an engine and were set aside.")
    if not report.changed:
        click.echo("The learned nearest-neighbour graph did not change.")
    else:
        click.echo(f"{len(report.changed)} item(s) changed nearest neighbour:")
        for algorithm, item, before, after in report.changed:
            click.echo(f"  [{algorithm}] {item}: {before or '-'} -> {after or '-'}")


@main.command()
@click.argument("study_id")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True, path_type=Path), default=None,
              help="Write to this file instead of standard output.")
def backup(study_id: str, output: Path | None):
    """Write STUDY as a portable backup (NDJSON: config, items with media, the answer log, ...)."""
    from workers.store.backup import BackupError, backup_lines

    with redis_connection() as conn:
        try:
            lines = backup_lines(conn, study_id)
            first = next(lines)  # surfaces an unknown study before anything is written
        except StudyNotFound as exc:
            raise click.ClickException(str(exc)) from None
        target = None
        try:
            if output is None:
                out = sys.stdout
            else:
                target = output.with_name(output.name + ".partial")
                out = target.open("w", encoding="utf-8", newline="\n")
            try:
                out.write(first)
                for line in lines:
                    out.write(line)
                out.flush()
                if target is not None:
                    os.fsync(out.fileno())
            finally:
                if target is not None:
                    out.close()
        except BackupError as exc:
            if target is not None:
                target.unlink(missing_ok=True)
            raise click.ClickException(str(exc)) from None
        if target is not None:
            target.replace(output)  # a backup file is complete or absent
            click.echo(f"Wrote {output}", err=True)


@main.command()
@click.argument("backup_file", type=click.File("r", encoding="utf-8"))
@click.option("--as", "as_id", default=None, metavar="NEW_ID", help="Restore under this study id instead.")
@click.option("--rebuild/--no-rebuild", "rebuild_after", default=True, show_default=True,
              help="Replay the restored log into the engines now (otherwise a worker's first update does).")
def restore(backup_file, as_id: str | None, rebuild_after: bool):
    """Restore a study from a file written by 'proxima backup' ('-' reads standard input)."""
    from workers.store.backup import BackupError, restore_study
    from workers.store.queue import schedule_update

    with redis_connection() as conn:
        try:
            report = restore_study(conn, backup_file, as_id=as_id)
        except BackupError as exc:
            raise click.ClickException(f"{backup_file.name}: {exc}") from None
        click.echo(f"Restored study {report.study_id} (backup of {report.source_study}, {report.created}): "
                   f"{report.items} items, {report.answers} answers, {report.set_aside} set aside.")
        if rebuild_after:
            from workers.jobs.rebuild import rebuild_study

            result = rebuild_study(conn, report.study_id)
            click.echo(f"Rebuilt its engines from {result.answers_replayed} answers in {result.seconds:.2f} s.")
        else:
            schedule_update(conn, report.study_id)
            click.echo("A worker's next update replays the log into the engines "
                       f"(or run: proxima rebuild {report.study_id}).")


@main.command("studies")
def list_studies_command():
    """List the studies on this Redis."""
    from workers.store.answers import count_answers
    from workers.store.studies import list_studies

    with redis_connection() as conn:
        for study in list_studies(conn):
            click.echo(f"{study.id}\t{study.status}\t{study.config.algorithm}\t{study.n_items} items\t"
                       f"{count_answers(conn, study.id)} answers\t{study.config.name}")


# ---------------------------------------------------------------------------- simulated crowds
def _simulation_redis():
    """The Redis of the simulated server (REDIS_URL or the running embedded one), or None.

    Never starts a temporary server: an empty Redis would not hold the study being simulated.
    """
    url = os.environ.get("REDIS_URL") or running_url(instance_path())
    if not url:
        return None
    conn = redis.Redis.from_url(url)
    try:
        conn.ping()
    except (redis.RedisError, OSError):
        return None
    return conn


def _wait_until_applied(conn, study_id: str, timeout: float) -> dict | None:
    """Study stats once the workers have applied every logged answer (or at the timeout)."""
    from workers.store.studies import get_study

    from ..stats import study_stats

    deadline = time.monotonic() + timeout
    while True:
        stats = study_stats(conn, get_study(conn, study_id))
        if stats["engine"]["answers_applied"] >= stats["answers"] or time.monotonic() >= deadline:
            return stats
        time.sleep(0.25)


@main.command()
@click.argument("study_id")
@click.option("--url", default="http://127.0.0.1:5000", show_default=True, help="Base URL of the running server.")
@click.option("--oracle", "oracle_spec", required=True, metavar="SPEC",
              help="The truth raters answer from: points:FILE.csv (columns id,x1,x2,...), matrix:FILE.csv "
                   "(header row of ids, then an n x n distance matrix), or eggs[:DATA_DIR] (alien eggs).")
@click.option("--raters", default=10, show_default=True, type=click.IntRange(1, 1000),
              help="Simulated raters answering at once (one thread and cookie session each).")
@click.option("--noise", type=click.FloatRange(min=0), default=None,
              help="Triplets: the logistic scale of the human noise model (engine.oracles), as a share of the "
                   "largest distance (0: raters answer the truth, but for lapses); ratings: Gaussian sigma on the "
                   "similarity. Default: fitted to the answers for eggs, the alien-egg fit (0.075) otherwise; "
                   "ratings 0.1.")
@click.option("--lapse", type=click.FloatRange(0, 1), default=None,
              help="Share of triplet answers given at random (the human lapse rate). Default: the fitted "
                   "human rate (0.03 without answers of the truth's own).")
@click.option("--careless", type=click.FloatRange(0, 1), default=0.0, show_default=True,
              help="Share of raters who answer uniformly at random (the first ones: sim-0, sim-1, ...).")
@click.option("--think", type=click.FloatRange(min=0), default=2.0, show_default=True,
              help="Mean think time per question in seconds (log-normal; 0 for benchmarks).")
@click.option("--answers", "max_answers", type=click.IntRange(min=1), default=None,
              help="Stop after this many accepted answers in total.")
@click.option("--duration", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Stop after this many seconds.")
@click.option("--seed", type=int, default=None, help="Seed of the raters' noise and think times.")
@click.option("--progress-every", default=5.0, show_default=True, type=click.FloatRange(min=0.1),
              help="Seconds between progress lines.")
@click.option("--log", "log_path", type=click.Path(dir_okay=False, writable=True, path_type=Path), default=None,
              help="Write every accepted answer (answer id, rater, items, choice/value) as JSON lines.")
@click.option("--wait", default=60.0, show_default=True, type=click.FloatRange(min=0),
              help="Seconds to wait for the workers to apply the last answers before scoring the graph.")
@click.option("--no-accuracy", is_flag=True, help="Do not score the learned graph at the end.")
def simulate(study_id, url, oracle_spec, raters, noise, lapse, careless, think, max_answers, duration, seed,
             progress_every, log_path, wait, no_accuracy):
    """Simulated raters answering STUDY_ID on a running server, as real HTTP clients, from a known truth.

    Each rater opens the rater link as sim-<n>, then asks for questions and answers them from
    the truth with noise (a --careless share answers at random), until --answers, --duration
    or the study is complete. Prints progress, answers/s, HTTP latency p50/p95, errors by
    code and, when the server's Redis is reachable (REDIS_URL or 'proxima serve' on this
    instance folder), the learned graph's accuracy: the share of items whose nearest
    neighbour is a true nearest neighbour (ties count as correct).

    To make a study that matches a truth, see 'proxima simulate-setup'.
    """
    import requests

    from .. import simulate as sim

    try:
        truth = sim.load_truth(oracle_spec)
        model, noise_text = sim.noise_model(truth, noise, lapse)
    except sim.SimulationError as exc:
        raise click.ClickException(str(exc)) from None
    base = url.rstrip("/")
    try:
        requests.get(f"{base}/api/health", timeout=5).raise_for_status()
    except requests.RequestException as exc:
        raise click.ClickException(f"cannot reach a Proxima server at {base} ({exc.__class__.__name__}); "
                                   "start one with 'proxima serve' or pass --url") from None
    conn = _simulation_redis()
    if conn is not None:
        from workers.store.studies import get_items

        try:
            ids = [item.id for item in get_items(conn, study_id)]
        except redis.RedisError:
            ids = []
        unknown = [i for i in ids if i not in truth.index]
        if unknown:
            raise click.ClickException(
                f"{len(unknown)} item(s) of study {study_id} are not in the truth ({truth.source}), e.g. "
                f"{', '.join(unknown[:5])}; simulate a study created from the same items")
    click.echo(f"Simulating {raters} rater(s) on {base}/s/{study_id}: truth {truth.source} ({truth.n_items} items), "
               f"noise {noise_text}, careless share {careless:g}, think time {think:g} s")
    crowd = sim.Crowd(base, study_id, truth, model, raters=raters, careless=careless, think=think,
                  max_answers=max_answers, duration=duration, seed=seed)
    try:
        report = crowd.run(progress=lambda r, s: click.echo(sim.progress_line(r, s)), every=progress_every)
    except sim.SimulationError as exc:
        raise click.ClickException(str(exc)) from None
    for line in sim.summary_lines(report):
        click.echo(line)
    if report.errors.get("rate_limited"):
        click.echo("note: the server rate-limited this crowd (it answers faster than people, all from one address); "
                   "start the server with PROXIMA_RATE_LIMIT_EXEMPT_ADDRESSES set to this machine's address "
                   "(e.g. 127.0.0.1) to simulate without limits", err=True)
    if log_path is not None:
        sim.write_log(report, log_path)
        click.echo(f"Wrote {report.answers} accepted answers to {log_path}")
    if no_accuracy:
        return
    if conn is None:
        click.echo("Accuracy: skipped (the server's Redis is not reachable: set REDIS_URL, or run beside "
                   "'proxima serve' with the same PROXIMA_INSTANCE_PATH)")
        return
    from workers.results.exports import ExportError, nn_graph

    stats = _wait_until_applied(conn, study_id, wait)
    if stats["engine"]["answers_applied"] < stats["answers"]:
        click.echo(f"warning: after {wait:g} s the workers have applied {stats['engine']['answers_applied']} of "
                   f"{stats['answers']} answers; scoring the graph as it is", err=True)
    try:
        graph = nn_graph(conn, study_id)
        score = sim.graph_accuracy(graph, truth)
    except (ExportError, sim.SimulationError) as exc:
        click.echo(f"Accuracy: skipped ({exc})")
        return
    click.echo(f"Learned graph ({graph['algorithm']}, k={score['k']}): nearest-neighbour accuracy "
               f"{score['accuracy']:.3f} over {score['items']} items"
               + (f", k-NN accuracy {score['knn_accuracy']:.3f}" if score["k"] > 1 else "")
               + f", certified {score['certified']:.0%}")


@main.command("simulate-setup")
@click.argument("source", metavar="TRUTH")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder to write items.csv, truth.csv and study.yaml into.")
@click.option("--kind", type=click.Choice(["rating", "triplet"]), default="rating", show_default=True,
              help="Question kind of the study (ANNTri samples from ratings or from triplets).")
@click.option("--algorithm", type=click.Choice(list(SIMULATED_ALGORITHMS)), default=None,
              help=f"Algorithm of the study (default {DEFAULT_NN_ALGORITHM} for triplets, "
                   f"{DEFAULT_RATING_ALGORITHM} for ratings): " + "; ".join(
                  f"{name}: {ALGORITHM_TABLE[name].description}" for name in SIMULATED_ALGORITHMS) + ".")
@click.option("--sigma", type=click.FloatRange(min=0, min_open=True), default=None,
              help="ANNTri's sigma parameter written into the config (default 0.1 for ratings, 0.5 for "
                   "triplet-derived 0/1 samples).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the clusters and of the study.")
@click.option("--create", "create_id", default=None, metavar="ID",
              help="Also create the study with this id (like 'proxima create').")
@click.pass_context
def simulate_setup(ctx, source, out_dir, kind, algorithm, sigma, seed, create_id):
    """Write a truth and a matching study (items.csv, truth.csv, study.yaml) for 'proxima simulate'.

    TRUTH is clusters[:CxS] (the ANNTri paper's circle clusters, default 10x10), eggs[:DATA_DIR],
    points:FILE.csv or matrix:FILE.csv. Then run, for example:

    \b
      proxima create OUT/study.yaml --items OUT/items.csv --id my-sim
      proxima simulate my-sim --oracle points:OUT/truth.csv --raters 20
    """
    from ..simulate import SimulationError, write_setup

    algorithm = algorithm or default_algorithm(kind)
    if kind not in ALGORITHM_TABLE[algorithm].question_kinds:
        only = " or ".join(ALGORITHM_TABLE[algorithm].question_kinds)
        raise click.ClickException(f"{algorithm} asks {only} questions only; use --kind {only}")
    try:
        written = write_setup(source, out_dir, kind=kind, algorithm=algorithm, sigma=sigma, seed=seed)
    except SimulationError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"Wrote {written['items']}, {written['truth']} and {written['config']} ({written['n_items']} items).")
    if create_id:
        ctx.invoke(create, config_file=written["config"], items_path=written["items"], study_id=create_id)
    study = create_id or "STUDY"
    if not create_id:
        click.echo(f"Create the study: proxima create {written['config']} --items {written['items']} --id my-sim")
        study = "my-sim"
    click.echo(f"Simulate raters:  proxima simulate {study} --oracle {written['oracle']} --raters 20")


@main.command("verify-code")
@click.argument("study_id")
@click.argument("rater")
@click.argument("code")
def verify_code_command(study_id: str, rater: str, code: str):
    """Check a rater's completion code (an HMAC of study and rater with this instance's secret key)."""
    from .. import instance_config
    from ..rating import check_completion_code

    # the secret key is all a code needs: no Redis (nor a running server) is required
    secret = instance_config()["SECRET_KEY"]
    if check_completion_code(secret, study_id, rater, code):
        click.echo(f"valid: {code.strip().upper()} is rater {rater}'s completion code for study {study_id}")
    else:
        raise click.ClickException(f"invalid: {code!r} is not rater {rater}'s completion code for study {study_id}")


# ---------------------------------------------------------------------------- budget planning
def _pilot_from_study(conn, study_id: str):
    """(triplets, n_items, params) of a study's triplet answers so far (excluded raters left out) and
    the parameters of its algorithms (by algorithm name), so its learners are simulated as they run."""
    from engine.planning import read_pilot_csv
    from workers.store import keys
    from workers.store.answers import export_triplets, iter_answers
    from workers.store.studies import get_study

    try:
        study = get_study(conn, study_id)
    except StudyNotFound as exc:
        raise click.ClickException(str(exc)) from None
    excluded = {r.decode() for r in conn.smembers(keys.excluded_raters(study_id))}
    text = "".join(export_triplets(iter_answers(conn, study_id), excluded))
    try:
        params = {}
        for alg in study.config.algorithms:
            params.setdefault(alg.algorithm, dict(alg.params))
        return read_pilot_csv(text, f"study {study_id}"), study.n_items, params
    except ValueError:
        raise click.ClickException(f"study {study_id} has no triplet answers yet: run a pilot first") from None


@main.command("plan")
@click.option("--truth", "truth_spec", default=None, metavar="SPEC",
              help="Plan from a known truth: points:FILE.csv (columns id,x1,x2,...), matrix:FILE.csv (header row "
                   "of ids, then an n x n distance matrix) or eggs[:DATA_DIR].")
@click.option("--pilot", "pilot_path", default=None, type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="Plan from a pilot's answers: an answers CSV export or a triplets export (list-order i,j,k).")
@click.option("--study", "study_id", default=None, metavar="ID",
              help="Plan from a running study's answers so far (its pilot) and show the plan on its dashboard.")
@click.option("--items", "n_items", type=click.IntRange(min=4), default=None,
              help="Number of items of a --pilot file (default: the largest index + 1).")
@click.option("--algorithms", default="", metavar="A,B,...",
              help="Learners to simulate (default: every learner of the table a triplet study can run).")
@click.option("--budgets", default="10,20,50,100,200,500", show_default=True, metavar="N,N,...",
              help="Answers per item at which accuracy is measured.")
@click.option("--runs", default=3, show_default=True, type=click.IntRange(1, 100),
              help="Simulations per learner (seeds; with a pilot each also refits a bootstrap resample).")
@click.option("--noise", type=click.FloatRange(min=0), default=None,
              help="With --truth: the logistic noise scale as a share of the largest distance "
                   "(default: the human fit, as 'proxima simulate').")
@click.option("--lapse", type=click.FloatRange(0, 1), default=None,
              help="With --truth: the share of answers given at random (default: the human fit).")
@click.option("--pay", type=click.FloatRange(min=0), default=None,
              help="Pay per answer, to print what each budget costs.")
@click.option("--currency", default="$", show_default=True, help="Currency sign of --pay.")
@click.option("--target", type=click.FloatRange(0, 1), default=0.9, show_default=True,
              help="Accuracy to reach: prints the answers (and money) each learner needs.")
@click.option("--metric", type=click.Choice(["exact", "hit3"]), default="exact", show_default=True,
              help="Accuracy --target refers to: the exact nearest neighbour, or one of the 3 nearest.")
@click.option("--batch", default=50, show_default=True, type=click.IntRange(1, 100000),
              help="Questions a learner plans at a time (a pool refill of a live study).")
@click.option("--jobs", type=click.IntRange(1, 64), default=None, help="Processes to simulate in (default: the CPUs).")
@click.option("--max-seconds", type=click.FloatRange(min=1), default=300.0, show_default=True,
              help="Bound on the plan's CPU time per process: every run gets an equal share, and a learner "
                   "that needs more stops at the budgets it reached (shown as '-').")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, writable=True, path_type=Path), default=None,
              help="Also write the plan as JSON to this file.")
def plan_command(truth_spec, pilot_path, study_id, n_items, algorithms, budgets, runs, noise, lapse, pay, currency,
                 target, metric, batch, jobs, json_path, max_seconds=300.0):
    """Plan a study's budget before paying: expected nearest-neighbour accuracy against answers per item.

    Every applicable learner runs in-process on simulated raters (logistic + lapse human noise) that answer
    from a known truth, or from an ordinal embedding fitted to a pilot's answers with the pilot's own noise.
    Prints accuracy (exact and hit@3, mean ± sd over runs) by budget, its cost at --pay, and the answers
    needed to reach --target. For example, after a pilot of ~10 answers per item:

    \b
      proxima plan --study my-study --pay 0.02 --target 0.9
      proxima plan --pilot pilot-answers.csv --runs 5 --metric hit3
    """
    import json

    from engine import planning

    if sum(x is not None for x in (truth_spec, pilot_path, study_id)) != 1:
        raise click.UsageError("give exactly one of --truth, --pilot or --study")
    try:
        names = planning.plannable_algorithms([a.strip() for a in algorithms.split(",") if a.strip()])
        grid = planning.check_budgets([float(b) for b in budgets.split(",") if b.strip()])
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    jobs = jobs or planning.default_jobs()
    started = time.perf_counter()
    params = None
    if truth_spec is not None:
        from ..simulate import HUMAN_LAPSE, HUMAN_SCALE, SimulationError, load_truth

        try:
            truth = load_truth(truth_spec)
        except (SimulationError, OSError) as exc:
            raise click.ClickException(str(exc)) from None
        scale = noise if noise is not None else (truth.logistic_scale or HUMAN_SCALE)
        lapse = lapse if lapse is not None else (truth.lapse if truth.lapse is not None else HUMAN_LAPSE)
        scenarios = [planning.Scenario(truth.distances, scale, lapse)]
        source = (f"{truth.source} (logistic scale {scale:.4f} of the largest distance, lapse {lapse:.3f})")
        spread = "seeds"
    else:
        if noise is not None or lapse is not None:
            raise click.UsageError("--noise and --lapse are for --truth; a pilot's noise is fitted to its answers")
        if study_id is not None:
            with redis_connection() as conn:
                triplets, n, params = _pilot_from_study(conn, study_id)
        else:
            try:
                triplets = planning.read_pilot_csv(pilot_path.read_text(encoding="utf-8"), str(pilot_path))
            except (ValueError, UnicodeDecodeError) as exc:
                raise click.ClickException(str(exc)) from None
            n = n_items or int(triplets.max()) + 1
        click.echo(f"Fitting an embedding and the raters' noise to {len(triplets)} pilot answers "
                   f"({len(triplets) / n:.1f} per item) ...", err=True)
        try:
            fit = planning.fit_pilot(triplets, n, replicates=runs)
        except ValueError as exc:
            raise click.ClickException(str(exc)) from None
        scenarios = list(fit.scenarios)
        source = fit.describe()
        spread = "seeds and bootstrap resamples of the pilot"
    click.echo(f"Simulating {', '.join(names)} ({runs} runs each, up to {grid[-1]:g} answers per item, "
               f"{jobs} processes; at most about {max_seconds:g} s of CPU per process, --max-seconds) ...", err=True)
    result = planning.plan(scenarios, names, grid, runs=runs, batch=batch, jobs=jobs, source=source, spread=spread,
                            params=params, max_seconds=max_seconds)
    for line in planning.format_plan(result, target=target, metric=metric, pay=pay, currency=currency):
        click.echo(line)
    click.echo(f"\nPlanned in {time.perf_counter() - started:.1f} s.", err=True)
    if result.cut_short:
        click.echo(f"Time limit: {', '.join(result.cut_short)} did not reach every budget within --max-seconds "
                   f"{max_seconds:g}; raise it (or lower --budgets, --runs) for the rest.", err=True)
    doc = {**result.to_dict(), "target": target, "metric": metric, "pay": pay, "currency": currency,
           "created_at": time.time(),
           "reach": {name: result.reach(name, target, metric)[0].__dict__ for name in result.algorithms}}
    if json_path is not None:
        json_path.write_text(json.dumps(doc, indent=1, allow_nan=False), encoding="utf-8")
    if study_id is not None:
        from workers.store import keys

        with redis_connection() as conn:
            conn.set(keys.plan(study_id), json.dumps(doc, allow_nan=False))
        click.echo(f"The plan is on study {study_id}'s dashboard.", err=True)
