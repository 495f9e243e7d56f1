"""Benchmark — how long the dashboard's map takes to answer: the layout of the whole map and a click on an item
(its neighbours and the answers behind each, ``workers.results.evidence``).

A study of ``--items`` text items whose answer log has N answers (``proxima import-triplets`` rows of a random
2-D truth, applied to a random-triplets learner in this process), on the embedded Redis. Timed, each the median
of ``--repeats``: ``graph_layout`` (what ``GET .../graph-layout`` computes) and ``item_evidence`` of ten items
(what ``GET .../items/N/evidence`` computes; it reads at most the newest ``MAX_ANSWERS_READ`` answers).

    python benchmarks/map_click.py                    # 10,000 and 100,000 answers, 1,000 items
    python benchmarks/map_click.py --quick            # 2,000 answers, 100 items
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np
import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from webapp.cli.embedded import EmbeddedRedis  # noqa: E402
from workers.jobs.update_pass import apply_new_answers  # noqa: E402
from workers.results.evidence import MAX_ANSWERS_READ, item_evidence  # noqa: E402
from workers.results.exports import import_triplets  # noqa: E402
from workers.results.layout import graph_layout  # noqa: E402
from workers.store.config import StudyConfig  # noqa: E402
from workers.store.studies import Item, create_study, get_study  # noqa: E402


def median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", default="10000,100000", help="answer counts, comma-separated")
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    counts = [2000] if args.quick else [int(x) for x in args.answers.split(",")]
    n_items = 100 if args.quick else args.items

    store = EmbeddedRedis(Path(tempfile.mkdtemp(prefix="proxima-map-")) / "store", appendfsync="everysec")
    conn = redis.Redis.from_url(store.start())
    rows = []
    try:
        rng = np.random.default_rng(0)
        X = rng.normal(size=(n_items, 2))
        for n in counts:
            study_id = f"map-{n}"
            config = StudyConfig.from_dict({"name": study_id, "algorithms": [{"algorithm": "random_triplets"}]})
            create_study(conn, config, [Item(id=f"i{i}", kind="text", text=f"item {i}") for i in range(n_items)],
                         study_id=study_id)
            triplets = np.array([rng.choice(n_items, 3, replace=False) for _ in range(n)])
            near = np.linalg.norm(X[triplets[:, 0]] - X[triplets[:, 1]], axis=1) < np.linalg.norm(
                X[triplets[:, 0]] - X[triplets[:, 2]], axis=1)
            triplets[~near] = triplets[~near][:, [0, 2, 1]]
            import_triplets(conn, study_id, "\n".join(",".join(map(str, t)) for t in triplets), rater="lab-import")
            apply_new_answers(conn, study_id)
            study = get_study(conn, study_id)
            t_layout = median_seconds(partial(graph_layout, conn, study, "random_triplets"), args.repeats)
            clicks = [median_seconds(partial(item_evidence, conn, study, "random_triplets", i), args.repeats)
                      for i in range(0, n_items, max(1, n_items // 10))]
            about = item_evidence(conn, study, "random_triplets", 0)["answers"]
            rows.append((n, n_items, t_layout, statistics.median(clicks), max(clicks), about))
    finally:
        conn.close()
        store.stop()

    print(f"(a click reads at most the newest {MAX_ANSWERS_READ:,} answers)")
    print("| answers | items | graph layout s | click: evidence s (median of 10 items) | slowest item s "
          "| answers about item 0 read |")
    print("|---|---|---|---|---|---|")
    for n, items, layout, click, slowest, about in rows:
        print(f"| {n:,} | {items:,} | {layout:.2f} | {click:.2f} | {slowest:.2f} | {about} |")


if __name__ == "__main__":
    main()
