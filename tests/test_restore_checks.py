"""Restore checks answers as the live path does: an answer whose choice was never offered, or whose
rater id breaks the id pattern, is restored into the log but set aside with its reason."""
from __future__ import annotations

import json

import redis
from test_backup import backup_text, give_answers, make_study

from workers.store import keys
from workers.store.backup import restore_study, set_aside_answers


def tamper(lines: list[str], change) -> list[str]:
    """Apply ``change`` to the first answer record's fields; the end record's counts stay right."""
    out, done = [], False
    for line in lines:
        record = json.loads(line)
        if record.get("type") == "answer" and not done:
            change(record["fields"])
            line, done = json.dumps(record), True
        out.append(line if line.endswith("\n") else line + "\n")
    assert done
    return out


def test_item12_restore_sets_aside_a_choice_never_offered_and_a_bad_rater_id(conn, fresh_redis):
    study_id = make_study(conn, with_media=False)
    give_answers(conn, study_id, 4)
    lines = backup_text(conn, study_id)

    def unoffered(fields):
        offered = {fields["a"], fields["b"], fields["head"]}
        fields["choice"] = next(str(i) for i in range(20) if str(i) not in offered)

    fresh = redis.Redis.from_url(fresh_redis)
    try:
        report = restore_study(fresh, tamper(lines, unoffered), as_id="unoffered")
        assert report.answers == 4 and report.set_aside == 1
        [aside] = set_aside_answers(fresh, "unoffered")
        assert "was not one of the offered items" in aside["reason"]
        report = restore_study(fresh, tamper(lines, lambda f: f.update(rater="=HYPERLINK(evil)")), as_id="bad-rater")
        assert report.set_aside == 1
        [aside] = set_aside_answers(fresh, "bad-rater")
        assert "rater id" in aside["reason"]
        report = restore_study(fresh, lines, as_id="clean")
        assert report.set_aside == 0 and fresh.hlen(keys.poisoned("clean")) == 0
    finally:
        fresh.close()
