"""Benchmark — does a learner learn as much live as offline from the same number of answers?

Offline: the learner as it comes from the registry (``make_planner``), asked ``n`` questions at a
time (one per head for duels), the answers observed before it is asked again, refits finished.
Live: what a study's worker does (``drive_as_pool``), asked ``--batches`` questions per pass, its
refits handed to a fitter that stands for the worker's fit process: a refit starts when the learner
asks for it and is ready once the crowd (``--rate`` answers per second) has given as many answers as
arrive in the time the fit takes, so a slow fit lags as many answers as it would in a real study.
That time is *modelled*, not measured: the fit's objective evaluations x triplets x (dimensions + 1)
x ``--unit`` seconds (calibrated on a quiet machine: ``--calibrate`` prints the ratio of measured
CPU time to the units). The fit's arithmetic does not depend on the machine, so the same command
gives the same figures on a busy machine and on a quiet one (with measured CPU time two identical
runs gave 4 and 13 refits). ``--unit measured`` charges measured CPU time instead.
``--unit 0``: refits without lag (ready at the call that starts them), so only the question schedule
differs from offline. ``--features A``: the learner is given features of the items of triplet agreement ``A``
with the truth (``simulation.features``, as ``features_prior.py``), live and offline alike, or ``--features noise``:
16 columns of pure noise (agreement .5, ``simulation.features.noise_features``, ``features_prior.py``'s "noise");
``--local K``: the agreement measured on local triplets (j and k among i's K truly nearest) instead of random ones.
``--map-until 25,50,inf``: one row per value of ``engine.duels.dims.MAP_UNTIL`` (answers per item up to which a
large study with trusted features fits the features' map alone), assigned at run time. ``--trust-z 2.0``: the
features' test trusts from that z at every look (as before alpha was spent over its looks, which trusted pure
noise at 10,000 items in seeds 0 and 7 of 40): a trusted-noise study on purpose. ``--trace``
prints, per fit, how the questions asked from it spread over the heads. ``--cost`` adds, per mode, the process's
peak memory (RSS, the simulated crowd included) and the time of the calls (plan + observe, the refits handed to
the fitter not counted: a worker runs them in its fit process): median, p99 and most.
Above ``engine.truth.DENSE_ITEMS`` items the truth's distances are read from the points when needed (no
n x n matrix), so 50,000 items fit in memory.
Truth: clustered points (4-D, clusters of 20), answered by the human noise model (logistic 0.1 of the
clusters' unit spread, lapse 0.1). hit@3 by answers per item, mean over seeds::

    python benchmarks/live_vs_offline.py                       # duels, n = 1000, offline and batches 100,200,500
    python benchmarks/live_vs_offline.py --items 10000 --batches 200 --budgets 60 --seeds 1   # one mode
    python benchmarks/live_vs_offline.py --items 300,1000 --algorithms duels,embedding,active_embedding,random_triplets
    python benchmarks/live_vs_offline.py --features .7 --batches offline,200 --budgets 5,10,25 --seeds 1
    python benchmarks/live_vs_offline.py --items 50000 --features .7 --local 50 --batches 500 --budgets 5,10 \
        --seeds 1 --cost
    python benchmarks/live_vs_offline.py --items 10000 --features .7 --local 50 --batches offline \
        --map-until 25,50,100 --budgets 10,25,50,100
"""
from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import numpy as np
from scipy.spatial.distance import cdist

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from harness import (  # noqa: E402, F401
    UNIT_SECONDS,
    CrowdClock,
    FitWork,
    Ready,
    TimedFitter,
    clustered_points,  # noqa: E402, F401
    nn_metrics,
    print_table,
)

from engine import embedding  # noqa: E402
from engine.duels import dims as duels_dims  # noqa: E402
from engine.duels import priors as duels_priors  # noqa: E402
from engine.planners import make_planner  # noqa: E402
from engine.registry import drive_as_pool  # noqa: E402
from engine.truth import neighbor_wrong, point_distances, true_kth_distances  # noqa: E402
from simulation import oracles  # noqa: E402
from simulation.features import features_of_agreement, noise_features  # noqa: E402

