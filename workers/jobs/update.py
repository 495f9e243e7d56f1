"""RQ job: apply a study's new answers to its engines and refill its question pools, pass after pass
while answers keep arriving.

``update_study`` is the only writer of a study's engine states (enqueued by its dotted path,
``workers.store.queue.UPDATE_JOB``). A job is its lock, its passes and the steps around them: it takes the
study's lock (``workers.jobs.lock``) and runs update passes (``workers.jobs.update_pass``): while answers
keep arriving, one job goes on with pass after pass (up to ``JOB_SECONDS``), and the learners stay in this
process's memory between passes (``workers.jobs.learner_cache``). Every other step, before and after each
pass and at the job's end, is one entry of the ordered list in ``workers.jobs.steps``: when the job ends,
the checkpoints its passes started are put in place; when it ends with no newer job to hand over to, the
last answers are checked and the dashboard's summary is written if the last pass left it out. Must never
import Flask.
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import redis
from rq import get_current_job

from workers.jobs import steps
from workers.jobs.learner_cache import fits_beside
from workers.jobs.lock import study_lock
from workers.jobs.update_pass import apply_new_answers
from workers.store import health, keys

if TYPE_CHECKING:
    from collections.abc import Callable

    from redis import Redis


#: One job goes on with further passes while answers keep arriving, for at most this long (then it
#: hands over to the job the new answers queued, so other studies get the worker too).
JOB_SECONDS = 30.0
#: A job waits this long for the next answer before it ends (an idle study costs no more). Read when a job
#: starts: a test's in-process burst worker sets it to 0 (nothing answers while it runs).
LINGER_SECONDS = 0.1
#: Passes of one job start at least this far apart (each saves the whole state: batch the answers).
PASS_INTERVAL_SECONDS = 0.03
#: ... and, where the pools hold questions for longer, up to this share of the time they last at the
#: pace raters take them, at most ``MAX_PASS_INTERVAL_SECONDS``: a fast crowd's answers are applied in
#: fewer, larger passes. A pass costs ~10 ms whatever it applies (reading, saving the state, one
#: transaction); at 450 answers/s on 2 cores passes 30 ms apart kept the worker ~90% busy, and any
#: pass held up emptied the pools into random fallbacks.
AHEAD_SHARE = 0.25
MAX_PASS_INTERVAL_SECONDS = 0.25
POLL_SECONDS = 0.01
#: A worker whose update jobs failed this many times in a row exits (see ``worker_should_exit``).
MAX_FAILING_JOBS = 5

#: Update jobs of this process that failed since the last one that succeeded.
failing_jobs = 0
log = logging.getLogger(__name__)
#: How often an idle job looks whether a refit running beside the passes is ready.
FIT_POLL_SECONDS = 0.2


def update_study(study_id: str) -> dict:
    """RQ entry point: drain new answers of one study, and go on while more keep arriving.

    Returns the summed summary of its passes."""
    global failing_jobs
    conn = get_current_job().connection
    # Clear the flag first: answers accepted from now on schedule a fresh job. That job waits in
    # the queue while this one goes on, and takes over when it ends: no answer is left waiting.
    conn.delete(keys.update_scheduled(study_id))
    try:
        with study_lock(conn, study_id) as renew:
            if not conn.exists(keys.study(study_id)):
                return {}  # deleted since the job was queued (workers.store.deletion)
            total = drain_study(conn, study_id, renew=renew, linger=LINGER_SECONDS)
    except Exception as exc:
        failing_jobs += 1
        try:
            failures = health.pass_failed(conn, study_id, exc)
            log.error("update of study %s failed (%d in a row for the study, %d jobs in a row in this worker): %s",
                      study_id, failures, failing_jobs, exc)
        except redis.RedisError:
            pass  # Redis itself is down: the job fails, and RQ retries nothing; the next answer queues a job
        raise
    failing_jobs = 0
    return total


def worker_should_exit() -> bool:
    """Whether this worker's jobs have failed ``MAX_FAILING_JOBS`` times in a row: the worker then exits
    (non-zero), so that ``proxima serve`` or its service manager starts a fresh process. A fault in the
    process itself (a broken library, memory) heals that way; a study that fails everywhere keeps failing,
    and says so on its Overview."""
    return failing_jobs >= MAX_FAILING_JOBS


def drain_study(conn: Redis, study_id: str, renew: Callable[[], None] | None = None, job_seconds: float = JOB_SECONDS,
                linger: float = LINGER_SECONDS, interval: float = PASS_INTERVAL_SECONDS) -> dict:
    """``apply_new_answers`` again and again while answers keep arriving (the learners stay in memory),
    until ``job_seconds`` have passed or no answer arrived for ``linger`` seconds after a pass; then the
    job's end steps (``workers.jobs.steps``: ``SETTLE`` unless it hands over, ``JOB_END`` however it ends).

    Passes start at least ``interval`` seconds apart, so a steady stream is applied in batches.

    A job that ends while answers keep arriving hands over to the job they queued: it leaves the
    study's last answer check and summary to that job (a job that settled them here held the passes up
    for seconds at 50,000 items, the pools ran dry and 40% of the questions served were random
    fallbacks). So does a job that a lull ended where answers came again before it settled (a crowd
    pausing for ``linger``: its settling waited up to 10 s for the answer check, and 17% of a
    50,000-item study's questions were fallbacks, served in 10-second blackouts). A job that ends
    with no newer answer settles both, and waits for the checkpoints still being written."""
    job = steps.UpdateJob(conn, study_id)
    try:
        total = _drain_passes(conn, study_id, renew, job_seconds, linger, interval)
        # a newer answer queued the next job (its time up, or a lull longer than ``linger`` that answers
        # broke): that job settles, after its own passes
        job.settling = not conn.exists(keys.update_scheduled(study_id))
        if job.settling:
            steps.run(steps.SETTLE, job)
        return total
    finally:
        steps.run(steps.JOB_END, job)


def _drain_passes(conn: Redis, study_id: str, renew, job_seconds: float, linger: float, interval: float) -> dict:
    """Passes while answers keep arriving, until ``job_seconds`` are up or no answer came for ``linger``
    seconds; returns their summed summary."""
    started = time.monotonic()
    pass_started = started
    total = apply_new_answers(conn, study_id, renew=renew, settle=False)
    wait = _pass_interval(interval, total.pop("ahead_seconds", None))
    while True:
        idle_until = time.monotonic() + linger
        check_at = pass_started + wait
        waiting = False  # something to apply was seen: the next pass begins at check_at
        polling = False  # the answers stopped and a refit runs beside: look again at check_at
        while True:
            # (a study whose answers stopped is left after ``linger``, however long the wait between passes;
            # with no linger, at once)
            now = time.monotonic()
            time.sleep(max(0.0, (check_at if waiting or polling else min(check_at, idle_until)) - now))
            if time.monotonic() - started >= job_seconds:
                return total
            fits = fits_beside(study_id)
            if fits or _has_new_answers(conn, study_id):
                if time.monotonic() >= check_at:
                    break  # new answers, or a refit ready to be put in place (and saved)
                waiting = True
                continue
            if time.monotonic() >= idle_until:
                if fits is None:
                    return total
                # a refit runs beside: the job waits for it (a study whose raters stopped gets it)
                check_at = time.monotonic() + FIT_POLL_SECONDS
                polling = True
                continue
            check_at = time.monotonic() + POLL_SECONDS
        pass_started = time.monotonic()
        summary = apply_new_answers(conn, study_id, renew=renew, settle=False)
        wait = _pass_interval(interval, summary.pop("ahead_seconds", None))
        for name, value in summary.items():
            total[name] = total.get(name, 0) + value


def _pass_interval(interval: float, ahead_seconds: float | None) -> float:
    """How long after a pass began the next one may begin: ``interval``, or ``AHEAD_SHARE`` of the
    time the pools last (``ahead_seconds``, from the pass) where that is longer, at most
    ``MAX_PASS_INTERVAL_SECONDS``."""
    if ahead_seconds is None:
        return interval
    return min(max(interval, AHEAD_SHARE * ahead_seconds), max(interval, MAX_PASS_INTERVAL_SECONDS))


def _has_new_answers(conn: Redis, study_id: str) -> bool:
    with conn.pipeline(transaction=False) as pipe:
        pipe.get(keys.cursor(study_id))
        pipe.xrevrange(keys.answers(study_id), count=1)
        cursor, last = pipe.execute()
    return bool(last) and last[0][0] != (cursor or b"0-0")
