"""Benchmark — how long ``proxima plan`` takes (issue 18: 300 items, 4 learners, 10-500 answers/item
in under 60 s on a 2-core machine).

Writes a clustered truth (``--items`` points in clusters of 5 around centres uniform in a 10 x 10
square, sd 0.3 around their centre) as a points CSV, runs the real command on it in a fresh
process

    proxima plan --truth points:FILE.csv --algorithms A,B,... --budgets 10,20,50,100,200,500 --runs 3

and prints its wall time, the CPU seconds of the whole command (its processes together), the wall
time it would take on free cores (the plan's longest-first order replayed with the measured CPU
seconds of each learner's runs, plus the rest of the command's CPU shared out: on a shared machine
the wall time says more about the neighbours than about the plan) and the CPU seconds of one run of
each learner (from the plan's JSON), with the accuracy reached at the largest budget (a speed-up
must not change what the plan predicts).

    python benchmarks/plan_speed.py
    python benchmarks/plan_speed.py --algorithms duels,random_triplets --repeat 2
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
ALGORITHMS = "duels,anntri,random_triplets,active_embedding"
BUDGETS = "10,20,50,100,200,500"


def write_truth(path: Path, n_items: int, seed: int = 0, cluster: int = 5, spread: float = 0.3) -> None:
    """``n_items`` points in clusters of ``cluster`` as a CSV with header ``id,x,y``."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0, 10, size=(-(-n_items // cluster), 2))
    X = np.repeat(centres, cluster, axis=0)[:n_items] + rng.normal(scale=spread, size=(n_items, 2))
    lines = ["id,x,y"] + [f"i{i},{x:.6f},{y:.6f}" for i, (x, y) in enumerate(X)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def run_plan(truth: Path, algorithms: str, budgets: str, runs: int, jobs: int | None,
             extra: list[str]) -> tuple[float, float, dict]:
    """(wall seconds, CPU seconds of the command and its processes, the plan's JSON)."""
    exe = Path(sys.executable).with_name("proxima")
    cmd = [str(exe) if exe.exists() else "proxima", "plan", "--truth", f"points:{truth}",
           "--algorithms", algorithms, "--budgets", budgets, "--runs", str(runs)]
    if jobs is not None:
        cmd += ["--jobs", str(jobs)]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "plan.json"
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(cmd + ["--json", str(out)] + extra, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        doc = json.loads(out.read_text(encoding="utf-8"))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, doc


def free_cores_wall(costs: list[float], runs: int, jobs: int) -> float:
    """Seconds the plan's processes would take on ``jobs`` free cores: the longest-first order of
    ``engine.planning`` replayed with every run of learner a taking ``costs[a]`` CPU seconds."""
    import heapq

    sys.path.insert(0, str(ROOT))
    from engine.planning import _LongestFirst

    order = _LongestFirst(len(costs), runs)
    free = [0.0] * jobs  # when each idle process fell free
    running: list[tuple[float, int]] = []  # (end, run)
    end = 0.0
    while True:
        while free and (w := order.next()) is not None:
            heapq.heappush(running, (heapq.heappop(free) + costs[w // runs], w))
        if not running:
            return end
        end, w = heapq.heappop(running)
        order.finished(w, costs[w // runs])
        heapq.heappush(free, end)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=300)
    ap.add_argument("--algorithms", default=ALGORITHMS)
    ap.add_argument("--budgets", default=BUDGETS)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=None, help="processes (default: the command's)")
    ap.add_argument("--repeat", type=int, default=1, help="times to run the command")
    ap.add_argument("--truth-seed", type=int, default=0)
    a, extra = ap.parse_known_args()
    with tempfile.TemporaryDirectory() as tmp:
        truth = Path(tmp) / f"truth{a.items}.csv"
        write_truth(truth, a.items, a.truth_seed)
        print(f"proxima plan --truth points:truth{a.items}.csv --algorithms {a.algorithms} --budgets {a.budgets} "
              f"--runs {a.runs}" + (f" --jobs {a.jobs}" if a.jobs else "") + "".join(f" {x}" for x in extra))
        print(f"machine: {os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        names = a.algorithms.split(",")
        jobs = a.jobs or min(4, os.cpu_count() or 1)
        print(f"repeat | wall s | CPU s | wall on {jobs} free cores (estimate) | "
              + " | ".join(f"{name} CPU s/run (exact@{a.budgets.split(',')[-1]})" for name in names))
        for r in range(a.repeat):
            wall, cpu, doc = run_plan(truth, a.algorithms, a.budgets, a.runs, a.jobs, extra)
            order = list(doc["algorithms"])  # the plan's order of learners (the table's)
            costs = [doc["algorithms"][name]["cpu_seconds"] for name in order]
            ideal = free_cores_wall(costs, a.runs, jobs) + (cpu - a.runs * sum(costs)) / jobs
            cells = []
            for name in names:
                alg = doc["algorithms"][name]
                cells.append(f"{alg['cpu_seconds']:.1f} ({alg['exact']['mean'][-1]})")
            print(f"{r + 1:6d} | {wall:6.1f} | {cpu:5.1f} | {ideal:5.1f} | " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
