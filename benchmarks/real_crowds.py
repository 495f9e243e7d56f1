"""Real crowds: every learner of the algorithm table against random triplets + an ordinal embedding.

What a researcher would otherwise do (NEXT / Salmon) is to buy uniformly random triplets and fit
an ordinal embedding. This script drives every nearest-neighbour learner of ``engine.registry``
through ``make_planner(name, n, question_kind="triplet")`` with its defaults, driven as a live
study's worker drives it (``--mode live``, the default: ``drive_as_pool``, ``--batch`` questions per
pass, refits beside the passes arriving as late as their CPU time at ``--rate`` answers per second;
``--mode script``: as a script or an outside harness does, ``next_questions(batch)`` → answers →
``observe`` with the planner's own defaults), reads ``neighbor_graph(k=1)`` anytime, and prints per
data set (mean over seeds):

- NN error (share of items whose pick is not a true nearest neighbour; ties count as right) and
  hit@3 (the pick is among the 3 truly nearest) at each budget of answers per item;
- answers per item each method needs to reach the peer's hit@3 at 300 answers/item;
- the peer: uniformly random triplets + the best of STE / t-STE (d = 2…8) and the human model on a line
  (what duels fits for a continuum), chosen on held-out
  answers (``engine.embedding.select_embedding``), refitted at every budget.

Data sets:
- ``eggs``: the 300 NEXT alien eggs (1-D truth); simulated raters with the logistic + lapse noise
  fitted to the 17,611 human answers (``simulation.oracles``); also the ±1-position accuracy;
- ``clusters``: hierarchical clusters in R² (n = 100, 300, 1000) with the same fitted human noise,
  scaled to the differences within a leaf cluster;
- ``recorded`` / ``recorded-idiosyncratic``: 85 items answered from a table of one recorded answer
  per triplet (plain points in [0, 1]^4, or with item-specific similarities no low-dimensional
  map holds, as with real photos);
- ``material``: the Lagunas et al. material triplets: held-out triplet accuracy of the learners that
  predict triplets (an embedding), trained on budgets of the recorded train answers.

Question kinds (``--kinds triplet,odd_one_out,rank``): for ``odd_one_out`` and ``rank`` (a study's
``n_reference``-rank-``n_select`` grid, ``--n-reference 8 --n-select 2``) every triplet learner is
driven through ``make_planner(name, n, question_kind=kind)`` with its defaults, its screens answered
by the simulated rater of that kind on the same truth with the same fitted noise
(``simulation.oracles.OddOneOutOracle`` / ``RankOracle``: a softmax over the pairs / sequential choice,
plus lapse), budgets in screens per item. Its peer: uniformly random screens of the kind, every
answer read as the triplets it implies (``engine.screens``), + the best embedding (the THINGS
workflow). On the recorded sets a screen is answered afresh by the simulated person the table was
recorded from (one recorded answer per triplet cannot answer a grid), so the truth is that person's
distances. ``material`` has no truth to simulate screens from and is run for triplets only.

    python benchmarks/real_crowds.py [--quick] [--seeds 3]
        [--datasets recorded,recorded-idiosyncratic,eggs,clusters,material] [--methods NAME,...]
        [--budgets 10,20,50,100,200,500] [--sizes 100,300,1000] [--spread]
        [--kinds triplet,odd_one_out,rank] [--n-reference 8] [--n-select 2]
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
from harness import fmt_row, near_share, nn_metrics, print_table, recorded_oracle  # noqa: E402, F401

from engine.embedding import embedding_neighbors, select_embedding
from engine.implied_triplets import odd_one_out_triplets, rank_triplets
from engine.planners import make_planner
from engine.registry import ALGORITHMS, DEFAULT_NN_ALGORITHM, drive_as_pool
from simulation import oracles
from simulation.datasets import load_alien_eggs, load_material
from simulation.noise import alien_egg_noise

PEER = "random triplets + embedding"
#: the peer's name per question kind (random screens of the kind + the best embedding)
PEERS = {"triplet": PEER, "odd_one_out": "random odd-one-out + embedding", "rank": "random grids + embedding"}
#: Finer marks than the printed budgets, to find where a method reaches the peer's accuracy.
FINE_MARKS = (5, 10, 15, 20, 25, 30, 33, 40, 50, 60, 75, 100, 125, 150, 200, 250, 300, 400, 500)


# ---------------------------------------------------------------------------- truth metrics
# ---------------------------------------------------------------------------- drivers
def methods_for(names: list[str] | None, kind: str = "triplet") -> list[str]:
    """Every table entry that learns a graph (or an embedding) from ``kind`` questions."""
    out = [name for name, entry in ALGORITHMS.items()
           if kind in entry.question_kinds and not entry.needs_labels]
    if names:
        unknown = sorted(set(names) - set(methods_for(None, "triplet")) - {PEER})
        if unknown:
            raise SystemExit(f"unknown method(s) {unknown}; choose from {out + [PEER]}")
        out = [m for m in out if m in names]
    return out


#: parameters given on the command line (--params), for every learner that takes them
PARAMS: dict = {}
#: --no-peer: leave the peer out (tuning runs)
SKIP_PEER = False
#: --mode live: the crowd's answers per second that refits beside the passes lag behind (None: --mode script)
LIVE_RATE: float | None = None
#: --spread: also print the standard deviation of hit@3 over seeds
SPREAD = False
#: the question kind being measured (--kinds runs each in turn) and the rank screens' shape
KIND = "triplet"
SCREEN = {"n_reference": 8, "n_select": 2}


def reference_budget(budgets: list[int]) -> int:
    """The peer's budget (questions per item) whose hit@3 the "reach" column is measured against:
    300 triplets, 100 odd-one-out screens (the goals of the question kinds), the largest rank budget."""
    return {"triplet": 300, "odd_one_out": 100}.get(KIND, max(budgets))


def kind_params() -> dict:
    return dict(SCREEN) if KIND == "rank" else {}


def screen_oracle(oracle, seed: int):
    """The simulated rater of the current kind answering like ``oracle`` (a human-model TripletOracle,
    or a recorded table made from one: then its person, answering afresh): same distances, scale, lapse."""
    if KIND == "triplet":
        return oracle
    rater = getattr(oracle, "rater", oracle)
    if KIND == "odd_one_out":
        return oracles.OddOneOutOracle(rater.distances, scale=rater.noise, lapse=rater.lapse, random_state=seed)
    return oracles.RankOracle(rater.distances, scale=rater.noise, lapse=rater.lapse,
                              n_select=SCREEN["n_select"], random_state=seed)


def implied_triplets(rows) -> np.ndarray:
    """(head, closer, farther) rows of the answers of the current kind."""
    out = []
    for r in rows:
        if KIND == "triplet":
            h, a, b, w = r
            out.append((h, w, b if w == a else a))
        else:
            conv = odd_one_out_triplets(*r) if KIND == "odd_one_out" else rank_triplets(*r)
            out.extend((h, w, b if w == a else a) for h, a, b, w in conv)
    return np.asarray(out, np.int64).reshape(-1, 3)


def random_screens(n: int, m: int, rng: np.random.Generator) -> list:
    """``m`` uniformly random screens of the current kind."""
    if KIND == "triplet":
        return [tuple(map(int, q)) for q in oracles.random_triplet_questions(n, m, rng)]
    width = 3 if KIND == "odd_one_out" else SCREEN["n_reference"] + 1
    items = [tuple(int(x) for x in rng.choice(n, size=width, replace=False)) for _ in range(m)]
    return items if KIND == "odd_one_out" else [(q[0], q[1:]) for q in items]


def drive(name: str, n: int, answer, marks: list[int], seed: int, batch: int) -> dict[int, np.ndarray]:
    """Run one learner (asked ``batch`` at a time): picks (n,) at every mark (total answers); engine CPU
    seconds under key -1."""
    params = {k: v for k, v in PARAMS.items() if k in ALGORITHMS[name].params}
    planner = make_planner(name, n, question_kind=KIND, random_state=seed, **params, **kind_params())
    crowd = None
    if LIVE_RATE:
        from harness import CrowdClock, TimedFitter

        crowd = CrowdClock(LIVE_RATE)
        drive_as_pool(planner, TimedFitter(crowd))
    picks: dict[int, np.ndarray] = {}
    total, engine = 0, 0.0
    clock = time.process_time
    for mark in marks:
        while total < mark:
            t0 = clock()
            qs = planner.next_questions(min(batch, mark - total))
            engine += clock() - t0
            if not qs:
                break
            ans = answer(qs)
            t0 = clock()
            planner.observe(ans)
            engine += clock() - t0
            total += len(qs)
            if crowd is not None:
                crowd.answers = total
        t0 = clock()
        picks[mark] = np.asarray(planner.neighbor_graph(k=1).neighbors, dtype=np.int64)[:, 0].copy()
        engine += clock() - t0
    picks[-1] = np.array([engine, total])
    return picks


def peer(n: int, answer, marks: list[int], seed: int) -> dict[int, np.ndarray]:
    """Random questions of the current kind + the best embedding (picked on held-out answers) at every
    mark (marks count questions: triplets or screens)."""
    rng = np.random.default_rng([seed, 7])
    rows = answer(random_screens(n, max(marks), rng))
    per = [len(implied_triplets([r])) for r in rows[:1]] or [1]
    trip = implied_triplets(rows)
    picks = {}
    t0 = time.process_time()
    for mark in marks:
        X = select_embedding(trip[: mark * per[0]], n, random_state=seed).embedding
        picks[mark] = embedding_neighbors(X, 1)[:, 0]
    picks[-1] = np.array([time.process_time() - t0, max(marks)])
    return picks


def oracle_answer(oracle):
    def answer(qs):
        return oracle.answer(qs)
    return answer


# ---------------------------------------------------------------------------- tables
def reach(curve: dict[int, float], target: float) -> str:
    """First mark (answers/item) whose hit@3 reaches ``target``, interpolated linearly."""
    marks = sorted(curve)
    prev = None
    for m in marks:
        if curve[m] >= target - 1e-12:
            if prev is None:
                return f"<={m:g}"
            lo, hlo = prev, curve[prev]
            val = lo + (m - lo) * (target - hlo) / max(curve[m] - hlo, 1e-12)
            return f"{val:.0f}"
        prev = m
    return f">{marks[-1]:g}"


def evaluate(title: str, n: int, D: np.ndarray | None, make_oracle, methods: list[str], budgets: list[int],
             seeds: int, batch: int, extra=None, truth=None) -> None:
    """One table: every method and the peer on ``seeds`` oracles; ``truth(oracle)`` gives the matrix
    the picks are scored against when it depends on the oracle (else ``D``)."""
    ref = reference_budget(budgets)
    per_item = sorted(set(budgets) | {b for b in FINE_MARKS if b <= max(budgets)} | {ref})
    marks = [b * n for b in per_item]
    peer_marks = [b * n for b in sorted(set(budgets) | {ref})]
    err: dict[str, dict[int, list]] = {}
    hit: dict[str, dict[int, list]] = {}
    more: dict[str, dict[int, list]] = {}
    cpu: dict[str, list] = {}
    peer_name = PEERS[KIND]
    everyone = methods + ([] if SKIP_PEER else [peer_name])
    for name in everyone:
        err[name], hit[name], more[name], cpu[name] = {}, {}, {}, []
        for s in range(seeds):
            oracle = make_oracle(1000 + s)
            answer = oracle_answer(screen_oracle(oracle, 2000 + s))
            if KIND != "triplet" and hasattr(oracle, "rater"):
                D_s = oracle.rater.distances  # screens are answered afresh by the recorded person
            else:
                D_s = D if truth is None else truth(oracle)
            picks = peer(n, answer, peer_marks, s) if name == peer_name else drive(name, n, answer, marks, s, batch)
            engine, total = picks.pop(-1)
            cpu[name].append(1000 * engine / max(total, 1))
            for mark, p in picks.items():
                e, h = nn_metrics(p, D_s)
                b = mark // n
                err[name].setdefault(b, []).append(e)
                hit[name].setdefault(b, []).append(h)
                if extra is not None:
                    more[name].setdefault(b, []).append(extra(p))
            print(f"  {title}: {name} seed {s} done ({cpu[name][-1]:.2f} ms CPU per answer)", file=sys.stderr)
    top = max(peer_marks) // n
    target = float(np.mean(hit[peer_name][top])) if peer_name in hit else float("nan")
    unit = "answers" if KIND == "triplet" else "screens"
    header = ["method"] + [f"{b}/item" for b in budgets] + [f"reach peer@{top}", f"ms/{unit[:-1]}"]
    rows = []
    for name in [m for m in [peer_name] + methods if m in hit]:
        cells = [name + (" (default)" if name == DEFAULT_NN_ALGORITHM else "")]
        for b in budgets:
            cell = f"{np.mean(err[name][b]):.2f} / {np.mean(hit[name][b]):.2f}"
            if SPREAD:
                cell += f" ±{np.std(hit[name][b]):.2f}"
            cells.append(cell)
        curve = {b: float(np.mean(v)) for b, v in hit[name].items()}
        cells.append(reach(curve, target))
        cells.append(f"{np.mean(cpu[name]):.2f}")
        rows.append(cells)
    what = "triplets" if KIND == "triplet" else (
        "odd-one-out screens" if KIND == "odd_one_out" else
        f"{SCREEN['n_reference']}-rank-{SCREEN['n_select']} screens")
    print_table(f"{title} — {what}: NN error / hit@3 by {unit} per item (mean of {seeds} seeds); "
                f"peer hit@3 at {top}/item = {target:.2f}", header, rows)
    if extra is not None:
        rows = [[name] + [f"{np.mean(more[name][b]):.2f}" for b in budgets] for name in everyone]
        print_table(f"{title} — share of picks within one position of a true neighbour",
                    ["method"] + [f"{b}/item" for b in budgets], rows)


def human_noise():
    fit = alien_egg_noise()
    print(f"human noise (alien eggs, {fit.n_answers} answers): scale {fit.scale:.4f} (distances in [0, 1]), "
          f"lapse {fit.lapse:.3f}, simulated agreement with the 1-D truth {fit.agreement:.3f}")
    return fit


def eggs(args, methods, fit):
    data = load_alien_eggs(args.data)
    D = data.distances
    n = len(D)
    coords = data.coordinates.astype(np.float64) / (data.coordinates.max() - data.coordinates.min())
    spacing = float(np.min(np.diff(np.sort(coords))))

    def make(seed):
        return oracles.TripletOracle(D, model="human", noise=fit.scale, lapse=fit.lapse, random_state=seed)

    evaluate(f"alien eggs, n = {n}, simulated human raters", n, D, make, methods, args.budgets, args.seeds,
             args.batch, extra=lambda p: near_share(p, coords, spacing))


def within_cluster_gap(D: np.ndarray, labels: np.ndarray, n_samples: int = 100_000) -> float:
    """Median |d(x,a) − d(x,b)| over random triplets of three items of one leaf cluster (fixed seed)."""
    rng = np.random.default_rng(0)
    members = [np.flatnonzero(labels == c) for c in np.unique(labels)]
    members = [m for m in members if len(m) >= 3]
    pick = rng.integers(len(members), size=n_samples)
    gaps = np.empty(n_samples)
    for i, c in enumerate(pick):
        x, a, b = rng.choice(members[c], size=3, replace=False)
        gaps[i] = abs(D[x, a] - D[x, b])
    return float(np.median(gaps))


def clusters(args, methods, fit):
    """Hierarchical clusters; the fitted noise is kept as a multiple of the median triplet gap
    *within a leaf cluster* (alien eggs are one kind of item: people's noise was fitted to the
    differences among items of one kind). Scaled to the gap over all triplets instead, as before,
    between-cluster distances set the scale and every method is at chance from n = 300 on (the
    noise ~900× the median nearest-neighbour distance)."""
    for n in args.sizes:
        X, labels = oracles.hierarchical_clusters(n, random_state=n)
        D = oracles.TripletOracle.from_points(X).distances
        scale = fit.scale / fit.median_gap * within_cluster_gap(D, labels)

        def make(seed, D=D, scale=scale):
            return oracles.TripletOracle(D, model="human", noise=scale, lapse=fit.lapse, random_state=seed)

        evaluate(f"hierarchical clusters, n = {n}, fitted human noise (within-cluster scale)", n, D, make,
                 methods, args.budgets, args.seeds, args.batch)


def recorded(args, methods, fit, idiosyncrasy: float = 0.0):
    """85 items answered from a table of recorded answers (:func:`recorded_oracle`), at the fitted
    lapse rate and at 0.1."""
    n = 85
    for lapse in sorted({round(fit.lapse, 3), 0.1}):
        def make(seed, lapse=lapse):
            return recorded_oracle(seed, fit, lapse, idiosyncrasy, n)

        kind = f"item-specific similarities {idiosyncrasy:g}, " if idiosyncrasy > 0 else ""
        evaluate(f"recorded answers (one per triplet), n = {n}, {kind}fitted human noise, lapse {lapse}", n,
                 None, make, methods, args.budgets, args.seeds, args.batch,
                 truth=lambda oracle: oracle.loss_share())


def material(args, methods):
    """Held-out triplet accuracy on the material data of learners that expose an embedding."""
    data = load_material(args.data)
    n = data.n_items
    train, test = data.train, data.test
    learners = [m for m in methods if ALGORITHMS[m].learns == "embedding"]
    budgets = [b for b in args.budgets if b * n <= len(train)]
    acc: dict[str, dict[int, list]] = {}
    for name in learners + [PEER]:
        acc[name] = {}
        for s in range(args.seeds):
            rng = np.random.default_rng(s)
            order = rng.permutation(len(train))
            rows = train[order]
            if name == PEER:
                for b in budgets:
                    X = select_embedding(rows[: b * n], n, random_state=s).embedding
                    acc[name].setdefault(b, []).append(_accuracy(X, test))
                continue
            planner = make_planner(name, n, question_kind="triplet", random_state=s)
            done = 0
            for b in budgets:
                chunk = rows[done: b * n]
                # (anchor, closer, farther) -> (head, a, b, winner) with the candidates in random order
                swap = rng.random(len(chunk)) < 0.5
                a = np.where(swap, chunk[:, 2], chunk[:, 1])
                c = np.where(swap, chunk[:, 1], chunk[:, 2])
                planner.observe(np.column_stack([chunk[:, 0], a, c, chunk[:, 1]]).tolist())
                done = b * n
                acc[name].setdefault(b, []).append(_accuracy(np.asarray(planner.embedding()), test))
    rows = [[name] + [f"{np.mean(acc[name][b]):.3f}" for b in budgets] for name in [PEER] + learners]
    print_table(f"material (Lagunas et al. 2019), n = {n}: held-out triplet accuracy (the per-triplet majority "
                f"caps it near 0.84) by recorded train answers per item, mean of {args.seeds} orders",
                ["method"] + [f"{b}/item" for b in budgets], rows)


def _accuracy(X: np.ndarray, test: np.ndarray) -> float:
    d1 = np.sum((X[test[:, 0]] - X[test[:, 1]]) ** 2, axis=1)
    d2 = np.sum((X[test[:, 0]] - X[test[:, 2]]) ** 2, axis=1)
    return float(np.mean(d1 < d2))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one seed, n = 100 clusters, budgets up to 100/item")
    ap.add_argument("--seeds", type=int)
    ap.add_argument("--datasets", default="recorded,recorded-idiosyncratic,eggs,clusters,material")
    ap.add_argument("--methods", default="", help="comma-separated registry names (default: all)")
    ap.add_argument("--budgets", default=None, help="answers per item, comma-separated")
    ap.add_argument("--kinds", default="triplet", help="question kinds, comma-separated: triplet,odd_one_out,rank")
    ap.add_argument("--screen-budgets", default=None,
                    help="screens per item for the screen kinds (default odd_one_out 10,20,33,50,100; "
                         "rank 5,10,15,25,50)")
    ap.add_argument("--n-reference", type=int, default=8, help="rank screens: references shown")
    ap.add_argument("--n-select", type=int, default=2, help="rank screens: references picked")
    ap.add_argument("--sizes", default=None, help="hierarchical cluster sizes")
    ap.add_argument("--batch", type=int, default=50, help="questions per next_questions call (live pool refill)")
    ap.add_argument("--mode", choices=("live", "script"), default="live",
                    help="live: as a study's worker drives the learners (pool, refits beside the passes); script: "
                         "with the planners' own defaults, as an outside harness")
    ap.add_argument("--rate", type=float, default=50.0, help="--mode live: the crowd's answers per second")
    ap.add_argument("--data", default=None, help="data folder (default ../shared/data)")
    ap.add_argument("--no-peer", action="store_true", help="leave the peer out (tuning runs)")
    ap.add_argument("--spread", action="store_true", help="also print hit@3's standard deviation over seeds")
    ap.add_argument("--params", default="", help="learner parameters, e.g. shortlist=15,explore=0.2 (given to "
                    "every method that has them)")
    args = ap.parse_args(argv)
    args.seeds = args.seeds or (1 if args.quick else 3)
    args.budgets = [int(x) for x in (args.budgets or ("10,20,50,100" if args.quick else "10,20,50,100,200,500"))
                    .split(",")]
    args.sizes = [int(x) for x in (args.sizes or ("100" if args.quick else "100,300,1000")).split(",")]
    global SKIP_PEER, SPREAD, LIVE_RATE, KIND
    SKIP_PEER = args.no_peer
    LIVE_RATE = args.rate if args.mode == "live" else None
    SPREAD = args.spread
    for item in filter(None, args.params.split(",")):
        key, _, value = item.partition("=")
        PARAMS[key] = json.loads(value)
    SCREEN.update(n_reference=args.n_reference, n_select=args.n_select)
    sets = args.datasets.split(",")
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = sorted(set(kinds) - set(PEERS))
    if unknown:
        raise SystemExit(f"unknown question kind(s) {unknown}; choose from {list(PEERS)}")
    triplet_budgets = args.budgets
    fit = human_noise() if {"eggs", "clusters", "recorded", "recorded-idiosyncratic"} & set(sets) else None
    for kind in kinds:
        KIND = kind
        methods = methods_for([m for m in args.methods.split(",") if m], kind)
        if kind == "triplet":
            args.budgets = triplet_budgets
        else:
            default = "10,20,33,50,100" if kind == "odd_one_out" else "5,10,15,25,50"
            args.budgets = [int(x) for x in (args.screen_budgets or default).split(",")]
        unit = "answers" if kind == "triplet" else "screens"
        print(f"\n# Real crowds benchmark, {kind} questions — methods: {', '.join(methods)}; default NN learner: "
              f"{DEFAULT_NN_ALGORITHM}; "
              + (f"live mode (batches of {args.batch}, crowd {args.rate:g} {unit}/s)" if LIVE_RATE else
                 f"script mode (batches of {args.batch})"))
        if "eggs" in sets:
            eggs(args, methods, fit)
        if "clusters" in sets:
            clusters(args, methods, fit)
        if "recorded" in sets:
            recorded(args, methods, fit)
        if "recorded-idiosyncratic" in sets:
            recorded(args, methods, fit, idiosyncrasy=0.1)
        if "material" in sets and kind == "triplet":
            material(args, methods)


if __name__ == "__main__":
    from threadpoolctl import threadpool_limits

    # one BLAS thread: OpenBLAS threads spinning on the small L-BFGS problems only burn CPU
    with threadpool_limits(limits=1, user_api="blas"):
        main()
