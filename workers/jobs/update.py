"""RQ jobs: apply a study's new answers to its engines and refill its question pools.

``update_study`` is the only writer of a study's engine states. It takes the study's
lock, reads every answer after the saved cursor, applies them as one batch to each
algorithm's learner, releases expired questions back to the planners, takes questions of
closed rounds out of the pools, tops the pools up, and writes what changed in the states (one
journal entry each, see ``engine_state``) + cursor + pools + stats in one MULTI guarded by WATCH,
so a worker killed at any instant neither loses nor double-applies an answer. Checkpoints of a
state are written by a thread while passes go on and put in place between passes (at the latest
when the job ends), so a pool refill never waits for one. The study's lock is taken over at once
from a holder that died (its Redis connection is gone), so a crashed worker does not hold the study up.

While answers keep arriving, one job goes on with pass after pass (up to ``JOB_SECONDS``), and
the learners stay in this process's memory between passes: a pass reloads a learner only when
the version saved with its state is not the one this process wrote (another worker, a rebuild or
a restore replaced it). The cache never decides what is correct: the WATCH on the cursor and the
engine states stays, and a pass that fails (EXEC refused or any error) drops the study's cached
learners, so its retry starts from the stored state.

Crash testing: ``PROXIMA_FAULT=<point>:<action>`` makes the worker crash (``crash``: SIGKILL
itself) or hang (``pause``: write its pid to ``PROXIMA_FAULT_FILE`` if set, then sleep until
killed) at a named point of a pass that applies answers: ``after_read``, ``after_observe``,
``before_exec``, ``after_exec``, ``before_swap`` (a checkpoint written, not yet put in place), or
``in_fit`` (in the worker's fit process, a refit handed over to it under way: ``workers.jobs.fits``).
Unset (always, outside tests) it costs one ``None`` check.
Must never import Flask.
"""
from __future__ import annotations

import contextlib
import json
import math
import secrets
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import redis
from rq import get_current_job

from engine import truth as oracles
from workers.jobs import faults, fits, rater_checks
from workers.jobs.learners import Learner
from workers.store import answers as answer_log
from workers.store import engine_state, keys, questions
from workers.store import truth as known_truth
from workers.store.lua import Script
from workers.store.studies import Study, get_items, get_study, initial_item_count

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from redis import Redis


# an issued question is reclaimed this long after its token expired (clock skew between hosts)
EXPIRY_GRACE_SECONDS = 30
MAX_ANSWERS_PER_PASS = 20000
LOCK_TIMEOUT_SECONDS = 600
#: A rater who was handed a question this recently counts as active (pool sizing).
ACTIVE_RATER_SECONDS = 120
LATENCIES_KEPT = 500
#: One job goes on with further passes while answers keep arriving, for at most this long (then it
#: hands over to the job the new answers queued, so other studies get the worker too).
JOB_SECONDS = 30.0
#: A job waits this long for the next answer before it ends (an idle study costs no more).
LINGER_SECONDS = 0.1
#: Passes of one job start at least this far apart (each saves the whole state: batch the answers).
PASS_INTERVAL_SECONDS = 0.03
POLL_SECONDS = 0.01
#: How often an idle job looks whether a refit running beside the passes is ready.
FIT_POLL_SECONDS = 0.2
#: Times a pass plans again for the questions its own planning made stale (see ``_replan``).
REPLANS = 3
#: Studies whose learners this process keeps in memory between passes (least recently used dropped).
CACHED_STUDIES = 4
#: A pool is filled to this multiple of the questions taken from it since the previous pass (with
#: raters answering faster than passes come, a pool of pool_size alone runs dry between passes).
DEMAND_HEADROOM = 1.5
#: A checkpoint of a learner's state is written once its journal has grown to this share of the
#: state's size, or to this many entries (what a reload replays stays below the state's own size).
CHECKPOINT_SHARE = 1.0
CHECKPOINT_ENTRIES = 2000
#: While a job goes on with pass after pass, the dashboard's summary of the learners (each item's
#: neighbour: a pass over the n x n estimates) is written at most this often ...
SUMMARY_SECONDS = 1.0
#: ... and at most as often as keeps its cost below this share of the worker's time (at 50,000 items
#: a summary of duels takes seconds: written every few seconds it would leave the passes no time)
SUMMARY_SHARE = 0.1

# ---------------------------------------------------------------------------- crash testing
FAULT_POINTS = faults.FAULT_POINTS
FAULT_ACTIONS = faults.FAULT_ACTIONS
parse_fault = faults.parse_fault
FAULT = faults.FAULT
_fault = faults.fault


_SWAP = Script("lock_swap.lua")  # replace or release the lock only while it holds the value we read


