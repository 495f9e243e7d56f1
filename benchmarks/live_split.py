"""Benchmark — the learner's split of rater time in a live mixed study (``split: learner``), against the same study
at fixed half-and-half shares.

A study of ``--items`` items asks ratings (``pooled``) and triplets (``--triplets``: the triplet algorithm beside
it, which chooses the triplets; the pooled learner learns from their answers too) through the platform: Redis
(embedded), the issuing script (``questions.issue_question``), ``accept_answer`` and the worker's update jobs run
by RQ (a burst worker every ``--batch`` answers). With ``split: learner`` the worker's pass sets the question
shares from ``PooledRatings.time_shares`` at each kind's measured seconds (``workers.jobs.learned_split``);
``fixed`` keeps shares 1:1 (half the rater time each at equal seconds). Raters and truth as
``rating_learners.py --mixed``: ratings from :func:`simulation.ratings.realistic_simulator` (1-9, raters taking
turns of 100 ratings), triplets from the same people (:class:`simulation.ratings.TripletRater`, ``--triplet-noise``
points, 10% lapse); each answer's response time is its kind's seconds (the kinds table's: 2.0 s each), and the
budget is rater seconds per item. hit@3 of the pooled learner's graph, by the held-out means of 253 raters::

    nice -n 10 python benchmarks/live_split.py --items 30 --budgets 50,100,200,400,800 --seeds 6
    nice -n 10 python benchmarks/live_split.py --items 30 --seeds 6 --triplets random_triplets
    nice -n 10 python benchmarks/live_split.py --items 30 --seeds 12 --triplets pooled_triplets  # pooled chooses them
    nice -n 10 python benchmarks/live_split.py --items 30 --seeds 6 --triplet-lapse 1   # triplets from a bot
"""
from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import redis

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from harness import nn_metrics, print_table, truth_distances  # noqa: E402

from engine.kinds import KINDS  # noqa: E402
from engine.registry import wrapped_learner  # noqa: E402
from simulation.ratings import TripletNoise, TripletRater, realistic_simulator, triplet_noise_for  # noqa: E402
from webapp.cli.embedded import EmbeddedRedis  # noqa: E402
from workers.jobs import update  # noqa: E402
from workers.jobs.learner_cache import forget_cached, load_learners  # noqa: E402
from workers.store import keys, questions  # noqa: E402
from workers.store.answers import accept_answer  # noqa: E402
from workers.store.config import StudyConfig  # noqa: E402
from workers.store.queue import enqueue_update, run_queued_jobs, schedule_update  # noqa: E402
from workers.store.studies import Item, create_study, get_study  # noqa: E402

SPLITS = ("learner", "fixed")


def run(conn, split: str, n: int, budgets: list[int], seed: int, triplets: str, triplet_noise: float,
        batch: int, lapse: float = TripletNoise().lapse, triplet_agreement: float | None = None
        ) -> tuple[list[float], ...]:
    """(hit@3, share of the rater time on ratings so far, the learner's time share in force, share of the questions
    so far that were random fallbacks) at each budget. ``triplet_agreement``: the triplet noise is the one at which
    random triplets of this seed's items agree with their truth that often, not ``triplet_noise``."""
    random.seed(seed)  # the issuing script's draws and the fallback questions (workers.store.questions)
    sim = realistic_simulator(n, random_state=seed)
    D = truth_distances(sim, seed)
    if triplet_agreement is not None:
        triplet_noise = triplet_noise_for(sim.means, triplet_agreement, lapse)
    people = TripletRater(sim.means, TripletNoise(noise_sd=triplet_noise, lapse=lapse), random_state=seed + 20_000)
    conn.flushall()
    forget_cached()
    config = StudyConfig.from_dict({
        "name": f"split {split} {seed}", "random_state": seed, "split": split, "heldout_share": 0,
        "attention": {"rate": 0, "answer_check": False}, "pool_size": n,
        "rating": {"min": 1, "max": 9, "step": 1, "widget": "slider"},
        "algorithms": [{"algorithm": "pooled", "question_kind": "rating"},
                       {"algorithm": triplets, "question_kind": "triplet"}]})
    sid = create_study(conn, config, [Item(id=f"i{i}", kind="text", text=f"item {i}") for i in range(n)],
                       study_id="split")
    schedule_update(conn, sid)
    run_queued_jobs(conn)
    study = get_study(conn, sid)
    seconds = {kind: float(KINDS[kind].seconds) for kind in ("rating", "triplet")}
    spent = {"rating": 0.0, "triplet": 0.0}
    hits, on_ratings, in_force, fallback = [], [], [], []
    given = 0
    for b in budgets:
        while sum(spent.values()) < b * n - 1e-9:
            now = time.time()
            question, _, _ = questions.issue_question(conn, sid, study.config, n, "crowd", now, now + 600)
            shown = questions.question_items(question)
            if question["kind"] == "rating":
                i, j, d, rater = sim.answer([shown])[0]
                choice, value = None, float(round(9 - 8 * d))
            else:
                (_, _, _, choice), value = people.answer([shown])[0], None
                rater = sim.n_given // sim.noise.per_rater
            _, scheduled = accept_answer(conn, sid, question, f"r{rater}", choice, issued_at=now,
                                         response_ms=int(1000 * seconds[question["kind"]]), used_ttl=600, value=value)
            if scheduled:
                enqueue_update(conn, sid)  # as the web process does: the answer script set the update flag
            spent[question["kind"]] += seconds[question["kind"]]
            given += 1
            if given % batch == 0:
                run_queued_jobs(conn)
        run_queued_jobs(conn)
        learner = wrapped_learner(load_learners(conn, get_study(conn, sid))["pooled"].planner)
        picks = np.asarray(learner.neighbor_graph(1).neighbors)[:, 0]
        hits.append(nn_metrics(picks, D)[1])
        on_ratings.append(spent["rating"] / sum(spent.values()))
        split_now = questions.split_in_force(conn, sid, study.config)
        in_force.append(np.nan if split_now is None else split_now["time_shares"]["rating"])
        served, fell_back = conn.hmget(keys.counters(sid), ["questions_served", "fallback_served"])
        fallback.append(int(fell_back or 0) / max(1, int(served or 0)))
    return hits, on_ratings, in_force, fallback


