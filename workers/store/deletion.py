"""Removing data for good: a whole study, or one rater's answers (a participant who withdraws).

Forgetting a rater records them as forgotten (digests only: their session is refused from then on), takes
their answers out of the answer log (and what XDEL leaves of them, ``compact_log``) and every record kept
about them (statistics, sessions, held questions), counts them out of the study's counters, marks the models
trained on the study and writes one audit line (when, by whom, the SHA-256 of the rater id, how many answers
left); the engines are then rebuilt from what remains (``queue.enqueue_rebuild``), so nothing learned from
the rater is left either, and Redis's files are rewritten (``persistence.rewrite_files``). Deleting a study
removes every key of it and its queued jobs, and records one line in ``keys.deleted_studies``. Must never
import Flask or the engine (a web process calls these).
"""
from __future__ import annotations

import hashlib
import json
import secrets
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import redis
from rq.job import Job

from workers.store import keys
from workers.store.packages import drop_packages
from workers.store.queue import REBUILD_JOB, REBUILD_STATUS_FIELD, UPDATE_JOB, enqueue_rebuild, get_queue
from workers.store.studies import StudyError, get_study

if TYPE_CHECKING:
    from collections.abc import Iterable

    from redis import Redis

#: The job that sweeps a deleted study's keys again once no worker holds its update lock (a pass that was
#: running when the study was deleted may write a last checkpoint or summary).
PURGE_JOB = "workers.jobs.deletion.purge_study_job"
#: The job that rewrites Redis's files once the rebuild after a forget from the dashboard has run.
REWRITE_JOB = "workers.jobs.deletion.rewrite_files_job"
#: The job that removes a rater's answers and records after a forget from the dashboard (``request_forget``):
#: reading and copying the whole answer log takes seconds at a million answers, too long for a web request.
FORGET_JOB = "workers.jobs.deletion.forget_rater_job"
#: Answers read from the log per round trip while looking for a rater's answers.
CHUNK = 5000


def rater_digest(rater: str) -> str:
    """What an audit line keeps of a forgotten rater: the SHA-256 of their id (hex). Whoever knows the id
    can check the line names them; the line itself holds no recruitment id."""
    return hashlib.sha256(rater.encode()).hexdigest()


def study_rater_digest(study_id: str, rater: str) -> str:
    """What ``keys.forgotten_anywhere`` keeps of a rater forgotten from a study: the SHA-256 of
    ``<study id>:<rater id>`` (a digest that does not link one person's studies to each other)."""
    return hashlib.sha256(f"{study_id}:{rater}".encode()).hexdigest()


def rater_forgotten(conn: Redis, study_id: str, rater: str) -> bool:
    """Whether ``rater`` was forgotten from the study: their browser session is refused."""
    return bool(conn.sismember(keys.forgotten_raters(study_id), rater_digest(rater)))


def forgotten_in(conn: Redis, study_ids: Iterable[str], raters: Iterable[str]) -> set[str]:
    """Those of ``raters`` forgotten from any of ``study_ids`` on this Redis, the study still here or deleted
    (``keys.forgotten_anywhere``, or the study's own set)."""
    raters, study_ids = sorted(set(raters)), sorted(set(study_ids))
    with conn.pipeline(transaction=False) as pipe:
        for rater in raters:
            for study_id in study_ids:
                pipe.sismember(keys.forgotten_anywhere(), study_rater_digest(study_id, rater))
                pipe.sismember(keys.forgotten_raters(study_id), rater_digest(rater))
        found = pipe.execute()
    per_rater = 2 * len(study_ids)
    return {rater for i, rater in enumerate(raters) if any(found[i * per_rater:(i + 1) * per_rater])}


def mark_models(conn: Redis, study_id: str, at: float) -> list[str]:
    """Mark every model trained on the study (``proxima train``) as trained with a rater since forgotten:
    its ``meta`` and its JSON export gain ``forgotten_raters`` (how many) and ``forgotten_at``; returns the
    models' names. A new ``proxima train`` replaces the model and its mark.

    Marked, not retrained: a model is a summary of many raters' answers, not a copy of anyone's; retraining
    takes the researcher's choices (held-out check, parameters) and time, so the researcher decides."""
    marked = []
    for key in sorted(conn.scan_iter(match=keys.model(study_id, "*"), count=1000)):
        meta_raw, export_raw = conn.hmget(key, ["meta", "export"])
        if meta_raw is None:
            continue
        fields = {}
        for name, raw in (("meta", meta_raw), ("export", export_raw)):
            if raw is not None:
                doc = json.loads(raw)
                doc["forgotten_raters"] = int(doc.get("forgotten_raters", 0)) + 1
                doc["forgotten_at"] = at
                fields[name] = json.dumps(doc)
        conn.hset(key, mapping=fields)
        marked.append(json.loads(fields["meta"]).get("model") or key.decode().rsplit(":", 1)[-1])
    return marked


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
    #: models trained on the study before the rater was forgotten, now marked so (``mark_models``)
    models_marked: tuple[str, ...] = ()


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