def _holder_gone(conn: Redis, value: str, run_id: str) -> bool:
    """Whether the lock value names a holder whose Redis connection no longer exists.

    The value is ``<server run id>:<client id>:<nonce>``: a holder killed with SIGKILL loses its
    connection at once, and a restarted server has a new run id. Where CLIENT LIST is not
    allowed (some managed Redis), the holder counts as alive and the lock's expiry applies.
    """
    parts = value.split(":")
    if len(parts) != 3 or not parts[1].isdigit():
        return False
    if parts[0] != run_id:
        return True
    try:
        listed = conn.execute_command("CLIENT", "LIST", "ID", parts[1])
    except redis.ResponseError:
        return False
    listed = listed.decode() if isinstance(listed, bytes) else str(listed)
    return f"id={parts[1]} " not in listed


@contextlib.contextmanager
def study_lock(conn: Redis, study_id: str, timeout: float = LOCK_TIMEOUT_SECONDS,
               wait: float = LOCK_TIMEOUT_SECONDS) -> Iterator[Callable[[], None]]:
    """Hold the study's update lock: one writer of its engine states at a time.

    Waits up to ``wait`` seconds for a live holder, takes the lock over at once from a dead one
    (see ``_holder_gone``); the lock expires ``timeout`` seconds after it was last taken or
    renewed (``renew``). Correctness does not rest on the lock (the update's MULTI is guarded by
    WATCH on the cursor): it only keeps two workers from doing the same work.
    Yields a ``renew()`` callable that restarts the expiry.
    """
    key = keys.update_lock(study_id)
    ttl_ms = int(timeout * 1000)
    # a connection of our own, kept open while we hold the lock: its client id names us
    holder = redis.Redis(connection_pool=conn.connection_pool, single_connection_client=True)
    try:
        run_id = holder.info("server")["run_id"]
        value = f"{run_id}:{holder.client_id()}:{secrets.token_hex(4)}"
        deadline = time.monotonic() + wait
        while not holder.set(key, value, nx=True, px=ttl_ms):
            current = holder.get(key)
            if current is not None and _holder_gone(holder, current.decode(), run_id):
                if _SWAP(holder, keys={"lock": key}, args={"expected": current, "new_value": value, "ttl_ms": ttl_ms}):
                    break
                continue
            if time.monotonic() >= deadline:
                raise TimeoutError(f"the update lock of study {study_id} is held by another worker")
            time.sleep(0.05)

        def renew() -> None:
            _SWAP(holder, keys={"lock": key}, args={"expected": value, "new_value": value, "ttl_ms": ttl_ms})

        try:
            yield renew
        finally:
            _SWAP(holder, keys={"lock": key}, args={"expected": value, "new_value": "", "ttl_ms": 0})
    finally:
        holder.close()


def update_study(study_id: str) -> dict:
    """RQ entry point: drain new answers of one study, and go on while more keep arriving.

    Returns the summed summary of its passes."""
    conn = get_current_job().connection
    # Clear the flag first: answers accepted from now on schedule a fresh job. That job waits in
    # the queue while this one goes on, and takes over when it ends: no answer is left waiting.
    conn.delete(keys.update_scheduled(study_id))
    with study_lock(conn, study_id) as renew:
        if not conn.exists(keys.study(study_id)):
            return {}  # deleted since the job was queued (workers.store.deletion)
        return drain_study(conn, study_id, renew=renew)


def drain_study(conn: Redis, study_id: str, renew: Callable[[], None] | None = None, job_seconds: float = JOB_SECONDS,
                linger: float = LINGER_SECONDS, interval: float = PASS_INTERVAL_SECONDS) -> dict:
    """``apply_new_answers`` again and again while answers keep arriving (the learners stay in memory),
    until ``job_seconds`` have passed or no answer arrived for ``linger`` seconds after a pass.

    Passes start at least ``interval`` seconds apart, so a steady stream is applied in batches."""
    try:
        return _drain(conn, study_id, renew, job_seconds, linger, interval)
    finally:
        settle_checkpoints(conn, study_id)
        write_summary(conn, study_id)


def _drain(conn: Redis, study_id: str, renew, job_seconds: float, linger: float, interval: float) -> dict:
    total = _drain_passes(conn, study_id, renew, job_seconds, linger, interval)
    rater_checks.settle(conn, study_id)  # the study's last answers get their answer check too
    return total


