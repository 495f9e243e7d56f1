"""Benchmark — a live study on a real ``proxima serve`` learns what the same answers teach offline.

The researcher's path, command by command: ``proxima simulate-setup`` writes a study of clustered
points (4-D, clusters of 20, unit spread, centres in [0, 10]^4), ``proxima serve`` runs it (gunicorn,
one RQ worker with its fit process, the embedded Redis) in a scratch folder, ``proxima create`` makes
the study, ``proxima simulate`` sends ``--raters`` simulated raters (real HTTP clients, no think time,
the human noise model: logistic ``--noise`` of the clusters' unit spread, lapse ``--lapse``) until
``--per-item`` answers per item, and ``proxima export --what graph`` gives the learned graph. Offline:
the same learner from the registry (``make_planner``, one question per head per call, refits
finished) answered by the same noise model to the same number of answers. Reported: hit@3 (a true
3-nearest neighbour) and exact accuracy (a true nearest neighbour) of both, answers/s, and where the
live answers went (fallback share) from the server's counters.

    python benchmarks/live_serve.py                          # 1,000 items, 200 raters, 60 answers per item
    python benchmarks/live_serve.py --items 300 --raters 40 --per-item 20
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import requests
from scipy.spatial.distance import cdist

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

from real_crowds import nn_metrics, print_table  # noqa: E402

from engine import oracles  # noqa: E402
from engine.registry import DEFAULT_NN_ALGORITHM, make_planner  # noqa: E402

PROXIMA = [str(Path(sys.executable).parent / "proxima")]


def points(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0, 10, size=(-(-n // 20), 4))
    return np.repeat(centres, 20, axis=0)[:n] + rng.normal(size=(n, 4))


def offline(D: np.ndarray, scale: float, lapse: float, per_item: int, seed: int) -> tuple[float, float]:
    n = len(D)
    oracle = oracles.TripletOracle(D, noise=scale, model="human", lapse=lapse, random_state=seed + 7)
    planner = make_planner(DEFAULT_NN_ALGORITHM, n, question_kind="triplet", random_state=seed)
    total = 0
    while total < per_item * n:
        qs = planner.next_questions(min(n, per_item * n - total))
        planner.observe(oracle.answer(qs))
        total += len(qs)
    error, hit3 = nn_metrics(np.asarray(planner.neighbor_graph(k=1).neighbors)[:, 0], D)
    return 1.0 - error, hit3


def run(cmd: list[str], env: dict, **kw) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT, **kw)
    if out.returncode:
        raise SystemExit(f"{' '.join(cmd[1:3])} failed:\n{out.stdout}\n{out.stderr}")
    return out


def live(X: np.ndarray, args, scratch: Path) -> dict:
    n = len(X)
    (scratch / "pts.csv").write_text("id," + ",".join(f"x{j + 1}" for j in range(X.shape[1])) + "\n" + "".join(
        f"p{i}," + ",".join(f"{v:.9f}" for v in X[i]) + "\n" for i in range(n)))
    port = args.port
    env = {**os.environ, "PROXIMA_INSTANCE_PATH": str(scratch / "instance"),
           "PROXIMA_RATE_LIMIT_EXEMPT_ADDRESSES": "127.0.0.1", "PYTHONPATH": str(ROOT)}
    env.pop("REDIS_URL", None)
    run([*PROXIMA, "simulate-setup", f"points:{scratch / 'pts.csv'}", "--kind", "triplet", "--out",
         str(scratch / "study"), "--seed", str(args.seed)], env)
    serve = subprocess.Popen([*PROXIMA, "serve", "--port", str(port)], env=env, cwd=ROOT,
                             stdout=open(scratch / "serve.log", "w"), stderr=subprocess.STDOUT,
                             start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if requests.get(f"http://127.0.0.1:{port}/api/health", timeout=2).status_code < 500:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline or serve.poll() is not None:
                raise SystemExit(f"proxima serve did not start: see {scratch / 'serve.log'}")
            time.sleep(0.5)
        run([*PROXIMA, "create", str(scratch / "study" / "study.yaml"), "--items", str(scratch / "study" / "items.csv"),
             "--id", "live-serve"], env)
        scale_share = args.noise / float(cdist(X, X).max())
        started = time.monotonic()
        sim = run([*PROXIMA, "simulate", "live-serve", "--url", f"http://127.0.0.1:{port}", "--oracle",
                   f"points:{scratch / 'study' / 'truth.csv'}", "--raters", str(args.raters), "--think", "0",
                   "--noise", f"{scale_share:.9f}", "--lapse", str(args.lapse), "--answers", str(args.per_item * n),
                   "--seed", str(args.seed), "--progress-every", "30", "--wait", "300"], env)
        took = time.monotonic() - started
        graph = run([*PROXIMA, "export", "live-serve", "--what", "graph", "--format", "json"], env).stdout
        stats = server_figures(scratch / "instance")
    finally:
        os.killpg(serve.pid, signal.SIGINT)
        try:
            serve.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(serve.pid, signal.SIGKILL)
    rate = re.search(r"Answers accepted: \d+ in [\d.]+ s \(([\d.]+) answers/s\)", sim.stdout)
    return {"graph": json.loads(graph), "answers_per_s": float(rate.group(1)) if rate else args.per_item * n / took,
            "simulate": sim.stdout, "server": stats}


def server_figures(instance: Path) -> dict:
    """What the server's counters say: fallback share, passes and their latency, the learner's refits."""
    import redis

    from webapp.cli.embedded import running_url
    from workers.store import engine_state, keys

    conn = redis.Redis.from_url(running_url(instance))
    counters = {k.decode(): int(v) for k, v in conn.hgetall(keys.counters("live-serve")).items()}
    engine = {k.decode(): v.decode() for k, v in conn.hgetall(keys.engine_stats("live-serve")).items()}
    latencies = sorted(float(x) for x in conn.lrange(keys.refresh_latencies("live-serve"), 0, -1))
    state = engine_state.load(conn, "live-serve", "duels") or {}
    served = counters.get("questions_served", 0)
    return {"fallback": counters.get("fallback_served", 0) / served if served else float("nan"),
            "passes": int(engine.get("updates", 0)),
            "refresh_p95_ms": latencies[int(0.95 * (len(latencies) - 1))] if latencies else float("nan"),
            "fits": state.get("n_fits"), "fitted_on": state.get("fitted_on"), "answers": state.get("n_answers")}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=1000)
    ap.add_argument("--raters", type=int, default=200)
    ap.add_argument("--per-item", type=int, default=60, help="answers per item")
    ap.add_argument("--noise", type=float, default=0.1, help="logistic scale, in units of the clusters' spread")
    ap.add_argument("--lapse", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--port", type=int, default=5077)
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder (logs)")
    args = ap.parse_args(argv)
    X = points(args.items, args.seed)
    D = cdist(X, X)
    scratch = Path(tempfile.mkdtemp(prefix="proxima-live-serve-"))
    got = live(X, args, scratch)
    picks = np.full(len(X), -1)
    for edge in got["graph"]["edges"]:
        if edge["rank"] == 1:
            picks[edge["source_index"]] = edge["target_index"]
    error, hit3 = nn_metrics(picks, D)
    exact_off, hit3_off = offline(D, args.noise, args.lapse, args.per_item, args.seed)
    print(got["simulate"])
    server = got["server"]
    print(f"Server: fallback {100 * server['fallback']:.1f}% of questions served, {server['passes']} update passes "
          f"(refresh p95 {server['refresh_p95_ms']:.0f} ms of the last 500), {server['fits']} refits, the last on "
          f"{server['fitted_on']} of {server['answers']} answers")
    print_table(f"duels, {args.items} clustered items, {args.raters} raters, {args.per_item} answers per item "
                f"(human noise {args.noise}, lapse {args.lapse})", ["run", "answers/s", "exact", "hit@3"],
                [["live (proxima serve + simulate)", f"{got['answers_per_s']:.0f}", f"{1 - error:.2f}", f"{hit3:.2f}"],
                 ["offline (make_planner, same answers per item)", "", f"{exact_off:.2f}", f"{hit3_off:.2f}"]])
    if not args.keep:
        import shutil

        shutil.rmtree(scratch, ignore_errors=True)
    else:
        print(f"scratch: {scratch}")


if __name__ == "__main__":
    main()
