"""The data package built by a background job: asking for a build (one at a time per study and variant; a
second request while one runs joins it), its progress, and the built zip kept in Redis until the study's
data change. The web process enqueues the job by dotted path (``workers.jobs.package.build_package``) and
never imports the numpy-heavy writer. Must never import Flask or the engine.
"""
from __future__ import annotations

import hashlib
import time
import uuid
from typing import TYPE_CHECKING

import redis
from rq.exceptions import NoSuchJobError
from rq.job import Dependency, Job, JobStatus

from workers.store import keys
from workers.store.queue import get_queue

if TYPE_CHECKING:
    from redis import Redis

PACKAGE_JOB = "workers.jobs.package.build_package"
#: The two packages a study can have: pseudonymous rater ids (the one to deposit) or recruitment ids.
VARIANTS = {False: "pseudonymous", True: "rater-ids"}
#: A built zip is dropped this long after it was built, even if nothing changed (Redis is no archive).
PACKAGE_TTL_SECONDS = 24 * 3600
#: Largest zip kept in Redis (``PROXIMA_PACKAGE_MAX_BYTES``); a larger study's package comes from the CLI.
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
#: All built zips of every study kept in Redis together at most (``PROXIMA_PACKAGES_TOTAL_BYTES``): a new zip
#: that would pass it drops the oldest other studies' zips first (they say so and are built again on request).
DEFAULT_TOTAL_BYTES = 1024 * 1024 * 1024
#: The zip is stored in list entries of at most this many bytes.
CHUNK_BYTES = 1024 * 1024
#: A build that has not finished.
ACTIVE = ("queued", "running")
#: A built zip that can be downloaded: current, or built before the data last changed (until a rebuild starts).
BUILT = ("finished", "stale")


def variant(rater_ids: bool) -> str:
    return VARIANTS[bool(rater_ids)]


def data_fingerprint(conn: Redis, study_id: str) -> str:
    """A digest of what a package is made of: the answer log (length and last id), the answers the learners
    have applied (the cursor), the excluded raters, the withdrawals (audit lines), the items and the study's
    config and status. Equal fingerprints: a package built then is the package now."""
    with conn.pipeline(transaction=False) as pipe:
        pipe.xlen(keys.answers(study_id))
        pipe.xrevrange(keys.answers(study_id), count=1)
        pipe.get(keys.cursor(study_id))
        pipe.smembers(keys.excluded_raters(study_id))
        pipe.xlen(keys.audit(study_id))
        pipe.llen(keys.items(study_id))
        pipe.hmget(keys.study(study_id), "config", "status")
        length, last, cursor, excluded, audit, items, study = pipe.execute()
    parts = [str(length), last[0][0].decode() if last else "", (cursor or b"").decode(),
             ",".join(sorted(r.decode() for r in excluded)), str(audit), str(items),
             *((v or b"").decode() for v in study)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]


def _text(raw: dict, name: str) -> str:
    return (raw.get(name.encode()) or b"").decode()


def _number(raw: dict, name: str) -> int:
    try:
        return int(float(_text(raw, name) or 0))
    except ValueError:
        return 0


def _job_ended(conn: Redis, job_id: str) -> bool:
    """True when the RQ job of a build that says it is queued or running is gone, failed or stopped (its
    worker was killed, or the job was cancelled): nothing will finish that build."""
    try:
        status = Job.fetch(job_id, connection=conn).get_status()
    except NoSuchJobError:
        return True
    return status in (JobStatus.FAILED, JobStatus.STOPPED, JobStatus.CANCELED, None)


def size_text(n_bytes: int) -> str:
    """A zip's size as people read it: "3.6 MiB", "14 KiB"."""
    if n_bytes >= 1024 * 1024:
        return f"{n_bytes / (1024 * 1024):.1f} MiB"
    return f"{max(1, round(n_bytes / 1024))} KiB"


def package_status(conn: Redis, study_id: str, rater_ids: bool = False) -> dict:
    """Where the study's package (of one variant) is: ``state`` none, queued, running, finished, stale (built
    before the data changed), dropped (to make room for newer packages), or failed; ``written`` and ``total``
    answers; ``size`` in bytes once built;
    ``error`` in words; ``message``: the state in a sentence a researcher reads."""
    raw = conn.hgetall(keys.package_status(study_id, variant(rater_ids)))
    state = _text(raw, "state") or "none"
    error = _text(raw, "error")
    if state in ACTIVE and _job_ended(conn, _text(raw, "job_id")):
        state, error = "failed", "the build stopped before it finished (the worker running it ended); build it again"
    written, total, size = _number(raw, "written"), _number(raw, "total"), _number(raw, "size")
    if state == "finished":
        if not conn.exists(keys.package_zip(study_id, variant(rater_ids))):
            state = "none"  # dropped after PACKAGE_TTL_SECONDS
        elif _text(raw, "fingerprint") != data_fingerprint(conn, study_id):
            state = "stale"
    built_at = float(_text(raw, "finished_at") or 0) or None
    message = {
        "none": "Not built yet.",
        "queued": "Waiting for a worker to start the build.",
        "running": f"Writing the package: {written:,} of {total:,} answers written.",
        "finished": f"Built ({size_text(size)}, {written:,} answers).",
        "stale": f"Built ({size_text(size)}, {written:,} answers) before the study's data last changed: build it again "
                 "to include the change.",
        "failed": f"The package could not be built: {error}.",
        "dropped": f"The package built before was dropped: {error}; build it again.",
    }[state]
    return {"state": state, "rater_ids": bool(rater_ids), "written": written, "total": total, "size": size,
            "error": error or None, "built_at": built_at, "message": message}