def _drain_passes(conn: Redis, study_id: str, renew, job_seconds: float, linger: float, interval: float) -> dict:
    started = time.monotonic()
    pass_started = started
    total = apply_new_answers(conn, study_id, renew=renew, settle=False)
    while True:
        idle_until = time.monotonic() + linger
        check_at = pass_started + interval
        while True:
            time.sleep(max(0.0, check_at - time.monotonic()))
            if time.monotonic() - started >= job_seconds:
                return total
            fits = _fits_beside(study_id)
            if fits or _has_new_answers(conn, study_id):
                break  # new answers, or a refit ready to be put in place (and saved)
            if time.monotonic() >= idle_until:
                if fits is None:
                    return total
                # a refit runs beside: the job waits for it (a study whose raters stopped gets it)
                check_at = time.monotonic() + FIT_POLL_SECONDS
                continue
            check_at = time.monotonic() + POLL_SECONDS
        pass_started = time.monotonic()
        summary = apply_new_answers(conn, study_id, renew=renew, settle=False)
        for name, value in summary.items():
            total[name] = total.get(name, 0) + value


def _fits_beside(study_id: str) -> bool | None:
    """Of the study's learners kept in memory: True if a refit that ran beside the passes is ready,
    False if one is still running, None if none is handed over (``planner.fit_ready``)."""
    cached = _cache.get(study_id)
    states = [] if cached is None else [learner.fit_ready() for learner in cached.learners.values()]
    if any(states):
        return True
    return False if any(state is False for state in states) else None


def _has_new_answers(conn: Redis, study_id: str) -> bool:
    with conn.pipeline(transaction=False) as pipe:
        pipe.get(keys.cursor(study_id))
        pipe.xrevrange(keys.answers(study_id), count=1)
        cursor, last = pipe.execute()
    return bool(last) and last[0][0] != (cursor or b"0-0")


# ---------------------------------------------------------------------------- learners kept in memory
@dataclass
class _Kept:
    """One learner's stored state as this process last committed or read it (see ``engine_state``)."""

    lifted: engine_state.Lifted | None  # None: nothing stored yet (a fresh learner)
    version: str | None
    lineage: str | None  # None: nothing stored, or a state saved before journals (next save is whole)
    seq: int = 0  # the last journal entry committed
    checkpoint_seq: int = 0  # the journal entry the stored checkpoint includes
    journal: tuple[tuple[int, int], ...] = ()  # (seq, array bytes) of the entries after the checkpoint

    @classmethod
    def of(cls, stored: engine_state.Stored) -> _Kept:
        return cls(stored.lifted, stored.version if stored.lifted is not None else None, stored.lineage,
                   stored.seq, stored.checkpoint_seq, tuple(stored.journal))


@dataclass
class _Cached:
    """A study's learners as this process last saved them: valid while the config is the same and
    every stored state still carries the version this process wrote."""

    config: str
    kept: dict[str, _Kept]
    learners: dict[str, Learner]


_cache: OrderedDict[str, _Cached] = OrderedDict()
#: study id -> time.monotonic() of the last summary written by this process
_summarised: dict[str, float] = {}
#: studies whose latest pass left the summary out (written when the job ends: ``write_summary``)
_unsummarised: set[str] = set()
#: study id -> seconds the last summary written by this process took
_summary_cost: dict[str, float] = {}


def _summary_due(study_id: str, every: float) -> bool:
    """Whether this pass writes the summary: ``every`` seconds after the last one, and no sooner than
    its cost over ``SUMMARY_SHARE`` (``every`` 0: always, as when a job settles)."""
    if every <= 0:
        return True
    wait = max(every, _summary_cost.get(study_id, 0.0) / SUMMARY_SHARE)
    return time.monotonic() - _summarised.get(study_id, -math.inf) >= wait


def study_memory(conn: Redis, study: Study, kept: dict[str, _Kept]) -> dict[str, int]:
    """What the study takes: ``memory_redis_bytes``, its keys in Redis (MEMORY USAGE: answers, items,
    pools, engine states and journals, statistics), and ``memory_engine_bytes``, its learners' states
    as a worker holds them (arrays + skeleton). Read in one round trip; written with the summary."""
    sid = study.id
    names = [keys.study(sid), keys.items(sid), keys.media(sid), keys.answers(sid), keys.issued(sid),
             keys.issued_questions(sid), keys.raters(sid), keys.counters(sid), keys.rater_stats(sid),
             keys.engine_stats(sid), keys.answers_per_minute(sid), keys.active_raters(sid)]
    for alg in study.config.algorithms:
        names += [keys.pool(sid, alg.label), keys.engine(sid, alg.label), keys.engine_journal(sid, alg.label),
                  keys.engine_checkpoint(sid, alg.label)]
    with conn.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.memory_usage(name)
        sizes = pipe.execute(raise_on_error=False)
    redis_bytes = sum(int(size) for size in sizes if isinstance(size, int))
    engine_bytes = sum(k.lifted.nbytes for k in kept.values() if k is not None and k.lifted is not None)
    return {"memory_redis_bytes": redis_bytes, "memory_engine_bytes": engine_bytes}


