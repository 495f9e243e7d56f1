"""Benchmark — engine cost per answer and state size from n = 100 to n = 10,000 items.

Runs the load benchmark's study (``load_setup.study_config``: ANNTri, triplet-derived questions) the way a
worker's update passes run it, without Redis or HTTP: each pass plans questions for the pool (the
pool target of ``--raters`` raters), simulated raters answer ``--batch`` of them (hidden 2-D item
positions, Gaussian noise, as in ``load.py``), the learner observes the batch, the pooled questions
its answers made stale are taken back, and the state is lifted and diffed against the kept state as
the update pass does (``engine_state.advance_delta``; ``--copy-state``: a whole copy per pass, as
before), giving the journal entry a pass writes to Redis.
Every n runs in a process of its own, so its peak memory (ru_maxrss) is its own.

Reported per n: engine time per answer (observe + plan + stale, amortised over the pass), state
lifting + journal diff per pass (both over ``--passes`` passes after a first one, reported apart: it
allocates the planner's arrays and diffs the whole state once), journal bytes per pass, the whole
state's size (what a checkpoint writes and a worker keeps) and the process's peak RSS (pages touched:
zero pages of arrays not yet written do not count).

    python benchmarks/engine_scale.py                          # n = 100, 1000, 5000, 10000
    python benchmarks/engine_scale.py --items 100,1000 --passes 20
"""
from __future__ import annotations

import argparse
import json
import math
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]


def _touch(planner) -> None:
    """Write every memory page of the planner's (n, n) arrays (same values): a study whose rows have all
    been written holds them all in RAM, which a few passes of a new study do not (untouched zero pages)."""
    for name in ("mean_", "count_", "pending_", "upper_", "lower_"):
        arr = planner.__dict__.get("_a_" + name)
        if arr is not None:
            flat = arr.reshape(-1)
            step = max(1, 4096 // arr.itemsize)
            view = flat[::step]
            view += 0  # (an assignment of a view to itself is skipped by numpy)


def measure(n: int, passes: int, batch: int, raters: int, seed: int, copy_state: bool = False,
            touch: bool = False) -> dict:
    from load_setup import ANSWER_NOISE, item_positions, study_config

    from workers.jobs.learners import Learner
    from workers.store import engine_state
    from workers.store.answers import Answer
    from workers.store.config import StudyConfig

    config = StudyConfig.from_dict(study_config(20, seed, n))
    alg = config.algorithms[0]
    positions = item_positions(n, seed)
    rng = random.Random(seed)
    started = time.perf_counter()
    learner = Learner.new(alg, config, n, [f"c{i:05d}" for i in range(n)])
    create_s = time.perf_counter() - started
    lifted = engine_state.Lifted.of(learner.to_state(), copy=True)
    window = alg.params.get("window", 1)
    pool: list[dict] = []
    engine_s = state_s = 0.0
    delta_bytes, answered, t = [], 0, 0.0
    first_s = None
    for step in range(passes + 1):
        if step == 1:  # the first pass allocates the planner's arrays and diffs the whole state: apart
            if touch:
                _touch(learner.planner)
            first_s = engine_s + state_s
            engine_s = state_s = 0.0
            delta_bytes, answered = [], 0
        started = time.perf_counter()
        pool.extend(learner.plan(max(0, int(1.5 * raters) - len(pool)), n, window=window))
        engine_s += time.perf_counter() - started
        rng.shuffle(pool)
        asked, pool = pool[:batch], pool[batch:]
        answers = []
        for q in asked:
            head, (a, b) = q["head"], q["candidates"]
            da = math.dist(positions[head], positions[a]) + rng.gauss(0.0, ANSWER_NOISE)
            db = math.dist(positions[head], positions[b]) + rng.gauss(0.0, ANSWER_NOISE)
            t += 0.01
            answers.append(Answer(id=f"{answered + len(answers) + 1}-0", qid=q["qid"], rater="r", kind="triplet",
                                  head=head, a=a, b=b, choice=a if da <= db else b, algorithm=q["algorithm"],
                                  fallback=False, issued_at=t, answered_at=t, response_ms=1000,
                                  probe=q.get("probe")))
        started = time.perf_counter()
        learner.observe(answers)
        stale = learner.stale(pool)
        learner.forget(stale)
        stale_ids = {q["qid"] for q in stale}
        pool = [q for q in pool if q["qid"] not in stale_ids]
        engine_s += time.perf_counter() - started
        answered += len(answers)
        started = time.perf_counter()
        live = engine_state.Lifted.of(learner.to_state())
        if copy_state:  # the update pass before advance_delta: a whole copy per pass, diffed against the last
            new = engine_state.Lifted.of(live.state(), copy=True)
            delta = engine_state.make_delta(lifted, new, "bench", 1)
            lifted = new
        else:
            delta, lifted = engine_state.advance_delta(lifted, live, "bench", 1)
        del live
        state_s += time.perf_counter() - started
        delta_bytes.append(len(delta or b""))
    delta_bytes.sort()
    return {"n": n, "answers": answered, "create_s": create_s, "first_pass_s": first_s,
            "engine_us_per_answer": 1e6 * engine_s / max(answered, 1),
            "state_ms_per_pass": 1e3 * state_s / passes,
            "journal_kb_per_pass_p50": delta_bytes[len(delta_bytes) // 2] / 1024,
            "state_mb": lifted.nbytes / 2**20,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", default="100,1000,5000,10000", help="study sizes, comma-separated")
    ap.add_argument("--passes", type=int, default=30, help="update passes per study size")
    ap.add_argument("--batch", type=int, default=100, help="answers per pass (500 answers/s, 5 passes/s)")
    ap.add_argument("--raters", type=int, default=200, help="raters the pool is sized for")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--copy-state", action="store_true",
                    help="copy the whole state every pass and diff it (the update pass before advance_delta)")
    ap.add_argument("--touch", action="store_true",
                    help="after the first pass, write every page of the planner's arrays (a study well under way)")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(measure(a.one, a.passes, a.batch, a.raters, a.seed, a.copy_state, a.touch)))
        return
    rows = []
    for n in (int(x) for x in a.items.split(",")):
        out = subprocess.run([sys.executable, __file__, "--one", str(n), "--passes", str(a.passes), "--batch",
                              str(a.batch), "--raters", str(a.raters), "--seed", str(a.seed),
                              *(["--copy-state"] if a.copy_state else []), *(["--touch"] if a.touch else [])],
                             capture_output=True, text=True)
        if out.returncode != 0:
            print(f"n = {n}: failed\n{out.stderr[-1500:]}", flush=True)
            continue
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        r = rows[-1]
        print(f"n = {n}: {r['engine_us_per_answer']:.0f} us/answer, state {r['state_mb']:.1f} MB, "
              f"peak RSS {r['peak_rss_mb']:.0f} MB", flush=True)
    print(f"\n{a.passes} passes of {a.batch} answers, pool sized for {a.raters} raters (ANNTri, triplet-derived, "
          "load.py's study)\n")
    print("| n | engine per answer (observe + plan + stale) | lift + journal diff per pass | journal per pass "
          "(p50) | whole state | peak RSS | first pass (arrays + whole diff) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        first = r.get("first_pass_s")
        print(f"| {r['n']:,} | {r['engine_us_per_answer']:.0f} µs | {r['state_ms_per_pass']:.1f} ms | "
              f"{r['journal_kb_per_pass_p50']:.0f} KB | {r['state_mb']:.1f} MB | {r['peak_rss_mb']:.0f} MB | "
              + ("—" if first is None else f"{first:.2f} s") + " |")


if __name__ == "__main__":
    main()
