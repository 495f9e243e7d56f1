"""The update pass keeps learners in memory between passes: it reuses them only while the stored
state is the one it saved, never after a failed pass, and it gives the same engine states as a pass
that reloads every time. Also: pools sized for the demand, and states not rewritten when nothing
happened to them.
"""
from __future__ import annotations

import numpy as np
import pytest
from helpers import answer, colour_items, fetch_question, index_of

from workers.jobs import learner_cache, update_pass
from workers.jobs.learners import Learner
from workers.store import engine_state, keys, questions
from workers.store.answers import read_answers
from workers.store.config import StudyConfig
from workers.store.studies import create_study, get_study


@pytest.fixture(autouse=True)
def empty_cache():
    learner_cache.forget_cached()
    yield
    learner_cache.forget_cached()


def give(client, n, study_id="colours"):
    """n answers through the API, each to the question the previous answer's response handed over."""
    question = fetch_question(client, study_id)
    for _ in range(n):
        head, (a, b) = index_of(question["head"]), [index_of(c) for c in question["candidates"]]
        response = answer(client, question, choice=a if abs(a - head) < abs(b - head) else b, study_id=study_id)
        assert response.status_code == 201, response.get_json()
        question = response.get_json()["next"]


def stats(conn, study_id="colours") -> dict:
    return {k.decode(): v.decode() for k, v in conn.hgetall(keys.engine_stats(study_id)).items()}


def test_a_second_pass_uses_the_learner_kept_in_memory(client, conn, study_id):
    update_pass.apply_new_answers(conn, study_id)
    give(client, 5)
    update_pass.apply_new_answers(conn, study_id)
    assert stats(conn)["passes_from_memory"] == "1"
    assert engine_state.load(conn, study_id, "random_triplets")["n_answers"] == 5


def test_a_kept_learner_is_not_used_after_another_writer_saved_a_newer_state(client, conn, study_id):
    give(client, 4)
    update_pass.apply_new_answers(conn, study_id)
    # another writer (a rebuild, a restore, another worker) replaces the state: here one that has
    # seen every answer twice, which no learner of this process has
    study = get_study(conn, study_id)
    alg = study.config.algorithms[0]
    other = Learner.from_state(alg, study.config, engine_state.load(conn, study_id, alg.label))
    other.observe(read_answers(conn, study_id))
    with conn.pipeline(transaction=True) as pipe:
        engine_state.save(pipe, study_id, alg.label, other.to_state())
        pipe.execute()
    give(client, 3)
    update_pass.apply_new_answers(conn, study_id)
    assert engine_state.load(conn, study_id, alg.label)["n_answers"] == 4 + 4 + 3  # built on the other writer's
    assert "passes_from_memory" not in stats(conn)


def test_a_pass_whose_exec_failed_leaves_no_mutated_learner_behind(client, conn, study_id, monkeypatch):
    update_pass.apply_new_answers(conn, study_id)
    give(client, 6)
    observe = update_pass.observe_batch
    calls = []

    def observe_then_race(learners, batch):
        calls.append(len(batch))
        result = observe(learners, batch)  # mutates the learners kept in memory
        if len(calls) == 1:  # another client touches the watched cursor: this pass's EXEC fails
            conn.set(keys.cursor(study_id), conn.get(keys.cursor(study_id)) or b"0-0")
        return result

    monkeypatch.setattr(update_pass, "observe_batch", observe_then_race)
    summary = update_pass.apply_new_answers(conn, study_id)
    assert calls == [6, 6]  # applied, refused at EXEC, applied again
    assert summary["applied"] == 6
    state = engine_state.load(conn, study_id, "random_triplets")
    assert state["n_answers"] == 6  # once each: the retry started from the stored state
    assert int(state["shown"].sum()) == 2 * 6
    # and the learner now kept is the one that was saved
    give(client, 2)
    update_pass.apply_new_answers(conn, study_id)
    assert engine_state.load(conn, study_id, "random_triplets")["n_answers"] == 8


def test_a_pass_that_raised_drops_the_kept_learners(client, conn, study_id, monkeypatch):
    update_pass.apply_new_answers(conn, study_id)
    give(client, 3)

    def broken(*args, **kwargs):
        raise RuntimeError("redis went away")

    monkeypatch.setattr(questions, "expired_questions", broken)
    with pytest.raises(RuntimeError):
        update_pass.apply_new_answers(conn, study_id)
    assert learner_cache.cached_study(study_id) is None
    monkeypatch.undo()
    update_pass.apply_new_answers(conn, study_id)
    assert engine_state.load(conn, study_id, "random_triplets")["n_answers"] == 3