def write_summary(conn: Redis, study_id: str) -> None:
    """Write the dashboard's summary of the study's kept learners if the latest pass left it out
    (with the point of each learner's error curve against a known truth, see ``record_truth_error``)."""
    cached = _cache.get(study_id)
    if study_id not in _unsummarised or cached is None:
        return
    study = get_study(conn, study_id)
    truth = known_truth_of(conn, study)
    counters = {k.decode(): v for k, v in conn.hgetall(keys.counters(study_id)).items()}
    summaries = {label: learner.summary() for label, learner in cached.learners.items()}
    with conn.pipeline(transaction=True) as pipe:
        pipe.hset(keys.engine_stats(study_id), "summary", json.dumps(summaries))
        record_truth_error(pipe, study, cached.learners, summaries, counters, truth)
        pipe.execute()
    _summarised[study_id] = time.monotonic()
    _unsummarised.discard(study_id)


# ---------------------------------------------------------------------------- error against a known truth
@dataclass(frozen=True)
class KnownTruth:
    """The items' positions and each one's distance to its true nearest neighbour (both None: not
    every item has a position), and whether they were computed in this pass (then it saves them)."""

    points: list | None
    nearest: list | None
    computed: bool


def known_truth_of(conn: Redis, study: Study) -> KnownTruth:
    """The study's known truth as stored, computed from the items' positions when none is stored for
    its current number of items."""
    fresh, points, nearest = known_truth.stored_truth(conn.hget(keys.engine_stats(study.id), known_truth.TRUTH_FIELD),
                                                      study.n_items)
    if fresh:
        return KnownTruth(points, nearest, computed=False)
    items = get_items(conn, study.id)
    dims = {len(item.position) if item.position else 0 for item in items}
    if not (2 <= len(items) <= known_truth.MAX_TRUTH_ITEMS and len(dims) == 1 and 0 not in dims):
        return KnownTruth(None, None, computed=True)
    points = [list(item.position) for item in items]
    return KnownTruth(points, oracles.true_kth_distances(points=points).tolist(), computed=True)


def _answers_applied(progress: dict | None, fallback: int) -> int:
    """Answers the learner has applied (what its current neighbours rest on), from its progress
    (``answers``, :class:`engine.graph.Progress`); ``fallback`` for a summary without one."""
    return int(progress["answers"]) if progress else fallback


def record_truth_error(pipe: redis.client.Pipeline, study: Study, learners: dict[str, Learner],
                       summaries: dict[str, dict], counters: dict, truth: KnownTruth) -> None:
    """Queue on ``pipe`` (a MULTI) the truth if it was computed, and for each learner that yields a graph
    the point (answers applied, share of items whose neighbour in ``summaries`` is wrong) of its error
    curve. Written with every summary, whether or not a dashboard is open. ``counters``: ``keys.counters``."""
    if truth.computed:
        known_truth.save_truth(pipe, study.id, study.n_items, truth.points, truth.nearest)
    if truth.points is None:
        return
    for label, learner in learners.items():
        summary = summaries.get(label) or {}
        if summary.get("neighbors") is None or not learner.entry.yields_graph:
            continue
        applied = _answers_applied(summary.get("progress"), int(counters.get(keys.counter_field("answers", label), 0)))
        n = len(truth.points)  # a learner not yet grown to the study's items: the others have no neighbour
        neighbors = list(summary["neighbors"][:n]) + [oracles.NO_NEIGHBOR] * (n - len(summary["neighbors"]))
        wrong = oracles.neighbor_error(neighbors, points=truth.points, kth=truth.nearest)
        known_truth.append_error_point(pipe, study.id, label, applied, wrong)


def forget_cached(study_id: str | None = None) -> None:
    """Drop the learners kept for one study (all studies: None)."""
    if study_id is None:
        _cache.clear()
    else:
        _cache.pop(study_id, None)


def _remember(study: Study, kept: dict[str, _Kept], learners: dict[str, Learner]) -> None:
    _cache[study.id] = _Cached(repr(study.config), kept, learners)
    _cache.move_to_end(study.id)
    while len(_cache) > CACHED_STUDIES:
        _cache.popitem(last=False)


def _cached_learners(conn: Redis, study: Study) -> tuple[dict[str, Learner], dict[str, _Kept]] | None:
    """The study's learners from memory, if every stored state is still the one this process saved."""
    cached = _cache.get(study.id)
    if cached is None or cached.config != repr(study.config):
        return None
    for alg in study.config.algorithms:
        version = engine_state.load_version(conn, study.id, alg.label)
        kept = cached.kept.get(alg.label)
        if version is None or kept is None or kept.version != version:
            return None
    for alg in study.config.algorithms:
        cached.learners[alg.label].algorithm = alg
        cached.learners[alg.label].config = study.config
    return cached.learners, dict(cached.kept)


