"""Benchmark — load: simulated raters against the production setup on loopback.

Starts what ``proxima serve`` starts, in a scratch instance folder: the embedded
redis-server (AOF, ``appendfsync always``), RQ worker(s) (``python -m webapp worker``) and
gunicorn with serve's options (``webapp.cli.serve``: 2 workers x 8 threads, keep-alive;
``--worker-class``/``--threads``/``--keep-alive`` override them), plus an access log
whose ``%(D)s`` gives the server-side time of every request. It creates a study of n = 1,000
colour items with the question kind's default learner (``--algorithm``: duels for triplets;
``anntri``: triplet-derived ANNTri with the parameters of the older figures) that the worker
runs adaptively during the whole test.

Simulated raters behave like people in a browser: each has its own aiohttp ClientSession
(its own cookie session, rater id from ``?rater=``), opens the study page, fetches a
question, thinks for a log-normal time (median ``--think-median`` s, log-sd ``--think-sigma``),
answers with the question's token and takes the next question from the answer's response
(as ``static/js/rater.js`` does), until the test ends. Choices follow hidden 2-D item
positions with Gaussian noise. The number of raters ramps through ``--steps`` (default
50, 100, 200, 500, 1000), each held ``--step-seconds``; new raters join spread over the
first quarter of their step (at most 5 s), and throughput is measured after that.

Reported per step: answers/s sustained (and the load offered by the raters), errors,
fallback (empty-pool) rate, engine refresh latency, server-side (access log) and client-side
latency p50/p95/p99 of question and answer requests, CPU (% of one core) and peak memory of
each process, and the machine's load average. After the run every answer id a client got a
2xx for is looked up in the answer log (XRANGE): missing and duplicate answers are counted.
``--profile`` holds the highest step ``--profile-seconds`` longer while py-spy samples the
gunicorn workers and the RQ worker (with its job processes), and prints where time goes.
``--baseline REF`` first runs the same test against a copy of this working tree whose hot-path
files (``HOT_PATH_FILES``) are as they were at git revision REF, then against this tree;
``--gthread`` then runs this tree again with gunicorn's threaded workers and long
keep-alive; every later run is compared with the first (the machine is shared: compare
within one run). The access log costs the web workers a little CPU production does not pay.

    python benchmarks/load.py                    # 50..1000 raters, 30 s per step (~3.5 min)
    python benchmarks/load.py --quick            # 50, 200, 500 raters, 10 s per step (< 2 min)
    python benchmarks/load.py --profile --baseline 2f71f82 --gthread   # the report's tables (~13 min)
    python benchmarks/load.py --web-workers 4 --worker-class gthread --threads 4 --keep-alive 75
    python benchmarks/load.py --steps 500,1000 --compare 2x8,2x16,3x8   # web tiers back to back, one run
    python benchmarks/load.py --items 1000,5000,10000 --steps 200      # study sizes back to back
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

from load_common import (  # noqa: E402
    ProcessGroups,
    fmt,
    machine_busy_seconds,
    percentile,
    profile_summary,
    read_access_log,
    read_collapsed,
    table,
)
from load_setup import (  # noqa: E402, F401
    ANSWER_NOISE,
    HOT_PATH_FILES,
    LABEL,
    STUDY,
    Setup,
    code_copy,
    create_load_study,
    gunicorn_command,
    healthy,
    item_positions,
    serve_gunicorn_options,
    stop_process,
    study_config,
    wait_until,
)

from webapp.handles import shown_index  # noqa: E402

HTTP_TIMEOUT = 30.0
#: New raters of a step join spread over this share of the step (at most RAMP_MAX_SECONDS).
RAMP_SHARE, RAMP_MAX_SECONDS = 0.25, 5.0
ANCHORS = ("Salmon (Sievert et al.): 79 answers/s at about 100 concurrent raters on 2 vCPUs, random sampling "
           "only; NEXT (Jamieson et al., NIPS 2015): query latency under 100 ms")
GTHREAD_THREADS, GTHREAD_KEEP_ALIVE = 8, 75
LATENCY_THRESHOLD_MS = 10  # Redis latency monitor: record stalls of at least this long
GOALS = {"answers_per_second": 500.0, "served_share": 0.97, "server_p99_ms": 50.0, "fallback_rate": 0.01,
         "engine_p95_ms": 200.0}


# ============================================================================ load generator
class Recorder:
    """What one generator process saw: latencies by (step, kind), error codes, acknowledged answers."""

    def __init__(self, t0: float, step_seconds: float, n_steps: int):
        self.t0, self.step_seconds, self.n_steps = t0, step_seconds, n_steps
        self.latency: dict[str, list[float]] = defaultdict(list)  # "step:kind" -> ms
        self.errors: dict[str, Counter] = defaultdict(Counter)  # "step" -> code -> count
        self.acked: list[str] = []
        self.acked_at: list[float] = []
        self.late: dict[str, list[float]] = defaultdict(list)  # "step" -> ms the think timer woke late
        self.raters = 0

    def step_at(self, t: float) -> int:
        """The step a moment belongs to; the profiling hold after the last step is step n_steps."""
        return max(0, min(self.n_steps, int((t - self.t0) // self.step_seconds)))

    def to_dict(self) -> dict:
        return {"latency": self.latency, "errors": {k: dict(v) for k, v in self.errors.items()},
                "acked": self.acked, "acked_at": self.acked_at, "late": self.late, "raters": self.raters}


async def _request(session, rec: Recorder, kind: str, method: str, url: str, **kwargs):
    """(status, parsed body or None); latency and any non-2xx/failure recorded under the send step."""
    import aiohttp

    sent = time.time()
    step = rec.step_at(sent)
    headers = {"X-Load-Step": str(step)}
    try:
        async with session.request(method, url, headers=headers, **kwargs) as resp:
            if resp.content_type == "application/json":
                body = await resp.json()
            else:
                await resp.read()
                body = None
            status = resp.status
    except (TimeoutError, aiohttp.ClientError) as exc:
        rec.errors[str(step)][f"{kind}:{type(exc).__name__}"] += 1
        return 0, None
    rec.latency[f"{step}:{kind}"].append((time.time() - sent) * 1000.0)
    if status >= 300:
        code = (body or {}).get("error", {}).get("code") if isinstance(body, dict) else None
        rec.errors[str(step)][f"{kind}:{status} {code or ''}".strip()] += 1
    return status, body


def screen_answer(question: dict, positions: list[tuple[float, float]], rng: random.Random, secret: str) -> dict:
    """A simulated rater's answer to any kind of screen (engine/kinds.py) from the hidden positions with
    Gaussian noise on each distance: a screen with a head picks the ``select`` (else one) candidates
    nearest the head, in order; three items without one pick the odd one (the item not in the nearest
    pair); a rated pair a value on its scale, the most similar end for the same place. One pick goes as
    ``choice``, several as ``picks``, by the items' handles (read with the server's ``secret`` key: the
    wire names items by handles only)."""
    def noisy(i, j):
        return math.dist(positions[i], positions[j]) + rng.gauss(0.0, ANSWER_NOISE)

    def index(item):  # a --baseline before handles names items by index
        return shown_index(secret, None, item["handle"]) if "handle" in item else item["index"]

    def name(item):
        return item.get("handle", item.get("index"))

    if "scale" in question:  # a rated pair: the most similar end of the scale for the same place
        scale = question["scale"]
        i, j = (index(item) for item in question["items"])
        low, high, step = float(scale["min"]), float(scale["max"]), float(scale.get("step") or 1)
        value = high - (high - low) * min(1.0, max(0.0, noisy(i, j)) / math.sqrt(2))
        return {"value": min(high, max(low, low + round((value - low) / step) * step))}
    if "head" in question:
        head = index(question["head"])
        ranked = sorted((noisy(head, index(c)), n) for n, c in enumerate(question["candidates"]))
        picks = [name(question["candidates"][n]) for _, n in ranked[: int(question.get("select", 1))]]
    else:
        x, y, z = (index(i) for i in question["items"])
        pairs = [(noisy(y, z), 0), (noisy(x, z), 1), (noisy(x, y), 2)]  # the pair nearest: the third is odd
        picks = [name(question["items"][min(pairs)[1]])]
    return {"picks": picks} if "select" in question else {"choice": picks[0]}


async def _rater(spec: dict, rec: Recorder, name: str, join_at: float, end_at: float,
                 positions: list[tuple[float, float]], rng: random.Random) -> None:
    import aiohttp

    await asyncio.sleep(max(0.0, join_at - time.time()))
    base, study = spec["base"], spec["study"]
    median, sigma = spec["think_median"], spec["think_sigma"]
    jar = aiohttp.CookieJar(unsafe=True)  # unsafe: keep cookies of an IP-address host (127.0.0.1)
    async with aiohttp.ClientSession(cookie_jar=jar, timeout=aiohttp.ClientTimeout(total=HTTP_TIMEOUT)) as session:
        rec.raters += 1
        await _request(session, rec, "page", "GET", f"{base}/s/{study}", params={"rater": name})
        question, failures = None, 0
        while time.time() < end_at:
            if question is None:
                status, body = await _request(session, rec, "question", "GET",
                                              f"{base}/api/studies/{study}/questions/next")
                if status != 200:
                    failures += 1
                    await asyncio.sleep(min(2.0, 0.1 * 2 ** min(failures, 5)))
                    continue
                question = body["question"]
            think = median * math.exp(sigma * rng.gauss(0.0, 1.0))
            wake = time.time() + think
            if wake >= end_at:
                return
            await asyncio.sleep(think)
            rec.late[str(rec.step_at(wake))].append((time.time() - wake) * 1000.0)
            status, body = await _request(session, rec, "answer", "POST", f"{base}/api/studies/{study}/answers",
                                          json={"token": question["token"],
                                                **screen_answer(question, positions, rng, spec["secret"]),
                                                "response_ms": int(think * 1000)})
            if status == 201:
                failures = 0
                rec.acked.append(body["answer"]["id"])
                rec.acked_at.append(time.time())
                question = body.get("next")
                if question is None and body.get("done"):
                    return
            else:
                failures += 1
                question = None


async def _generate(spec: dict) -> Recorder:
    t0, step_s, steps = spec["t0"], spec["step_seconds"], spec["steps"]
    rec = Recorder(t0, step_s, len(steps))
    end_at = t0 + len(steps) * step_s + spec["hold_seconds"]
    positions = item_positions(spec["n_items"], spec["seed"])
    ramp = min(RAMP_MAX_SECONDS, RAMP_SHARE * step_s)
    tasks, before = [], 0
    for k, count in enumerate(steps):
        for i in range(before, count):
            if i % spec["generators"] != spec["index"]:
                continue
            join_at = t0 + k * step_s + ramp * (i - before) / max(1, count - before)
            rng = random.Random(spec["seed"] * 1_000_003 + i)
            tasks.append(asyncio.create_task(
                _rater(spec, rec, f"load-{i}", join_at, end_at, positions, rng)))
        before = max(before, count)
    results = await asyncio.gather(*tasks, return_exceptions=True)
    for r in results:
        if isinstance(r, BaseException):
            # counted in the last step's errors, so a generator that cannot answer a kind fails "zero errors"
            # (a rater coroutine that crashed sends nothing, and the run read as 0 answers, 0 errors)
            rec.errors[str(len(steps) - 1)][f"rater crashed: {type(r).__name__}: {r}"] += 1
    return rec


def generator_main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    rec = asyncio.run(_generate(spec))
    Path(spec["out"]).write_text(json.dumps(rec.to_dict()))


# ============================================================================ the servers
class EngineSampler(threading.Thread):
    """Every engine refresh latency (the worker keeps the latest 500 in Redis), by load step."""

    def __init__(self, url: str, step_of, every: float = 0.5):
        import redis

        super().__init__(daemon=True)
        self.conn = redis.Redis.from_url(url)
        self.step_of, self.every = step_of, every
        self.latencies: dict[int, list[float]] = defaultdict(list)
        self.batches: dict[int, list[int]] = defaultdict(list)
        self.pool_depths: dict[int, list[int]] = defaultdict(list)  # the question pool's depth, sampled
        self.pool_targets: dict[int, list[int]] = defaultdict(list)
        self.updates = None
        self.halt = threading.Event()

    def run(self) -> None:
        from workers.store import keys

        while not self.halt.wait(self.every):
            with self.conn.pipeline(transaction=True) as pipe:
                pipe.hmget(keys.engine_stats(STUDY), ["updates", "last_batch"])
                pipe.lrange(keys.refresh_latencies(STUDY), 0, -1)
                pipe.llen(keys.pool(STUDY, LABEL))
                pipe.hget(keys.pool_targets(STUDY), LABEL)
                (updates, batch), latest, depth, target = pipe.execute()
            step = self.step_of(time.time())
            self.pool_depths[step].append(int(depth))
            self.pool_targets[step].append(int(target or 0))
            updates = int(updates or 0)
            if self.updates is None:
                self.updates = updates
                continue
            new = updates - self.updates
            if new > 0:
                step = self.step_of(time.time())
                self.latencies[step].extend(float(x) for x in latest[:new])
                self.batches[step].append(int(batch or 0))
                self.updates = updates


def engine_state_figures(conn) -> dict:
    """What the update passes wrote of the engine state, and what the study's engine keys hold now."""
    from workers.store import keys

    stats = {k.decode(): v.decode() for k, v in conn.hgetall(keys.engine_stats(STUDY)).items() if k != b"summary"}
    figures = {name: int(stats.get(name, 0)) for name in ("updates", "state_bytes_written", "checkpoints",
                                                           "checkpoint_bytes")}
    figures["stored_bytes"] = sum(conn.memory_usage(key) or 0 for key in (
        keys.engine(STUDY, LABEL), keys.engine_journal(STUDY, LABEL), keys.engine_checkpoint(STUDY, LABEL)))
    figures["used_memory"] = int(conn.info("memory")["used_memory"])
    return figures


