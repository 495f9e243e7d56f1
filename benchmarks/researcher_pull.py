"""Benchmark — how long a researcher waits to pull a study onto a laptop.

A real ``proxima serve`` (gunicorn, the embedded Redis, no RQ worker of its own) holds a study of ``--items``
text items whose answer log has N answers (written with ``proxima import-triplets``, rows of a random 2-D
truth); one ``proxima worker --burst`` applies them before anything is timed. Timed, each the median of
``--repeats``: ``proxima.connect(url, token).study(id).answers()`` (HTTP export + pandas), ``.triplets()``,
``proxima.read_export(zip).answers()`` (offline); and the data package: the zip written in this process as the
web request wrote it before a background job built it (what that request waited), then the request that asks
for a build now (``POST .../package/build``), the build in a ``proxima worker --burst`` from that request to
the status saying finished, and ``GET .../package`` of the built zip; plus the package's size.

    python benchmarks/researcher_pull.py                    # 10,000 and 100,000 answers, 1,000 items
    python benchmarks/researcher_pull.py --quick            # 2,000 answers, 100 items
"""
from __future__ import annotations

import argparse
import io
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np
import redis
import requests

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT)]

import proxima  # noqa: E402
from webapp.accounts import create_user  # noqa: E402
from webapp.api_tokens import create_token  # noqa: E402
from webapp.cli.embedded import EmbeddedRedis, free_port  # noqa: E402
from webapp.stats import study_stats  # noqa: E402
from workers.results.exports import import_triplets  # noqa: E402
from workers.results.package import write_package_zip  # noqa: E402
from workers.store import keys  # noqa: E402
from workers.store.config import StudyConfig  # noqa: E402
from workers.store.studies import Item, create_study, get_study  # noqa: E402


def timed(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def worker(env: dict) -> None:
    """Run every queued job (``proxima worker --burst``)."""
    subprocess.run([str(Path(sys.executable).parent / "proxima"), "worker", "--burst"], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, timeout=1800)


def build_over_http(base: str, token: str, study_id: str, env: dict, conn) -> tuple[float, float]:
    """(seconds of the request asking for a build, seconds the job took from starting to storing the zip), the
    build run by a ``proxima worker --burst`` started right after the request (its start-up not counted); a
    kept package is dropped first, so every call builds."""
    from workers.store.packages import drop_packages

    drop_packages(conn, study_id)
    headers = {"Authorization": f"Bearer {token}"}
    start = time.perf_counter()
    response = requests.post(f"{base}/api/studies/{study_id}/package/build", headers=headers, timeout=600)
    asked = time.perf_counter()
    assert response.status_code == 202, response.text
    worker(env)
    status = requests.get(f"{base}/api/studies/{study_id}/package/status", headers=headers, timeout=600).json()
    assert status["state"] == "finished", status
    started, finished = conn.hmget(keys.package_status(study_id, "pseudonymous"), "started_at", "finished_at")
    return asked - start, float(finished) - float(started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", default="10000,100000", help="answer counts, comma-separated")
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    counts = [2000] if args.quick else [int(x) for x in args.answers.split(",")]
    n_items = 100 if args.quick else args.items
    repeats = 1 if args.quick else args.repeats

    work = Path(tempfile.mkdtemp(prefix="proxima-pull-"))
    store = EmbeddedRedis(work / "store", appendfsync="everysec")
    url = store.start()
    port = free_port()
    env = dict(os.environ, REDIS_URL=url, PROXIMA_INSTANCE_PATH=str(work))
    server = subprocess.Popen([str(Path(sys.executable).parent / "proxima"), "serve", "--port", str(port),
                               "--web-workers", "2", "--workers", "0"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    conn = redis.Redis.from_url(url)
    rows = []
    try:
        for _ in range(600):
            try:
                if requests.get(f"{base}/api/health", timeout=2).ok:
                    break
            except requests.RequestException:
                pass
            time.sleep(0.2)
        create_user(conn, "bench", "a long benchmark password")
        token = create_token(conn, "bench", "benchmark")[0]
        rng = np.random.default_rng(0)
        X = rng.normal(size=(n_items, 2))
        for n in counts:
            study_id = f"pull-{n}"
            config = StudyConfig.from_dict({"name": study_id, "algorithms": [{"algorithm": "random_triplets"}]})
            create_study(conn, config, [Item(id=f"i{i}", kind="text", text=f"item {i}") for i in range(n_items)],
                         study_id=study_id)
            triplets = np.array([rng.choice(n_items, 3, replace=False) for _ in range(n)])
            near = np.linalg.norm(X[triplets[:, 0]] - X[triplets[:, 1]], axis=1) < np.linalg.norm(
                X[triplets[:, 0]] - X[triplets[:, 2]], axis=1)
            triplets[~near] = triplets[~near][:, [0, 2, 1]]
            text = "\n".join(",".join(map(str, t)) for t in triplets)
            import_triplets(conn, study_id, text, rater="lab-import")
            worker(env)  # the learners apply the imported answers first: nothing else runs while timing
            study = proxima.connect(base, token).study(study_id)
            t_answers, answers = timed(study.answers, repeats)
            t_triplets, got = timed(study.triplets, repeats)
            assert len(answers) == n and len(got) == n
            # the package as the web request wrote it before (the same writer, without the HTTP transfer)
            t_inline, _ = timed(partial(write_package_zip, conn, study_id, io.BytesIO(),
                                        status=study_stats(conn, get_study(conn, study_id))), repeats)
            builds = [build_over_http(base, token, study_id, env, conn) for _ in range(repeats)]
            t_post, t_build = (statistics.median(b[i] for b in builds) for i in range(2))
            zip_path = work / f"{study_id}.zip"
            t_get, package = timed(partial(study.download_package, zip_path), repeats)  # built: joined, fetched
            t_offline, offline = timed(package.answers, repeats)
            assert len(offline) == n
            rows.append((n, n_items, t_answers, t_triplets, t_inline, t_post, t_build, t_get,
                         zip_path.stat().st_size / 1e6, t_offline))
    finally:
        conn.close()
        os.killpg(server.pid, signal.SIGINT)
        server.wait(timeout=60)
        store.stop()

    print("| answers | items | .answers() s | .triplets() s | package in the request (before) s "
          "| POST package/build ms | build in the worker s | .download_package() of the built zip s | package MB "
          "| read_export().answers() s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n, items, a, t, inline, post, build, get, mb, o in rows:
        print(f"| {n:,} | {items:,} | {a:.2f} | {t:.2f} | {inline:.2f} | {1000 * post:.0f} | {build:.2f} "
              f"| {get:.2f} | {mb:.1f} | {o:.2f} |")

if __name__ == "__main__":
    main()
