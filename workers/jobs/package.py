"""The RQ job that builds a study's data package (``workers.store.packages.request_build`` enqueues it): writes
the zip with ``workers.results.package``, reports the answers written as it goes, and keeps the zip in Redis
(``keys.package_zip``) with the fingerprint of the data it was built from. Failures are kept in words.
"""
from __future__ import annotations

import tempfile
import time
from typing import TYPE_CHECKING

import redis
from rq import get_current_job

from workers.results.package import PackageError, write_package_zip
from workers.store import keys
from workers.store.packages import (
    CHUNK_BYTES,
    DEFAULT_TOTAL_BYTES,
    PACKAGE_TTL_SECONDS,
    data_fingerprint,
    make_room,
    note_kept,
    size_text,
    variant,
)
from workers.store.studies import StudyNotFound

if TYPE_CHECKING:
    from redis import Redis


class PackageTooLarge(PackageError):
    """A zip larger than the server keeps."""


def _set_if_mine(conn: Redis, key: str, job_id: str, fields: dict) -> None:
    """Update the build's status unless it was dropped (a withdrawal) or taken over by another build."""
    if (conn.hget(key, "job_id") or b"").decode() == job_id:
        conn.hset(key, mapping=fields)


def build(conn: Redis, study_id: str, rater_ids: bool, job_id: str, status: dict | None = None,
          max_bytes: int | None = None, total_bytes: int | None = None) -> dict:
    """Build the package of the build ``job_id`` (the one the status names; a build superseded meanwhile
    writes nothing) and store it, first dropping the oldest other kept zips if all of them together would
    pass ``total_bytes``; returns the final status fields."""
    key = keys.package_status(study_id, variant(rater_ids))
    if (conn.hget(key, "job_id") or b"").decode() != job_id:
        return {"state": "superseded"}
    fingerprint = data_fingerprint(conn, study_id)  # before reading: an answer arriving meanwhile makes it stale
    _set_if_mine(conn, key, job_id, {"state": "running", "started_at": time.time(), "error": ""})

    def progress(written: int, total: int) -> None:
        _set_if_mine(conn, key, job_id, {"written": written, "total": total})

    try:
        with tempfile.SpooledTemporaryFile(max_size=32 * 1024 * 1024) as out:
            write_package_zip(conn, study_id, out, rater_ids=rater_ids, status=status, progress=progress)
            size = out.tell()
            if max_bytes is not None and size > max_bytes:
                raise PackageTooLarge(
                    f"the zip is {size_text(size)}, more than the {size_text(max_bytes)} the server keeps "
                    "(PROXIMA_PACKAGE_MAX_BYTES); write it with 'proxima export STUDY --package -o FILE.zip' "
                    "(or leave the media files out with --no-media)")
            out.seek(0)
            make_room(conn, study_id, rater_ids, size, DEFAULT_TOTAL_BYTES if total_bytes is None else total_bytes)
            done = {"state": "finished", "size": size, "fingerprint": fingerprint, "finished_at": time.time()}
            _store(conn, study_id, rater_ids, job_id, out, done)
            return done
    except StudyNotFound:
        failed = {"state": "failed", "error": "the study was deleted"}
    except PackageError as exc:
        failed = {"state": "failed", "error": str(exc)}
    except Exception as exc:
        _set_if_mine(conn, key, job_id, {"state": "failed",
                                         "error": f"an unexpected error ({type(exc).__name__}: {exc})"})
        raise  # the worker's log keeps the traceback
    _set_if_mine(conn, key, job_id, failed)
    return failed


def _store(conn: Redis, study_id: str, rater_ids: bool, job_id: str, data, done: dict) -> None:
    """The zip and its status in one transaction, unless another build took over meanwhile."""
    status_key, zip_key = keys.package_status(study_id, variant(rater_ids)), keys.package_zip(study_id,
                                                                                               variant(rater_ids))
    with conn.pipeline() as pipe:
        try:
            pipe.watch(status_key)
            if (pipe.hget(status_key, "job_id") or b"").decode() != job_id:
                pipe.unwatch()
                return
            pipe.multi()
            pipe.delete(zip_key)
            while chunk := data.read(CHUNK_BYTES):
                pipe.rpush(zip_key, chunk)
            pipe.expire(zip_key, PACKAGE_TTL_SECONDS)
            pipe.hset(status_key, mapping=done)
            note_kept(pipe, study_id, rater_ids, done["finished_at"])
            pipe.execute()
        except redis.WatchError:
            pass  # a newer build owns the status now


def build_package(study_id: str, rater_ids: bool, job_id: str, status: dict | None = None,
                  max_bytes: int | None = None, total_bytes: int | None = None) -> dict:
    """RQ entry point (enqueued by ``workers.store.packages.request_build``)."""
    return build(get_current_job().connection, study_id, rater_ids, job_id, status, max_bytes, total_bytes)
