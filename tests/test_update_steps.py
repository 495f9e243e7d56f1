"""An update job is its lock, its passes and the steps around them (``workers.jobs.steps``): one ordered list,
each step with its moment, run from one place."""
from __future__ import annotations

import pytest
from helpers import answer, fetch_question, index_of

from workers.jobs import learner_cache, steps, update, update_pass
from workers.store import keys


@pytest.fixture(autouse=True)
def empty_cache():
    learner_cache.forget_cached()
    yield
    learner_cache.forget_cached()


def recorded(monkeypatch) -> list[tuple[str, str]]:
    """Every step run from now on, as (moment, name), each step still doing its work."""
    ran = []
    monkeypatch.setattr(steps, "STEPS", tuple(
        steps.Step(s.name, s.when, lambda job, s=s: (ran.append((s.when, s.name)), s.run(job))) for s in steps.STEPS))
    return ran


def one_answer(client, study_id):
    question = fetch_question(client, study_id)
    response = answer(client, question, choice=index_of(question["candidates"][0]), study_id=study_id)
    assert response.status_code == 201, response.get_json()


def names(when: str) -> list[tuple[str, str]]:
    return [(s.when, s.name) for s in steps.STEPS if s.when == when]


def test_one_answers_job_runs_its_steps_around_its_pass_in_the_declared_order(client, conn, study_id,
                                                                             monkeypatch):
    one_answer(client, study_id)
    ran = recorded(monkeypatch)
    conn.delete(keys.update_scheduled(study_id))
    total = update.drain_study(conn, study_id, linger=0.0)
    assert total["applied"] == 1 and total["passes"] == 1
    assert ran == (names(steps.BEFORE_PASS) + names(steps.AFTER_PASS) + names(steps.SETTLE)
                   + names(steps.JOB_END))


def test_a_job_that_hands_over_leaves_the_settling_steps_to_the_next_job(client, conn, study_id, monkeypatch):
    one_answer(client, study_id)
    ran = recorded(monkeypatch)
    conn.set(keys.update_scheduled(study_id), "1")  # a newer answer queued the next job
    update.drain_study(conn, study_id, linger=0.0)
    assert [when for when, _ in ran].count(steps.SETTLE) == 0
    assert ran[-len(names(steps.JOB_END)):] == names(steps.JOB_END)


def test_a_failed_pass_still_runs_the_job_end_steps(client, conn, study_id, monkeypatch):
    one_answer(client, study_id)
    ran = recorded(monkeypatch)

    def broken(*args, **kwargs):
        raise RuntimeError("a broken pass")

    monkeypatch.setattr(update_pass, "_one_pass", broken)
    with pytest.raises(RuntimeError, match="a broken pass"):
        update.drain_study(conn, study_id, linger=0.0)
    assert ran == names(steps.BEFORE_PASS) + names(steps.JOB_END)


def test_a_pass_of_its_own_runs_the_job_end_steps_when_it_settles(client, conn, study_id, monkeypatch):
    one_answer(client, study_id)
    ran = recorded(monkeypatch)
    update_pass.apply_new_answers(conn, study_id, settle=False)
    assert ran == names(steps.BEFORE_PASS) + names(steps.AFTER_PASS)
    ran.clear()
    update_pass.apply_new_answers(conn, study_id)
    assert ran == names(steps.BEFORE_PASS) + names(steps.AFTER_PASS) + names(steps.JOB_END)


def test_every_step_has_a_known_moment():
    assert {s.when for s in steps.STEPS} == set(steps.MOMENTS)
    assert len({s.name for s in steps.STEPS}) == len(steps.STEPS)
    with pytest.raises(ValueError, match="unknown moment"):
        steps.Step("never", "sometime", lambda job: None)