def _load(conn: Redis, study: Study) -> tuple[dict[str, Learner], dict[str, _Kept]]:
    learners, kept, labels = {}, {}, None
    for alg in study.config.algorithms:
        stored = engine_state.load_stored(conn, study.id, alg.label)
        kept[alg.label] = _Kept.of(stored)
        if stored.lifted is not None:
            learners[alg.label] = Learner.from_state(alg, study.config, stored.state)
            continue
        n = initial_item_count(conn, study.id, study.n_items)
        if labels is None:
            labels = [item.label for item in get_items(conn, study.id)][:n]
        learners[alg.label] = Learner.new(alg, study.config, n, labels)
    return learners, kept


def load_learners(conn: Redis, study: Study, versions: dict | None = None) -> dict[str, Learner]:
    """Every algorithm's learner from its saved state, or fresh where none is saved yet.

    ``versions``, if given, receives each saved state's version (None for a fresh learner)."""
    learners, kept = _load(conn, study)
    if versions is not None:
        versions.update({label: k.version for label, k in kept.items()})
    return learners


def pass_learners(conn: Redis, study: Study) -> tuple[dict[str, Learner], dict[str, _Kept], bool]:
    """(learners, {label: the stored state they equal}, whether they came from memory); their refits
    run in this process's fit pool where it has one (``workers.jobs.fits``)."""
    cached = _cached_learners(conn, study)
    if cached is not None:
        return cached[0], cached[1], True
    _cache.pop(study.id, None)
    learners, kept = _load(conn, study)
    for label, learner in learners.items():
        learner.fit_beside(fits.fitter_for(study.id, label))
    return learners, kept, False


#: A whole state larger than this is written in pieces before the pass's MULTI (``save_lifted_chunked``).
CHUNKED_SAVE_BYTES = 8 << 20


def _commit_state(pipe, study_id: str, label: str, learner: Learner, kept: _Kept,
                  conn: Redis=None) -> tuple[_Kept, int]:
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
        return _Kept(lifted, version, lineage), lifted.nbytes
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
    return _Kept(lifted, version, kept.lineage, kept.seq + 1, kept.checkpoint_seq,
                 (*kept.journal, (kept.seq + 1, engine_state.entry_size(delta)))), len(delta)


# ---------------------------------------------------------------------------- checkpoints
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


def _checkpoint_due(kept: _Kept) -> bool:
    if kept.lifted is None or kept.lineage is None or not kept.journal:
        return False
    journal_bytes = sum(n for _, n in kept.journal)
    return journal_bytes >= CHECKPOINT_SHARE * kept.lifted.nbytes or len(kept.journal) >= CHECKPOINT_ENTRIES


def _start_checkpoints(conn: Redis, study_id: str, kept: dict[str, _Kept]) -> None:
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
            _fault("before_swap")
        if not job.ok or not engine_state.swap_checkpoint(conn, study_id, label, job.lineage, job.seq):
            continue
        swapped += 1
        cached = _cache.get(study_id)
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


def observe_batch(learners: dict[str, Learner], batch: list) -> dict[str, str]:
    """Apply a batch to every learner; an answer a learner refuses is set aside, not retried forever.

    Returns {answer id: reason} of the answers set aside. Engines validate a whole batch before
    changing anything, so on a refusal the batch is applied again one answer at a time.
    """
    poisoned: dict[str, str] = {}
    for learner in learners.values():
        try:
            learner.observe(batch)
        except ValueError:
            for answer in batch:
                try:
                    learner.observe([answer])
                except ValueError as exc:
                    poisoned[answer.id] = f"{learner.label}: {exc}"
    return poisoned


def read_batch(conn: Redis, study_id: str, after: str, count: int) -> tuple[list, dict[str, str], str]:
    """(answers, {entry id: reason} of entries that are not readable answers, id of the last entry read).

    A log entry that cannot be read as an answer (a missing or malformed field) is set aside like
    an answer an engine refuses, so it cannot stop every later update of the study.
    """
    entries = conn.xrange(keys.answers(study_id), min=f"({after}" if after != "0-0" else "-", max="+", count=count)
    batch, unreadable = [], {}
    for entry_id, fields in entries:
        try:
            batch.append(answer_log.Answer.from_stream(entry_id, fields))
        except (KeyError, ValueError, UnicodeDecodeError) as exc:
            unreadable[entry_id.decode()] = f"unreadable log entry: {type(exc).__name__}: {exc}"
    return batch, unreadable, entries[-1][0].decode() if entries else after