def compact_log(conn: Redis, study_id: str, chunk: int = CHUNK) -> int:
    """Copy the answer log without what XDEL left of deleted entries, and put the copy in its place.

    XDEL only marks a stream entry deleted: its fields stay in the stream's memory, and so in every RDB
    snapshot and AOF rewrite, until its whole node is gone. The copy keeps every remaining entry with its id
    and the log's last id (XSETID), so cursors and new answers go on as before. It is made in chunks while
    answers keep arriving, then finished in one MULTI guarded by WATCH on the log: an answer (or another
    deletion) during the last step makes it try that step again. Returns the entries copied."""
    log, copy = keys.answers(study_id), keys.answers_compacting(study_id)
    while True:
        conn.delete(copy)
        copied, after = 0, "-"
        while True:  # the bulk, while raters may go on answering
            entries = conn.xrange(log, min=after, count=chunk)
            if entries:
                with conn.pipeline(transaction=False) as pipe:
                    for entry_id, fields in entries:
                        pipe.xadd(copy, fields, id=entry_id)
                    pipe.execute()
                copied += len(entries)
                after = f"({entries[-1][0].decode()}"
            if len(entries) < chunk:
                break
        with conn.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(log)
                rest = pipe.xrange(log, min=after)
                if pipe.xlen(log) != copied + len(rest):  # entries deleted meanwhile are in the copy: start again
                    pipe.unwatch()
                    continue
                last_id = pipe.xinfo_stream(log)["last-generated-id"] if copied + len(rest) else None
                pipe.multi()
                for entry_id, fields in rest:
                    pipe.xadd(copy, fields, id=entry_id)
                if last_id is None:
                    pipe.delete(log, copy)
                else:
                    pipe.execute_command("XSETID", copy, last_id)
                    pipe.rename(copy, log)
                pipe.execute()
                return copied + len(rest)
            except redis.WatchError:
                continue


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


class AlreadyForgotten(StudyError):
    """The rater was forgotten from the study before: nothing of them is left in the study's records (what a
    second ``forget-rater`` can still do is rewrite Redis's files and name the backups holding them)."""


def forget_rater(conn: Redis, study_id: str, rater: str, by: str, rebuild: bool = True) -> ForgetReport:
    """Take ``rater``'s answers and records out of the study, write the audit line, mark the models trained
    on the study (``mark_models``) and (``rebuild``) queue the engines' rebuild from what remains. StudyError
    when the study knows no such rater (or forgot them already).

    The rater is first recorded as forgotten (the SHA-256 of their id, ``keys.forgotten_raters``): from then
    on the study guard refuses every request of theirs, so no answer of theirs is stored after this and no
    fresh allowance of questions is opened; their browser session and held questions go too. The log is
    then read again after the deletion for an answer that got in before. Redis's own files still hold
    copies until they are rewritten (``persistence.rewrite_files``)."""
    _refuse(conn, study_id, rater)
    return _remove(conn, study_id, rater, by, rebuild)


def _refuse(conn: Redis, study_id: str, rater: str) -> None:
    """Check that the study knows ``rater`` (StudyError, AlreadyForgotten) and record them as forgotten: no
    more answers from their session, ever."""
    get_study(conn, study_id)
    stats_fields = [f.decode() for f, _ in conn.hscan_iter(keys.rater_stats(study_id), match=f"{rater}:*")]
    stats_fields = [f for f in stats_fields if keys.split_rater_field(f)[0] == rater]
    known = conn.sismember(keys.raters(study_id), rater) or stats_fields or \
        conn.hexists(keys.rater_sessions(study_id), rater) or conn.exists(keys.outstanding(study_id, rater))
    if not known:
        if rater_forgotten(conn, study_id, rater):
            raise AlreadyForgotten(f"rater '{rater}' was already forgotten from study {study_id}; nothing of them "
                                   "is left in the study")
        raise StudyError(f"study {study_id} has no rater '{rater}' (no answers, no record); check the id")
    with conn.pipeline(transaction=True) as pipe:  # no more answers from this rater's session, ever
        pipe.sadd(keys.forgotten_raters(study_id), rater_digest(rater))
        pipe.sadd(keys.forgotten_anywhere(), study_rater_digest(study_id, rater))
        pipe.hdel(keys.rater_sessions(study_id), rater)
        pipe.delete(keys.outstanding(study_id, rater), keys.repeats(study_id, rater), keys.rate_rater(study_id, rater))
        pipe.zrem(keys.active_raters(study_id), rater)
        pipe.execute()


