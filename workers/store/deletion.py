"""Removing data for good: a whole study, or one rater's answers (a participant who withdraws).

Forgetting a rater takes their answers out of the answer log and every record kept about them
(statistics, sessions, held questions), counts them out of the study's counters and writes one audit
line (when, by whom, the SHA-256 of the rater id, how many answers left); the engines are then rebuilt
from what remains (``queue.enqueue_rebuild``), so nothing learned from the rater is left either. Deleting
a study removes every key of it and its queued jobs, and records one line in ``keys.deleted_studies``.
Must never import Flask or the engine (a web process calls these).
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import redis
from rq.job import Job

from workers.store import keys
from workers.store.queue import REBUILD_JOB, UPDATE_JOB, enqueue_rebuild, get_queue
from workers.store.studies import StudyError, get_study

if TYPE_CHECKING:
    from redis import Redis

#: The job that sweeps a deleted study's keys again once no worker holds its update lock (a pass that was
#: running when the study was deleted may write a last checkpoint or summary).
PURGE_JOB = "workers.jobs.deletion.purge_study_job"
#: Answers read from the log per round trip while looking for a rater's answers.
CHUNK = 5000


def rater_digest(rater: str) -> str:
    """What an audit line keeps of a forgotten rater: the SHA-256 of their id (hex). Whoever knows the id
    can check the line names them; the line itself holds no recruitment id."""
    return hashlib.sha256(rater.encode()).hexdigest()


@dataclass(frozen=True)
class AuditLine:
    """One removal from a study's data, as ``keys.audit`` and a backup's ``removed`` records hold it."""

    action: str  # "forget_rater"
    at: float  # unix seconds
    by: str  # the researcher account, or "cli:<user>" for the command line
    rater_sha256: str
    answers: int  # answers that left the log

    @property
    def when(self) -> str:
        """``at`` as UTC date and time, as the dashboard shows it."""
        return datetime.fromtimestamp(self.at, UTC).strftime("%Y-%m-%d %H:%M:%S")

    def to_fields(self) -> dict[str, str]:
        return {k: str(v) for k, v in asdict(self).items()}

    @classmethod
    def from_fields(cls, fields: dict[str, str]) -> AuditLine:
        return cls(action=fields["action"], at=float(fields["at"]), by=fields["by"],
                   rater_sha256=fields["rater_sha256"], answers=int(fields["answers"]))


def audit_lines(conn: Redis, study_id: str) -> list[tuple[str, AuditLine]]:
    """The study's audit lines, oldest first, with their stream ids."""
    return [(entry_id.decode(), AuditLine.from_fields({k.decode(): v.decode() for k, v in fields.items()}))
            for entry_id, fields in conn.xrange(keys.audit(study_id))]


@dataclass(frozen=True)
class ForgetReport:
    study_id: str
    rater: str
    answers_removed: int
    audit_id: str
    rebuild_job: str | None


def _rater_answers(conn: Redis, study_id: str, rater: str, after: str = "-") -> tuple[list[tuple[str, dict]], str]:
    """(the rater's log entries after ``after`` as (id, fields), the id of the last entry read)."""
    found, last, start = [], after, after
    while True:
        entries = conn.xrange(keys.answers(study_id), min=start, count=CHUNK)
        for entry_id, fields in entries:
            if fields.get(b"rater", b"").decode() == rater:
                found.append((entry_id.decode(), {k.decode(): v.decode() for k, v in fields.items()}))
        if entries:
            last = entries[-1][0].decode()
            start = f"({last}"
        if len(entries) < CHUNK:
            return found, last


def _drop_zero_fields(conn: Redis, key: str, fields: set[str]) -> None:
    """Remove hash fields a decrement left at zero or below, unless something counted them up meanwhile."""
    if not fields:
        return
    with conn.pipeline(transaction=True) as pipe:
        while True:
            try:
                pipe.watch(key)
                values = pipe.hmget(key, sorted(fields))
                empty = [f for f, v in zip(sorted(fields), values, strict=True) if v is not None and int(v) <= 0]
                pipe.multi()
                if empty:
                    pipe.hdel(key, *empty)
                pipe.execute()
                return
            except redis.WatchError:  # a counter moved meanwhile: read again
                continue