def request_build(conn: Redis, study_id: str, rater_ids: bool = False, status: dict | None = None,
                  max_bytes: int = DEFAULT_MAX_BYTES, total_bytes: int = DEFAULT_TOTAL_BYTES) -> dict:
    """Start building the study's package in an RQ job unless a build is queued or running (the request joins
    it) or the built one is still the study's data; returns ``package_status``. ``status`` is the dashboard's
    numbers now (kept as status.json). A build of the other variant runs first if one is under way."""
    key = keys.package_status(study_id, variant(rater_ids))
    with conn.pipeline() as pipe:
        while True:
            try:
                pipe.watch(key)
                current = package_status(conn, study_id, rater_ids)
                if current["state"] in (*ACTIVE, "finished"):
                    pipe.unwatch()
                    return current
                # a new id for every build: a build left running after its status was dropped never passes
                # for a new one
                job_id = f"proxima-package-{study_id}-{variant(rater_ids)}-{uuid.uuid4().hex[:12]}"
                pipe.multi()
                pipe.delete(key)
                pipe.hset(key, mapping={"state": "queued", "job_id": job_id, "written": 0,
                                        "total": conn.xlen(keys.answers(study_id)), "requested_at": time.time()})
                pipe.execute()
                break
            except redis.WatchError:
                continue
    other = conn.hgetall(keys.package_status(study_id, variant(not rater_ids)))
    after = _text(other, "job_id") if _text(other, "state") in ACTIVE else ""
    try:  # runs once the other build has ended, however it ended
        depends_on = Dependency(jobs=[Job.fetch(after, connection=conn)], allow_failure=True) if after else None
    except NoSuchJobError:
        depends_on = None
    get_queue(conn).enqueue(PACKAGE_JOB, study_id, bool(rater_ids), job_id, status, int(max_bytes), int(total_bytes),
                            job_id=job_id,
                            depends_on=depends_on, job_timeout=3600, result_ttl=3600, failure_ttl=7 * 86400)
    return package_status(conn, study_id, rater_ids)


def built_package(conn: Redis, study_id: str, rater_ids: bool = False) -> bytes | None:
    """The built zip (``package_status`` finished, or stale until a new build is asked for), else None. One
    read, so a build finishing meanwhile never mixes two zips."""
    if package_status(conn, study_id, rater_ids)["state"] not in BUILT:
        return None
    chunks = conn.lrange(keys.package_zip(study_id, variant(rater_ids)), 0, -1)
    return b"".join(chunks) if chunks else None


def drop_packages(conn: Redis, study_id: str, pipeline: redis.client.Pipeline | None = None) -> None:
    """Forget both built packages and the builds under way (a withdrawn rater's answers and recruitment id may
    be in them): a build that started before finds its status gone and stores nothing."""
    target = pipeline if pipeline is not None else conn
    target.delete(*(key(study_id, v) for v in VARIANTS.values() for key in (keys.package_zip, keys.package_status)))
    target.zrem(keys.packages_kept(), *(_kept_member(study_id, v) for v in VARIANTS.values()))


def _kept_member(study_id: str, variant_name: str) -> str:
    return f"{study_id}|{variant_name}"


def make_room(conn: Redis, study_id: str, rater_ids: bool, size: int, total_bytes: int) -> list[str]:
    """Before a zip of ``size`` bytes is kept for the study: drop the oldest other kept zips (of any study)
    until all of them together stay within ``total_bytes``. A dropped package's status says why. Returns the
    ``<study id>|<variant>`` of the dropped ones. Zips expired or dropped meanwhile leave the index here."""
    me = _kept_member(study_id, variant(rater_ids))
    kept = []
    for raw_member in conn.zrange(keys.packages_kept(), 0, -1):  # oldest first
        member = raw_member.decode()
        if member == me:
            continue
        other_study, _, other_variant = member.rpartition("|")
        if not conn.exists(keys.package_zip(other_study, other_variant)):
            conn.zrem(keys.packages_kept(), member)
            continue
        kept.append((member, other_study, other_variant,
                     _number(conn.hgetall(keys.package_status(other_study, other_variant)), "size")))
    total = size + sum(other_size for *_, other_size in kept)
    dropped = []
    for member, other_study, other_variant, other_size in kept:
        if total <= total_bytes:
            break
        status_key = keys.package_status(other_study, other_variant)
        with conn.pipeline() as pipe:
            pipe.delete(keys.package_zip(other_study, other_variant))
            pipe.hset(status_key, mapping={
                "state": "dropped",
                "error": f"it was the oldest kept when the server made room for a newer one (all packages together "
                         f"are kept within {size_text(total_bytes)}: PROXIMA_PACKAGES_TOTAL_BYTES)"})
            pipe.zrem(keys.packages_kept(), member)
            pipe.execute()
        total -= other_size
        dropped.append(member)
    return dropped


def note_kept(pipe: redis.client.Pipeline, study_id: str, rater_ids: bool, built_at: float) -> None:
    """Index the zip stored in ``pipe``'s transaction for ``make_room``."""
    pipe.zadd(keys.packages_kept(), {_kept_member(study_id, variant(rater_ids)): built_at})
