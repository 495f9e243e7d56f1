"""How an update pass saves a learner's state, and the checkpoints written beside the passes.

A pass queues what changed in a learner's state as one journal entry (the whole state where there is
no journal to append to: see ``engine_state``). Once a journal has grown enough, a thread of this
process writes a checkpoint of the state while passes go on; it is put in place between passes (at
the latest when the job ends), so a pool refill never waits for one. Must never import Flask.
"""
from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import redis

from workers.jobs import faults
from workers.jobs.learner_cache import Kept, cached_study
from workers.store import engine_state, keys

if TYPE_CHECKING:
    from redis import Redis
    from redis.client import Pipeline

    from workers.jobs.learners import Learner


#: A checkpoint of a learner's state is written once its journal has grown to this share of the
#: state's size, or to this many entries (what a reload replays stays below the state's own size).
CHECKPOINT_SHARE = 1.0
CHECKPOINT_ENTRIES = 2000
#: A whole state larger than this is written in pieces before the pass's MULTI (``save_lifted_chunked``).
CHUNKED_SAVE_BYTES = 8 << 20


def commit_state(pipe: Pipeline, study_id: str, label: str, learner: Learner, kept: Kept,
                 conn: Redis=None) -> tuple[Kept, int]:
    """Queue the learner's changes since ``kept`` on ``pipe`` (inside MULTI): a journal entry of what
    differs, or the whole state where there is no journal to append to. Returns (what will then be
    stored, bytes queued)."""
    if kept.lifted is None or kept.lineage is None:
        lifted = engine_state.Lifted.of(learner.to_state(), copy=True)
        if conn is not None and lifted.nbytes > CHUNKED_SAVE_BYTES:
            # one EXEC of the whole state would block Redis for seconds
            version, lineage = engine_state.save_lifted_chunked(conn, pipe, study_id, label, lifted)
        else:
            version, lineage = engine_state.save_lifted(pipe, study_id, label, lifted)
        return Kept(lifted, version, lineage), lifted.nbytes
    if (study_id, label) in _checkpoints:
        # a checkpoint writer reads the kept state: diff against it, keep a copy of the new one
        lifted = engine_state.Lifted.of(learner.to_state(), copy=True)
        delta = engine_state.make_delta(kept.lifted, lifted, kept.lineage, kept.seq + 1)
    else:
        # the changed elements are written into the kept arrays: no copy of the whole state per pass.
        # Should EXEC fail, the kept learners and states are dropped (forget_cached) and read back.
        delta, lifted = engine_state.advance_delta(kept.lifted, engine_state.Lifted.of(learner.to_state()),
                                                   kept.lineage, kept.seq + 1)
    if delta is None:
        return replace(kept, lifted=lifted), 0
    version = engine_state.append_delta(pipe, study_id, label, delta)
    return Kept(lifted, version, kept.lineage, kept.seq + 1, kept.checkpoint_seq,
                (*kept.journal, (kept.seq + 1, engine_state.entry_size(delta)))), len(delta)


@dataclass
class _Checkpoint:
    """A checkpoint being written by a thread of this process (``engine_state.write_checkpoint``)."""

    lineage: str
    seq: int
    thread: threading.Thread | None = None
    written: int = 0
    seconds: float = 0.0
    ok: bool = False


_checkpoints: dict[tuple[str, str], _Checkpoint] = {}


def _checkpoint_due(kept: Kept) -> bool:
    if kept.lifted is None or kept.lineage is None or not kept.journal:
        return False
    journal_bytes = sum(n for _, n in kept.journal)
    return journal_bytes >= CHECKPOINT_SHARE * kept.lifted.nbytes or len(kept.journal) >= CHECKPOINT_ENTRIES


def start_checkpoints(conn: Redis, study_id: str, kept: dict[str, Kept]) -> None:
    """Start writing a checkpoint of each learner whose journal has grown enough (one at a time per learner)."""
    for label, k in kept.items():
        if (study_id, label) in _checkpoints or not _checkpoint_due(k):
            continue
        job = _Checkpoint(k.lineage, k.seq)

        def write(job=job, label=label, lifted=k.lifted):
            started = time.perf_counter()
            try:
                job.written = engine_state.write_checkpoint(conn, study_id, label, lifted, job.lineage, job.seq)
                job.ok = True
            except redis.RedisError as exc:  # the journal still holds everything: try again later
                print(f"checkpoint of {study_id}/{label} failed: {exc}", file=sys.stderr, flush=True)
            job.seconds = time.perf_counter() - started

        job.thread = threading.Thread(target=write, name=f"checkpoint {study_id}/{label}", daemon=True)
        _checkpoints[(study_id, label)] = job
        job.thread.start()


def settle_checkpoints(conn: Redis, study_id: str, wait: bool = True) -> int:
    """Put the study's written checkpoints in place (waiting for those still being written if ``wait``);
    returns how many were put in place."""
    swapped = 0
    for (sid, label), job in list(_checkpoints.items()):
        if sid != study_id or (job.thread.is_alive() and not wait):
            continue
        job.thread.join()
        del _checkpoints[(sid, label)]
        if job.ok:
            faults.fault("before_swap")
        if not job.ok or not engine_state.swap_checkpoint(conn, study_id, label, job.lineage, job.seq):
            continue
        swapped += 1
        cached = cached_study(study_id)
        kept = cached.kept.get(label) if cached is not None else None
        if kept is not None and kept.lineage == job.lineage:
            cached.kept[label] = replace(kept, checkpoint_seq=job.seq,
                                         journal=tuple(e for e in kept.journal if e[0] > job.seq))
        with conn.pipeline(transaction=False) as pipe:
            pipe.hincrby(keys.engine_stats(study_id), "checkpoints", 1)
            pipe.hincrby(keys.engine_stats(study_id), "checkpoint_bytes", job.written)
            pipe.hset(keys.engine_stats(study_id), mapping={"last_checkpoint_ms": f"{job.seconds * 1000:.1f}",
                                                            "last_checkpoint_bytes": job.written})
            pipe.execute()
    return swapped