def forget_rater(conn: Redis, study_id: str, rater: str, by: str, rebuild: bool = True) -> ForgetReport:
    """Take ``rater``'s answers and records out of the study, write the audit line, and (``rebuild``)
    queue the engines' rebuild from what remains. StudyError when the study knows no such rater.

    The rater's browser session and held questions go first, so an answer of theirs still on its way is
    refused; the log is then read again after the deletion for one that got in before."""
    get_study(conn, study_id)
    stats_fields = [f.decode() for f, _ in conn.hscan_iter(keys.rater_stats(study_id), match=f"{rater}:*")]
    stats_fields = [f for f in stats_fields if keys.split_rater_field(f)[0] == rater]
    known = conn.sismember(keys.raters(study_id), rater) or stats_fields or \
        conn.hexists(keys.rater_sessions(study_id), rater)
    if not known:
        raise StudyError(f"study {study_id} has no rater '{rater}' (no answers, no record); check the id")
    with conn.pipeline(transaction=True) as pipe:  # no more answers from this rater's session
        pipe.hdel(keys.rater_sessions(study_id), rater)
        pipe.delete(keys.outstanding(study_id, rater), keys.repeats(study_id, rater), keys.rate_rater(study_id, rater))
        pipe.zrem(keys.active_raters(study_id), rater)
        pipe.execute()
    removed = 0
    counters_touched: set[str] = set()
    minutes_touched: set[str] = set()
    after = "-"
    while True:
        found, after = _rater_answers(conn, study_id, rater, after)
        if not found and removed:
            break
        ids = [entry_id for entry_id, _ in found]
        per_algorithm: dict[str, int] = {}
        per_minute: dict[str, int] = {}
        for _, fields in found:
            counter = keys.counter_field("answers", fields.get("algorithm", ""))
            per_algorithm[counter] = per_algorithm.get(counter, 0) + 1
            minute = str(int(float(fields.get("answered_at") or 0) // 60))
            per_minute[minute] = per_minute.get(minute, 0) + 1
        with conn.pipeline(transaction=True) as pipe:
            for start in range(0, len(ids), 1000):
                pipe.xdel(keys.answers(study_id), *ids[start:start + 1000])
                pipe.hdel(keys.poisoned(study_id), *ids[start:start + 1000])
            qids = [fields["qid"] for _, fields in found if fields.get("qid")]
            for start in range(0, len(qids), 1000):
                pipe.delete(*[keys.used_token(study_id, q) for q in qids[start:start + 1000]])
            for counter, n in per_algorithm.items():
                pipe.hincrby(keys.counters(study_id), counter, -n)
            for minute, n in per_minute.items():
                pipe.hincrby(keys.answers_per_minute(study_id), minute, -n)
            pipe.execute()
        removed += len(found)
        counters_touched |= set(per_algorithm)
        minutes_touched |= set(per_minute)
        if not found:
            break
    # an answer accepted while the first read ran holds fresh statistics: read the fields again
    stats_fields = {f.decode() for f, _ in conn.hscan_iter(keys.rater_stats(study_id), match=f"{rater}:*")}
    stats_fields = [f for f in stats_fields if keys.split_rater_field(f)[0] == rater]
    line = AuditLine(action="forget_rater", at=time.time(), by=by, rater_sha256=rater_digest(rater), answers=removed)
    with conn.pipeline(transaction=True) as pipe:
        if stats_fields:
            pipe.hdel(keys.rater_stats(study_id), *stats_fields)
        pipe.srem(keys.raters(study_id), rater)
        pipe.srem(keys.excluded_raters(study_id), rater)
        pipe.xadd(keys.audit(study_id), line.to_fields())
        audit_id = pipe.execute()[-1].decode()
    _drop_zero_fields(conn, keys.counters(study_id), counters_touched)
    _drop_zero_fields(conn, keys.answers_per_minute(study_id), minutes_touched)
    job = enqueue_rebuild(conn, study_id, [], reason=f"forget {audit_id}") if rebuild else None
    return ForgetReport(study_id, rater, removed, audit_id, job)


@dataclass(frozen=True)
class DeletionReport:
    study_id: str
    name: str
    items: int
    answers: int
    raters: int
    keys_deleted: int
    jobs_cancelled: int
    tokens_revoked: int = 0


def _study_jobs(conn: Redis, study_id: str) -> list[Job]:
    """Queued jobs that work on the study (updates, rebuilds, purges)."""
    out = []
    for job in get_queue(conn).get_jobs():
        if job.func_name in (UPDATE_JOB, REBUILD_JOB, PURGE_JOB) and job.args and job.args[0] == study_id:
            out.append(job)
    return out


def purge_study_keys(conn: Redis, study_id: str) -> int:
    """Delete every key of the study but its update lock (released by whoever holds it); returns how many."""
    lock = keys.update_lock(study_id)
    doomed = [k for k in conn.scan_iter(match=keys.study_pattern(study_id), count=1000) if k.decode() != lock]
    deleted = 0
    for start in range(0, len(doomed), 1000):
        deleted += conn.delete(*doomed[start:start + 1000])
    return deleted


def revoke_study_tokens(conn: Redis, study_id: str) -> int:
    """Delete the researcher API tokens made for this one study (``webapp.api_tokens``' records): a
    study made later under the same id must not be readable with them. Returns how many."""
    ids = [t.decode() for t in conn.smembers(keys.api_tokens())]
    with conn.pipeline(transaction=False) as pipe:
        for token_id in ids:
            pipe.hget(keys.api_token(token_id), "study")
        studies = pipe.execute()
    doomed = [t for t, s in zip(ids, studies, strict=True) if s is not None and s.decode() == study_id]
    if doomed:
        with conn.pipeline() as pipe:
            pipe.delete(*(keys.api_token(t) for t in doomed))
            pipe.srem(keys.api_tokens(), *doomed)
            pipe.execute()
    return len(doomed)


def delete_study(conn: Redis, study_id: str, by: str) -> DeletionReport:
    """Delete the study: it leaves the list and every page at once, its queued jobs are cancelled, its
    keys (items, media, answer log, engine states, models, raters, pools ...) deleted, and one line in
    ``keys.deleted_studies`` records it. A worker sweeps its keys once more when the pass that may be
    running for it has ended (``PURGE_JOB``), and the API tokens made for it alone are revoked. StudyNotFound
    for an unknown id."""
    study = get_study(conn, study_id)
    with conn.pipeline(transaction=True) as pipe:
        pipe.xlen(keys.answers(study_id))
        pipe.scard(keys.raters(study_id))
        pipe.srem(keys.studies(), study_id)
        pipe.delete(keys.study(study_id))  # from here on the study is unknown to every process
        answers, raters, _, _ = pipe.execute()
    conn.xadd(keys.deleted_studies(), {"study": study_id, "name": study.config.name, "at": repr(time.time()),
                                       "by": by, "items": study.n_items, "answers": answers, "raters": raters,
                                       "config": json.dumps(study.config.to_dict(), sort_keys=True)})
    jobs = _study_jobs(conn, study_id)
    for job in jobs:
        job.cancel()
        job.delete()
    deleted = purge_study_keys(conn, study_id) + 1
    revoked = revoke_study_tokens(conn, study_id)
    get_queue(conn).enqueue(PURGE_JOB, study_id, job_timeout=600, result_ttl=0, failure_ttl=7 * 86400)
    return DeletionReport(study_id, study.config.name, study.n_items, answers, raters, deleted, len(jobs), revoked)


def deleted_studies(conn: Redis) -> list[dict[str, str]]:
    """The audit lines of deleted studies, oldest first."""
    return [{"id": entry_id.decode(), **{k.decode(): v.decode() for k, v in fields.items()}}
            for entry_id, fields in conn.xrange(keys.deleted_studies())]
