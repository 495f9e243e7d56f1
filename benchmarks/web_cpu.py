"""Benchmark — web CPU per request: what one question and one answer request cost the web processes.

Starts gunicorn the way ``proxima serve`` does (``load.py``'s command line: 2 workers x 8 threads,
gthread, keep-alive) against the embedded redis-server (AOF, ``appendfsync always``) and the load
benchmark's ANNTri study of n = 1,000 items, fills the study's question pool with planned questions
(so requests take the pooled path, as under a running engine, without an RQ worker's CPU and Redis
commands in the figures; ``--worker`` runs one as well), then drives two phases from ``--clients``
concurrent simulated raters (each its own cookie session, no think time):

1. ``question``: ``--requests`` GET .../questions/next;
2. ``answer``: ``--requests`` POST .../answers, each answering the question the rater holds and
   taking the next one from the response (as the rater page does).

Reported per phase: web CPU ms per request (user + system of the gunicorn master and workers, from
psutil, before and after the phase: the stable figure on a shared machine), Redis commands per
request (``INFO commandstats`` before and after, by command) and the client-side latency p50/p99.
``--baseline REF`` first measures a copy of this tree whose hot-path files are as they were at git
revision REF (``load_setup.HOT_PATH_FILES``), then this tree: before and after in one run. ``--profile``
samples one gunicorn worker with py-spy during both phases and prints where its CPU goes.

    python benchmarks/web_cpu.py                          # 32 clients, 3,000 requests per phase
    python benchmarks/web_cpu.py --baseline HEAD~3        # before / after, back to back
    python benchmarks/web_cpu.py --profile --requests 6000
"""
from __future__ import annotations

import argparse
import asyncio
import math
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

import load_setup as load  # noqa: E402
import psutil  # noqa: E402
from load_common import percentile, profile_summary, read_collapsed, table, tree_cpu_seconds  # noqa: E402

PHASES = ("question", "answer")
HTTP_TIMEOUT = 30.0
#: Planned questions pushed into the pool before the phases (more than they take).
POOL_MARGIN = 1.5
PROFILE_GROUPS = {
    "gunicorn outside the app (accept, read, respond)": ("!Flask.wsgi_app (",),
    "the Flask app (request context, hooks, views, response)": ("Flask.wsgi_app (",),
    "the view functions": ("Flask.dispatch_request (",),
    "redis-py (pack commands, parse replies)": ("redis/",),
    "question tokens": ("tokens.py",),
    "session cookie (open/save)": ("open_session (", "save_session ("),
    "JSON (json.dumps/loads, jsonify)": ("json/",),
    "rate limits": ("limit_rater_requests (",),
    "metrics": ("metrics.py",),
}


# ============================================================================ clients
async def _client(base: str, index: int, phase: str, quota: list[int], held: dict, latencies: dict,
                  errors: Counter, sessions: dict) -> None:
    import aiohttp

    session = sessions.get(index)
    if session is None:
        jar = aiohttp.CookieJar(unsafe=True)  # keep the cookies of an IP-address host (127.0.0.1)
        session = sessions[index] = aiohttp.ClientSession(
            cookie_jar=jar, timeout=aiohttp.ClientTimeout(total=HTTP_TIMEOUT))
        async with session.get(f"{base}/s/{load.STUDY}", params={"rater": f"cpu-{index}"}) as resp:
            await resp.read()
    while quota[0] > 0:
        quota[0] -= 1
        sent = time.perf_counter()
        if phase == "question" or held.get(index) is None:
            async with session.get(f"{base}/api/studies/{load.STUDY}/questions/next") as resp:
                body = await resp.json(content_type=None)
                status = resp.status
            question = (body or {}).get("question") if status == 200 else None
        else:
            question = held[index]
            choice = question["candidates"][0]["handle"]
            async with session.post(f"{base}/api/studies/{load.STUDY}/answers",
                                    json={"token": question["token"], "choice": choice, "response_ms": 2500}) as resp:
                body = await resp.json(content_type=None)
                status = resp.status
            question = (body or {}).get("next") if status == 201 else None
        latencies[phase].append((time.perf_counter() - sent) * 1000.0)
        if status >= 300:
            code = ((body or {}).get("error") or {}).get("code") if isinstance(body, dict) else None
            errors[f"{phase}:{status} {code or ''}".strip()] += 1
        held[index] = question


