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

from workers.config import ConfigError, load_config_file
from workers.studies import StudyError, StudyNotFound

from . import ROOT
from .embedded import EmbeddedRedis, EmbeddedRedisError, running_url


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


@main.command()
@click.option("--demo", is_flag=True, help="Create the demo colour study (once) and print its links.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address the web server listens on.")
@click.option("--port", default=5000, show_default=True, type=click.IntRange(0, 65535),
              help="Port of the web server (0: any free port).")
@click.option("--web-workers", default=2, show_default=True, type=click.IntRange(1, 64),
              help="gunicorn worker processes.")
@click.option("--workers", "n_workers", default=1, show_default=True, type=click.IntRange(0, 64),
              help="RQ worker processes that update the engines.")
def serve(demo: bool, host: str, port: int, web_workers: int, n_workers: int):
    """Start Redis (unless REDIS_URL is set), RQ workers and the web app under gunicorn."""
    from .embedded import free_port

    inst = instance_path()
    inst.mkdir(parents=True, exist_ok=True)
    server = None
    url = os.environ.get("REDIS_URL")
    if not url:
        server = EmbeddedRedis(inst)
        try:
            url = server.start()
        except EmbeddedRedisError as exc:
            raise click.ClickException(str(exc)) from None
        click.echo(f"Redis: embedded redis-server, data in {inst / 'redis'} (AOF, appendfsync always)")
    else:
        click.echo("Redis: using REDIS_URL")
    children: list[subprocess.Popen] = []
    stopping = False

    def stop(*_):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        conn = redis.Redis.from_url(url)
        study_id = None
        if demo:
            from workers.queue import schedule_update

            from .demo import ensure_demo_study

            study_id = ensure_demo_study(conn)
            schedule_update(conn, study_id)
        if port == 0:
            port = free_port()
        env = dict(os.environ, REDIS_URL=url, PROXIMA_INSTANCE_PATH=str(inst))
        for _ in range(n_workers):
            children.append(subprocess.Popen([sys.executable, "-m", "webapp", "worker"], env=env,
                                             start_new_session=True))
        children.append(subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "--bind", f"{host}:{port}", "--workers", str(web_workers),
             "--graceful-timeout", "10", "--log-level", "warning", "webapp:create_app()"],
            env=env, cwd=str(ROOT), start_new_session=True))
        shown_host = "127.0.0.1" if host in ("0.0.0.0", "") else host
        base = f"http://{shown_host}:{port}"
        if not _wait_healthy(f"{base}/api/health", children, lambda: stopping):
            if not stopping:
                raise click.ClickException("the web server did not start; see the messages above")
        else:
            click.echo(f"Dashboard:  {base}/")
            if study_id:
                click.echo(f"Rater link: {base}/s/{study_id}")
                click.echo(f"Study dashboard: {base}/studies/{study_id}")
            click.echo("Press Ctrl-C to stop.", err=False)
        while not stopping:
            if any(child.poll() is not None for child in children):
                raise click.ClickException("a Proxima process exited unexpectedly; stopping the others")
            time.sleep(0.2)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _stop_children(children)
        if server is not None:
            server.stop()
        click.echo("Proxima stopped.")


def _wait_healthy(url: str, children, stopping, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not stopping():
        if any(child.poll() is not None for child in children):
            return False
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.2)
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
def demo():
    """Same as 'serve --demo'."""
    ctx = click.get_current_context()
    ctx.invoke(serve, demo=True)


@main.command()
@click.option("--burst", is_flag=True, help="Process the queued jobs, then exit.")
def worker(burst: bool):
    """Run an RQ worker that applies answers to the engines (needs REDIS_URL)."""
    from rq import Worker

    import workers.jobs  # noqa: F401  (import numpy and the engine once, before forking job processes)
    from workers.queue import get_queue, schedule_stale_studies

    url = os.environ.get("REDIS_URL") or running_url(instance_path())
    if not url:
        raise click.ClickException("no Redis to work for: set REDIS_URL or start 'proxima serve' first")
    conn = redis.Redis.from_url(url)
    try:
        conn.ping()
    except (redis.RedisError, OSError) as exc:
        raise click.ClickException(f"cannot reach Redis: {exc}") from None
    schedule_stale_studies(conn)
    Worker([get_queue(conn)], connection=conn).work(burst=burst, logging_level="WARNING")


