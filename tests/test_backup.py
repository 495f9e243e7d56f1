"""`proxima backup` / `proxima restore`: a study round-trips through a portable NDJSON file into a
fresh Redis, and `rebuild` there learns the same graph; bad files are refused naming the line."""
from __future__ import annotations

import json
import random
import time

import pytest
import redis
from click.testing import CliRunner

from webapp.cli import main
from workers.jobs.update_pass import apply_new_answers
from workers.results.exports import nn_graph
from workers.store import keys
from workers.store.answers import accept_answer, read_answers
from workers.store.backup import FORMAT, VERSION, BackupError, read_backup, restore_study, set_aside_answers
from workers.store.config import StudyConfig
from workers.store.questions import issue_question
from workers.store.studies import Item, create_study, get_items, get_media, get_study, get_stylesheet

N_ITEMS = 8


def make_study(conn, study_id="shapes", with_media=True) -> str:
    """Image items with media bytes; ANNTri on triplet-derived questions beside random triplets."""
    config = StudyConfig.from_dict({
        "name": "Shapes", "random_state": 3, "pool_size": 6,
        "algorithms": [{"algorithm": "anntri", "params": {"k": 1, "sigma": 0.5}},
                       {"algorithm": "random_triplets", "label": "rt"}],
    })
    items = [Item(id=f"shape-{i}", kind="image", media_type="image/png", label="ab"[i % 2]) for i in range(N_ITEMS)]
    media = {i: bytes([137, 80, 78, 71, i, 0, 255, i * 7 % 256]) * 3 for i in range(N_ITEMS)} if with_media else None
    return create_study(conn, config, items, media, study_id=study_id)


def give_answers(conn, study_id: str, n: int, raters=("r1", "r2", "r3"), seed: int = 0) -> list[str]:
    """``n`` answers through the same issue/accept path the web app uses; returns their ids."""
    rng = random.Random(seed)
    study = get_study(conn, study_id)
    ids = []
    for i in range(n):
        rater = raters[i % len(raters)]
        now = time.time()
        question, _, _ = issue_question(conn, study_id, study.config, study.n_items, rater, now=now,
                                        expires_at=now + 600)
        answer_id, _ = accept_answer(conn, study_id, question, rater, rng.choice(question["candidates"]),
                                     issued_at=now, response_ms=900 + i, used_ttl=3600)
        ids.append(answer_id)
    return ids


def poison(conn, study_id: str, label: str = "rt", qid: str = "poison-1") -> str:
    """A logged answer its engine refuses: an item index past the end of the study."""
    question = {"qid": qid, "kind": "triplet", "head": 0, "candidates": [1, N_ITEMS + 5], "algorithm": label,
                "catch": True}
    answer_id, _ = accept_answer(conn, study_id, question, "mallory", N_ITEMS + 5, issued_at=time.time(),
                                 response_ms=500, used_ttl=3600)
    return answer_id


def invoke(args, url, **kwargs):
    return CliRunner().invoke(main, args, env={"REDIS_URL": url}, catch_exceptions=False, **kwargs)


def graph_without_time(conn, study_id, algorithm=None):
    doc = nn_graph(conn, study_id, algorithm)
    doc.pop("created_at")
    doc.pop("study")
    return doc


