"""Jobs of deletion (``workers.store.deletion``): a rater forgotten from the dashboard, the last sweep of a
deleted study's keys, once no worker holds its update lock, and the rewrite of Redis's files after a deletion
(``workers.store.persistence``). Must never import Flask."""
from __future__ import annotations

import logging

from rq import get_current_job

from workers.jobs.lock import study_lock
from workers.store import keys
from workers.store.deletion import purge_study_keys, run_forget_request
from workers.store.persistence import PersistenceError, rewrite_files

logger = logging.getLogger(__name__)


def forget_rater_job(study_id: str, request_id: str) -> dict:
    """RQ entry point of a forget asked from the dashboard (``deletion.request_forget``): the rater, refused
    already, leaves the log and every record; the rebuild and the rewrite of Redis's files are queued after.
    Returns what was done, without the rater's id."""
    return run_forget_request(get_current_job().connection, study_id, request_id)


def purge_study_job(study_id: str) -> int:
    """RQ entry point: wait for the pass that may be running on the deleted study, then delete whatever it
    wrote (a checkpoint, a summary), then rewrite Redis's files so they hold nothing of the study. A study
    of that id created again meanwhile is left alone."""
    conn = get_current_job().connection
    with study_lock(conn, study_id):
        if conn.exists(keys.study(study_id)):
            return 0
        deleted = purge_study_keys(conn, study_id)
    try:
        report = rewrite_files(conn, [keys.study_pattern(study_id).rstrip("*")])
    except PersistenceError as exc:  # the keys are gone either way; say why the files still hold them
        logger.warning("study %s: Redis's files were not rewritten after the deletion: %s", study_id, exc)
    else:
        logger.info("study %s deleted: %s", study_id, " ".join(report.lines()))
    return deleted


def rewrite_files_job() -> list[str]:
    """RQ entry point, queued after the rebuild that follows a rater forgotten from the dashboard: rewrite
    Redis's AOF (and RDB snapshot) from what it holds now; returns the report's lines. It is given no rater
    id (a job's arguments are stored in Redis), so it rewrites without looking for one."""
    return rewrite_files(get_current_job().connection).lines()