def redis_stalls(conn, since: float) -> dict[str, list[int]]:
    """Redis's latency monitor: per event (aof-fsync-always, aof-write, command, fork, ...) the
    worst stall in ms of each second with one over the threshold, since ``since``."""
    out = {}
    for event in conn.execute_command("LATENCY", "LATEST"):
        name = event[0].decode() if isinstance(event[0], bytes) else str(event[0])
        history = conn.execute_command("LATENCY", "HISTORY", name)
        out[name] = [int(ms) for ts, ms in history if int(ts) >= int(since)]
    return out


def slow_commands(conn) -> dict[str, list[float]]:
    """Redis's slow log: the commands that took ``LATENCY_THRESHOLD_MS`` or more, by what ran (a script
    by the first words of its body's first line, other commands by name and first key), in ms."""
    scripts = {}
    out: dict[str, list[float]] = {}
    for entry in conn.slowlog_get(1000):
        words = [w.decode(errors="replace") if isinstance(w, bytes) else str(w) for w in entry["command"].split()]
        if words and words[0].upper() == "EVALSHA":
            sha = words[1]
            if sha not in scripts:
                body = next((text for text in _loaded_scripts() if _sha1(text) == sha), "")
                scripts[sha] = body.strip().splitlines()[0][:60] if body else sha[:12]
            name = f"script {scripts[sha]}"
        else:
            name = " ".join(words[:2])[:60]
        out.setdefault(name, []).append(entry["duration"] / 1000.0)
    return out