def apply_new_answers(conn: Redis, study_id: str, now: float | None = None, renew: Callable[[], None] | None = None,
                      settle: bool = True) -> dict:
    """Apply every answer after the cursor, then refill the pools; retried if another writer raced us.

    ``renew`` (from ``study_lock``) is called before each pass to keep the lock. With ``settle``,
    checkpoints the passes started are waited for and put in place before returning (``drain_study``
    lets them be written while it goes on with further passes).
    """
    total = {"applied": 0, "released": 0, "planned": 0, "pruned": 0, "passes": 0}
    try:
        while True:
            if renew is not None:
                renew()
            settle_checkpoints(conn, study_id, wait=False)
            summary = _one_pass(conn, study_id, time.time() if now is None else now,
                                0.0 if settle else SUMMARY_SECONDS)
            rater_checks.after_pass(conn, study_id, summary)
            for name in ("applied", "released", "planned", "pruned"):
                total[name] += summary[name]
            total["passes"] += 1
            if not summary["more"]:
                return total
    finally:
        if settle:
            settle_checkpoints(conn, study_id)


def _budget_reached(learner: Learner, counters: dict) -> bool:
    budget = learner.algorithm.budget
    return budget is not None and int(counters.get(keys.counter_field("questions_served", learner.label), 0)) >= budget


def _pool_target(base: int, label: str, counters: dict, previous: dict) -> int:
    """At least ``base``, and enough for the questions taken from the pool since the previous pass
    (times ``DEMAND_HEADROOM``); at most ten times ``base``."""
    served = int(counters.get(keys.counter_field("questions_served", label), 0))
    before = previous.get(keys.served_field(label))
    demand = served - int(before) if before is not None else 0
    return max(base, min(math.ceil(DEMAND_HEADROOM * demand), 10 * max(base, 1)))


# ---------------------------------------------------------------------------- one pass
@dataclass
class _Pass:
    """What one attempt of a pass has read and decided so far, handed from step to step:
    ``_begin`` → ``_read_answers`` → ``_observe`` → ``_read_demand`` → ``_plan`` → ``_commit``.

    An attempt whose EXEC fails is thrown away with its learners; only the questions its planning
    took out of the pools outlive it (``pruned``, see ``_one_pass``)."""

    study: Study
    now: float
    started: float  # time.perf_counter() when the attempt began
    learners: dict[str, Learner]
    stored: dict[str, _Kept]  # the stored state each learner equals when the attempt begins
    from_memory: bool
    windows_before: dict[str, int | None]
    cursor: str = "0-0"  # the id of the last answer read (saved as the new cursor)
    n_read: int = 0  # log entries read, readable or not
    poisoned: dict[str, str] = field(default_factory=dict)  # answer id -> why it is set aside
    late_answers: int = 0
    fallback_answers: int = 0
    expired: list[dict] = field(default_factory=list)
    counters: dict = field(default_factory=dict)  # keys.counters, names decoded
    previous: dict = field(default_factory=dict)  # "served:<label>" as the previous pass saw it
    active: int = 0
    planned: dict[str, list[dict]] = field(default_factory=dict)
    targets: dict[str, int] = field(default_factory=dict)
    finished: list[str] = field(default_factory=list)
    pruned_now: int = 0
    repeats: int = 0
    items_routed: dict[str, int] = field(default_factory=dict)  # added items whose routing this pass started

    @property
    def labels(self) -> list[str]:
        return [alg.label for alg in self.study.config.algorithms]


def _begin(pipe, study: Study, now: float) -> _Pass:
    """Watch the cursor and the engine states, and take the study's learners (from memory or Redis)."""
    study_id = study.id
    started = time.perf_counter()
    # the engine states are watched too: a state replaced since we read it (a rebuild, a
    # restore, another worker) makes EXEC fail, whatever its cursor
    pipe.watch(keys.cursor(study_id), *[keys.engine(study_id, alg.label) for alg in study.config.algorithms])
    cursor = engine_state.load_cursor(pipe, study_id)
    learners, stored, from_memory = pass_learners(pipe, study)
    return _Pass(study, now, started, learners, stored, from_memory, cursor=cursor,
                 windows_before={label: learner.window for label, learner in learners.items()})


def _sync_items(p: _Pass) -> None:
    """Start routing the items added to the study since a learner that takes them was built."""
    for label, learner in p.learners.items():
        p.items_routed[label] = p.items_routed.get(label, 0) + learner.sync_items(p.study.n_items)


def _read_answers(pipe, p: _Pass) -> list:
    """The answers after the cursor this pass applies (excluded raters' left out); moves ``p.cursor``."""
    study_id = p.study.id
    _sync_items(p)
    batch, p.poisoned, p.cursor = read_batch(pipe, study_id, p.cursor, MAX_ANSWERS_PER_PASS)
    p.n_read = len(batch) + len(p.poisoned)
    if p.n_read:
        _fault("after_read")
    excluded = {r.decode() for r in pipe.smembers(keys.excluded_raters(study_id))}
    return [a for a in batch if a.rater not in excluded]