def test_a_state_nothing_happened_to_is_not_saved_again(client, conn, study_id):
    update_pass.apply_new_answers(conn, study_id)
    version = engine_state.load_version(conn, study_id, "random_triplets")
    assert version is not None
    update_pass.apply_new_answers(conn, study_id)  # no answer, the pool full: nothing to change
    assert engine_state.load_version(conn, study_id, "random_triplets") == version
    give(client, 1)
    update_pass.apply_new_answers(conn, study_id)
    assert engine_state.load_version(conn, study_id, "random_triplets") != version


def test_kept_learners_and_reloaded_learners_reach_the_same_state(app, conn):
    def run(study_id, keep):
        config = StudyConfig.from_dict({
            "name": study_id, "question_kind": "rating", "random_state": 3, "pool_size": 4, "attention": {"rate": 0},
            "rating": {"min": 0, "max": 1, "step": None, "widget": "slider"},
            "algorithms": [{"algorithm": "anntri", "params": {"sigma": 0.1, "delta": 0.1}}]})
        create_study(conn, config, colour_items(8), study_id=study_id)
        client = app.test_client()
        rng = np.random.default_rng(0)
        update_pass.apply_new_answers(conn, study_id)
        question = fetch_question(client, study_id)
        for n in range(120):
            i, j = (index_of(item) for item in question["items"])
            value = float(np.clip(1 - abs(i - j) / 7 + rng.normal(0, 0.05), 0, 1))
            response = client.post(f"/api/studies/{study_id}/answers",
                                   json={"token": question["token"], "value": value})
            assert response.status_code == 201
            question = response.get_json()["next"]
            if n % 3 == 2:
                if not keep:
                    learner_cache.forget_cached()
                update_pass.apply_new_answers(conn, study_id)
            if question is None or question.get("fallback"):
                break
        return engine_state.load(conn, study_id, "anntri"), stats(conn, study_id)

    kept, kept_stats = run("kept", keep=True)
    reloaded, reloaded_stats = run("reloaded", keep=False)
    assert int(kept_stats["passes_from_memory"]) > 10 and "passes_from_memory" not in reloaded_stats
    for name in ("count", "mean", "pending", "upper", "lower", "status", "round_issued", "neighbors"):
        np.testing.assert_array_equal(kept[name], reloaded[name], err_msg=name)
    assert kept["params"] == reloaded["params"] and kept["n_issued"] == reloaded["n_issued"]


def test_a_pool_is_filled_for_the_questions_taken_since_the_previous_pass(client, conn, study_id):
    update_pass.apply_new_answers(conn, study_id)
    assert int(conn.hget(keys.pool_targets(study_id), "random_triplets")) == 8  # pool_size
    give(client, 20)  # 21 questions taken from a pool of 8: most were fallbacks
    update_pass.apply_new_answers(conn, study_id)
    target = int(conn.hget(keys.pool_targets(study_id), "random_triplets"))
    assert target == int(update_pass.DEMAND_HEADROOM * 21 + 0.999)
    assert conn.llen(keys.pool(study_id, "random_triplets")) == target
    update_pass.apply_new_answers(conn, study_id)  # nothing taken since: back to pool_size
    assert int(conn.hget(keys.pool_targets(study_id), "random_triplets")) == 8


def test_a_pool_holds_questions_ahead_for_every_active_rater_up_to_half_the_items(conn):
    """A pool of one question per rater runs dry in half a second of a fast crowd: each active rater
    gets AHEAD_PER_RATER questions planned ahead, never more than half the items (the staleness of
    planning far ahead), never fewer than one per rater or the study's pool size."""
    import time

    config = StudyConfig.from_dict({"name": "Wide", "algorithms": [{"algorithm": "random_triplets"}], "pool_size": 8,
                                    "random_state": 0, "attention": {"rate": 0}})
    study_id = create_study(conn, config, colour_items(400), study_id="wide")

    def target_with(active: int) -> int:
        conn.delete(keys.active_raters(study_id))
        if active:
            now = time.time()
            conn.zadd(keys.active_raters(study_id), {f"r{i}": now for i in range(active)})
        update_pass.apply_new_answers(conn, study_id)
        target = int(conn.hget(keys.pool_targets(study_id), "random_triplets"))
        assert conn.llen(keys.pool(study_id, "random_triplets")) == target
        return target

    assert update_pass.AHEAD_PER_RATER == 5
    assert target_with(1) == 8  # the pool size
    assert target_with(30) == 150  # five each
    assert target_with(100) == 200  # half the items
    assert target_with(300) == 300  # one each
    assert [update_pass._ahead(a, n) for a, n in [(200, 1000), (200, 50000), (1000, 1000), (3, 10)]] == [
        500, 1000, 1000, 5]