def _sha1(text: str) -> str:
    import hashlib

    return hashlib.sha1(text.encode()).hexdigest()


def _loaded_scripts() -> list[str]:
    """The bodies of the project's Lua scripts (workers/store/lua/*.lua)."""
    return [path.read_text() for path in sorted((ROOT / "workers" / "store" / "lua").glob("*.lua"))]


def snapshot(conn, groups: ProcessGroups) -> dict:
    from workers.store import keys

    with conn.pipeline(transaction=False) as pipe:
        pipe.hgetall(keys.counters(STUDY))
        pipe.xlen(keys.answers(STUDY))
        pipe.hget(keys.engine_stats(STUDY), "answers_applied")
        counters, logged, applied = pipe.execute()
    return {"time": time.time(), "cpu": {name: s.cpu for name, s in groups.sample().items()},
            "busy": machine_busy_seconds(), "load": os.getloadavg()[0],
            "counters": {k.decode(): int(v) for k, v in counters.items()},
            "logged": int(logged), "applied": int(applied or 0)}


def start_profilers(pids: dict[str, list[int]], seconds: int, folder: Path) -> list[tuple[str, Path, subprocess.Popen]]:
    spy = Path(sys.executable).with_name("py-spy")
    running = []
    for name, pid_list in pids.items():
        for pid in pid_list:
            out = folder / f"pyspy-{name}-{pid}.txt"
            cmd = [str(spy), "record", "--pid", str(pid), "--duration", str(seconds), "--rate", "100",
                   "--nonblocking", "--format", "raw", "--output", str(out)]
            # web: Python running on the CPU only (a thread waiting for Redis or a socket drops the GIL);
            # rq: every sample of the job process too, waits included (refresh latency is wall time)
            cmd.append("--gil" if name == "web" else "--subprocesses")
            running.append((name, out, subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)))
    return running