def test_backup_restores_study_log_items_and_config_into_a_fresh_instance_and_rebuild_gives_the_same_graph(
        conn, redis_url, fresh_redis, tmp_path):
    study_id = make_study(conn)
    give_answers(conn, study_id, 30)
    poisoned = poison(conn, study_id)
    give_answers(conn, study_id, 10, raters=("r4",), seed=1)
    conn.sadd(keys.excluded_raters(study_id), "r2")
    conn.hset(keys.rater_stats(study_id), "r1:debrief", "Les formes étaient claires ✓")
    apply_new_answers(conn, study_id)
    assert invoke(["rebuild", study_id], redis_url).exit_code == 0

    backup_file = tmp_path / "shapes.ndjson"
    result = invoke(["backup", study_id, "-o", str(backup_file)], redis_url)
    assert result.exit_code == 0, result.output
    lines = backup_file.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    assert header["format"] == FORMAT and header["version"] == VERSION and header["study"] == study_id
    assert header["counts"] == {"items": N_ITEMS, "answers": 41, "set_aside": 1, "excluded_raters": 1, "removed": 0}
    assert all(isinstance(json.loads(line), dict) for line in lines)  # NDJSON: one JSON object per line

    result = invoke(["restore", str(backup_file)], fresh_redis)
    assert result.exit_code == 0, result.output
    assert "41 answers, 1 set aside" in result.output
    fresh = redis.Redis.from_url(fresh_redis)
    try:
        # the log, with its stream ids, in order
        assert fresh.xrange(keys.answers(study_id)) == conn.xrange(keys.answers(study_id))
        assert get_items(fresh, study_id) == get_items(conn, study_id)
        assert all(get_media(fresh, study_id, i) == get_media(conn, study_id, i) for i in range(N_ITEMS))
        assert get_study(fresh, study_id) == get_study(conn, study_id)
        assert fresh.smembers(keys.excluded_raters(study_id)) == {b"r2"}
        assert [a["answer_id"] for a in set_aside_answers(fresh, study_id)] == [poisoned]
        for name in (keys.counters, keys.rater_stats, keys.answers_per_minute):
            assert fresh.hgetall(name(study_id)) == conn.hgetall(name(study_id))
        # restore ran rebuild: the same learned graphs as the original's rebuild
        for label in ("anntri", "rt"):
            assert graph_without_time(fresh, study_id, label) == graph_without_time(conn, study_id, label)
        assert graph_without_time(fresh, study_id)["edges"]  # the graph is not trivially empty
    finally:
        fresh.close()


def test_restore_refuses_an_existing_study_unless_given_a_new_id(conn, redis_url, tmp_path):
    study_id = make_study(conn, with_media=False)
    give_answers(conn, study_id, 5)
    backup_file = tmp_path / "b.ndjson"
    assert invoke(["backup", study_id, "-o", str(backup_file)], redis_url).exit_code == 0

    result = CliRunner().invoke(main, ["restore", str(backup_file)], env={"REDIS_URL": redis_url})
    assert result.exit_code != 0 and "already exists" in result.output and "--as" in result.output

    result = invoke(["restore", str(backup_file), "--as", "shapes-copy", "--no-rebuild"], redis_url)
    assert result.exit_code == 0, result.output
    assert [a.id for a in read_answers(conn, "shapes-copy")] == [a.id for a in read_answers(conn, study_id)]
    assert conn.sismember(keys.studies(), "shapes-copy")
    assert conn.get(keys.update_scheduled("shapes-copy"))  # a worker replays the log into its engines


def test_backup_to_standard_output_restores_from_standard_input(conn, redis_url, fresh_redis):
    study_id = make_study(conn, with_media=False)
    give_answers(conn, study_id, 4)
    text = invoke(["backup", study_id], redis_url).stdout
    result = invoke(["restore", "-", "--no-rebuild"], fresh_redis, input=text)
    assert result.exit_code == 0, result.output
    fresh = redis.Redis.from_url(fresh_redis)
    assert len(read_answers(fresh, study_id)) == 4
    fresh.close()


def backup_text(conn, study_id) -> list[str]:
    from workers.store.backup import backup_lines

    return list(backup_lines(conn, study_id))


def nothing_written(conn, study_id):
    return not conn.exists(keys.study(study_id), keys.answers(study_id), keys.items(study_id)) and \
        not conn.sismember(keys.studies(), study_id)