def test_a_fast_crowd_is_applied_in_fewer_larger_passes(conn, monkeypatch):
    """A pass says how long its pools last at the pace raters took questions since the previous pass
    (the pool's depth x the time between the passes / the questions taken); the next pass of the job
    waits AHEAD_SHARE of that, at least PASS_INTERVAL_SECONDS and at most MAX_PASS_INTERVAL_SECONDS
    (each pass costs ~10 ms whatever it applies: a fast crowd applied 30 ms apart kept a worker busy)."""
    import time

    from workers.jobs import update

    config = StudyConfig.from_dict({"name": "Wide", "algorithms": [{"algorithm": "random_triplets"}], "pool_size": 8,
                                    "random_state": 0, "attention": {"rate": 0}})
    study_id = create_study(conn, config, colour_items(400), study_id="wide")
    t0 = time.time()
    conn.zadd(keys.active_raters(study_id), {f"r{i}": t0 for i in range(30)})
    assert update_pass.apply_new_answers(conn, study_id, now=t0)["ahead_seconds"] is None  # no pace known yet
    pool = keys.pool(study_id, "random_triplets")
    assert conn.llen(pool) == 150  # five ahead for each of 30 raters
    for _ in range(60):  # raters take 60 questions in 2 s
        conn.lpop(pool)
    conn.hincrby(keys.counters(study_id), keys.counter_field("questions_served", "random_triplets"), 60)
    summary = update_pass.apply_new_answers(conn, study_id, now=t0 + 2.0)
    assert conn.llen(pool) == 150
    assert summary["ahead_seconds"] == pytest.approx(150 * 2.0 / 60)  # 5 s of questions
    assert update_pass.apply_new_answers(conn, study_id, now=t0 + 3.0)["ahead_seconds"] is None  # none taken

    interval = update.PASS_INTERVAL_SECONDS
    assert (update.AHEAD_SHARE, update.MAX_PASS_INTERVAL_SECONDS) == (0.25, 0.25)
    assert update._pass_interval(interval, None) == interval
    assert update._pass_interval(interval, 0.05) == interval
    assert update._pass_interval(interval, 0.4) == pytest.approx(0.1)
    assert update._pass_interval(interval, 5.0) == 0.25
    assert update._pass_interval(0.5, 5.0) == 0.5  # a longer interval asked for stands

    # the job spaces its passes so: a crowd whose pools last 5 s gets a pass every 0.25 s, not every 30 ms
    began = []
    monkeypatch.setattr(update, "apply_new_answers", lambda *a, **k: (began.append(time.monotonic()), {
        "applied": 1, "passes": 1, "ahead_seconds": 5.0})[1])
    monkeypatch.setattr(update, "_has_new_answers", lambda conn, sid: True)
    total = update._drain_passes(conn, study_id, None, job_seconds=0.6, linger=1.0, interval=interval)
    assert total["applied"] == len(began) and 2 <= len(began) <= 3 and "ahead_seconds" not in total
    assert all(b - a >= 0.25 for a, b in zip(began, began[1:], strict=False))

    # ... and a study whose answers stopped is left after the linger, not after the wait between passes
    monkeypatch.setattr(update, "MAX_PASS_INTERVAL_SECONDS", 60.0)
    monkeypatch.setattr(update, "_has_new_answers", lambda conn, sid: False)
    monkeypatch.setattr(update, "apply_new_answers", lambda *a, **k: (began.append(time.monotonic()), {
        "applied": 1, "passes": 1, "ahead_seconds": 1000.0})[1])
    began.clear()
    t0 = time.monotonic()
    update._drain_passes(conn, study_id, None, job_seconds=120.0, linger=0.05, interval=interval)
    assert len(began) == 1 and time.monotonic() - t0 < 30.0  # (the wait asked for was 60 s)


