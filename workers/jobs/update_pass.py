"""One update pass: apply a study's new answers to its learners and refill its question pools.

A pass reads every answer after the saved cursor, applies them as one batch to each algorithm's
learner, releases expired questions back to the planners, takes questions of closed rounds out of
the pools, tops the pools up, and writes what changed in the states (one journal entry each, see
``workers.jobs.checkpoints``) + cursor + pools + stats in one MULTI guarded by WATCH, so a worker
killed at any instant neither loses nor double-applies an answer. Its learners come from this
process's memory where they are still valid (``workers.jobs.learner_cache``). Must never import Flask.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import redis

from workers.jobs import heldout, steps
from workers.jobs.checkpoints import commit_state
from workers.jobs.faults import fault
from workers.jobs.learner_cache import Kept, forget_cached, pass_learners, remember
from workers.jobs.learners import Learner, link_delegates, observe_batch
from workers.jobs.summary import SUMMARY_SECONDS, note_pass, queue_summary, summary_due
from workers.jobs.truth_curve import known_truth_of
from workers.store import engine_state, health, keys, questions
from workers.store.answers import read_batch
from workers.store.studies import Study, get_study

if TYPE_CHECKING:
    from collections.abc import Callable

    from redis import Redis


# an issued question is reclaimed this long after its token expired (clock skew between hosts)
EXPIRY_GRACE_SECONDS = 30
MAX_ANSWERS_PER_PASS = 20000
#: A rater who was handed a question this recently counts as active (pool sizing).
ACTIVE_RATER_SECONDS = 120
LATENCIES_KEPT = 500
#: Times a pass plans again for the questions its own planning made stale (see ``_replan``).
REPLANS = 3
#: A pool is filled to this multiple of the questions taken from it since the previous pass (with
#: raters answering faster than passes come, a pool of pool_size alone runs dry between passes).
DEMAND_HEADROOM = 1.5
#: Each rater active now gets this many questions planned ahead, up to half the items (so at most one
#: item in two has a question planned from a state that has not seen the answers before it). One per
#: rater is half a second of questions for 200 raters answering as fast as a browser lets them, and a
#: pass held up longer than that (a refit swapped in, a checkpoint, a busy machine) emptied the pool
#: into random fallbacks: 8% of the questions of a 50,000-item study, 15% at 1,000 items.
AHEAD_PER_RATER = 5


def apply_new_answers(conn: Redis, study_id: str, now: float | None = None, renew: Callable[[], None] | None = None,
                      settle: bool = True) -> dict:
    """Apply every answer after the cursor, then refill the pools; retried if another writer raced us.

    Each pass runs between the steps of its moments (``workers.jobs.steps``: ``BEFORE_PASS``,
    ``AFTER_PASS``). ``renew`` (from ``study_lock``) is called before each pass to keep the lock. With
    ``settle`` (a job of its own: every pass writes the summary), the job's end steps run before returning:
    the checkpoints the passes started are waited for and put in place (``drain_study`` runs them itself
    when it ends, letting them be written while it goes on with further passes).
    """
    total = {"applied": 0, "released": 0, "planned": 0, "pruned": 0, "passes": 0}
    job = steps.UpdateJob(conn, study_id)
    try:
        while True:
            if renew is not None:
                renew()
            steps.run(steps.BEFORE_PASS, job)
            job.last_pass = _one_pass(conn, study_id, time.time() if now is None else now,
                                      0.0 if settle else SUMMARY_SECONDS)
            steps.run(steps.AFTER_PASS, job)
            for name in ("applied", "released", "planned", "pruned"):
                total[name] += job.last_pass[name]
            total["passes"] += 1
            total["ahead_seconds"] = job.last_pass["ahead_seconds"]
            if not job.last_pass["more"]:
                return total
    finally:
        if settle:
            steps.run(steps.JOB_END, job)


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


def _note_ahead(p: _Pass, label: str, depth: int) -> None:
    """``p.ahead_seconds``: the shortest time any pool of depth ``depth`` lasts at the pace its questions
    were taken since the previous pass (unknown without a previous pass or while none were taken)."""
    before = p.previous.get(keys.served_field(label))
    if before is None or p.previous_at is None or p.now <= p.previous_at:
        return
    taken = int(p.counters.get(keys.counter_field("questions_served", label), 0)) - int(before)
    if taken > 0:
        lasts = depth * (p.now - p.previous_at) / taken
        p.ahead_seconds = lasts if p.ahead_seconds is None else min(p.ahead_seconds, lasts)


def _ahead(active: int, n_items: int) -> int:
    """The questions planned ahead for ``active`` raters: ``AHEAD_PER_RATER`` each, at most half the
    items, never fewer than one per rater."""
    return min(AHEAD_PER_RATER * active, max(active, n_items // 2))


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
    stored: dict[str, Kept]  # the stored state each learner equals when the attempt begins
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
    previous_at: float | None = None  # when the previous pass ran (its ``now``)
    ahead_seconds: float | None = None  # how long the pools last at the pace raters took questions lately
    active: int = 0
    planned: dict[str, list[dict]] = field(default_factory=dict)
    targets: dict[str, int] = field(default_factory=dict)
    finished: list[str] = field(default_factory=list)
    pruned_now: int = 0
    repeats: int = 0
    items_routed: dict[str, int] = field(default_factory=dict)  # added items whose routing this pass started
    kept: heldout.Kept = field(default_factory=heldout.Kept)  # what the held-out scores need of the answers read

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
        fault("after_read")
    excluded = {r.decode() for r in pipe.smembers(keys.excluded_raters(study_id))}
    return [a for a in batch if a.rater not in excluded]


def _observe(p: _Pass, used: list) -> None:
    """Apply the answers to every learner (refused ones are set aside in ``p.poisoned``)."""
    p.late_answers = sum(learner.closed_round_answers(used) for learner in p.learners.values())
    p.fallback_answers = sum(1 for a in used if a.fallback and not a.skipped)
    p.poisoned.update(observe_batch(p.learners, used))
    p.kept = heldout.Kept().read(used)  # held-out answers (no learner saw them) and validation repeats
    if p.n_read:
        fault("after_observe")
    _sync_items(p)  # a forest finished by this batch starts routing added items


def _read_demand(pipe, p: _Pass) -> None:
    """What the pool refill depends on: expired questions, counters, the previous pass's served
    counts and the raters active now."""
    study_id = p.study.id
    p.expired = questions.expired_questions(pipe, study_id, before=p.now - EXPIRY_GRACE_SECONDS)
    p.counters = {k.decode(): v for k, v in pipe.hgetall(keys.counters(study_id)).items()}
    served_fields = [keys.served_field(label) for label in p.labels]
    *served, last_at = pipe.hmget(keys.engine_stats(study_id), [*served_fields, "last_update_at"])
    p.previous = {name: v for name, v in zip(served_fields, served, strict=True) if v is not None}
    p.previous_at = float(last_at) if last_at is not None else None
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
    in_force = questions.split_in_force(conn, study.id, config)  # (None for fixed shares: no round trip)
    shares = in_force["shares"] if in_force is not None else config.shares()  # the pools sized as they are drawn
    link_delegates(p.learners)  # a learner asking the questions another chooses plans through it
    running = study.status == "running"
    ahead = _ahead(p.active, study.n_items)
    for label, learner in p.learners.items():
        learner.forget(p.expired)
        learner.forget(pruned.get(label, []))
        done = learner.finished or _budget_reached(learner, p.counters)
        if done:
            p.finished.append(label)
        base = max(math.ceil(config.pool_size * shares[label]), math.ceil(ahead * shares[label]))
        target = p.targets[label] = _pool_target(base, label, p.counters, p.previous)
        if done or not running or learner.rounds is not None:
            pooled = questions.pooled_questions(pipe, study.id, label)
            stale, size = (pooled if done or not running else learner.stale(pooled)), len(pooled)
        else:
            # only a planner that works in rounds finds pooled questions stale: the pool's length is
            # enough (reading and decoding the whole pool every pass cost a tenth of a busy worker)
            pooled, stale, size = [], [], questions.pool_length(pipe, study.id, label)
        removed = questions.prune_questions(conn, study.id, label, stale)
        learner.forget(removed)
        pruned.setdefault(label, []).extend(removed)
        p.pruned_now += len(removed)
        depth = size - len(removed)
        wanted = max(0, target - depth) if running and not done else 0
        if learner.algorithm.budget is not None:
            served = int(p.counters.get(keys.counter_field("questions_served", label), 0))
            wanted = min(wanted, max(0, learner.algorithm.budget - served - depth))
        window = learner.algorithm.params.get("window", 1)
        p.planned[label] = learner.plan(wanted, study.n_items, window=window, served=_served(p, label))
        if running and not done:
            _note_ahead(p, label, depth + len(p.planned[label]))
        p.repeats += learner.repeats_planned
        removed_ids = {q["qid"] for q in removed}
        kept = [q for q in pooled if q["qid"] not in removed_ids]
        for _ in range(REPLANS if running and not done else 0):
            if not _replan(conn, p, label, learner, kept, pruned, window):
                break


def _served(p: _Pass, label: str) -> tuple[int, int]:
    """(questions served from the learner's pool, answers given to its questions) so far: what a seeded study's
    held-out draws follow (``Learner.plan``)."""
    return tuple(int(p.counters.get(keys.counter_field(name, label), 0)) for name in ("questions_served", "answers"))


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
    p.planned[label].extend(learner.plan(gap, p.study.n_items, window=window, served=_served(p, label)))
    p.repeats += learner.repeats_planned
    return True


def _changed(p: _Pass, pruned: dict[str, list[dict]]) -> dict[str, bool]:
    """Which learners to save: one nothing happened to keeps its stored state (and version); a learner that chose
    another's questions (``Learner.chooser``) drew them from its own stream, so it is saved too."""
    chose = {learner.chooser for label, learner in p.learners.items() if p.planned[label]}
    return {label: bool(p.n_read or p.expired or pruned.get(label) or p.planned[label] or learner.fit_settled
                        or p.stored[label].version is None
                        or p.items_routed.get(label) or learner.window != p.windows_before[label]
                        or label in chose)
            for label, learner in p.learners.items()}


def _commit(conn: Redis, pipe, p: _Pass, changed: dict[str, bool], summarise: bool) -> tuple[dict[str, Kept], bool]:
    """Queue every write of the pass in one MULTI and EXEC it (raises WatchError if a watched key
    changed). Returns (the stored state of each learner after it, whether the summary was written)."""
    study, study_id, learners = p.study, p.study.id, p.learners
    latency_ms = (time.perf_counter() - p.started) * 1000.0
    truth = known_truth_of(pipe, study) if summarise else None

    pipe.multi()
    saved, state_bytes = dict(p.stored), 0
    for label, learner in learners.items():
        if changed[label]:
            saved[label], size = commit_state(pipe, study_id, label, learner, p.stored[label], conn)
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
    p.kept.write(pipe, study_id)
    health.pass_succeeded(conn, study_id, p.now, pipeline=pipe)
    pipe.zremrangebyscore(keys.active_raters(study_id), "-inf", p.now - 86400)
    pipe.lpush(keys.refresh_latencies(study_id), f"{latency_ms:.3f}")
    pipe.ltrim(keys.refresh_latencies(study_id), 0, LATENCIES_KEPT - 1)
    summary_field = queue_summary(conn, pipe, study, learners, p.stored, p.counters, truth, p.kept) if summarise else {}
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
        fault("before_exec")
    pipe.execute()
    return saved, bool(summary_field)


def _one_pass(conn: Redis, study_id: str, now: float, summary_every: float = 0.0) -> dict:
    """One pass, retried until its EXEC goes through; returns its report (``saved``: the stored state of each
    learner after it, what the after-pass steps start checkpoints of)."""
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
                summarise = summary_due(study_id, summary_every)
                saved, summarised = _commit(conn, pipe, p, _changed(p, pruned), summarise)
            except redis.WatchError:
                forget_cached(study_id)  # the learners may be mutated: the retry starts from the stored state
                continue
            except BaseException:
                forget_cached(study_id)
                raise
            remember(study, saved, p.learners)
            note_pass(study_id, summarised)
            if p.n_read:
                fault("after_exec")
            return {"saved": saved, "applied": p.n_read, "released": len(p.expired), "pruned": p.pruned_now,
                    "planned": sum(len(q) for q in p.planned.values()), "poisoned": len(p.poisoned),
                    "more": p.n_read == MAX_ANSWERS_PER_PASS, "ahead_seconds": p.ahead_seconds}