NOISE, LAPSE = 0.1, 0.1


def clustered(n: int, seed: int, cluster: int = 20, dim: int = 4) -> np.ndarray:
    """Distances of n points in clusters of ``cluster`` (centres uniform in [0, 10]^dim, unit spread)."""
    X = clustered_points(n, seed, cluster, dim)
    return cdist(X, X)


def calibrate(n: int = 1000, seed: int = 0) -> None:
    """Print measured CPU seconds per unit of fit work for fits like a study's refits."""
    D = clustered(n, seed)
    oracle = oracles.TripletOracle(D, noise=NOISE, model="human", lapse=LAPSE, random_state=seed)
    rng = np.random.default_rng(seed)
    rows = []
    for per_item in (5, 20, 60):
        q = np.array([rng.choice(n, 3, replace=False) for _ in range(per_item * n)])
        a = np.asarray(oracle.answer([tuple(map(int, r)) for r in q]))
        far = np.where(a[:, 3] == a[:, 1], a[:, 2], a[:, 1])
        t = np.column_stack([a[:, 0], a[:, 3], far])
        for dim in (1, 2, 4, 8):
            kernel = "human" if dim == 1 else "tste"
            t0 = time.process_time()
            with FitWork() as work:
                embedding.fit_embedding(t, n, dim=dim, kernel=kernel, random_state=seed, max_iter=300)
            took = time.process_time() - t0
            rows.append([f"{per_item}/item", str(dim), f"{took:.2f}", f"{work.units:.3g}", f"{took / work.units:.3g}"])
    print_table(f"fit work calibration, {n} items (model unit: {UNIT_SECONDS:.3g} s)",
                ["answers", "dim", "cpu s", "units", "s/unit"], rows)


class Trace:
    """What the questions between two refits were (``--trace``): per head how many it was asked
    (mean, SD, most, share of heads asked none), the share that were duels (both items in the head's
    shortlist), the most times one question (head, pair) was asked, and at each refit the share of
    heads whose shortlist holds one of their true 3 nearest; printed to stderr at every refit."""

    def __init__(self, planner, D: np.ndarray, label: str) -> None:
        self.planner, self.label, n = planner, label, len(D)
        self.top3 = np.argsort(D + np.diag(np.full(n, np.inf)), axis=1)[:, :3]
        self.fits, self.since = -1, 0
        self._reset()

    def _reset(self) -> None:
        self.per_head = np.zeros(len(self.top3), np.int64)
        self.questions: dict[tuple[int, int, int], int] = {}
        self.duels = 0

    def asked(self, qs, total: int) -> None:
        p = self.planner
        fits = int(getattr(p, "n_fits_", 0))
        if fits != self.fits:
            if self.fits >= 0:
                self.report(total)
            self.fits, self.since = fits, total
            self._reset()
        cands = getattr(p, "cands_", None)
        for h, a, b in qs:
            self.per_head[h] += 1
            key = (h, min(a, b), max(a, b))
            self.questions[key] = self.questions.get(key, 0) + 1
            if cands is not None and a in cands[h] and b in cands[h]:
                self.duels += 1

    def report(self, total: int) -> None:
        p, c, n = self.planner, self.per_head, len(self.per_head)
        asked = max(int(c.sum()), 1)
        rows = getattr(p, "cands_", None)
        held = (np.mean([np.isin(self.top3[h], rows[h]).any() for h in range(n)]) if rows is not None
                else float("nan"))
        print(f"    {self.label}: fit {self.fits} asked {self.since / n:.1f}-{total / n:.1f}/item: per head "
              f"{c.mean():.2f} (sd {c.std():.2f}, max {c.max()}, none {np.mean(c == 0):.3f}), duels "
              f"{self.duels / asked:.2f}, most repeats of a question {max(self.questions.values(), default=0)}; "
              f"then fit {self.fits + 1}: dim {getattr(p, 'chosen_dim_', '-')}, coin {getattr(p, 'coin_', '-')}, "
              f"shortlists holding a true top-3 {held:.3f}", file=sys.stderr, flush=True)