def _remove(conn: Redis, study_id: str, rater: str, by: str, rebuild: bool) -> ForgetReport:
    """What ``forget_rater`` does once the rater is refused: the slow part (the whole log is read, and copied
    when answers left it)."""
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
        audit_at = len(pipe)
        drop_packages(conn, study_id, pipeline=pipe)  # built data packages may hold the rater's answers and id
        audit_id = pipe.execute()[audit_at - 1].decode()
    if removed:
        compact_log(conn, study_id)  # what XDEL keeps of their answers goes too
    _drop_zero_fields(conn, keys.counters(study_id), counters_touched)
    _drop_zero_fields(conn, keys.answers_per_minute(study_id), minutes_touched)
    marked = mark_models(conn, study_id, line.at)
    job = enqueue_rebuild(conn, study_id, [], reason=f"forget {audit_id}") if rebuild else None
    return ForgetReport(study_id, rater, removed, audit_id, job, tuple(marked))


def request_forget(conn: Redis, study_id: str, rater: str, by: str) -> str:
    """The dashboard's forget: check and refuse the rater at once (as ``forget_rater`` does: StudyError,
    AlreadyForgotten), and queue the rest as FORGET_JOB (``run_forget_request``), whose progress the study's
    rebuild status shows (the Raters tab). Returns the job id. The rater's id waits for the job in
    ``keys.forget_requests``, not in the job's arguments: RQ keeps those in Redis after the job ran."""
    _refuse(conn, study_id, rater)
    request_id = secrets.token_hex(8)
    job_id = f"forget-{study_id}-{request_id}"
    conn.hset(keys.forget_requests(study_id), request_id, json.dumps({"rater": rater, "by": by}))
    conn.hset(keys.engine_stats(study_id), REBUILD_STATUS_FIELD, json.dumps({
        "state": "queued", "action": "forget", "job_id": job_id, "raters": [], "queued_at": time.time()}))
    get_queue(conn).enqueue(FORGET_JOB, study_id, request_id, job_id=job_id, job_timeout=3600, result_ttl=86400,
                            failure_ttl=7 * 86400)
    return job_id


def run_forget_request(conn: Redis, study_id: str, request_id: str) -> dict:
    """FORGET_JOB's work: remove the rater of the request (``forget_rater`` once they are refused), queue the
    engines' rebuild and after it the rewrite of Redis's files, and put what was done in the study's rebuild
    status (``forgotten_answers``, ``models_marked``), where the Raters tab shows it; the request goes. Returns
    the report without the rater's id (RQ keeps a job's result)."""
    raw = conn.hget(keys.forget_requests(study_id), request_id)
    if raw is None:
        return {"answers_removed": 0, "note": "no such request (already run)"}
    request = json.loads(raw)
    report = _remove(conn, study_id, request["rater"], request["by"], rebuild=True)
    conn.hdel(keys.forget_requests(study_id), request_id)
    rewrite = enqueue_rewrite(conn, after=report.rebuild_job)
    with conn.pipeline(transaction=True) as pipe:
        while True:
            try:
                pipe.watch(keys.engine_stats(study_id))
                status = json.loads(pipe.hget(keys.engine_stats(study_id), REBUILD_STATUS_FIELD) or "{}")
                status.update(forgotten_answers=report.answers_removed, models_marked=list(report.models_marked))
                pipe.multi()
                pipe.hset(keys.engine_stats(study_id), REBUILD_STATUS_FIELD, json.dumps(status))
                pipe.execute()
                break
            except redis.WatchError:  # the rebuild moved its status on meanwhile: read it again
                continue
    return {"answers_removed": report.answers_removed, "audit_id": report.audit_id,
            "models_marked": list(report.models_marked), "rebuild_job": report.rebuild_job, "rewrite_job": rewrite}


def enqueue_rewrite(conn: Redis, after: str | None = None) -> str:
    """Queue the rewrite of Redis's files (``REWRITE_JOB``), after the job ``after`` (a rebuild) has run;
    returns its job id."""
    job = get_queue(conn).enqueue(REWRITE_JOB, depends_on=after, job_timeout=3600, result_ttl=86400,
                                  failure_ttl=7 * 86400)
    return job.id


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
