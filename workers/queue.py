"""Enqueueing RQ jobs by dotted path, so web processes never import the numpy-heavy jobs module."""
from __future__ import annotations

from rq import Queue

from . import keys

QUEUE_NAME = "proxima"
UPDATE_FLAG_TTL = 60  # a web process that dies between flag and enqueue delays the study this long at most
UPDATE_JOB = "workers.jobs.update_study"


def get_queue(conn) -> Queue:
    return Queue(QUEUE_NAME, connection=conn)


def enqueue_update(conn, study_id: str):
    """Queue one update of the study (callers hold the study's update-scheduled flag)."""
    return get_queue(conn).enqueue(UPDATE_JOB, study_id, job_timeout=600, result_ttl=60, failure_ttl=7 * 86400)


def schedule_update(conn, study_id: str) -> bool:
    """Enqueue an update unless one is already queued and not started; True if this call queued it."""
    if conn.set(keys.update_scheduled(study_id), "1", nx=True, ex=UPDATE_FLAG_TTL):
        enqueue_update(conn, study_id)
        return True
    return False


def schedule_stale_studies(conn) -> list[str]:
    """Queue an update for every study whose log holds answers its engine has not applied.

    Run when a worker starts, so answers left behind by a worker that crashed mid-job (and
    whose study then received no further answer) are not left waiting.
    """
    from .studies import list_studies

    stale = []
    for study in list_studies(conn):
        last = conn.xrevrange(keys.answers(study.id), count=1)
        cursor = conn.get(keys.cursor(study.id)) or b"0-0"
        if (last and last[0][0] != cursor) or not conn.exists(keys.cursor(study.id)):
            if schedule_update(conn, study.id):
                stale.append(study.id)
    return stale
