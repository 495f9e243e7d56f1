"""The steps of an update job besides its lock and its passes, declared once in the order they run, each with
its moment: before each pass, after each pass, when the job settles and when it ends. ``run`` runs a moment's
steps: ``update_pass.apply_new_answers`` around each pass, ``update.drain_study`` at the job's end. Must never
import Flask.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from workers.jobs import checkpoints, fits, learned_split, rater_checks, summary
from workers.store import health

if TYPE_CHECKING:
    from collections.abc import Callable

    from redis import Redis


#: The moments of a step. Before each pass and after it (the pass's report at hand) ...
BEFORE_PASS = "before_pass"
AFTER_PASS = "after_pass"
#: ... when the job's passes are done and no newer job takes over (a newer answer queued the next job, which
#: settles after its own passes, so none of them waits here) ...
SETTLE = "settle"
#: ... and when the job ends, however it ends (a failed pass too): what its passes started is put in place.
JOB_END = "job_end"
MOMENTS = (BEFORE_PASS, AFTER_PASS, SETTLE, JOB_END)


@dataclass
class UpdateJob:
    """What the steps read of the job they run in: the study, the report of the pass just run (after a
    pass), and whether the job settles (ends with no newer job to hand over to: ``SETTLE``)."""

    conn: Redis
    study_id: str
    settling: bool = True
    last_pass: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Step:
    """One step: what it does, when (one of ``MOMENTS``) and the function doing it (given the :class:`UpdateJob`)."""

    name: str
    when: str
    run: Callable[[UpdateJob], None]

    def __post_init__(self) -> None:
        if self.when not in MOMENTS:
            raise ValueError(f"step {self.name!r}: unknown moment {self.when!r}, not one of {MOMENTS}")


def _heal_fits(job: UpdateJob) -> None:
    # a fit or check process that died is replaced before the pass hands it anything
    for event in fits.heal():
        health.record_incident(job.conn, f"the worker's {event['what']} died",
                               f"pid {event['pid']} {event['how']}; the worker started a new one and its "
                               f"work is done again", now=event["at"])


def _put_written_checkpoints_in_place(job: UpdateJob) -> None:
    checkpoints.settle_checkpoints(job.conn, job.study_id, wait=False)


def _start_checkpoints(job: UpdateJob) -> None:
    checkpoints.start_checkpoints(job.conn, job.study_id, job.last_pass["saved"])


def _check_raters(job: UpdateJob) -> None:
    rater_checks.after_pass(job.conn, job.study_id, job.last_pass)


def _learned_split(job: UpdateJob) -> None:
    if job.last_pass.get("applied"):
        learned_split.set_split(job.conn, job.study_id)  # a study of fixed shares: nothing


def _last_answer_check(job: UpdateJob) -> None:
    rater_checks.settle(job.conn, job.study_id)  # the study's last answers get their answer check too


def _settle_checkpoints(job: UpdateJob) -> None:
    # a job that hands over leaves a checkpoint still being written to the next job's passes (they put it in
    # place when it is done; the journal holds everything meanwhile): waiting for it here held the passes up
    # for most of a second at 50,000 items
    checkpoints.settle_checkpoints(job.conn, job.study_id, wait=job.settling)


def _write_summary(job: UpdateJob) -> None:
    if job.settling:
        summary.write_summary(job.conn, job.study_id)  # if the last pass left it out


#: The steps, in the order they run at each moment.
STEPS = (
    Step("replace a dead fit process", BEFORE_PASS, _heal_fits),
    Step("put written checkpoints in place", BEFORE_PASS, _put_written_checkpoints_in_place),
    Step("start checkpoints of the states the pass saved", AFTER_PASS, _start_checkpoints),
    Step("check the raters whose answers the pass applied", AFTER_PASS, _check_raters),
    Step("let the pooled learner set the split of ratings and triplets", AFTER_PASS, _learned_split),
    Step("check the raters' last answers", SETTLE, _last_answer_check),
    Step("put the job's checkpoints in place", JOB_END, _settle_checkpoints),
    Step("write the summary the last pass left out", JOB_END, _write_summary),
)


def run(when: str, job: UpdateJob) -> None:
    """Run the steps of moment ``when``, in their order."""
    for step in STEPS:
        if step.when == when:
            step.run(job)