@pytest.mark.parametrize("damage, message", [
    (lambda lines: lines[:-3], "line 24: the backup ends without its 'end' record"),  # cut short
    (lambda lines: lines[:12] + lines[13:], "line 26: the 'end' record counts 26 lines before it, not 25"),
    (lambda lines: lines + [lines[-2]], "line 28: follows the 'end' record"),
    (lambda lines: [lines[0].replace('"answers":12', '"answers":13')] + lines[1:],
     "line 27: the backup ends with 12 answers but its header promises 13"),
    (lambda lines: lines[:5] + ['{"type": "answer", "id": "12-0", "fields": {'] + lines[6:],
     "line 6: is not valid JSON"),
    (lambda lines: lines[:3] + ['{"type": "nonsense"}\n'] + lines[3:], "line 4: unknown record type 'nonsense'"),
    (lambda lines: [lines[0].replace('"version":2', '"version":3')] + lines[1:], "line 1: backup format version 3"),
    (lambda lines: ['{"hello": 1}\n'] + lines[1:], "line 1: not a Proxima backup"),
    (lambda lines: lines[:2] + [lines[3]] + [lines[2]] + lines[4:], "line 3: expected item index 0"),
    (lambda lines: lines[:-7] + [lines[-6], lines[-7]] + lines[-5:], "line 22: answer .* is not after answer"),
    (lambda lines: lines[:10] + [lines[10].replace('"head":', '"headless":')] + lines[11:],
     "line 11: answer"),
])
def test_a_damaged_backup_is_refused_naming_the_line_and_nothing_is_written(conn, damage, message):
    study_id = make_study(conn, with_media=False)
    give_answers(conn, study_id, 12)
    lines = backup_text(conn, study_id)
    assert all(json.loads(line)["type"] == "answer" for line in lines[2 + N_ITEMS:-5])
    with pytest.raises(BackupError, match=message):
        restore_study(conn, damage(lines), as_id="shapes-restored")
    assert nothing_written(conn, "shapes-restored")


def test_a_config_that_fails_validation_is_refused(conn):
    study_id = make_study(conn, with_media=False)
    lines = backup_text(conn, study_id)
    study = json.loads(lines[1])
    study["config"]["algorithms"][0]["params"]["k"] = 0
    lines[1] = json.dumps(study) + "\n"
    with pytest.raises(BackupError, match="line 2: the study's config: .*k"):
        read_backup(lines)


def test_a_set_aside_unreadable_log_entry_survives_the_round_trip(conn, fresh_redis):
    """The log is restored as it was, including an entry no engine could read (it was set aside)."""
    study_id = make_study(conn, with_media=False)
    give_answers(conn, study_id, 3)
    broken = conn.xadd(keys.answers(study_id), {"qid": "q-broken", "rater": "r9"}).decode()
    apply_new_answers(conn, study_id)
    reasons = {a["answer_id"]: a["reason"] for a in set_aside_answers(conn, study_id)}
    assert reasons.keys() == {broken} and "unreadable" in reasons[broken]
    fresh = redis.Redis.from_url(fresh_redis)
    try:
        report = restore_study(fresh, backup_text(conn, study_id))
        assert report.answers == 4 and report.set_aside == 1
        assert fresh.xrange(keys.answers(study_id), min=broken, max=broken)[0][1] == {b"qid": b"q-broken",
                                                                                          b"rater": b"r9"}
    finally:
        fresh.close()


def test_backup_of_an_unknown_study_fails_cleanly(conn, redis_url, tmp_path):
    result = CliRunner().invoke(main, ["backup", "no-such-study", "-o", str(tmp_path / "x.ndjson")],
                                env={"REDIS_URL": redis_url})
    assert result.exit_code != 0 and "no study with id 'no-such-study'" in result.output
    assert not (tmp_path / "x.ndjson").exists()


def test_the_study_stylesheet_survives_a_backup_and_a_hostile_one_is_refused(conn):
    config = StudyConfig.from_dict({"name": "Styled", "random_state": 1})
    items = [Item(id=f"t{i}", kind="text", text=f"item {i}") for i in range(4)]
    css = ".item-text { font-size: 2rem; }\n"
    study_id = create_study(conn, config, items, study_id="styled", stylesheet=css)
    lines = backup_text(conn, study_id)
    restore_study(conn, lines, as_id="styled-restored")
    assert get_stylesheet(conn, "styled-restored") == css

    study = json.loads(lines[1])
    study["stylesheet"] = "</style><script>alert(1)</script>"
    with pytest.raises(BackupError, match="line 2: the study's stylesheet"):
        restore_study(conn, [lines[0], json.dumps(study) + "\n", *lines[2:]], as_id="styled-hostile")
    assert nothing_written(conn, "styled-hostile") and get_stylesheet(conn, "styled-hostile") is None