def _observe(p: _Pass, used: list) -> None:
    """Apply the answers to every learner (refused ones are set aside in ``p.poisoned``)."""
    p.late_answers = sum(learner.closed_round_answers(used) for learner in p.learners.values())
    p.fallback_answers = sum(1 for a in used if a.fallback and not a.skipped)
    p.poisoned.update(observe_batch(p.learners, used))
    if p.n_read:
        _fault("after_observe")
    _sync_items(p)  # a forest finished by this batch starts routing added items


def _read_demand(pipe, p: _Pass) -> None:
    """What the pool refill depends on: expired questions, counters, the previous pass's served
    counts and the raters active now."""
    study_id = p.study.id
    p.expired = questions.expired_questions(pipe, study_id, before=p.now - EXPIRY_GRACE_SECONDS)
    p.counters = {k.decode(): v for k, v in pipe.hgetall(keys.counters(study_id)).items()}
    served_fields = [keys.served_field(label) for label in p.labels]
    p.previous = {name: v for name, v in zip(served_fields, pipe.hmget(keys.engine_stats(study_id), served_fields),
                                             strict=True)
                  if v is not None}
    p.active = int(pipe.zcount(keys.active_raters(study_id), p.now - ACTIVE_RATER_SECONDS, "+inf"))


def _plan(conn: Redis, pipe, p: _Pass, pruned: dict[str, list[dict]]) -> None:
    """Release expired questions to the learners, take stale questions out of the pools and plan
    each pool's refill (``p.planned``, ``p.targets``, ``p.finished``).

    The pools are pruned here, before the MULTI, with ``conn`` (a script that returns the questions
    it removed), not inside the transaction: raters take questions from the pools all the time, so
    a learner can be told which of its stale questions are gone for good (and will get no answer)
    only once they are gone. Inside the MULTI the learner state saved with it would have to guess,
    and WATCHing the pools would make every pass fail while raters are answering. So the removal
    is final even when EXEC then fails: ``pruned`` collects what this pass removed across its
    retries, and every attempt makes its learners forget it again."""
    study, config = p.study, p.study.config
    shares = config.shares()
    running = study.status == "running"
    for label, learner in p.learners.items():
        learner.forget(p.expired)
        learner.forget(pruned.get(label, []))
        done = learner.finished or _budget_reached(learner, p.counters)
        if done:
            p.finished.append(label)
        base = max(math.ceil(config.pool_size * shares[label]), math.ceil(p.active * shares[label]))
        target = p.targets[label] = _pool_target(base, label, p.counters, p.previous)
        pooled = questions.pooled_questions(pipe, study.id, label)
        stale = pooled if done or not running else learner.stale(pooled)
        removed = questions.prune_questions(conn, study.id, label, stale)
        learner.forget(removed)
        pruned.setdefault(label, []).extend(removed)
        p.pruned_now += len(removed)
        depth = len(pooled) - len(removed)
        wanted = max(0, target - depth) if running and not done else 0
        if learner.algorithm.budget is not None:
            served = int(p.counters.get(keys.counter_field("questions_served", label), 0))
            wanted = min(wanted, max(0, learner.algorithm.budget - served - depth))
        window = learner.algorithm.params.get("window", 1)
        p.planned[label] = learner.plan(wanted, study.n_items, window=window)
        p.repeats += learner.repeats_planned
        removed_ids = {q["qid"] for q in removed}
        kept = [q for q in pooled if q["qid"] not in removed_ids]
        for _ in range(REPLANS if running and not done else 0):
            if not _replan(conn, p, label, learner, kept, pruned, window):
                break


def _replan(conn: Redis, p: _Pass, label: str, learner: Learner, kept: list[dict], pruned: dict[str, list[dict]],
            window: int) -> bool:
    """Planning reads rows whose deferred triangle updates can close more rounds: take their
    questions back too, pooled ones (``kept``, updated in place) and those just planned, and plan
    for the gap again. Returns whether there were any."""
    late = learner.stale(kept + p.planned[label])
    if not late:
        return False
    late_ids = {q["qid"] for q in late}
    kept_ids = {q["qid"] for q in kept}
    late_removed = questions.prune_questions(conn, p.study.id, label, [q for q in late if q["qid"] in kept_ids])
    late_planned = [q for q in p.planned[label] if q["qid"] in late_ids]
    p.planned[label] = [q for q in p.planned[label] if q["qid"] not in late_ids]
    kept[:] = [q for q in kept if q["qid"] not in late_ids]
    learner.forget(late_removed + late_planned)
    pruned.setdefault(label, []).extend(late_removed)
    p.pruned_now += len(late_removed)
    gap = len(late_removed) + len(late_planned)
    p.planned[label].extend(learner.plan(gap, p.study.n_items, window=window))
    p.repeats += learner.repeats_planned
    return True


