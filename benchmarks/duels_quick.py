"""Quick evaluation of CandidateDuels against random triplets on alien eggs with human-like noise.

Prints NN error and hit@3 against answers per item for the duel learner and for the peer
(uniformly random triplets + an ordinal embedding when engine.embedding is installed, else the
random triplets' win rates), mean over seeds, and the duel learner's CPU time per 1,000 answers.

    .venv/bin/python benchmarks/duels_quick.py [--n 300] [--seeds 3] [--budgets 10,20,50,100,200,300]

``--pass-cost`` instead times what a live worker pays per update pass: n = 1000 clustered items,
simulated human answers in batches (``--batch``, default 50) up to ``--answers`` (default 50,000);
each pass is ``observe(batch)`` + ``next_questions(batch)``; prints the CPU time per pass (median,
99th percentile, max, passes over 200 ms), split by the passes that did embedding work, and the
cost of ``neighbor_graph(1)`` / ``progress()`` / ``to_state()`` at the end.

    .venv/bin/python benchmarks/duels_quick.py --pass-cost [--answers 50000] [--batch 50]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from anntri_common import timed_answers

from engine.duels import CandidateDuels
from engine.random_triplets import RandomTriplets
from engine.registry import drive_as_pool
from simulation.datasets import load_alien_eggs
from simulation.noise import alien_egg_noise
from simulation.oracles import TripletOracle


def true_ranks(D):
    """rank[i, j] = 0 for i's nearest neighbour, 1 the next, ... (ties share the lower rank)."""
    Dd = D.copy()
    np.fill_diagonal(Dd, np.inf)
    return (Dd[:, :, None] > Dd[:, None, :]).sum(axis=2)


def scores(nb, ranks):
    r = ranks[np.arange(len(nb)), np.maximum(nb, 0)]
    r = np.where(nb < 0, 10**9, r)
    return float(np.mean(r > 0)), float(np.mean(r < 3))


def peer_neighbors(trip_rows, n, seed):
    try:
        from engine import embedding
    except ImportError:
        return None
    t = np.asarray([(h, w, b if w == a else a) for h, a, b, w in trip_rows], np.int64)
    X = embedding.fit_embedding(t, n, dim=2, random_state=seed)
    return embedding.embedding_neighbors(X, 1)[:, 0]


def run(planner, oracle, budgets, n, on_checkpoint):
    total, cpu = 0, 0.0
    for b in budgets:
        total, spent = timed_answers(planner, oracle, total, b * n, n)
        cpu += spent
        t0 = time.process_time()
        on_checkpoint(b, planner)
        cpu += time.process_time() - t0
    return cpu, total


def one_seed(s, D_all, scale, lapse, n_items, budgets, params, res, peer=True):
    """One seed: a random subset of n_items eggs, both learners, scores into res[...][s]."""
    rng = np.random.default_rng(1000 + s)
    idx = np.sort(rng.choice(len(D_all), size=min(n_items, len(D_all)), replace=False))
    D = D_all[np.ix_(idx, idx)]
    D = D / D.max()
    ranks = true_ranks(D)
    n = len(D)

    def rec_duels(b, p):
        res["duels"][s, budgets.index(b)] = scores(p.neighbor_graph(1).neighbors[:, 0], ranks)

    planner = CandidateDuels(n, random_state=s, **params)
    oracle = TripletOracle(D, noise=scale, model="human", lapse=lapse, random_state=np.random.default_rng(s))
    cpu, tot = run(planner, oracle, budgets, n, rec_duels)
    if not peer:
        return cpu, tot, "peer (skipped)"
    log = []
    rt = RandomTriplets(n, random_state=s)
    orig = rt.observe

    def observe(rows):
        log.extend(rows)
        orig(rows)

    rt.observe = observe
    name = ["random + t-STE"]

    def rec_peer(b, p):
        nb = peer_neighbors(log, n, s)
        if nb is None:
            name[0] = "random win rate"
            nb = p.neighbor_graph(1).neighbors[:, 0]
        res["peer"][s, budgets.index(b)] = scores(nb, ranks)

    peer_oracle = TripletOracle(D, noise=scale, model="human", lapse=lapse, random_state=np.random.default_rng(s))
    run(rt, peer_oracle, budgets, n, rec_peer)
    return cpu, tot, name[0]


