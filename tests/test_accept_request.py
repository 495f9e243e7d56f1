"""Accepting an answer under the study's rules (``workers.store.answers.AcceptRequest``): the request is built
from the study's config in one place, and what an answer calls for besides being stored (exclusion by the catch
rule, the self-agreement judgement, the rater's completion) is done by the answer script itself
(lua/accept.lua), with no round trip after it."""
from __future__ import annotations

import time

import pytest

from engine.kinds import get_kind
from workers.store import keys
from workers.store.answers import AcceptRequest, AnswerRefused, accept_and_issue, judge_self_agreement
from workers.store.config import StudyConfig
from workers.store.questions import StudyGuard


def catch(qid: str) -> dict:
    return {"qid": qid, "kind": "triplet", "head": 0, "candidates": [1, 2], "algorithm": "catch", "catch": True}


def repeat(qid: str) -> dict:
    return {"qid": "v" + qid, "kind": "triplet", "head": 0, "candidates": [2, 1], "algorithm": "repeat",
            "catch": True, "repeat_of": 1}


def accept(conn, question: dict, request: AcceptRequest, stats: tuple[str, ...], rater: str = "r1") -> None:
    accept_and_issue(conn, "s", question, rater, 1, time.time(), 900, request, stats=stats)


def stat(conn, rater: str, name: str) -> bytes | None:
    return conn.hget(keys.rater_stats("s"), keys.rater_field(rater, name))


def test_an_accept_request_built_from_a_study_carries_the_studys_rules():
    config = StudyConfig.from_dict({"name": "Rules", "limits": {"max_questions_per_rater": 40, "answer_budget": 900,
                                                                 "min_response_ms": 700},
                                    "attention": {"flag_action": "exclude", "validation_repeats": 10,
                                                  "min_self_agreement": 0.7}})
    guard = StudyGuard(fingerprint="f")
    request = AcceptRequest.live(config, get_kind("triplet"), 3600, guard=guard)
    assert (request.max_per_rater, request.budget, request.min_response_ms) == (40, 900, 700)
    assert request.flag_rule == config.catch_rule() and request.stop_flagged and request.exclude_flagged
    assert (request.repeats_to_judge, request.min_self_agreement) == (8, 0.7)
    assert request.require_held and request.guard is guard and request.then is None and request.used_ttl == 3600
    marked = AcceptRequest.live(StudyConfig.from_dict({"name": "M", "attention": {"flag_action": "mark"}}),
                                get_kind("triplet"), 60)
    assert not marked.exclude_flagged and not marked.stop_flagged and marked.repeats_to_judge is None
    assert request.complete_refused and request.complete_at is None
    late = AcceptRequest.live(config, get_kind("triplet"), 3600, late=True)
    assert late.complete_at == config.limits.answers_for_code == 40
    with pytest.raises(ValueError, match="flag_rule"):
        AcceptRequest(used_ttl=60, exclude_flagged=True)


@pytest.mark.parametrize("exclude", [True, False])
def test_the_answer_script_excludes_a_rater_the_catch_rule_flags_after_a_failed_catch_trial(conn, exclude):
    request = AcceptRequest(used_ttl=60, flag_rule=(1, 0.0, 1), exclude_flagged=exclude)
    accept(conn, catch("c1"), request, ("catch", "catch_failed"))  # one miss: allowed
    assert stat(conn, "r1", "flagged") is None and not conn.sismember(keys.excluded_raters("s"), "r1")
    accept(conn, catch("c2"), request, ("catch", "catch_failed"))
    assert stat(conn, "r1", "flagged") == b"1"
    assert bool(conn.sismember(keys.excluded_raters("s"), "r1")) is exclude


def test_only_a_failed_catch_trial_excludes_a_rater_the_rule_flags(conn):
    conn.hset(keys.rater_stats("s"), mapping={keys.rater_field("r1", "catch"): 3,
                                              keys.rater_field("r1", "catch_failed"): 3})
    request = AcceptRequest(used_ttl=60, flag_rule=(1, 0.0, 1), exclude_flagged=True)
    accept(conn, catch("c1"), request, ("catch",))  # passed: flagged again by the rule, not excluded
    assert stat(conn, "r1", "flagged") == b"1" and not conn.sismember(keys.excluded_raters("s"), "r1")


