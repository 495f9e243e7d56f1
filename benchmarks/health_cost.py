"""Benchmark — what ``/api/health``'s crowd report costs at many raters (issue 40).

A study whose catch trials the crowd judges reports, per health probe, its comparisons, the raters awaiting a
verdict and whether the crowd is behind (``workers.jobs.rater_checks.crowd_status``). Before, each probe read
every rater's counters (one HGETALL of the study's rater-stats hash, ~12 fields per rater, parsed in Python); now
the answer check stores what waits (``_keep_waiting``, beside the read of every rater it does anyway) and a probe
reads three small keys, plus the log entries after the crowd's last look when catch answers came after it.

Fills an embedded Redis with N raters' counters (as the answer script writes them), a crowd look's counts and a
log of 2,000 answers, then times per call (best of ``--repeats``):
- ``every rater's counters``: the HGETALL + parse a probe did before (``rater_checks._stats``);
- ``probe, all seen``: ``crowd_status`` now, the crowd's last look saw every catch answer;
- ``probe, behind``: ``crowd_status`` now, catch answers after the last look (it reads the log after it);
- ``answer check's store``: ``_keep_waiting`` (run by each answer check, after its own read of every rater);
- ``Redis held``: the longest single command of reading every rater's counters, as one HGETALL (before) and as the
  chunked HSCAN the checks, the Raters table and the Overview read them with now (``read_rater_stats``): how long
  every rater's answer waited behind it.

    python benchmarks/health_cost.py                      # 1,000, 10,000 and 50,000 raters
    python benchmarks/health_cost.py --raters 1000,5000 --repeats 3
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from workers.jobs import rater_checks  # noqa: E402
from workers.store import keys  # noqa: E402
from workers.store.answers import CATCH_ALGORITHM  # noqa: E402
from workers.store.config import StudyConfig  # noqa: E402
from workers.store.raters import CATCH_PENDING, CROWD_JUDGED  # noqa: E402

STUDY = "health-cost"
LOG_ANSWERS = 2000
#: One answer in this many of the log is a catch trial (the attention rate's order).
CATCH_EVERY = 15


def fill(conn: redis.Redis, raters: int, now: float) -> None:
    conn.flushdb()
    conn.set(keys.catch_comparisons(STUDY), json.dumps({"crowd": True}))
    stats = keys.rater_stats(STUDY)
    with conn.pipeline(transaction=False) as pipe:
        for r in range(raters):
            name = f"rater-{r:08d}"
            fields = {"answers": 40, "catch": 3, "catch_failed": 0, "too_fast": 0, "skipped": 0, "completed": 1,
                      "last_answer_at": repr(now - r), "code_shown": 1, CATCH_PENDING: int(r % 7 == 0),
                      CROWD_JUDGED: int(r % 7 != 0 or r % 3 == 0), "repeats": 2, "repeat_agreed": 2}
            pipe.hset(stats, mapping={keys.rater_field(name, k): v for k, v in fields.items()})
            if r % 1000 == 999:
                pipe.execute()
        pipe.execute()
    ids = []
    for n in range(LOG_ANSWERS):
        catch = n % CATCH_EVERY == 0
        ids.append(conn.xadd(keys.answers(STUDY), {"algorithm": CATCH_ALGORITHM if catch else "duels",
                                                    "answered_at": repr(now - 600 + n * 0.1), "rater": "r"}))
    catches = len(range(0, LOG_ANSWERS, CATCH_EVERY))
    conn.hset(keys.counters(STUDY), keys.counter_field("answers", CATCH_ALGORITHM), catches)
    conn.hset(keys.catch_claims(STUDY), mapping={"confirmed": 40, "pending": 8, "retired": 2, "answered": 50,
                                                 "judged_at": repr(now - 60), "seen": "x"})
    conn.hset(keys.crowd_state(STUDY), mapping={"catches_seen": catches, "log_seen": ids[-1].decode()})


def held(conn: redis.Redis, fn, command: str) -> float:
    """The longest ``command`` Redis ran while ``fn`` ran (ms, from its slow log): how long every other client,
    raters' answers included, waited behind one read."""
    conn.config_set("slowlog-log-slower-than", 0)
    conn.slowlog_reset()
    fn()
    entries = conn.slowlog_get(10000)
    conn.config_set("slowlog-log-slower-than", 10000)
    return max((e["duration"] / 1000 for e in entries if command in str(e["command"]).upper()), default=0.0)


def best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--raters", default="1000,10000,50000")
    parser.add_argument("--repeats", type=int, default=5)
    a = parser.parse_args()
    from webapp.cli.embedded import EmbeddedRedis

    server = EmbeddedRedis(tempfile.mkdtemp(prefix="health-cost-"), appendfsync="no")
    conn = redis.Redis.from_url(server.start())
    study = SimpleNamespace(id=STUDY, config=StudyConfig.from_dict({"name": "health cost"}))
    rows = []
    try:
        for raters in [int(x) for x in a.raters.split(",")]:
            now = time.time()
            fill(conn, raters, now)
            before = best(lambda: rater_checks._stats(conn, STUDY), a.repeats)
            stats = rater_checks._stats(conn, STUDY)
            whole = held(conn, lambda: conn.hgetall(keys.rater_stats(STUDY)), "HGETALL")
            chunked = held(conn, lambda: rater_checks._stats(conn, STUDY), "HSCAN")
            keep = best(lambda stats=stats: rater_checks._keep_waiting(conn, STUDY, stats), a.repeats)
            seen = best(lambda now=now: rater_checks.crowd_status(conn, study, now), a.repeats)
            status = rater_checks.crowd_status(conn, study, now)
            assert status["state"] == "ok" and status["awaiting"] > 0, status
            # catch answers after the last look: the probe reads the log after it to date the earliest
            conn.hset(keys.crowd_state(STUDY), mapping={"catches_seen": 0, "log_seen": ""})
            behind = best(lambda now=now: rater_checks.crowd_status(conn, study, now), a.repeats)
            assert rater_checks.crowd_status(conn, study, now)["state"] == "behind"
            rows.append((raters, before, seen, behind, keep, whole, chunked))
    finally:
        conn.close()
        server.stop()
    print(f"\n{'raters':>8} | {'every rater counters (before), ms':>34} | {'probe, all seen, ms':>20} | "
          f"{'probe, behind, ms':>18} | {'answer check store, ms':>23} | {'Redis held: HGETALL / HSCAN, ms':>32}")
    for raters, before, seen, behind, keep, whole, chunked in rows:
        print(f"{raters:>8,} | {before:>34.1f} | {seen:>20.2f} | {behind:>18.2f} | {keep:>23.2f} | "
              f"{whole:>18.2f} / {chunked:>11.2f}")


if __name__ == "__main__":
    main()
