"""Enqueueing RQ jobs by dotted path, so web processes never import the numpy-heavy jobs module."""
from __future__ import annotations

import hashlib
import json
import time
from typing import TYPE_CHECKING

from rq import Queue
from rq.exceptions import NoSuchJobError
from rq.job import Job, JobStatus

from workers.store import keys

if TYPE_CHECKING:
    from collections.abc import Iterable

    from redis import Redis


QUEUE_NAME = "proxima"
UPDATE_FLAG_TTL = 60  # a web process that dies between flag and enqueue delays the study this long at most
UPDATE_JOB = "workers.jobs.update.update_study"
REBUILD_JOB = "workers.jobs.rebuild.rebuild_job"
#: Field of ``keys.engine_stats`` holding the latest rebuild's status (JSON), which the dashboard polls.
REBUILD_STATUS_FIELD = "rebuild"


def get_queue(conn: Redis) -> Queue:
    return Queue(QUEUE_NAME, connection=conn)


def run_queued_jobs(conn: Redis) -> None:
    """Run every queued job in this process and return once the queue is empty: RQ's SimpleWorker in
    burst mode, for scripts and tests that drive a study without a worker process (benchmarks, the test
    suite). It leaves out the command channel a long-running worker listens on (``rq`` commands such as
    stop-job): nothing can send it one within a burst, and stopping the channel's listener thread cost
    every burst ~0.12 s."""
    from rq import SimpleWorker

    class BurstWorker(SimpleWorker):
        def subscribe(self) -> None:
            self.pubsub = self.pubsub_thread = None

        def unsubscribe(self) -> None:
            pass

    BurstWorker([get_queue(conn)], connection=conn).work(burst=True, logging_level="WARNING")


def enqueue_update(conn: Redis, study_id: str) -> Job:
    """Queue one update of the study (callers hold the study's update-scheduled flag)."""
    return get_queue(conn).enqueue(UPDATE_JOB, study_id, job_timeout=600, result_ttl=60, failure_ttl=7 * 86400)


def schedule_update(conn: Redis, study_id: str) -> bool:
    """Enqueue an update unless one is already queued and not started; True if this call queued it."""
    if conn.set(keys.update_scheduled(study_id), "1", nx=True, ex=UPDATE_FLAG_TTL):
        enqueue_update(conn, study_id)
        return True
    return False


def schedule_stale_studies(conn: Redis) -> list[str]:
    """Queue an update for every study whose log holds answers its engine has not applied.

    Run when a worker starts, so answers left behind by a worker that died are not left waiting: one that
    crashed mid-job (and whose study then received no further answer), or one killed (or cut off from a
    Redis that restarted) between taking a job off the queue and starting it, which leaves the update flag
    set with no job behind it: the flag would keep every later answer from queueing one until it expires
    (``UPDATE_FLAG_TTL``). A study whose flag is set and whose update job waits in the queue is left to it."""
    from workers.store.studies import list_studies

    stale, waiting = [], None
    for study in list_studies(conn):
        last = conn.xrevrange(keys.answers(study.id), count=1)
        cursor = conn.get(keys.cursor(study.id)) or b"0-0"
        if (last and last[0][0] != cursor) or not conn.exists(keys.cursor(study.id)):
            if schedule_update(conn, study.id):
                stale.append(study.id)
                continue
            waiting = _queued_updates(conn) if waiting is None else waiting
            if study.id not in waiting and queue_sweep_update(conn, study.id):
                stale.append(study.id)  # the flag outlived its job
    return stale


def _queued_updates(conn: Redis) -> set[str]:
    """The studies with an update job waiting in the queue."""
    ids = get_queue(conn).get_job_ids()
    jobs = Job.fetch_many(ids, connection=conn) if ids else []
    return {job.args[0] for job in jobs if job is not None and job.func_name == UPDATE_JOB and job.args}


def sweep_job_id(study_id: str) -> str:
    """The id of the update job queued for a study found behind (one at a time): by a starting worker
    (``schedule_stale_studies``) or the sweep of ``proxima serve`` / ``proxima sweep``."""
    return f"proxima-sweep-{study_id}"