def test_the_answer_script_judges_self_agreement_once_after_the_repeat_that_reaches_the_count(conn):
    request = AcceptRequest(used_ttl=60, repeats_to_judge=3, min_self_agreement=0.6)
    for rater, agreed in (("careless", ()), ("careful", ("repeat_agreed",))):
        accept(conn, repeat(rater + "1"), request, ("repeats",), rater)
        accept(conn, repeat(rater + "2"), request, ("repeats", *agreed), rater)
        assert stat(conn, rater, "repeats_judged") is None
        accept(conn, catch(rater + "c"), request, ("catch",), rater)  # no repeat: no judgement
        assert stat(conn, rater, "repeats_judged") is None
        accept(conn, repeat(rater + "3"), request, ("repeats", *agreed), rater)
        assert stat(conn, rater, "repeats_judged") == b"3"
    assert stat(conn, "careless", "flagged") == b"1" and stat(conn, "careful", "flagged") is None
    accept(conn, repeat("careful4"), request, ("repeats",), "careful")  # judged once: 2 of 4 flags no more
    assert stat(conn, "careful", "repeats_judged") == b"3" and stat(conn, "careful", "flagged") is None
    assert not judge_self_agreement(conn, "s", "careful", 3, 0.6)


def test_no_self_agreement_is_judged_for_a_study_that_never_judges_it(conn):
    request = AcceptRequest(used_ttl=60)
    for n in range(4):
        accept(conn, repeat(f"r{n}"), request, ("repeats",))
    assert stat(conn, "r1", "repeats_judged") is None and stat(conn, "r1", "flagged") is None
    assert not judge_self_agreement(conn, "s", "r1", None, 0.6)
    assert judge_self_agreement(conn, "s", "r1", 4, 0.6) and stat(conn, "r1", "flagged") == b"1"


@pytest.mark.parametrize("complete", [True, False])
def test_an_answer_refused_at_the_raters_limit_completes_the_rater_in_the_script(conn, complete):
    request = AcceptRequest(used_ttl=60, max_per_rater=1, complete_refused=complete)
    accept(conn, catch("c1"), request, ("catch",))
    assert stat(conn, "r1", "completed") is None
    with pytest.raises(AnswerRefused, match="rater_limit"):
        accept(conn, catch("c2"), request, ("catch",))
    assert (stat(conn, "r1", "completed") == b"1") is complete


def test_an_answer_refused_at_the_studys_budget_completes_the_rater_in_the_script(conn):
    request = AcceptRequest(used_ttl=60, budget=1, complete_refused=True)
    accept(conn, catch("c1"), request, ("catch",), "first")
    with pytest.raises(AnswerRefused, match="budget"):
        accept(conn, catch("c2"), request, ("catch",), "second")
    assert stat(conn, "second", "completed") == b"1" and stat(conn, "first", "completed") is None


def test_a_late_answer_completes_the_rater_once_their_answers_reach_the_count_of_a_code(conn):
    request = AcceptRequest(used_ttl=60, complete_at=2)
    first = accept_and_issue(conn, "s", catch("c1"), "r1", 1, time.time(), 900, request, stats=("catch",))
    assert not first.completed and stat(conn, "r1", "completed") is None
    second = accept_and_issue(conn, "s", catch("c2"), "r1", 1, time.time(), 900, request, stats=("catch",))
    assert second.completed and stat(conn, "r1", "completed") == b"1" and second.next is None
    # a rater id another browser session holds: the answer is kept, nothing more is done for the session
    conn.hset(keys.rater_sessions("s"), "r2", "other-nonce")
    held = AcceptRequest(used_ttl=60, complete_at=1, guard=StudyGuard(rater="r2", nonce="mine"))
    replaced = accept_and_issue(conn, "s", catch("c3"), "r2", 1, time.time(), 900, held, stats=("catch",))
    assert not replaced.completed and replaced.next.status == "replaced" and stat(conn, "r2", "completed") is None
