"""``proxima backup`` and ``restore``: a study as one portable NDJSON file, and back.

Never imports Flask.
"""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import click

from workers.store.studies import StudyNotFound

from .connection import redis_connection

if TYPE_CHECKING:
    from redis import Redis

#: Where the nightly backups go (deploy/proxima-backup.service): ``forget-rater`` looks there by default.
NIGHTLY_FOLDER = Path("/var/backups/proxima")


def default_backup_folders() -> list[Path]:
    """The folders ``forget-rater`` looks through for backups by default: the instance's ``backups`` folder
    and the nightly backups' folder."""
    from .connection import instance_path

    return [instance_path() / "backups", NIGHTLY_FOLDER]


#: File names ``backup --all`` writes: ``<study id>-<UTC date>.ndjson`` (what ``--keep-days`` may delete).
ALL_NAME = re.compile(r"^(?P<study>[a-z0-9][a-z0-9-]*)-(?P<date>\d{4}-\d{2}-\d{2})\.ndjson$")


@click.command()
@click.argument("study_id", required=False)
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True, path_type=Path), default=None,
              help="Write to this file instead of standard output.")
@click.option("--all", "every_study", is_flag=True,
              help="Back up every study into --dir, one file each: STUDY-YYYY-MM-DD.ndjson (UTC date).")
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="With --all: the folder the files are written to (created if missing).")
@click.option("--keep-days", type=click.IntRange(min=1), default=None,
              help="With --all: delete the files --all wrote there more than this many days ago.")
def backup(study_id: str | None, output: Path | None, every_study: bool = False, directory: Path | None = None,
           keep_days: int | None = None) -> None:
    """Write STUDY as a portable backup (NDJSON: config, items with media, the answer log, ...), or with
    --all every study into a folder (what deploy/proxima-backup.timer runs each night)."""
    from workers.store.backup import BackupError

    if every_study:
        if study_id is not None or output is not None:
            raise click.UsageError("--all backs up every study into --dir: give no STUDY and no -o")
        if directory is None:
            raise click.UsageError("--all needs --dir, the folder to write the backups to")
        _backup_all(directory, keep_days)
        return
    if study_id is None:
        raise click.UsageError("give the STUDY to back up (or --all --dir FOLDER for every study)")
    if directory is not None or keep_days is not None:
        raise click.UsageError("--dir and --keep-days go with --all")
    with redis_connection() as conn:
        try:
            _write_backup(conn, study_id, output)
        except StudyNotFound as exc:
            raise click.ClickException(str(exc)) from None
        except BackupError as exc:
            raise click.ClickException(str(exc)) from None
    if output is not None:
        click.echo(f"Wrote {output}", err=True)


def _write_backup(conn: Redis, study_id: str, output: Path | None) -> None:
    """The study's backup to ``output`` (complete or absent: written under a temporary name, then renamed)
    or standard output. StudyNotFound before anything is written; BackupError."""
    from workers.store.backup import BackupError, backup_lines

    lines = backup_lines(conn, study_id)
    first = next(lines)  # surfaces an unknown study before anything is written
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
    except BackupError:
        if target is not None:
            target.unlink(missing_ok=True)
        raise
    if target is not None:
        target.replace(output)  # a backup file is complete or absent


def _backup_all(directory: Path, keep_days: int | None) -> None:
    from datetime import UTC, datetime, timedelta

    from workers.store.backup import BackupError
    from workers.store.studies import list_studies

    directory.mkdir(parents=True, exist_ok=True)
    today = datetime.now(tz=UTC).date()
    failed = []
    with redis_connection() as conn:
        studies = list_studies(conn)
        for study in studies:
            path = directory / f"{study.id}-{today.isoformat()}.ndjson"
            try:
                _write_backup(conn, study.id, path)
            except (StudyNotFound, BackupError) as exc:  # deleted meanwhile, or changed while read
                failed.append(f"{study.id}: {exc}")
                continue
            click.echo(f"Wrote {path}", err=True)
    removed = 0
    if keep_days is not None:
        oldest = today - timedelta(days=keep_days)
        for path in directory.iterdir():
            found = ALL_NAME.match(path.name)
            if found and datetime.strptime(found["date"], "%Y-%m-%d").date() < oldest:
                path.unlink()
                removed += 1
    click.echo(f"Backed up {len(studies) - len(failed)} of {len(studies)} studies to {directory}"
               + (f"; deleted {removed} backup(s) older than {keep_days} days" if removed else "") + ".")
    if failed:
        raise click.ClickException("not backed up: " + "; ".join(failed))


@click.command()
@click.argument("backup_file", type=click.File("r", encoding="utf-8"))
@click.option("--as", "as_id", default=None, metavar="NEW_ID", help="Restore under this study id instead.")
@click.option("--rebuild/--no-rebuild", "rebuild_after", default=True, show_default=True,
              help="Replay the restored log into the engines now (otherwise a worker's first update does).")
def restore(backup_file: TextIO, as_id: str | None, rebuild_after: bool) -> None:
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
        if report.forgotten_left_out:
            left = report.forgotten_left_out
            click.echo(f"Warning: this backup holds {len(left)} rater(s) forgotten on this instance after it was "
                       f"made ({sum(left.values())} answer(s)). They were left out of the restored study and stay "
                       "forgotten (an audit line says so); the backup file itself still holds them, so delete it "
                       "once you no longer need it.", err=True)
        if rebuild_after:
            from workers.jobs.rebuild import rebuild_study

            result = rebuild_study(conn, report.study_id)
            click.echo(f"Rebuilt its engines from {result.answers_replayed} answers in {result.seconds:.2f} s.")
        else:
            schedule_update(conn, report.study_id)
            click.echo("A worker's next update replays the log into the engines "
                       f"(or run: proxima rebuild {report.study_id}).")