async def _drive(base: str, clients: int, phase: str, requests: int, held: dict, latencies: dict,
                 errors: Counter, sessions: dict) -> None:
    quota = [requests]
    await asyncio.gather(*(_client(base, i, phase, quota, held, latencies, errors, sessions) for i in range(clients)))


async def _close(sessions: dict) -> None:
    for session in sessions.values():
        await session.close()


# ============================================================================ measuring
def web_cpu_seconds(master) -> tuple[float, float]:
    """(user + system, system) CPU seconds of the gunicorn master and its workers."""
    system = 0.0
    for proc in (master, *master.children(recursive=True)):
        try:
            system += proc.cpu_times().system
        except psutil.Error:
            continue
    return tree_cpu_seconds(master), system


def command_calls(conn) -> Counter:
    """Calls per Redis command so far (``INFO commandstats``: the commands a script runs count too)."""
    stats = conn.info("commandstats")
    return Counter({name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()})


def fill_pool(conn, n_items: int, count: int, seed: int) -> None:
    """Push ``count`` planned questions (triplet-derived, as the study's ANNTri asks) into the pool."""
    import random

    from workers.store.questions import derived_triplet_question, push_questions

    rng = random.Random(seed)
    batch = []
    for _ in range(count):
        i, j, k = rng.sample(range(n_items), 3)
        batch.append(derived_triplet_question(i, j, k, load.LABEL))
        if len(batch) == 1000:
            push_questions(conn, load.STUDY, load.LABEL, batch)
            batch = []
    push_questions(conn, load.STUDY, load.LABEL, batch)


