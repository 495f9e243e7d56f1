"""``proxima backup`` and ``restore``: a study as one portable NDJSON file, and back.

Never imports Flask.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TextIO

import click

from workers.store.studies import StudyNotFound

from .connection import redis_connection


@click.command()
@click.argument("study_id")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True, path_type=Path), default=None,
              help="Write to this file instead of standard output.")
def backup(study_id: str, output: Path | None) -> None:
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
        if rebuild_after:
            from workers.jobs.rebuild import rebuild_study

            result = rebuild_study(conn, report.study_id)
            click.echo(f"Rebuilt its engines from {result.answers_replayed} answers in {result.seconds:.2f} s.")
        else:
            schedule_update(conn, report.study_id)
            click.echo("A worker's next update replays the log into the engines "
                       f"(or run: proxima rebuild {report.study_id}).")