def noise_label(args) -> str:
    if args.triplet_agreement is None:
        return f"{args.triplet_noise:g}"
    return f"for random triplets' agreement with the truth {args.triplet_agreement:g}"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=30)
    ap.add_argument("--budgets", default="50,100,200,400,800", help="rater seconds per item")
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--splits", default=",".join(SPLITS))
    ap.add_argument("--triplets", default="duels", help="the algorithm asking the triplets (pooled_triplets: the "
                    "triplets the pooled learner chooses, its next_triplets)")
    ap.add_argument("--triplet-noise", type=float, default=TripletNoise().noise_sd)
    ap.add_argument("--triplet-agreement", type=float, default=None,
                    help="in place of --triplet-noise, the noise at which random triplets agree with the truth this "
                         "often (real people's: .864, simulation.ratings.REAL_RANDOM_TRIPLET_AGREEMENT)")
    ap.add_argument("--triplet-lapse", type=float, default=TripletNoise().lapse,
                    help="share of triplets answered at random (1: a bot)")
    ap.add_argument("--batch", type=int, default=30, help="answers between update jobs")
    args = ap.parse_args(argv)
    budgets = [int(x) for x in args.budgets.split(",")]
    update.LINGER_SECONDS = 0.0  # a burst worker: nothing answers while it runs
    with tempfile.TemporaryDirectory() as tmp:
        store = EmbeddedRedis(Path(tmp) / "redis", appendfsync="everysec")
        conn = redis.Redis.from_url(store.start())
        try:
            rows, per_seed = [], {}
            for split in args.splits.split(","):
                t0 = time.time()
                runs = [run(conn, split, args.items, budgets, s, args.triplets, args.triplet_noise, args.batch,
                            args.triplet_lapse, args.triplet_agreement)
                        for s in range(args.seeds)]
                per_seed[split] = np.asarray([r[0] for r in runs])
                label = "live, the learner's split" if split == "learner" else "live, half and half (fixed 1:1)"
                rows.append([label, *[f"{v:.2f}" for v in per_seed[split].mean(axis=0)]])
                rows.append(["  its share of the time on ratings",
                             *[f"{v:.2f}" for v in np.mean([r[1] for r in runs], axis=0)]])
                if split == "learner":
                    rows.append(["  the learner's time share in force",
                                 *[f"{v:.2f}" for v in np.nanmean([r[2] for r in runs], axis=0)]])
                rows.append(["  random fallback questions (share)",
                             *[f"{v:.2f}" for v in np.mean([r[3] for r in runs], axis=0)]])
                print(f"  {label}: {' / '.join(rows[-3 if split != 'learner' else -4][1:])} "
                      f"({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
            if len(per_seed) == 2:
                d = per_seed["learner"] - per_seed["fixed"]
                se = d.std(axis=0, ddof=1) / np.sqrt(len(d)) if len(d) > 1 else np.full(d.shape[1], np.nan)
                rows.append(["learner's split - half and half (SE)",
                             *[f"{m:+.2f} ({e:.2f})" for m, e in zip(d.mean(axis=0), se, strict=True)]])
        finally:
            conn.close()
            store.stop()
    print_table(f"{args.items} items, a live mixed study (pooled ratings + {args.triplets} triplets), hit@3 (held-out "
                f"means of 253 raters) by rater seconds per item (a rating and a triplet "
                f"{KINDS['rating'].seconds:g} / {KINDS['triplet'].seconds:g} s; triplet noise "
                f"{noise_label(args)}, "
                f"lapse {args.triplet_lapse:g}; "
                f"update every {args.batch} answers), mean of {args.seeds} seeds",
                ["study", *[f"{b} s/item" for b in budgets]], rows)


if __name__ == "__main__":
    main()