def queue_sweep_update(conn: Redis, study_id: str) -> bool:
    """Queue an update of a study found behind whatever its update flag says (the job the flag stands for may
    be lost: ``schedule_stale_studies``, the sweep of ``proxima serve``), unless the study's sweep job is
    already waiting or running (a study behind a long job is queued once, not once per look). Sets the flag
    too: web processes then know an update is on its way (the job clears it when it starts). True if this
    call queued one."""
    try:
        status = Job.fetch(sweep_job_id(study_id), connection=conn).get_status()
    except NoSuchJobError:
        status = None
    if status in (JobStatus.QUEUED, JobStatus.STARTED, JobStatus.DEFERRED, JobStatus.SCHEDULED):
        return False
    conn.set(keys.update_scheduled(study_id), "1", ex=UPDATE_FLAG_TTL)
    get_queue(conn).enqueue(UPDATE_JOB, study_id, job_id=sweep_job_id(study_id), job_timeout=600, result_ttl=60,
                            failure_ttl=7 * 86400)
    return True


def rebuild_job_id(study_id: str, excluded_raters: Iterable[str], reason: str = "") -> str:
    """One job id per (study, set of excluded raters, reason): asking twice for the same rebuild queues it
    once. A rebuild after a change to the log itself (a forgotten rater) gives the change as ``reason``."""
    text = "\n".join(sorted(excluded_raters)) + (f"\n#{reason}" if reason else "")
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return f"proxima-rebuild-{study_id}-{digest}"


def enqueue_rebuild(conn: Redis, study_id: str, raters: Iterable[str] = (), reason: str = "") -> str:
    """Queue a replay of the study's log without its excluded raters (``keys.excluded_raters``, which
    the caller has already updated); returns the job id. The status the dashboard shows is set to
    "queued" unless this very rebuild is already queued, running or done."""
    excluded = sorted(r.decode() for r in conn.smembers(keys.excluded_raters(study_id)))
    job_id = rebuild_job_id(study_id, excluded, reason)
    try:
        status = Job.fetch(job_id, connection=conn).get_status()
    except NoSuchJobError:
        status = None
    if status in (JobStatus.QUEUED, JobStatus.STARTED, JobStatus.DEFERRED, JobStatus.SCHEDULED,
                  JobStatus.FINISHED):
        return job_id
    if status is not None:  # failed or stopped: clear the old run so its registries forget it
        Job.fetch(job_id, connection=conn).delete()
    conn.hset(keys.engine_stats(study_id), REBUILD_STATUS_FIELD, json.dumps({
        "state": "queued", "job_id": job_id, "raters": sorted(raters), "excluded_raters": excluded,
        "queued_at": time.time()}))
    get_queue(conn).enqueue(REBUILD_JOB, study_id, job_id=job_id, job_timeout=3600, result_ttl=86400,
                            failure_ttl=7 * 86400)
    return job_id


BUILTIN_FEATURES_JOB = "workers.jobs.builtin_features.builtin_features_job"


def enqueue_builtin_features(conn: Redis, study_id: str) -> str:
    """Queue the computing of a study's built-in image features (the job then rebuilds from them); returns the job
    id, one per study (asking again while it is queued queues nothing more)."""
    job_id = f"proxima-features-{study_id}"
    try:
        status = Job.fetch(job_id, connection=conn).get_status()
    except NoSuchJobError:
        status = None
    if status in (JobStatus.QUEUED, JobStatus.STARTED, JobStatus.DEFERRED, JobStatus.SCHEDULED):
        return job_id
    if status is not None:
        Job.fetch(job_id, connection=conn).delete()
    conn.hset(keys.engine_stats(study_id), keys.FEATURES_JOB_FIELD, json.dumps({"state": "queued",
                                                                                  "at": time.time()}))
    get_queue(conn).enqueue(BUILTIN_FEATURES_JOB, study_id, job_id=job_id, job_timeout=3600, result_ttl=3600,
                            failure_ttl=7 * 86400)
    return job_id