def _changed(p: _Pass, pruned: dict[str, list[dict]]) -> dict[str, bool]:
    """Which learners to save: one nothing happened to keeps its stored state (and version)."""
    return {label: bool(p.n_read or p.expired or pruned.get(label) or p.planned[label] or learner.fit_settled
                        or p.stored[label].version is None
                        or p.items_routed.get(label) or learner.window != p.windows_before[label])
            for label, learner in p.learners.items()}


def _commit(conn: Redis, pipe, p: _Pass, changed: dict[str, bool], summarise: bool) -> tuple[dict[str, _Kept], bool]:
    """Queue every write of the pass in one MULTI and EXEC it (raises WatchError if a watched key
    changed). Returns (the stored state of each learner after it, whether the summary was written)."""
    study, study_id, learners = p.study, p.study.id, p.learners
    latency_ms = (time.perf_counter() - p.started) * 1000.0
    truth = known_truth_of(pipe, study) if summarise else None

    pipe.multi()
    saved, state_bytes = dict(p.stored), 0
    for label, learner in learners.items():
        if changed[label]:
            saved[label], size = _commit_state(pipe, study_id, label, learner, p.stored[label], conn)
            state_bytes += size
        questions.push_questions(conn, study_id, label, p.planned[label], pipeline=pipe)
    engine_state.save_cursor(pipe, study_id, p.cursor)
    questions.release_questions(pipe, study_id, [q["qid"] for q in p.expired])
    pipe.hset(keys.pool_targets(study_id), mapping=p.targets)
    pipe.delete(keys.finished(study_id))
    if p.finished:
        pipe.sadd(keys.finished(study_id), *p.finished)
    if p.poisoned:
        pipe.hset(keys.poisoned(study_id), mapping=p.poisoned)
    pipe.zremrangebyscore(keys.active_raters(study_id), "-inf", p.now - 86400)
    pipe.lpush(keys.refresh_latencies(study_id), f"{latency_ms:.3f}")
    pipe.ltrim(keys.refresh_latencies(study_id), 0, LATENCIES_KEPT - 1)
    summary_field = {}
    if summarise:
        began = time.perf_counter()
        summaries = {label: learner.summary() for label, learner in learners.items()}
        summary_field["summary"] = json.dumps(summaries)
        summary_field.update(study_memory(conn, study, p.stored))
        record_truth_error(pipe, study, learners, summaries, p.counters, truth)
        _summary_cost[study_id] = time.perf_counter() - began
    pipe.hset(keys.engine_stats(study_id), mapping={
        "last_update_at": repr(p.now), "last_latency_ms": f"{latency_ms:.3f}",
        "last_batch": p.n_read, "cursor": p.cursor, "active_raters": p.active, **summary_field,
        **{keys.served_field(label): int(p.counters.get(keys.counter_field("questions_served", label), 0))
           for label in p.labels},
    })
    for name, value in (("updates", 1), ("answers_applied", p.n_read), ("answers_closed_round", p.late_answers),
                        ("answers_fallback", p.fallback_answers),
                        ("questions_planned", sum(len(q) for q in p.planned.values())),
                        ("questions_repeated", p.repeats), ("questions_pruned", p.pruned_now),
                        ("questions_expired", len(p.expired)), ("passes_from_memory", int(p.from_memory)),
                        ("state_bytes_written", state_bytes)):
        if value or name in ("updates", "answers_applied"):
            pipe.hincrby(keys.engine_stats(study_id), name, value)
    if p.n_read:
        _fault("before_exec")
    pipe.execute()
    return saved, bool(summary_field)


def _one_pass(conn: Redis, study_id: str, now: float, summary_every: float = 0.0) -> dict:
    study = get_study(conn, study_id)
    # questions taken out of the pools by this pass: final even if an attempt's EXEC fails (see _plan)
    pruned: dict[str, list[dict]] = {}
    with conn.pipeline(transaction=True) as pipe:
        while True:
            try:
                p = _begin(pipe, study, now)
                used = _read_answers(pipe, p)
                _observe(p, used)
                _read_demand(pipe, p)
                _plan(conn, pipe, p, pruned)
                summarise = _summary_due(study_id, summary_every)
                saved, summarised = _commit(conn, pipe, p, _changed(p, pruned), summarise)
            except redis.WatchError:
                forget_cached(study_id)  # the learners may be mutated: the retry starts from the stored state
                continue
            except BaseException:
                forget_cached(study_id)
                raise
            _remember(study, saved, p.learners)
            if summarised:
                _summarised[study_id] = time.monotonic()
                _unsummarised.discard(study_id)
            else:
                _unsummarised.add(study_id)
            if p.n_read:
                _fault("after_exec")
            _start_checkpoints(conn, study_id, saved)
            return {"applied": p.n_read, "released": len(p.expired), "pruned": p.pruned_now,
                    "planned": sum(len(q) for q in p.planned.values()), "poisoned": len(p.poisoned),
                    "more": p.n_read == MAX_ANSWERS_PER_PASS}
