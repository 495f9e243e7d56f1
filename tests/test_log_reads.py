"""Reading the answer log's newest entries in short commands (``workers.store.answers.newest_entries``):
the answer check and the raters table read up to 100,000 entries, and one XREVRANGE of 20,000 held Redis
for 17-31 ms while every rater's request waited (``benchmarks/load.py``'s slow log)."""
from __future__ import annotations

from workers.store import answers, keys
from workers.store.answers import newest_entries


def test_the_newest_entries_come_in_chunks_and_equal_one_long_read(conn, monkeypatch):
    key = keys.answers("log")
    for i in range(2_345):
        conn.xadd(key, {"qid": f"q{i}"})
    monkeypatch.setattr(answers, "LOG_CHUNK", 100)
    calls = []
    xrevrange = conn.xrevrange

    def counted(*args, **kwargs):
        calls.append(kwargs.get("count"))
        return xrevrange(*args, **kwargs)

    monkeypatch.setattr(conn, "xrevrange", counted)
    got = newest_entries(conn, "log", 2_100)
    assert got == xrevrange(key, count=2_100)  # the same entries, newest first, none twice
    assert len(calls) == 21 and max(calls) == 100
    calls.clear()
    assert newest_entries(conn, "log", 10_000) == xrevrange(key)  # fewer than asked: all, and then it stops
    assert len(calls) == 24
    assert newest_entries(conn, "empty", 500) == []