def run_load(a, code_root: Path, label: str) -> dict:
    """One full ramp against a fresh setup running the code in ``code_root``; returns every figure."""
    import psutil

    from webapp.cli.embedded import free_port
    from workers.store import keys

    setup = Setup(a, code_root, "proxima-load-", a.pool_size)
    scratch, url, conn, server, log, procs = setup.scratch, setup.url, setup.conn, setup.server, setup.log, setup.procs
    try:
        conn.config_set("latency-monitor-threshold", LATENCY_THRESHOLD_MS)
        conn.config_set("slowlog-log-slower-than", LATENCY_THRESHOLD_MS * 1000)
        conn.config_set("slowlog-max-len", 1000)
        conn.slowlog_reset()
        rq = [setup.start([sys.executable, "-m", "webapp", "worker"]) for _ in range(a.rq_workers)]
        port = free_port()
        access_log = scratch / "access.log"
        web = setup.start(gunicorn_command(a, port, access_log))
        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: healthy(base), 90, "gunicorn to answer /api/health")
        wait_until(lambda: conn.hget(keys.engine_stats(STUDY), "updates"), 120, "the first pool fill")
        web_workers = [p.pid for p in psutil.Process(web.pid).children()]

        steps, step_s = a.steps, a.step_seconds
        hold = a.profile_seconds if a.profile else 0.0
        t0 = time.time() + 2.0
        n_steps = len(steps)

        def step_of(t: float) -> int:
            return max(0, min(n_steps, int((t - t0) // step_s)))

        gens = []
        for g in range(a.generators):
            spec = {"base": base, "study": STUDY, "steps": steps, "step_seconds": step_s, "t0": t0,
                    "hold_seconds": hold, "think_median": a.think_median, "think_sigma": a.think_sigma,
                    "seed": a.seed, "n_items": a.items, "index": g, "generators": a.generators,
                    "secret": (setup.instance / "secret_key").read_text().strip(),
                    "out": str(scratch / f"generator-{g}.json")}
            spec_path = scratch / f"generator-{g}.spec.json"
            spec_path.write_text(json.dumps(spec))
            gens.append(subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--generator",
                                          str(spec_path)], stdout=log, stderr=subprocess.STDOUT))
        procs += gens
        groups = ProcessGroups({"web": [web.pid], "rq": [p.pid for p in rq], "redis": [server.process.pid],
                                "generator": [p.pid for p in gens]})
        sampler = EngineSampler(url, step_of)
        sampler.start()
        snaps = [None] * (n_steps + 1)
        peak_rss: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        peak_load: dict[int, float] = defaultdict(float)
        profilers = []
        print(f"[{label}] {len(steps)} steps of {step_s:g} s from {steps[0]} to {steps[-1]} raters"
              + (f", then {hold:g} s under py-spy" if hold else ""), flush=True)
        while time.time() < t0:
            time.sleep(0.05)
        snaps[0] = snapshot(conn, groups)
        boundary = 1
        end = t0 + n_steps * step_s
        while True:
            now = time.time()
            if boundary <= n_steps and now >= t0 + boundary * step_s:
                snaps[boundary] = snapshot(conn, groups)
                s = snaps[boundary]
                answered = s["logged"] - snaps[boundary - 1]["logged"]
                print(f"[{label}]   step {boundary}: {steps[boundary - 1]} raters, {answered / step_s:.0f} answers/s, "
                      f"load {s['load']:.2f}", flush=True)
                boundary += 1
                if boundary > n_steps and a.profile:
                    pids = {"web": web_workers, "rq": [p.pid for p in rq]}
                    profilers = start_profilers(pids, max(2, int(hold) - 2), scratch)
            if boundary > n_steps and now >= end + hold:
                break
            step = step_of(now)
            for name, sample in groups.sample().items():
                peak_rss[step][name] = max(peak_rss[step][name], sample.rss_max)
                peak_rss[step][name + ":total"] = max(peak_rss[step][name + ":total"], sample.rss_total)
            peak_load[step] = max(peak_load[step], os.getloadavg()[0])
            time.sleep(0.5)
        for gen in gens:
            gen.wait(HTTP_TIMEOUT + 30)
        sampler.halt.set()
        sampler.join()
        drain_started = time.monotonic()
        try:
            wait_until(lambda: int(conn.hget(keys.engine_stats(STUDY), "answers_applied") or 0)
                       >= conn.xlen(keys.answers(STUDY)), 300, "the engine to apply every answer", every=0.5)
        except SystemExit as exc:
            print(f"[{label}] {exc}", flush=True)
        drain = time.monotonic() - drain_started
        profiles = {}
        for name, out, proc in profilers:
            try:
                _, err = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
            if out.exists():
                profiles.setdefault(name, []).extend(read_collapsed(out))
            else:
                print(f"[{label}] py-spy on {name} wrote nothing: {err.decode(errors='replace')[-400:]}", flush=True)
        generated = [json.loads((scratch / f"generator-{g}.json").read_text()) for g in range(a.generators)
                     if (scratch / f"generator-{g}.json").exists()]
        if len(generated) != a.generators:
            raise SystemExit(f"a load generator failed; see {scratch / 'servers.log'}")
        stalls = redis_stalls(conn, t0)
        slow = slow_commands(conn)  # (before the check below reads the whole log in one command)
        logged = [(entry_id.decode(), fields[b"qid"].decode())
                  for entry_id, fields in conn.xrange(keys.answers(STUDY))]
        info = conn.info("all")
        redis_commands = {k[len("cmdstat_"):]: v for k, v in info.items() if k.startswith("cmdstat_")}
        server_ms = read_access_log(access_log)
        return {"label": label, "steps": steps, "step_seconds": step_s, "t0": t0, "snaps": snaps,
                "peak_rss": peak_rss, "peak_load": peak_load, "engine": sampler.latencies,
                "batches": sampler.batches, "pool_depths": sampler.pool_depths, "pool_targets": sampler.pool_targets,
                "generated": generated, "logged": logged, "server_ms": server_ms,
                "drain_seconds": drain, "profiles": profiles, "redis_commands": redis_commands,
                "aof": {k: info[k] for k in ("aof_current_size", "aof_base_size", "aof_delayed_fsync", "total_forks")
                        if k in info},
                "stalls": stalls, "slow": slow, "engine_state": engine_state_figures(conn),
                "web_workers": len(web_workers)}
    finally:
        setup.stop()
        if a.keep:
            print(f"[{label}] kept {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


# ============================================================================ the tables
def step_figures(run: dict, a) -> list[dict]:
    steps, step_s, t0 = run["steps"], run["step_seconds"], run["t0"]
    ramp = min(RAMP_MAX_SECONDS, RAMP_SHARE * step_s)
    latency: dict[str, list[float]] = defaultdict(list)
    errors: dict[str, Counter] = defaultdict(Counter)
    late: dict[str, list[float]] = defaultdict(list)
    acked_at: list[float] = []
    for g in run["generated"]:
        for key, values in g["latency"].items():
            latency[key].extend(values)
        for step, codes in g["errors"].items():
            errors[step].update(codes)
        for step, values in g["late"].items():
            late[step].extend(values)
        acked_at.extend(g["acked_at"])
    mean_think = a.think_median * math.exp(a.think_sigma ** 2 / 2)
    out = []
    for k, raters in enumerate(steps):
        s0, s1 = run["snaps"][k], run["snaps"][k + 1]
        start, stop = t0 + k * step_s + ramp, t0 + (k + 1) * step_s
        answered = sum(1 for t in acked_at if start <= t < stop)
        served = s1["counters"].get("questions_served", 0) - s0["counters"].get("questions_served", 0)
        fallback = s1["counters"].get("fallback_served", 0) - s0["counters"].get("fallback_served", 0)
        wall = s1["time"] - s0["time"]
        cpu = {name: 100.0 * (s1["cpu"][name] - s0["cpu"][name]) / wall for name in s0["cpu"]}
        busy = 100.0 * (s1["busy"] - s0["busy"]) / wall
        cpu["others"] = busy - sum(cpu.values())
        requests = len(run["server_ms"].get((k, "answer"), [])) + len(run["server_ms"].get((k, "question"), []))
        engine = run["engine"].get(k, [])
        web_cpu = s1["cpu"]["web"] - s0["cpu"]["web"]
        out.append({
            "raters": raters, "offered": raters / mean_think, "answers_per_second": answered / (stop - start),
            "errors": sum(errors.get(str(k), Counter()).values()), "error_codes": errors.get(str(k), Counter()),
            "served": served, "fallback_rate": fallback / served if served else math.nan,
            "engine_p50": percentile(engine, 50), "engine_p95": percentile(engine, 95),
            "engine_max": max(engine) if engine else math.nan, "passes": len(engine),
            "batch": percentile(run["batches"].get(k, []), 50),
            "pool_empty": _share(run["pool_depths"].get(k, []), lambda d: d == 0),
            "pool_depth": percentile(run["pool_depths"].get(k, []), 50),
            "pool_target": percentile(run["pool_targets"].get(k, []), 50),
            "lag": s1["logged"] - s1["applied"], "load": s1["load"], "peak_load": run["peak_load"].get(k, math.nan),
            "cpu": cpu, "busy": busy, "rss": run["peak_rss"].get(k, {}),
            "web_cpu_ms_per_request": 1000.0 * web_cpu / requests if requests else math.nan,
            "late_p99": percentile(late.get(str(k), []), 99),
            "latency": {kind: {"server": run["server_ms"].get((k, kind), []), "client": latency.get(f"{k}:{kind}", [])}
                        for kind in ("question", "answer", "page")},
        })
    return out


def _share(values, test) -> float:
    return 100.0 * sum(1 for v in values if test(v)) / len(values) if values else math.nan


def p3(values) -> str:
    return " / ".join(fmt(percentile(values, q)) for q in (50, 95, 99)) if values else "—"


def print_run(run: dict, figures: list[dict], a) -> None:
    mean_think = a.think_median * math.exp(a.think_sigma ** 2 / 2)
    learner = "ANNTri (triplet-derived)" if a.algorithm == "anntri" and a.kind is None else a.algorithm
    if a.kind is not None:
        shape = dict(a.kind_settings or {})
        learner += f", {a.kind}" + (f" {shape['n_reference']}-rank-{shape['n_select']}" if "n_select" in shape else "")
    print(f"\n=== {run['label']}: {a.items} items, {learner}, {run['web_workers']} gunicorn "
          f"{a.worker_class} worker(s)" + (f" x {a.threads} threads" if a.threads > 1 else "")
          + (f", keep-alive {a.keep_alive} s" if a.keep_alive is not None else "")
          + f", {a.rq_workers} RQ worker(s), Redis appendfsync {a.appendfsync}, {a.generators} load generator(s); "
          f"think time log-normal, median {a.think_median:g} s, log-sd {a.think_sigma:g} (mean {mean_think:.2f} s)")
    print("\nThroughput per step (answers/s over each step after its ramp; offered = raters / mean think time)")
    table(["raters", "offered/s", "answers/s", "errors", "fallback %", "engine passes", "refresh p50/p95/max ms",
           "batch p50", "engine lag", "load 1m (peak)"],
          [[f["raters"], f["offered"], f["answers_per_second"], f["errors"], 100.0 * f["fallback_rate"], f["passes"],
            f"{fmt(f['engine_p50'])} / {fmt(f['engine_p95'])} / {fmt(f['engine_max'])}", f["batch"], f["lag"],
            f"{f['load']:.2f} ({f['peak_load']:.2f})"] for f in figures])
    print("\nQuestion pool (sampled every 0.5 s): share of samples with the pool empty, depth and the "
          "workers' target (p50)")
    table(["raters", "pool empty %", "depth p50", "target p50"],
          [[f["raters"], f["pool_empty"], f["pool_depth"], f["pool_target"]] for f in figures])
    print("\nLatency per step, ms p50 / p95 / p99 (server: gunicorn access log %(D)s; client: aiohttp, "
          "includes queueing); an answer request also issues the next question; page: the study page a "
          "joining rater opens")
    rows = []
    for f in figures:
        for kind in ("question", "answer", "page"):
            lat = f["latency"][kind]
            rows.append([f["raters"], kind, len(lat["server"]), p3(lat["server"]), p3(lat["client"])])
    table(["raters", "request", "n", "server p50 / p95 / p99", "client p50 / p95 / p99"], rows)
    print("\nCPU per step (% of one core; the machine has "
          f"{os.cpu_count()}) and peak RSS (MB: largest process / whole group)")
    names = ("web", "rq", "redis", "generator")
    rows = []
    for f in figures:
        rss = f["rss"]
        rows.append([f["raters"], *(f["cpu"][n] for n in names), f["cpu"]["others"],
                     f["web_cpu_ms_per_request"], f["late_p99"],
                     *(f"{rss.get(n, 0) / 2**20:.0f} / {rss.get(n + ':total', 0) / 2**20:.0f}" for n in names)])
    table(["raters", "web %", "rq %", "redis %", "generator %", "others %", "web ms/req", "timer late p99 ms",
           "web MB", "rq MB", "redis MB", "generator MB"], rows)
    codes = Counter()
    for f in figures:
        codes.update(f["error_codes"])
    if codes:
        print("\nErrors: " + ", ".join(f"{code} x{n}" for code, n in codes.most_common()))


def answer_check(run: dict) -> dict:
    acked = [i for g in run["generated"] for i in g["acked"]]
    logged_ids = [entry for entry, _ in run["logged"]]
    qids = [q for _, q in run["logged"]]
    logged_set = set(logged_ids)
    return {"acked": len(acked), "logged": len(logged_ids), "missing": len(set(acked) - logged_set),
            "duplicate_acks": len(acked) - len(set(acked)), "duplicate_questions": len(qids) - len(set(qids)),
            "unacknowledged": len(logged_set - set(acked))}


def print_checks(run: dict, figures: list[dict]) -> dict:
    check = answer_check(run)
    print(f"\nAnswers: {check['acked']} acknowledged with 2xx, {check['logged']} in the log; missing from the log "
          f"{check['missing']}, acknowledged twice {check['duplicate_acks']}, questions answered twice in the log "
          f"{check['duplicate_questions']}, logged but never acknowledged {check['unacknowledged']}; the engine "
          f"applied them all {run['drain_seconds']:.1f} s after the load stopped")
    top = sorted(run["redis_commands"].items(), key=lambda kv: -kv[1].get("usec", 0))[:6]
    print("Redis time by command (whole run): " + ", ".join(
        f"{name} {v['usec'] / 1e6:.1f} s ({v['calls']} calls, {v['usec_per_call']:.0f} µs/call)" for name, v in top))
    print(f"Redis AOF: {run['aof']}")
    es = run.get("engine_state") or {}
    if es:
        print(f"Engine state: {es['updates']} passes wrote {es['state_bytes_written'] / 2**20:.1f} MB of it "
              f"(journal entries and whole saves) and {es['checkpoints']} checkpoints "
              f"{es['checkpoint_bytes'] / 2**20:.1f} MB; the study's engine keys hold "
              f"{es['stored_bytes'] / 2**20:.1f} MB, Redis {es['used_memory'] / 2**20:.0f} MB in all")
    if run["stalls"]:
        print(f"Redis stalls of >= {LATENCY_THRESHOLD_MS} ms during the load (latency monitor; seconds with one, "
              "median and worst of each second's worst):")
        for event, values in sorted(run["stalls"].items(), key=lambda kv: -max(kv[1] or [0])):
            if values:
                print(f"  {event}: {len(values)} s, median {percentile(values, 50):.0f} ms, worst {max(values)} ms")
    if run.get("slow"):
        print(f"Redis commands of >= {LATENCY_THRESHOLD_MS} ms (slow log; each blocks every other client meanwhile):")
        for name, values in sorted(run["slow"].items(), key=lambda kv: -sum(kv[1])):
            print(f"  {name}: {len(values)} x, median {percentile(values, 50):.0f} ms, worst {max(values):.0f} ms")
    return check


def print_verdict(figures: list[dict], check: dict) -> None:
    top = figures[-1]
    best = max(figures, key=lambda f: f["answers_per_second"])
    near100 = min(figures, key=lambda f: abs(f["raters"] - 100))
    # every request a rater makes: the study page a joining rater opens as well as questions and answers
    p99 = max(percentile(f["latency"][k]["server"], 99) for f in figures for k in ("question", "answer", "page")
              if f["latency"][k]["server"])
    errors = sum(f["errors"] for f in figures)
    served = sum(f["served"] for f in figures)
    fallback = sum(f["fallback_rate"] * f["served"] for f in figures if f["served"])
    print(f"\nAnchors: {ANCHORS}.")
    print(f"This run, adaptive engine on: {near100['raters']} raters offered {near100['offered']:.0f} answers/s "
          f"(think time) and {near100['answers_per_second']:.0f} were served; the most sustained was "
          f"{best['answers_per_second']:.0f} answers/s at {best['raters']} raters "
          f"({best['answers_per_second'] / 79:.1f} x Salmon's 79); server p99 over all steps {fmt(p99)} ms "
          "(NEXT: < 100 ms).")
    short = [f for f in figures if f["answers_per_second"] < GOALS["served_share"] * f["offered"]]
    # a step in which no pass finished has no refresh latency: that is a miss, not a step to skip
    passless = [f["raters"] for f in figures if f["engine_p95"] != f["engine_p95"]]
    engine_p95 = max((f["engine_p95"] for f in figures if f["engine_p95"] == f["engine_p95"]), default=math.nan)
    goals = [
        (f">= {100 * GOALS['served_share']:.0f}% of the offered answers/s at every step", not short,
         ", ".join(f"{f['raters']} raters {100 * f['answers_per_second'] / f['offered']:.0f}%" for f in figures)),
        (f"engine refresh p95 < {GOALS['engine_p95_ms']:.0f} ms at every step",
         not passless and engine_p95 < GOALS["engine_p95_ms"],
         f"worst {fmt(engine_p95)} ms" + (f"; no pass finished at {', '.join(map(str, passless))} raters"
                                          if passless else "")),
        ("answers/s >= 500 at the top step", top["answers_per_second"] >= GOALS["answers_per_second"],
         f"{top['answers_per_second']:.0f} (offered {top['offered']:.0f})"),
        ("server-side p99 < 50 ms (every step, every request: page, question, answer)",
         p99 < GOALS["server_p99_ms"], f"{fmt(p99)} ms"),
        ("zero errors", errors == 0, str(errors)),
        ("every answer kept exactly once (none lost, acknowledged twice, logged twice or logged unacknowledged)",
         not (check["missing"] or check["duplicate_acks"] or check["duplicate_questions"] or check["unacknowledged"]),
         f"{check['missing']} missing, {check['duplicate_acks']} acknowledged twice, "
         f"{check['duplicate_questions']} logged twice, {check['unacknowledged']} logged but never acknowledged"),
        ("fallback < 1%", served > 0 and fallback / served < GOALS["fallback_rate"],
         f"{100 * fallback / served:.2f}%" if served else "—"),
    ]
    for name, ok, value in goals:
        print(f"  goal {name}: {'met' if ok else 'MISSED'} ({value})")


PROFILE_GROUPS = {
    "web": {
        "gunicorn outside the app (accept, read, respond, close, access log)": ("!Flask.wsgi_app (",),
        "Flask view functions": ("Flask.dispatch_request (",),
        "redis-py (pack commands, parse replies)": ("redis/",),
        "question tokens (itsdangerous)": ("itsdangerous/",),
        "session cookie (Flask sessions)": ("open_session (", "save_session ("),
    },
    "rq": {
        "the update job (update_study)": ("update_study (",),
        "read engine state (HGETALL + decode)": ("load_learners (",),
        "apply answers (observe)": ("observe_batch (",),
        "plan questions, prune pools": ("Learner.plan (", "Learner.stale (", "prune_questions ("),
        "encode engine state": ("encode_state (",),
        "MULTI/EXEC (state, pools, stats)": ("Pipeline.execute (",),
        "redis-py (pack commands, parse replies)": ("redis/",),
    },
}


def print_profiles(run: dict) -> None:
    if not run["profiles"]:
        return
    print(f"\nWhere time goes at {run['steps'][-1]} raters (py-spy, 100 Hz; web: samples holding the GIL, "
          "rq: all samples of the worker and its job processes; shares are of all samples)")
    for name, stacks in run["profiles"].items():
        summary = profile_summary(stacks, top=12, groups=PROFILE_GROUPS.get(name))
        what = "gunicorn workers" if name == "web" else "RQ worker and its job processes"
        print(f"\n{what}: {summary['samples']} samples")
        table(["share %", "part (inclusive)"], [[f"{100 * v:.1f}", k] for k, v in summary["groups"].items()])
        table(["incl. %", "project function"], [[f"{100 * v:.1f}", k] for k, v in summary["inclusive"]])
        table(["own %", "innermost function"], [[f"{100 * v:.1f}", k] for k, v in summary["top"]])


def print_comparison(before: tuple[dict, list[dict]], after: tuple[dict, list[dict]]) -> None:
    (rb, fb), (ra, fa) = before, after
    print(f"\nBefore ({rb['label']}) / after ({ra['label']}), same machine, one command, back to back")
    rows = []
    for b, f in zip(fb, fa, strict=True):
        def ratio(x, y):
            return fmt(y / x) if x and x == x and y == y else "—"

        sb = percentile(b["latency"]["answer"]["server"], 99)
        sa = percentile(f["latency"]["answer"]["server"], 99)
        rows.append([f["raters"], f"{b['answers_per_second']:.0f} -> {f['answers_per_second']:.0f}",
                     f"{fmt(percentile(b['latency']['answer']['server'], 50))} -> "
                     f"{fmt(percentile(f['latency']['answer']['server'], 50))}",
                     f"{fmt(sb)} -> {fmt(sa)}", ratio(sb, sa),
                     f"{fmt(b['web_cpu_ms_per_request'])} -> {fmt(f['web_cpu_ms_per_request'])}",
                     ratio(b["web_cpu_ms_per_request"], f["web_cpu_ms_per_request"]),
                     f"{b['cpu']['web']:.0f} -> {f['cpu']['web']:.0f}",
                     f"{b['cpu']['redis']:.0f} -> {f['cpu']['redis']:.0f}",
                     f"{b['errors']} -> {f['errors']}"])
    table(["raters", "answers/s", "answer server p50 ms", "answer server p99 ms", "p99 ratio", "web ms/request",
           "ms/request ratio", "web CPU %", "redis CPU %", "errors"], rows)


# ============================================================================ command line
def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=lambda s: [int(x) for x in s.split(",")], default=None,
                    help="concurrent raters per step, comma-separated (default 50,100,200,500,1000)")
    ap.add_argument("--step-seconds", type=float, default=None, help="how long each step is held (default 30)")
    ap.add_argument("--quick", action="store_true", help="steps 50,200,500 of 10 s (< 2 minutes)")
    ap.add_argument("--items", type=lambda s: [int(x) for x in s.split(",")], default=[1000],
                    help="items of the study; several (1000,5000,10000): one run each, back to back")
    ap.add_argument("--pool-size", type=int, default=20, help="the study's pool_size (the config default)")
    ap.add_argument("--think-median", type=float, default=1.8, help="median think time, s (log-normal)")
    ap.add_argument("--think-sigma", type=float, default=0.4, help="sd of the log think time")
    serve = serve_gunicorn_options()
    ap.add_argument("--web-workers", type=int, default=serve["web_workers"],
                    help=f"gunicorn workers (proxima serve: {serve['web_workers']})")
    ap.add_argument("--worker-class", default=serve["worker_class"],
                    help=f"gunicorn worker class (proxima serve: {serve['worker_class']})")
    ap.add_argument("--threads", type=int, default=serve["threads"],
                    help=f"threads per gunicorn worker (proxima serve: {serve['threads']})")
    ap.add_argument("--keep-alive", type=int, default=serve["keep_alive"],
                    help=f"gunicorn --keep-alive seconds (proxima serve: {serve['keep_alive']})")
    ap.add_argument("--compare", type=lambda s: [tuple(int(x) for x in c.split("x")) for c in s.split(",")],
                    metavar="WxT,...", help="run once per web tier of W gunicorn workers x T threads, back to back")
    ap.add_argument("--rq-workers", type=int, default=1, help="RQ workers (proxima serve: 1)")
    ap.add_argument("--appendfsync", default="always", choices=("always", "everysec", "no"),
                    help="Redis AOF fsync policy (proxima serve: always)")
    ap.add_argument("--generators", type=int, default=1, help="load-generator processes")
    ap.add_argument("--profile", action="store_true", help="py-spy the web and RQ workers at the top step")
    ap.add_argument("--profile-seconds", type=float, default=None, help="extra hold of the top step under py-spy")
    ap.add_argument("--baseline", metavar="REF",
                    help="first run this tree with the hot-path files of git revision REF, then this tree")
    ap.add_argument("--gthread", action="store_true",
                    help=f"then run this tree again under gunicorn --worker-class gthread --threads {GTHREAD_THREADS}"
                         f" --keep-alive {GTHREAD_KEEP_ALIVE}")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--algorithm", default=None,
                    help="the study's learner (a name of engine/registry.py's table); default: the default "
                         "learner of the question kind (duels for triplets); 'anntri' runs the triplet-derived "
                         "ANNTri study the older figures of benchmarks/HISTORY.md were measured with")
    ap.add_argument("--kind", default=None,
                    help="the study's question kind (engine/kinds.py: triplet, rating, odd_one_out, rank); "
                         "without it, a triplet study")
    ap.add_argument("--n-reference", type=int, default=None, help="with --kind rank: references per screen (8)")
    ap.add_argument("--n-select", type=int, default=None, help="with --kind rank: picks per screen (2)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder (logs, access log, profiles)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    a = ap.parse_args(argv)
    if a.steps is None:
        a.steps = [50, 200, 500] if a.quick else [50, 100, 200, 500, 1000]
    if a.step_seconds is None:
        a.step_seconds = 10.0 if a.quick else 30.0
    if a.profile_seconds is None:
        a.profile_seconds = 8.0 if a.quick else 20.0
    from engine.kinds import DEFAULT_KIND, get_kind
    from engine.registry import default_algorithm

    if a.kind is not None:
        try:
            kind = get_kind(a.kind)
        except ValueError as exc:
            ap.error(str(exc))
        size = {k: v for k, v in (("n_reference", a.n_reference), ("n_select", a.n_select)) if v is not None}
        a.kind_settings = kind.check_settings(size) if kind.settings else None
    else:
        a.kind_settings = None
    a.algorithm = a.algorithm or default_algorithm(a.kind or DEFAULT_KIND)
    return a


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--generator":
        generator_main(sys.argv[2])
        return
    a = parse_args()
    try:
        import aiohttp  # noqa: F401  (the load generators' client: without it they send nothing)
    except ImportError:
        sys.exit("load.py needs aiohttp and psutil: pip install -e '.[bench]'")
    # a SIGTERM (kill, pkill) ends the run through its finally blocks: the servers it started stop too
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(f"load.py: stopped by signal {signum}"))
    global LABEL
    LABEL = a.algorithm  # the study's one algorithm's label (its name)
    print(f"Machine: {os.cpu_count()} cores, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
          "(other users' work shows in the 'others %' column)", flush=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="proxima-load-code-") as tmp:
        runs = []
        if a.baseline:
            runs.append((code_copy(a.baseline, Path(tmp) / "baseline"), f"baseline {a.baseline}",
                         argparse.Namespace(**{**vars(a), "items": a.items[0]})))
        if a.compare or len(a.items) > 1:
            for n_items in a.items:
                for workers, threads in a.compare or [(a.web_workers, a.threads)]:
                    tier = argparse.Namespace(**{**vars(a), "items": n_items, "web_workers": workers,
                                                 "threads": threads})
                    runs.append((ROOT, f"this tree, n = {n_items}, gunicorn {workers} x {threads} threads", tier))
        else:
            runs.append((ROOT, "this tree", argparse.Namespace(**{**vars(a), "items": a.items[0]})))
        if a.gthread:
            # the web tier without one blocked process per connection: threads, and connections kept
            # open between a rater's requests (longer than a think time, as browsers do)
            tuned = argparse.Namespace(**{**vars(a), "items": a.items[0], "worker_class": "gthread",
                                          "threads": GTHREAD_THREADS,
                                          "keep_alive": GTHREAD_KEEP_ALIVE, "profile": False})
            runs.append((ROOT, f"this tree, gunicorn gthread x {GTHREAD_THREADS}, keep-alive {GTHREAD_KEEP_ALIVE} s",
                         tuned))
        for code_root, label, options in runs:
            run = run_load(options, code_root, label)
            figures = step_figures(run, options)
            print_run(run, figures, options)
            check = print_checks(run, figures)
            print_profiles(run)
            print_verdict(figures, check)
            results.append((run, figures, check))
    for later in results[1:]:
        print_comparison(results[0][:2], later[:2])
    if a.json:
        def plain(f):
            return {k: v for k, v in f.items() if k != "latency"} | {
                "latency": {kind: {side: [percentile(vals, q) for q in (50, 95, 99)] for side, vals in d.items()}
                            for kind, d in f["latency"].items()}}
        Path(a.json).write_text(json.dumps([{"label": r["label"], "steps": [plain(f) for f in figs], "answers": c}
                                            for r, figs, c in results], indent=1, default=str))


if __name__ == "__main__":
    main()
