"""Jobs of deletion (``workers.store.deletion``): the last sweep of a deleted study's keys, once no worker
holds its update lock. Must never import Flask."""
from __future__ import annotations

from rq import get_current_job

from workers.jobs.lock import study_lock
from workers.store import keys
from workers.store.deletion import purge_study_keys


def purge_study_job(study_id: str) -> int:
    """RQ entry point: wait for the pass that may be running on the deleted study, then delete whatever it
    wrote (a checkpoint, a summary). A study of that id created again meanwhile is left alone."""
    conn = get_current_job().connection
    with study_lock(conn, study_id):
        if conn.exists(keys.study(study_id)):
            return 0
        return purge_study_keys(conn, study_id)