def measure(a, code_root: Path, label: str) -> dict:
    """One fresh server running the code in ``code_root``; both phases measured. Returns the figures."""
    from webapp.cli.embedded import free_port

    setup = load.Setup(a, code_root, "proxima-webcpu-", 20)
    scratch, conn = setup.scratch, setup.conn
    spy = None
    try:
        if a.worker:
            setup.start([sys.executable, "-m", "webapp", "worker"])
        fill_pool(conn, a.items, int(POOL_MARGIN * 2 * a.requests) + 1000, a.seed)
        port = free_port()
        web = setup.start(load.gunicorn_command(a, port, scratch / "access.log" if a.access_log else None))
        base = f"http://127.0.0.1:{port}"
        load.wait_until(lambda: load.healthy(base), 90, "gunicorn to answer /api/health")
        master = psutil.Process(web.pid)
        if a.profile:
            worker_pid = master.children()[0].pid
            out = scratch / "pyspy.txt"
            spy = subprocess.Popen([str(Path(sys.executable).with_name("py-spy")), "record", "--pid", str(worker_pid),
                                    "--rate", "200", "--nonblocking", "--gil", "--format", "raw", "--output", str(out)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            time.sleep(1.0)
        held: dict = {}
        sessions: dict = {}
        latencies: dict[str, list[float]] = {p: [] for p in PHASES}
        errors: Counter = Counter()
        figures: dict = {"label": label, "phases": {}}

        async def run_all() -> None:
            # warm-up: every client opens the study page and takes a few questions (connections, imports)
            await _drive(base, a.clients, "question", a.clients * 3, held, {"question": []}, Counter(), sessions)
            for phase in PHASES:
                latencies[phase].clear()
                calls0, (cpu0, sys0), t0 = command_calls(conn), web_cpu_seconds(master), time.perf_counter()
                await _drive(base, a.clients, phase, a.requests, held, latencies, errors, sessions)
                wall, (cpu1, sys1), calls1 = time.perf_counter() - t0, web_cpu_seconds(master), command_calls(conn)
                delta = calls1 - calls0
                delta["info"] -= 1  # our own INFO before the phase
                delta = +delta
                figures["phases"][phase] = {
                    "requests": a.requests, "wall": wall, "cpu_ms": 1000.0 * (cpu1 - cpu0) / a.requests,
                    "system_ms": 1000.0 * (sys1 - sys0) / a.requests,
                    "redis_calls": sum(delta.values()) / a.requests,
                    "redis_by_command": {k: v / a.requests for k, v in delta.most_common()},
                    "p50": percentile(latencies[phase], 50), "p99": percentile(latencies[phase], 99)}
            await _close(sessions)

        asyncio.run(run_all())
        figures["errors"] = dict(errors)
        if spy is not None:
            spy.send_signal(2)
            spy.wait(30)
            figures["profile"] = read_collapsed(scratch / "pyspy.txt") if (scratch / "pyspy.txt").exists() else []
            if a.profile_out:
                Path(a.profile_out).write_text((scratch / "pyspy.txt").read_text())
        return figures
    finally:
        if spy is not None and spy.poll() is None:
            spy.kill()
        setup.stop()


# ============================================================================ report
def print_figures(runs: list[dict], a) -> None:
    print(f"\n{a.clients} concurrent clients, {a.requests} requests per phase, gunicorn {a.web_workers} x "
          f"{a.threads} ({a.worker_class}); client-side latency (the clients share the machine)")
    rows = []
    for run in runs:
        for phase, f in run["phases"].items():
            rows.append([run["label"], phase, f"{f['cpu_ms']:.2f}", f"{f['system_ms']:.2f}",
                         f"{f['redis_calls']:.2f}", f"{f['requests'] / f['wall']:.0f}", f"{f['p50']:.1f}",
                         f"{f['p99']:.1f}"])
    table(["code", "request", "web CPU ms/request", "of which system", "Redis commands/request", "requests/s",
           "p50 ms", "p99 ms"], rows)
    for run in runs:
        for phase, f in run["phases"].items():
            print(f"  {run['label']}, {phase}: Redis " + ", ".join(
                f"{k} {v:.2f}" for k, v in f["redis_by_command"].items() if v >= 0.005))
        if run["errors"]:
            counts = Counter(run["errors"]).most_common()
            print(f"  {run['label']}: errors " + ", ".join(f"{k} x{n}" for k, n in counts))
    if len(runs) > 1:
        first = runs[0]
        for run in runs[1:]:
            for phase in PHASES:
                b, f = first["phases"][phase], run["phases"][phase]
                print(f"  {phase}: CPU ms/request {b['cpu_ms']:.2f} -> {f['cpu_ms']:.2f} "
                      f"(x {f['cpu_ms'] / b['cpu_ms']:.2f}), Redis commands/request {b['redis_calls']:.2f} -> "
                      f"{f['redis_calls']:.2f}")
    for run in runs:
        if run.get("profile"):
            summary = profile_summary(run["profile"], top=20, groups=PROFILE_GROUPS)
            print(f"\nWhere one gunicorn worker's CPU goes ({run['label']}; py-spy, {summary['samples']} samples of "
                  "running threads, both phases)")
            table(["share %", "part (inclusive)"], [[f"{100 * v:.1f}", k] for k, v in summary["groups"].items()])
            table(["incl. %", "project function"], [[f"{100 * v:.1f}", k] for k, v in summary["inclusive"]])
            table(["own %", "innermost function"], [[f"{100 * v:.1f}", k] for k, v in summary["top"]])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=32, help="concurrent simulated raters")
    ap.add_argument("--requests", type=int, default=3000, help="requests per phase")
    ap.add_argument("--items", type=int, default=1000, help="items of the study")
    serve = load.serve_gunicorn_options()
    ap.add_argument("--web-workers", type=int, default=serve["web_workers"])
    ap.add_argument("--worker-class", default=serve["worker_class"])
    ap.add_argument("--threads", type=int, default=serve["threads"])
    ap.add_argument("--keep-alive", type=int, default=serve["keep_alive"])
    ap.add_argument("--appendfsync", default="always", choices=("always", "everysec", "no"))
    ap.add_argument("--worker", action="store_true", help="also run an RQ worker (its Redis commands count too)")
    ap.add_argument("--access-log", action="store_true", help="write gunicorn's access log (costs web CPU)")
    ap.add_argument("--baseline", metavar="REF", help="first measure the hot-path files of git revision REF")
    ap.add_argument("--profile", action="store_true", help="py-spy one gunicorn worker during the phases")
    ap.add_argument("--profile-out", metavar="FILE", help="also keep py-spy's raw stacks in FILE")
    ap.add_argument("--seed", type=int, default=0)
    return ap.parse_args(argv)


def main() -> None:
    a = parse_args()
    print(f"Machine: {os.cpu_count()} cores, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
          flush=True)
    runs = []
    with tempfile.TemporaryDirectory(prefix="proxima-webcpu-code-") as tmp:
        if a.baseline:
            runs.append(measure(a, load.code_copy(a.baseline, Path(tmp) / "baseline"), f"baseline {a.baseline}"))
        runs.append(measure(a, ROOT, "this tree"))
    print_figures(runs, a)
    if any(math.isnan(f["cpu_ms"]) for run in runs for f in run["phases"].values()):
        print("some CPU figures are missing (a gunicorn process went away)")


if __name__ == "__main__":
    main()
