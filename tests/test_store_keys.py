"""Redis key and hash-field names stay what existing data was written under, and the Lua scripts
(workers/store/lua/) are found, expanded and run by the names of their headers."""
from __future__ import annotations

import pytest
from helpers import colour_items

from workers.store import keys
from workers.store.config import StudyConfig
from workers.store.lua import Script, source
from workers.store.questions import issue_question
from workers.store.studies import create_study


def test_key_strings_are_the_ones_stored_data_uses():
    # byte for byte: a changed name would lose every study, account and bucket already in Redis
    assert keys.study("s1") == "proxima:{s1}:study"
    assert keys.answers("s1") == "proxima:{s1}:answers"
    assert keys.pool("s1", "anntri") == "proxima:{s1}:pool:anntri"
    assert keys.used_token("s1", "q1") == "proxima:{s1}:used:q1"
    assert keys.rater_stats("s1") == "proxima:{s1}:rater-stats"
    assert keys.outstanding("s1", "r1") == "proxima:{s1}:outstanding:r1"
    assert keys.rater_sessions("s1") == "proxima:{s1}:rater-sessions"
    assert keys.studies() == "proxima:studies"
    assert keys.user("alice") == "proxima:user:alice"
    assert keys.users() == "proxima:users"
    assert keys.login_failures("alice", "10.0.0.1") == "proxima:login-failures:d9c12eb0720772fdc9be0ff2e30e7a4b"
    assert keys.researcher_session("sess-1") == (
        "proxima:researcher-session:abe633f3a47a2758174eabe9160daf36c4b1a33e8642ebf96e8f91c3fcbd5f9c")
    assert keys.rate_rater("s1", "r1") == "proxima:{s1}:rate:rater:82f3e9c695dc6b8d1b11818d"
    assert keys.rate_address("s1", "10.0.0.1") == "proxima:{s1}:rate:addr:f5047344122f0dee9974ba67"
    assert keys.rate_codes("s1", "10.0.0.1") == "proxima:{s1}:rate:addr:f5047344122f0dee9974ba67:codes"
    assert keys.rate_login("10.0.0.1") == "proxima:login-rate:f5047344122f0dee9974ba67"


def test_every_other_study_key_keeps_its_name():
    assert [keys.items("s1"), keys.media("s1"), keys.pool_targets("s1"), keys.finished("s1")] == [
        "proxima:{s1}:items", "proxima:{s1}:media", "proxima:{s1}:pool-targets", "proxima:{s1}:finished"]
    assert [keys.active_raters("s1"), keys.issued("s1"), keys.issued_questions("s1"), keys.raters("s1")] == [
        "proxima:{s1}:active-raters", "proxima:{s1}:issued", "proxima:{s1}:issued:questions", "proxima:{s1}:raters"]
    assert [keys.excluded_raters("s1"), keys.answers_per_minute("s1"), keys.counters("s1"), keys.cursor("s1")] == [
        "proxima:{s1}:excluded-raters", "proxima:{s1}:per-minute", "proxima:{s1}:counters", "proxima:{s1}:cursor"]
    assert [keys.refresh_latencies("s1"), keys.poisoned("s1"), keys.engine_stats("s1"), keys.plan("s1")] == [
        "proxima:{s1}:refresh-ms", "proxima:{s1}:poisoned", "proxima:{s1}:engine:stats", "proxima:{s1}:plan"]
    assert [keys.update_scheduled("s1"), keys.update_lock("s1"), keys.stylesheet("s1")] == [
        "proxima:{s1}:update-scheduled", "proxima:{s1}:update-lock", "proxima:{s1}:stylesheet"]
    assert [keys.engine("s1", "a"), keys.engine_journal("s1", "a"), keys.engine_checkpoint("s1", "a")] == [
        "proxima:{s1}:engine:a", "proxima:{s1}:engine-journal:a", "proxima:{s1}:engine-checkpoint:a"]
    assert [keys.model("s1", "m"), keys.anonymous_sessions("s1", "10.0.0.1"), keys.repeats("s1", "r1")] == [
        "proxima:{s1}:model:m", "proxima:{s1}:anonymous-sessions:10.0.0.1", "proxima:{s1}:repeats:r1"]
    assert keys.request_durations() == "proxima:metrics:request_durations"


def test_hash_field_names_are_the_ones_stored_data_uses():
    assert keys.rater_field("p-7", "answers") == "p-7:answers"
    assert keys.split_rater_field("p:7:catch_failed") == ("p:7", "catch_failed")
    assert keys.counter_field("questions_served", "anntri") == "questions_served:anntri"
    assert keys.served_field("anntri") == "served:anntri"


def test_every_script_file_expands_and_names_its_keys_and_arguments():
    accept = Script("accept.lua")
    assert "--#include" not in accept.text
    assert accept.text.count("local function issue(") == 1 and "local function next_question(" in accept.text
    assert accept.key_names[:2] == ("used_token", "issued") and accept.more_keys and accept.more_args
    assert "return next_question(KEYS, ARGV, 0, 0)" in source("next.lua")
    with pytest.raises(TypeError, match="missing \\['entry', 'ttl'\\], unknown \\['extra'\\]"):
        Script("queue_repeat.lua").ordered(keys={"repeats": "a", "rater_stats": "b"},
                                           args={"rater": "r", "most": 1, "extra": 2})
    with pytest.raises(TypeError, match="takes no keys beyond"):
        Script("queue_repeat.lua").ordered(keys={"repeats": "a", "rater_stats": "b"},
                                           args={"rater": "r", "most": 1, "entry": "e", "ttl": 1}, more_keys=["c"])


def test_a_script_runs_again_after_redis_forgets_it(conn):
    config = StudyConfig.from_dict({"name": "keys", "algorithms": [{"algorithm": "anntri"}]})
    create_study(conn, config, colour_items(10), study_id="keys")
    assert issue_question(conn, "keys", config, 10, "r1", now=1.0, expires_at=100.0)[0]["fallback"]
    conn.script_flush()  # as after a restart: EVALSHA answers NOSCRIPT, the script is loaded again
    question, _, _ = issue_question(conn, "keys", config, 10, "r1", now=1.0, expires_at=100.0)
    assert conn.zscore(keys.issued("keys"), question["qid"]) == 100.0
    assert int(conn.hget(keys.counters("keys"), keys.counter_field("questions_served", "anntri"))) == 2