class CallCost:
    """Wall time of each call (plan + observe), less the time spent in the fitter's refits within it."""

    def __init__(self, fitter: TimedFitter | None) -> None:
        self.fitter, self.ms = fitter, []
        if fitter is not None:
            fit = fitter.fit

            def timed(task):
                t0 = time.perf_counter()
                try:
                    return fit(task)
                finally:
                    self._in_fits += time.perf_counter() - t0

            fitter.fit = timed
        self._in_fits = 0.0

    def __enter__(self) -> CallCost:
        self._t0, self._in_fits = time.perf_counter(), 0.0
        return self

    def __exit__(self, *exc) -> None:
        self.ms.append(1000.0 * (time.perf_counter() - self._t0 - self._in_fits))


def run(algorithm: str, n: int, batch: int | None, budgets: list[int], seed: int, rate: float,
        unit: float | None = UNIT_SECONDS, trace: bool = False, agreement: float | str | None = None,
        local: int = 0, costs: list | None = None, map_until: float | None = None) -> list[float]:
    """hit@3 at each budget; ``batch`` None: offline; ``agreement``: the learner gets features of that
    triplet agreement with the truth (on local triplets of ``local`` neighbours if > 0), ``"noise"``: 16
    columns of pure noise; ``costs``: each call's time (ms, :class:`CallCost`) is appended to it;
    ``map_until``: ``engine.duels.dims.MAP_UNTIL`` for this run (None: as it is)."""
    if map_until is None:
        return _run(algorithm, n, batch, budgets, seed, rate, unit, trace, agreement, local, costs)
    kept = duels_dims.MAP_UNTIL
    duels_dims.MAP_UNTIL = float(map_until)
    try:
        return _run(algorithm, n, batch, budgets, seed, rate, unit, trace, agreement, local, costs)
    finally:
        duels_dims.MAP_UNTIL = kept


