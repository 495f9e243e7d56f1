"""Benchmark — a live study on a real ``proxima serve`` learns what the same answers teach offline.

The researcher's path, command by command: ``proxima simulate-setup`` writes a study of clustered
points (4-D, clusters of 20, unit spread, centres in [0, 10]^4 at 1,000 items, the box growing with n so
the clusters stay as dense), ``proxima serve`` runs it (gunicorn,
one RQ worker with its fit process, the embedded Redis) in a scratch folder, ``proxima create`` makes
the study, ``proxima simulate`` sends ``--raters`` simulated raters (real HTTP clients, ``--think``
seconds per answer, none by default; ``--crowd-nice 19`` lets the server's processes come first, a
stand-in for raters on other machines), the human noise model: logistic ``--noise`` of the
clusters' unit spread, lapse ``--lapse``) until
``--per-item`` answers per item, and ``proxima export --what graph`` gives the learned graph. Offline:
the same learner from the registry (``make_planner``, one question per head per call, refits
finished) answered by the same noise model to the same number of answers. Reported: hit@3 (a true
3-nearest neighbour) and exact accuracy (a true nearest neighbour) of both, answers/s, and where the
live answers went (fallback share) from the server's counters.

    python benchmarks/live_serve.py                          # 1,000 items, 200 raters, 60 answers per item
    python benchmarks/live_serve.py --items 300 --raters 40 --per-item 20
    python benchmarks/live_serve.py --items 50000 --budgets 5,10           # a 50,000-item study, live
    python benchmarks/live_serve.py --items 50000 --no-live --budgets 10,20 --peer --peer-dims 2,4,8 \
        --peer-kernels tste          # ... and offline against the peer given the learner's own models

``--budgets`` exports the graph at each of those answers per item (the crowd goes on between them);
``--peer`` adds random triplets + an embedding (:func:`engine.embedding.select_embedding`) at the same
budgets. Above ``truth.DENSE_ITEMS`` items nothing builds an n x n matrix: the raters read distances
of the points on demand, the scores use the points (neighbours by blocks of rows), and the offline run
is left out unless ``--offline`` asks for it. Also reported: each server process's peak RSS (the
worker, its fit process, the web workers), update passes (p50 / p99 of the last 500), the learner
state written per pass, the first checkpoint's size and Redis's own time per EXEC.
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

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

from harness import offline, oracle_of, peer, points, print_table, scores  # noqa: E402, F401

from engine import truth  # noqa: E402

PROXIMA = [str(Path(sys.executable).parent / "proxima")]


def graph_picks(graph: dict, n: int) -> np.ndarray:
    picks = np.full(n, -1)
    for edge in graph["edges"]:
        if edge["rank"] == 1:
            picks[edge["source_index"]] = edge["target_index"]
    return picks


def peak_rss(root: int) -> dict[str, float]:
    """Peak RSS (MB, VmHWM) of the server process and all its descendants, by what each runs."""
    procs: dict[int, tuple[int, str, float]] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            status = (proc / "status").read_text()
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        ppid = re.search(r"PPid:\s+(\d+)", status)
        hwm = re.search(r"VmHWM:\s+(\d+) kB", status)
        if ppid and hwm:
            procs[int(proc.name)] = (int(ppid.group(1)), cmd, int(hwm.group(1)) / 1024)
    family, grew = {root}, True
    while grew:
        more = {pid for pid, (ppid, _, _) in procs.items() if ppid in family} - family
        family |= more
        grew = bool(more)
    out = {}
    for pid in sorted(family & procs.keys()):
        cmd = procs[pid][1]
        label = ("redis" if "redis" in cmd else "web (gunicorn)" if "gunicorn" in cmd else
                 "fit process" if "spawn_main" in cmd else "resource tracker" if "resource_tracker" in cmd else
                 " ".join(w.rsplit("/", 1)[-1] for w in cmd.split()[:5]))
        out[f"{label} [{pid}]"] = procs[pid][2]
    return out


COMMANDS = ("simulate-setup", "serve", "create", "simulate", "export")


def run(cmd: list[str], env: dict, **kw) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT, **kw)
    if out.returncode:
        raise SystemExit(f"{' '.join(c for c in cmd if c in COMMANDS)} failed:\n{out.stdout}\n{out.stderr}")
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
        scale_share = args.noise / truth.diameter(X)
        started = time.monotonic()
        marks, done, out = [], 0, []
        for b in args.budgets:
            crowd = ["nice", "-n", str(args.crowd_nice)] if args.crowd_nice else []
            sim = run([*crowd, *PROXIMA, "simulate", "live-serve", "--url", f"http://127.0.0.1:{port}", "--oracle",
                       f"points:{scratch / 'study' / 'truth.csv'}", "--raters", str(args.raters),
                       "--think", str(args.think),
                       "--noise", f"{scale_share:.9f}", "--lapse", str(args.lapse),
                       "--answers", str(max(1, b * n - done)),
                       "--seed", str(args.seed + b), "--progress-every", "60", "--wait", "300"], env)
            got = re.search(r"Answers accepted: (\d+) in ([\d.]+) s", sim.stdout)
            done += int(got.group(1)) if got else 0
            out.append(sim.stdout)
            graph = json.loads(run([*PROXIMA, "export", "live-serve", "--what", "graph", "--format", "json"],
                                   env).stdout)
            marks.append((b, done, graph_picks(graph, n)))
            print(f"  {b} answers per item: {done} answers in {time.monotonic() - started:.0f} s", file=sys.stderr,
                  flush=True)
        took = time.monotonic() - started
        rss = peak_rss(serve.pid)
        stats = server_figures(scratch / "instance")
    finally:
        os.killpg(serve.pid, signal.SIGINT)
        try:
            serve.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(serve.pid, signal.SIGKILL)
    return {"marks": marks, "answers_per_s": done / took, "simulate": "\n".join(out), "server": stats, "rss": rss}


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
    passes = int(engine.get("updates", 0))
    execs = conn.info("commandstats").get("cmdstat_exec", {})

    def pct(q: float) -> float:
        return latencies[int(q * (len(latencies) - 1))] if latencies else float("nan")

    return {"fallback": counters.get("fallback_served", 0) / served if served else float("nan"),
            "passes": passes, "refresh_p50_ms": pct(0.5), "refresh_p95_ms": pct(0.95), "refresh_p99_ms": pct(0.99),
            "state_kb_per_pass": int(engine.get("state_bytes_written", 0)) / max(passes, 1) / 1024,
            "checkpoints": int(engine.get("checkpoints", 0)),
            "last_checkpoint_mb": int(engine.get("last_checkpoint_bytes", 0)) / 2**20,
            "exec_us": float(execs.get("usec_per_call", float("nan"))),
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
    ap.add_argument("--think", type=float, default=0.0, help="the raters' mean think time, s (0: as fast as served)")
    ap.add_argument("--crowd-nice", type=int, default=0,
                    help="run the simulated crowd under this nice value (19: the server's processes come first, "
                         "a stand-in for a crowd on other machines on a box with few cores)")
    ap.add_argument("--budgets", default=None, help="answers per item at which the graph is exported and scored, "
                    "comma-separated (default: --per-item)")
    ap.add_argument("--peer", action="store_true", help="also random triplets + an embedding at each budget")
    ap.add_argument("--peer-dims", default="2,3,5,8", help="the peer's embedding dimensions (it also gets the line); "
                    "2,4,8 with --peer-kernels tste are the learner's own models, fewer fits at 50,000 items")
    ap.add_argument("--peer-kernels", default="ste,tste")
    ap.add_argument("--live", action=argparse.BooleanOptionalAction, default=True,
                    help="run the live study (--no-live: only the offline learner and the peer, e.g. at 50,000 "
                    "items where a live run to 20 answers per item takes an hour)")
    ap.add_argument("--offline", action=argparse.BooleanOptionalAction, default=None,
                    help=f"also the learner offline (default: up to {truth.DENSE_ITEMS} items)")
    args = ap.parse_args(argv)
    args.budgets = [int(b) for b in (args.budgets or str(args.per_item)).split(",")]
    X = points(args.items, args.seed)
    rows = []
    if args.live:
        rows += live_rows(X, args)
    if args.offline or (args.offline is None and (args.items <= truth.DENSE_ITEMS or not args.live)):
        for b, got_off in zip(args.budgets, offline(X, args.noise, args.lapse, args.budgets, args.seed), strict=True):
            rows.append([f"offline (make_planner), {b}/item", "", *map("{:.2f}".format, got_off)])
    if args.peer:
        dims = [int(d) for d in args.peer_dims.split(",")]
        kernels = tuple(args.peer_kernels.split(","))
        for b, got_peer in zip(args.budgets, peer(X, args.noise, args.lapse, args.budgets, args.seed, dims, kernels),
                               strict=True):
            rows.append([f"random triplets + embedding, {b}/item", "", *map("{:.2f}".format, got_peer)])
    print_table(f"duels, {args.items} clustered items, {args.raters} raters (human noise {args.noise}, lapse "
                f"{args.lapse})", ["run", "answers/s", "exact", "hit@3"], rows)


def live_rows(X: np.ndarray, args) -> list[list[str]]:
    """The live study's rows (and its server figures, printed): one per budget."""
    scratch = Path(tempfile.mkdtemp(prefix="proxima-live-serve-"))
    got = live(X, args, scratch)
    print(got["simulate"])
    server = got["server"]
    print(f"Server: fallback {100 * server['fallback']:.1f}% of questions served, {server['passes']} update passes "
          f"(last 500: p50 {server['refresh_p50_ms']:.0f} ms, p95 {server['refresh_p95_ms']:.0f} ms, p99 "
          f"{server['refresh_p99_ms']:.0f} ms), learner state written {server['state_kb_per_pass']:.0f} kB per pass, "
          f"{server['checkpoints']} checkpoints (the last {server['last_checkpoint_mb']:.1f} MB), Redis "
          f"{server['exec_us']:.0f} us per EXEC; {server['fits']} refits, the last on {server['fitted_on']} of "
          f"{server['answers']} answers")
    print("Peak RSS (MB): " + ", ".join(f"{k} {v:.0f}" for k, v in sorted(got["rss"].items())))
    rows = [[f"live (proxima serve + simulate), {b}/item", f"{got['answers_per_s']:.0f}", *map("{:.2f}".format,
             scores(picks, X))] for b, _, picks in got["marks"]]
    if not args.keep:
        import shutil

        shutil.rmtree(scratch, ignore_errors=True)
    else:
        print(f"scratch: {scratch}")
    return rows


if __name__ == "__main__":
    main()