def test_a_pass_reports_how_long_its_shortest_lasting_pool_lasts(conn):
    """With two algorithms, the pool that runs dry first sets the pace of the passes (the other would leave it
    empty between passes: random fallbacks)."""
    import time

    config = StudyConfig.from_dict({"name": "Two", "pool_size": 8, "random_state": 0, "attention": {"rate": 0},
                                    "algorithms": [{"algorithm": "random_triplets", "label": "fast"},
                                                   {"algorithm": "random_triplets", "label": "slow"}]})
    study_id = create_study(conn, config, colour_items(400), study_id="two-pools")
    t0 = time.time()
    conn.zadd(keys.active_raters(study_id), {f"r{i}": t0 for i in range(30)})
    update_pass.apply_new_answers(conn, study_id, now=t0)
    depth = conn.llen(keys.pool(study_id, "fast"))
    assert depth == conn.llen(keys.pool(study_id, "slow")) == 75  # the questions planned ahead, shared
    for label, taken in (("fast", 30), ("slow", 6)):  # in 2 s: the fast pool lasts 5 s, the slow one 25 s
        pool = keys.pool(study_id, label)
        for _ in range(taken):
            conn.lpop(pool)
        conn.hincrby(keys.counters(study_id), keys.counter_field("questions_served", label), taken)
    summary = update_pass.apply_new_answers(conn, study_id, now=t0 + 2.0)
    assert summary["ahead_seconds"] == pytest.approx(depth * 2.0 / 30)


def test_a_pass_records_the_memory_the_study_takes(client, conn, study_id, app):
    from webapp.stats import study_stats

    give(client, 6)
    update_pass.apply_new_answers(conn, study_id)
    figures = stats(conn)
    # the summary (and with it the memory figures) goes out with the first pass of a job
    assert int(figures["memory_redis_bytes"]) > 0
    give(client, 2)
    update_pass.apply_new_answers(conn, study_id)
    study = get_study(conn, study_id)
    engine = study_stats(conn, study)["engine"]
    assert engine["memory_redis_bytes"] > 0 and engine["memory_engine_bytes"] > 0


@pytest.mark.parametrize("job_seconds, successor, settles", [(0.0, True, False), (0.0, False, True),
                                                              (60.0, False, True), (60.0, True, False)])
def test_a_job_cut_by_its_time_while_answers_keep_coming_hands_over_unsettled(client, conn, study_id, monkeypatch,
                                                                              job_seconds, successor, settles):
    """A job whose time is up, or that a lull ended, while newer answers queued the next job leaves the
    last answer check, the summary and a checkpoint still being written to that job, so no pass waits on
    them; a job ending without one (its time up with no newer answer, or answers stopped) settles all
    three."""
    from workers.jobs import checkpoints, rater_checks, summary, update

    give(client, 3)
    done = []
    monkeypatch.setattr(rater_checks, "settle", lambda conn, sid: done.append(("check", sid)))
    monkeypatch.setattr(summary, "write_summary", lambda conn, sid: done.append(("summary", sid)))
    waited = []  # whether the job waited for checkpoints still being written (the next job's passes do not)
    monkeypatch.setattr(checkpoints, "settle_checkpoints", lambda conn, sid, wait=True: waited.append(wait))
    conn.delete(keys.update_scheduled(study_id))
    if successor:
        conn.set(keys.update_scheduled(study_id), "1")  # what accepting a newer answer sets (and queues a job)
    total = update.drain_study(conn, study_id, job_seconds=job_seconds, linger=0.0)
    assert total["applied"] == 3
    assert done == ([("check", study_id), ("summary", study_id)] if settles else [])
    assert waited[-1] is settles and not any(waited[:-1])  # only the job's end waits (before a pass never)


def test_settling_stops_waiting_for_the_answer_check_when_newer_answers_queued_the_next_job(conn, study_id,
                                                                                          monkeypatch):
    """The last answer check of a job waits for the one running beside the passes, unless newer answers
    queued the next job meanwhile: that job checks them, and its passes must not wait (at 50,000 items
    the wait emptied the pools for 10 s at a time)."""
    from workers.jobs import rater_checks

    waits, started = [], []
    monkeypatch.setattr(rater_checks.fits, "running_beside", lambda key: True)  # a check runs beside
    monkeypatch.setattr(rater_checks.time, "sleep", lambda s: (waits.append(s), conn.set(
        keys.update_scheduled(study_id), "1")))  # a newer answer arrives while it waits
    monkeypatch.setattr(rater_checks, "after_pass", lambda *a: started.append(a))
    conn.delete(keys.update_scheduled(study_id))
    rater_checks.settle(conn, study_id)
    assert len(waits) == 1 and not started  # it waited until the answer came, then left it to the next job
    waits.clear()
    rater_checks.settle(conn, study_id)
    assert not waits and not started