@main.command()
@click.argument("config_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--items", "items_path", required=True, type=click.Path(path_type=Path),
              help="A folder of images/audio/video, or a CSV of texts with a 'text' column.")
@click.option("--id", "study_id", default=None, help="Study id (default: from the name).")
def create(config_file: Path, items_path: Path, study_id: str | None):
    """Create a study from a YAML/JSON config and a folder of media or a CSV of texts."""
    from workers.queue import schedule_update
    from workers.studies import create_study, items_from_csv, items_from_folder

    try:
        config = load_config_file(config_file)
        if not items_path.exists():
            raise StudyError(f"items path {items_path} does not exist")
        if items_path.is_dir():
            items, media = items_from_folder(items_path)
        else:
            items, media = items_from_csv(items_path), None
    except (ConfigError, StudyError) as exc:
        raise click.ClickException(str(exc)) from None
    with redis_connection() as conn:
        try:
            study_id = create_study(conn, config, items, media, study_id=study_id)
        except StudyError as exc:
            raise click.ClickException(str(exc)) from None
        schedule_update(conn, study_id)
    click.echo(f"Created study {study_id} with {len(items)} items. Rater page: /s/{study_id}")


@main.command()
@click.argument("study_id")
@click.option("--what", type=click.Choice(["answers", "triplets"]), default="answers", show_default=True,
              help="answers: one row per answer; triplets: cblearn list-order rows i,j,k (i closer to j than k).")
@click.option("--format", "fmt", type=click.Choice(["csv", "jsonl"]), default="csv", show_default=True,
              help="Format of the answers export (triplets are always CSV).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True, path_type=Path), default=None,
              help="File to write (default: standard output).")
def export(study_id: str, what: str, fmt: str, output: Path | None):
    """Export a study's answers (CSV or JSONL) or its triplets (cblearn list-order CSV)."""
    from workers import keys
    from workers.answers import export_csv, export_jsonl, export_triplets, iter_answers
    from workers.studies import get_items, get_study

    with redis_connection() as conn:
        try:
            get_study(conn, study_id)
        except StudyNotFound as exc:
            raise click.ClickException(str(exc)) from None
        item_ids = [item.id for item in get_items(conn, study_id)]
        if what == "triplets":
            excluded = {r.decode() for r in conn.smembers(keys.excluded_raters(study_id))}
            chunks = export_triplets(iter_answers(conn, study_id), excluded)
        else:
            chunks = (export_csv if fmt == "csv" else export_jsonl)(iter_answers(conn, study_id), item_ids)
        if output is None:
            for chunk in chunks:
                click.echo(chunk, nl=False)
        else:
            with output.open("w", encoding="utf-8", newline="") as fh:
                for chunk in chunks:
                    fh.write(chunk)
            click.echo(f"Wrote {output}", err=True)


@main.command()
@click.argument("study_id")
@click.option("--exclude-rater", "exclude", multiple=True, metavar="ID",
              help="Leave this rater's answers out of the engine (repeatable; remembered for later updates).")
def rebuild(study_id: str, exclude: tuple[str, ...]):
    """Replay the answer log into fresh engine state and report how the learned graph changed."""
    from workers import keys
    from workers.rebuild import rebuild_study

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
    if not report.changed:
        click.echo("The learned nearest-neighbour graph did not change.")
    else:
        click.echo(f"{len(report.changed)} item(s) changed nearest neighbour:")
        for item, before, after in report.changed:
            click.echo(f"  {item}: {before or '-'} -> {after or '-'}")


@main.command("studies")
def list_studies_command():
    """List the studies on this Redis."""
    from workers.answers import count_answers
    from workers.studies import list_studies

    with redis_connection() as conn:
        for study in list_studies(conn):
            click.echo(f"{study.id}\t{study.status}\t{study.config.algorithm}\t{study.n_items} items\t"
                       f"{count_answers(conn, study.id)} answers\t{study.config.name}")