def pass_cost(n_answers: int, batch: int, n: int = 1000, params=None) -> None:
    """CPU time of each live update pass at n items (see the module docstring)."""
    from simulation import oracles
    from simulation.noise import alien_egg_noise

    fit = alien_egg_noise()
    X, _ = oracles.hierarchical_clusters(n, random_state=n)
    D = oracles.TripletOracle.from_points(X).distances
    oracle = oracles.TripletOracle(D, model="human", noise=fit.scale_for(D, unit="median_gap"), lapse=fit.lapse,
                                   random_state=0)
    planner = CandidateDuels(n, random_state=0, **(params or {}))
    drive_as_pool(planner)  # a live pool refill
    qs = planner.next_questions(batch)
    costs, fitting = [], []
    while planner.n_answers_ < n_answers:
        ans = oracle.answer(qs)
        t0 = time.process_time()
        planner.observe(ans)
        busy = planner._needs_refit()
        qs = planner.next_questions(batch)
        costs.append(time.process_time() - t0)
        fitting.append(busy)
    costs_ms, fitting = 1000 * np.asarray(costs), np.asarray(fitting)
    print(f"duels live passes, n = {n}, {planner.n_answers_} answers in batches of {batch}, "
          f"{planner.n_fits_} embedding refits, params {params or {}}")
    for label, sel in (("all passes", np.ones(len(costs_ms), bool)), ("passes refitting", fitting),
                       ("other passes", ~fitting)):
        c = costs_ms[sel]
        if len(c):
            print(f"  {label:17s} {len(c):5d}: median {np.median(c):6.1f} ms, p99 {np.percentile(c, 99):6.1f} ms, "
                  f"max {c.max():6.1f} ms, over 200 ms: {int((c > 200).sum())}")
    last = costs_ms[-len(costs_ms) // 5:]
    print(f"  last 20% of passes: median {np.median(last):.1f} ms, max {last.max():.1f} ms")
    for name, call in (("neighbor_graph(1)", lambda: planner.neighbor_graph(1)),
                       ("progress()", planner.progress), ("to_state()", planner.to_state)):
        t0 = time.process_time()
        call()
        print(f"  {name:17s} {1000 * (time.process_time() - t0):6.1f} ms")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pass-cost", action="store_true", help="time live update passes at n = 1000")
    ap.add_argument("--answers", type=int, default=50_000)
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--budgets", default="10,20,50,100,200,300")
    ap.add_argument("--no-peer", action="store_true", help="skip the peer (for tuning runs)")
    ap.add_argument("--params", default="", help="CandidateDuels params, e.g. shortlist=15,warmup=4")
    args = ap.parse_args()
    budgets = [int(b) for b in args.budgets.split(",")]
    params = {}
    for kv in filter(None, args.params.split(",")):
        k, v = kv.split("=")
        params[k] = float(v) if "." in v else int(v)
    if args.pass_cost:
        pass_cost(args.answers, args.batch, params=params)
        return
    eggs = load_alien_eggs()
    D_all = eggs.distances
    fit = alien_egg_noise()  # the one human noise model: scale and lapse fitted to the egg crowds
    scale, lapse = fit.scale, fit.lapse
    res = {name: np.zeros((args.seeds, len(budgets), 2)) for name in ("duels", "peer")}
    cpu_total, ans_total, peer_name = 0.0, 0, "peer"
    for s in range(args.seeds):
        cpu, tot, peer_name = one_seed(s, D_all, scale, lapse, args.n, budgets, params, res, not args.no_peer)
        cpu_total += cpu
        ans_total += tot
    print(f"alien eggs n={args.n}, logistic scale {scale:.4f} + lapse {lapse:.3f}, {args.seeds} seeds, params {params}")
    print(f"{'answers/item':>12} | {'duels err':>9} {'duels hit@3':>11} | {peer_name + ' err':>22} {'hit@3':>6}")
    for j, b in enumerate(budgets):
        d = res["duels"][:, j].mean(axis=0)
        p = res["peer"][:, j].mean(axis=0)
        print(f"{b:>12} | {d[0]:>9.3f} {d[1]:>11.3f} | {p[0]:>22.3f} {p[1]:>6.3f}")
    print(f"CandidateDuels CPU: {1000 * cpu_total / max(ans_total, 1):.3f} s per 1,000 answers")


if __name__ == "__main__":
    from threadpoolctl import threadpool_limits

    # one BLAS thread, as a live worker should run (threads spinning on small fits only burn CPU)
    with threadpool_limits(limits=1, user_api="blas"):
        main()