def _run(algorithm: str, n: int, batch: int | None, budgets: list[int], seed: int, rate: float,
         unit: float | None, trace: bool, agreement: float | str | None, local: int,
         costs: list | None) -> list[float]:
    t0 = time.perf_counter()
    X = clustered_points(n, seed)
    D = point_distances(X)  # (dense up to engine.truth.DENSE_ITEMS items, else read from the points)
    kth = true_kth_distances(points=X, rank=3)
    oracle = oracles.TripletOracle(D, noise=NOISE, model="human", lapse=LAPSE, random_state=seed + 7)
    if agreement is None:
        extra = {}
    elif agreement == "noise":
        extra = {"features": noise_features(n, 16, random_state=seed)}
    else:
        extra = {"features": features_of_agreement(X, float(agreement), random_state=seed, local=local)}
    planner = make_planner(algorithm, n, question_kind="triplet", random_state=seed, **extra)
    clock = CrowdClock(rate)
    fitter = None
    if batch is not None:
        fitter = TimedFitter(clock, unit)
        drive_as_pool(planner, fitter)
    cost = CallCost(fitter)
    tracer = Trace(planner, D, "offline" if batch is None else f"batches of {batch}") if trace else None
    step = n if batch is None else batch
    total, out = 0, []
    for b in budgets:
        while total < b * n:
            with cost:
                qs = planner.next_questions(min(step, b * n - total))
                answers = oracle.answer(qs)
                planner.observe(answers)
            if not qs:
                break
            if tracer is not None:
                tracer.asked(qs, total)
            total += len(qs)
            clock.answers = total
        picks = np.asarray(planner.neighbor_graph(k=1).neighbors)[:, 0]
        out.append(float(1.0 - neighbor_wrong(picks, points=X, rank=3, kth=kth).mean()))
    if costs is not None:
        costs.extend(cost.ms)
    prior = getattr(planner, "prior_", None)
    print(f"    seed {seed}: hit@3 {' / '.join(f'{v:.3f}' for v in out)}, "
          f"features {'-' if prior is None else 'trusted' if prior.trusted else 'dropped'}, chosen dim "
          f"{getattr(planner, 'chosen_dim_', '-')}, {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algorithms", default="duels")
    ap.add_argument("--items", default="1000")
    ap.add_argument("--batches", default="offline,100,200,500",
                    help="modes, comma-separated: 'offline' and/or live batch sizes (e.g. --batches 200 runs one)")
    ap.add_argument("--budgets", default="20,60,100", help="answers per item")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--first-seed", type=int, default=0, help="seeds run: first-seed, ..., first-seed + seeds - 1")
    ap.add_argument("--rate", type=float, default=500.0, help="the crowd's answers per second")
    ap.add_argument("--unit", default=str(UNIT_SECONDS),
                    help="seconds per unit of fit work, or 'measured' (the fits' CPU time: not reproducible)")
    ap.add_argument("--trace", action="store_true", help="print what the questions between refits were (stderr)")
    ap.add_argument("--calibrate", action="store_true", help="print CPU seconds per unit of fit work and stop")
    ap.add_argument("--features", default=None,
                    help="give the learner features of this triplet agreement with the truth (e.g. .7), "
                         "or 'noise' (16 columns of pure noise)")
    ap.add_argument("--local", type=int, default=0,
                    help="with --features: their agreement on triplets among each item's K truly nearest")
    ap.add_argument("--cost", action="store_true", help="add peak memory and call times per mode")
    ap.add_argument("--map-until", default=None,
                    help="rows per value of engine.duels.dims.MAP_UNTIL, answers per item, e.g. 25,50,100,inf")
    ap.add_argument("--trust-z", type=float, default=None,
                    help="the features' test trusts from this z at every look (default: alpha spent over looks)")
    args = ap.parse_args(argv)
    if args.trust_z is not None:
        duels_priors.trust_z = lambda look: args.trust_z
    if args.calibrate:
        calibrate()
        return
    unit = None if args.unit == "measured" else float(args.unit)
    budgets = [int(x) for x in args.budgets.split(",")]
    for algorithm in args.algorithms.split(","):
        for n in (int(x) for x in args.items.split(",")):
            rows = []
            untils = args.map_until.split(",") if args.map_until else [None]
            modes = [(None if x == "offline" else int(x), None if m is None else float(m))
                     for x in args.batches.split(",") for m in untils]
            for batch, map_until in modes:
                ms: list[float] = []
                hits = [run(algorithm, n, batch, budgets, s, args.rate, unit, args.trace, args.features, args.local,
                            ms, map_until) for s in range(args.first_seed, args.first_seed + args.seeds)]
                mean = np.mean(hits, axis=0)
                rows.append([("offline (n per call)" if batch is None else f"live, batches of {batch}")
                             + ("" if map_until is None else f", MAP_UNTIL {map_until:g}"),
                             *[f"{v:.2f}" for v in mean]])
                if args.cost:
                    # (the peak of the process so far: run the mode of interest alone to read its own)
                    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
                    rows[-1] += [f"{peak:,.0f}", f"{np.median(ms):.0f} / {np.percentile(ms, 99):.0f} / "
                                                 f"{max(ms):.0f}"]
                print(f"  {algorithm} n={n} {rows[-1][0]}: hit@3 {' / '.join(rows[-1][1:])}", file=sys.stderr,
                      flush=True)
            given = ("" if args.features is None else " with features of pure noise" if args.features == "noise"
                     else f" with features of agreement {float(args.features):g}")
            given += f" on triplets among {args.local} nearest" if args.features is not None and args.local else ""
            print_table(f"{algorithm}{given}, {n} clustered items, human noise (lapse {LAPSE}), crowd {args.rate:.0f} "
                        f"answers/s — hit@3 by answers per item (mean of seeds {args.first_seed}-"
                        f"{args.first_seed + args.seeds - 1})",
                        ["mode", *[f"{b}/item" for b in budgets],
                         *(["peak RSS MB", "call ms median / p99 / max"] if args.cost else [])], rows)


if __name__ == "__main__":
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        main()
