"""What the benchmarks share: accuracy against a known truth, printed tables, simulated crowds and
fit processes, and a live study driven through the serving path. Benchmarks import this module, never
each other (a benchmark is a script: what two of them need lives here).

- ``nn_metrics``, ``near_share``: accuracy of picked neighbours against a distance matrix.
- ``print_table``: the markdown-like tables every benchmark prints.
- ``recorded_oracle``: one recorded answer per triplet, as an exhaustively collected real data set.
- ``CrowdClock``, ``FitWork``, ``TimedFitter``: a fit process beside the passes, its time modelled.
- ``points``, ``scores``, ``offline``, ``peer``: clustered points of any size (scored from the points,
  not a distance matrix), the default learner offline and random triplets + the best embedding on them.
- ``clustered_truth``, ``live_curve``: a study of known answer driven through Redis, the storage
  calls or the rater API, and RQ update passes (``benchmarks/plan_vs_live.py``, tests).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
from scipy.spatial.distance import cdist

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from engine import embedding, truth  # noqa: E402
from engine.embedding import embedding_neighbors, select_embedding  # noqa: E402
from engine.planners import make_planner  # noqa: E402
from engine.planning import METRICS, nn_accuracy  # noqa: E402
from engine.registry import DEFAULT_NN_ALGORITHM  # noqa: E402
from simulation import oracles  # noqa: E402
from simulation.oracles import TripletOracle  # noqa: E402

#: seconds per unit of fit work (one objective evaluation over one triplet in one dimension + 1),
#: from ``live_vs_offline.py --calibrate`` on a quiet 2-core machine
UNIT_SECONDS = 1.1e-8


# ---------------------------------------------------------------------------- truth metrics
#: rating benchmarks judge picks by the held-out means of 253 other raters (as the real table was judged) up to
#: this many items, by the simulator's own means above (a full table of 253 raters is too large there)
HELDOUT_UP_TO = 100


def truth_distances(sim, seed: int) -> np.ndarray:
    """Minus the mean ratings a rating benchmark judges picks by (smaller = more alike), zero diagonal: of a
    :class:`simulation.ratings.RatingSimulator` ``sim``, held out (:data:`HELDOUT_UP_TO`) as seed ``seed``'s."""
    means = sim.heldout_means(253, random_state=seed + 10_000) if sim.n_items <= HELDOUT_UP_TO else sim.means
    D = -np.asarray(means, np.float64)
    np.fill_diagonal(D, 0.0)
    return D


def nn_metrics(picks: np.ndarray, D: np.ndarray, tol: float = 1e-9) -> tuple[float, float]:
    """(NN error, hit@3) of picks (n,) against the distance matrix; -1 (no pick) is wrong."""
    n = len(D)
    Dm = D.astype(np.float64).copy()
    np.fill_diagonal(Dm, np.inf)
    srt = np.sort(Dm, axis=1)
    safe = np.maximum(picks, 0)
    chosen = Dm[np.arange(n), safe]
    has = picks >= 0
    exact = has & (chosen <= srt[:, 0] + tol)
    hit3 = has & (chosen <= srt[:, 2] + tol)
    return float(1 - exact.mean()), float(hit3.mean())


def near_share(picks: np.ndarray, coords: np.ndarray, spacing: float) -> float:
    """Share of picks within one position of a true neighbour on a line of evenly spaced items."""
    ok = (picks >= 0) & (np.abs(coords[np.maximum(picks, 0)] - coords) <= 2 * spacing + 1e-9)
    return float(ok.mean())


# ---------------------------------------------------------------------------- tables
def fmt_row(cells: list[str], widths: list[int]) -> str:
    return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))


def print_table(title: str, header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    print(f"\n### {title}\n")
    print(fmt_row(header, widths))
    print(fmt_row(["-" * w for w in widths], widths))
    for r in rows:
        print(fmt_row(r, widths))


# ---------------------------------------------------------------------------- simulated crowds
def recorded_oracle(seed: int, fit, lapse: float, idiosyncrasy: float = 0.0, n: int = 85):
    """One recorded answer per triplet, as on an exhaustively collected real crowd data set.

    ``n`` items uniform in [0, 1]^4 (with the fitted human noise, the true neighbour loses ~2.4%
    of its triplets, the runner-up ~4.8%, a typical item ~50%: the statistics of a held-out set
    of 85 product photos with one person's answer per triplet). Every triplet is answered once by
    a simulated human; questions are answered from that table (a repeated question gets the same
    answer) and the truth is the table's: the j losing the smallest share of (i; j, ·).

    ``idiosyncrasy`` > 0 adds to every pair's distance its own symmetric Gaussian term (that many
    median distances): similarities no low-dimensional map holds, as with real photos, where
    t-STE fitted to all the answers puts a true top-3 item first for only 60–87% of the items.
    At 0.1 the loss-share statistics above stay the same and the ceiling of t-STE on 60,000 random
    answers is .42 / .77 / .74 hit@3 in 2 / 4 / 8 dimensions (plain points: .92 in 4 and 8).
    """
    rng = np.random.default_rng([seed, 85])
    X = rng.random((n, 4))
    D = oracles.TripletOracle.from_points(X).distances
    if idiosyncrasy > 0:
        E = rng.normal(size=(n, n))
        D = D + idiosyncrasy * float(np.median(D[np.triu_indices(n, 1)])) * (E + E.T) / np.sqrt(2)
        D = D - min(0.0, float(D.min())) + 1e-3
        np.fill_diagonal(D, 0.0)
    rater = oracles.TripletOracle(D, model="human", noise=fit.scale_for(D, unit="median_gap"), lapse=lapse,
                                  random_state=seed)
    table = oracles.RecordedTriplets.record(rater)
    table.rater = rater  # the person the table was recorded from (answers screens afresh)
    return table


class CrowdClock:
    """Simulated time: answers given so far over the crowd's rate."""

    def __init__(self, rate: float) -> None:
        self.rate, self.answers = float(rate), 0

    @property
    def now(self) -> float:
        return self.answers / self.rate


class FitWork:
    """Counts the work of the embedding fits run inside it: objective evaluations x triplets x
    (dimensions + 1), summed over the fits (what a fit's CPU time is proportional to)."""

    def __init__(self) -> None:
        self.units, self._fit = 0.0, None

    def __enter__(self) -> FitWork:
        self._fit = embedding.fit_embedding

        def counted(triplets, n_items, dim=2, *args, **kwargs):
            info = kwargs.pop("return_info", False)
            X, got = self._fit(triplets, n_items, dim, *args, return_info=True, **kwargs)
            self.units += got["nfev"] * len(triplets) * (int(dim) + 1)
            return (X, got) if info else X

        embedding.fit_embedding = counted
        return self

    def __exit__(self, *exc) -> None:
        embedding.fit_embedding = self._fit


class TimedFitter:
    """A fit process beside the passes: the fit is computed at once and is ready when the crowd's
    clock has moved on by the time it takes: its work (:class:`FitWork`) x ``unit`` seconds, or its
    measured CPU time where ``unit`` is None."""

    def __init__(self, clock: CrowdClock, unit: float | None = UNIT_SECONDS) -> None:
        self.clock, self.unit, self.fits, self.seconds = clock, unit, 0, 0.0

    def fit(self, task):
        t0 = time.process_time()
        with FitWork() as work:
            result = task.run()
        took = time.process_time() - t0 if self.unit is None else work.units * self.unit
        self.fits += 1
        self.seconds += took
        return Ready(self.clock, self.clock.now + took, result)


class Ready:
    """A fit's result, ready once the crowd's clock reaches ``at``."""

    def __init__(self, clock, at, result):
        self.clock, self.at, self._result = clock, at, result

    def done(self) -> bool:
        return self.clock.now >= self.at

    def result(self):
        return self._result


# ---------------------------------------------------------------------------- a live study
def clustered_points(n: int, seed: int, cluster: int = 20, dim: int = 4) -> np.ndarray:
    """n points in clusters of ``cluster`` (centres uniform in [0, 10]^dim, unit spread): live_vs_offline.py's and
    features_prior.py's truth."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0, 10, size=(-(-n // cluster), dim))
    return np.repeat(centres, cluster, axis=0)[:n] + rng.normal(size=(n, dim))


def world_points(n: int, kind: str, seed: int = 0, dims: int = 3) -> np.ndarray:
    """``n`` points in ``dims`` dimensions: ``uniform`` in the unit cube, or ``clustered`` (clusters of 5 around
    centres uniform in [0, 10]^dims, spread 0.3): pilot_plan.py's and duels_dims5.py's truths."""
    rng = np.random.default_rng(seed)
    if kind == "uniform":
        return rng.uniform(size=(n, dims))
    if kind == "clustered":
        centres = rng.uniform(0, 10, size=(-(-n // 5), dims))
        return np.repeat(centres, 5, axis=0)[:n] + rng.normal(scale=0.3, size=(n, dims))
    raise ValueError(f"unknown truth {kind!r}: uniform or clustered")


def to_budgets(planner, oracle, n: int, budgets: list[int]):
    """Drive ``planner`` offline on ``oracle``'s answers, at most ``n`` questions a call; yields each budget
    (answers per item, in order) once the planner has had that many answers."""
    total = 0
    for per_item in budgets:
        while total < per_item * n:
            qs = planner.next_questions(min(n, per_item * n - total))
            planner.observe(oracle.answer(qs))
            total += len(qs)
        yield per_item


def clustered_truth(n_items: int, seed: int = 0, cluster: int = 5, spread: float = 0.3) -> np.ndarray:
    """Distances (scaled to a largest of 1) of ``n_items`` points in clusters of ``cluster``."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0, 10, size=(-(-n_items // cluster), 2))
    X = np.repeat(centres, cluster, axis=0)[:n_items] + rng.normal(scale=spread, size=(n_items, 2))
    D = cdist(X, X)
    return D / D.max()


def live_curve(app, conn, distances: np.ndarray, scale: float, lapse: float, algorithm: str,
               budgets, seed: int, raters: int = 10, params: dict | None = None, through: str = "api",
               metric: str = "exact") -> np.ndarray:
    """Exact-NN accuracy (``metric="hit3"``: hit@3) a live study of ``algorithm`` reaches at each budget
    (answers per item).

    ``raters`` simulated raters each hold one question at a time and answer in turn; the worker runs
    the update jobs the web processes queued after every ``raters`` answers (one pass per round of
    the crowd, as a busy worker would). ``through="api"``: the raters take and answer questions
    through the Flask app's rater API; ``"store"``: through the two storage calls the API makes
    (``issue_question``: pop a pooled question or a fallback and record it as issued; ``accept_answer``:
    the answer script, which schedules the update) without HTTP, so a 1,000-item study fits in a
    test's time (``app`` is unused then)."""

    from workers.store import keys
    from workers.store.answers import accept_answer
    from workers.store.config import StudyConfig
    from workers.store.questions import issue_question
    from workers.store.queue import enqueue_update, run_queued_jobs, schedule_update
    from workers.store.studies import Item, create_study

    if through not in ("api", "store"):
        raise ValueError(f"through must be 'api' or 'store', not {through!r}")

    def run_worker():
        run_queued_jobs(conn)

    n = len(distances)
    study_id = f"plan-vs-live-{algorithm.replace('_', '-')}-{seed}"
    config = StudyConfig.from_dict({"name": study_id, "random_state": seed,
                                    "algorithms": [{"algorithm": algorithm, "params": dict(params or {})}]})
    create_study(conn, config, [Item(id=f"i{i}", kind="text", text=f"item {i}") for i in range(n)],
                 study_id=study_id)
    schedule_update(conn, study_id)
    run_worker()
    oracle = TripletOracle(distances, noise=scale, model="human", lapse=lapse, random_state=seed + 1000)
    if through == "api":
        from webapp.handles import shown_index

        def index(item):
            return shown_index(app.config["SECRET_KEY"], study_id, item["handle"])

        crowd = [app.test_client() for _ in range(raters)]
        held = [c.get(f"/api/studies/{study_id}/questions/next").get_json()["question"] for c in crowd]
    else:
        def issue(r):
            now = time.time()
            return issue_question(conn, study_id, config, n, f"rater-{r}", now, now + 3600)[0]

        held = [issue(r) for r in range(raters)]
    label = config.algorithms[0].label
    out, total = [], 0
    for per_item in budgets:
        mark = int(round(per_item * n))
        while total < mark:
            for r in range(raters):
                q = held[r]
                # the wire names items by handles: read with the app's secret key
                head, (a, b) = ((index(q["head"]), [index(c) for c in q["candidates"]]) if through == "api"
                                else (q["head"], q["candidates"]))
                if through == "api":
                    pick = q["candidates"][[a, b].index(oracle(head, a, b))]["handle"]
                    body = crowd[r].post(f"/api/studies/{study_id}/answers",
                                         json={"token": q["token"], "choice": pick}).get_json()
                    held[r] = body["next"]
                    if held[r] is None:
                        raise RuntimeError(f"the study stopped asking after {total} answers: {body.get('done')}")
                else:
                    _, scheduled = accept_answer(conn, study_id, q, f"rater-{r}", oracle(head, a, b),
                                                 issued_at=time.time(), response_ms=1500, used_ttl=3600)
                    if scheduled:
                        enqueue_update(conn, study_id)
                    held[r] = issue(r)
                total += 1
            run_worker()
        run_worker()
        summary = json.loads(conn.hget(keys.engine_stats(study_id), "summary"))[label]
        out.append(nn_accuracy(np.asarray(summary["neighbors"]), distances)[METRICS.index(metric)])
    return np.array(out)


# ---------------------------------------------------------------------------- clustered points of any size
def points(n: int, seed: int) -> np.ndarray:
    """n points in clusters of 20 (unit spread), the clusters as dense as 1,000 items' in [0, 10]^4:
    the box grows with n (side 10 (n / 1000)^(1/4)), so a larger study is not a harder one."""
    rng = np.random.default_rng(seed)
    side = 10.0 * max(1.0, n / 1000) ** 0.25
    centres = rng.uniform(0, side, size=(-(-n // 20), 4))
    return np.repeat(centres, 20, axis=0)[:n] + rng.normal(size=(n, 4))


def scores(picks: np.ndarray, X: np.ndarray) -> tuple[float, float]:
    """(exact, hit@3) of picks (n,) (-1: none, wrong): a true nearest neighbour, one of the true 3."""
    exact = ~truth.neighbor_wrong(picks, points=X, rank=1)
    hit3 = ~truth.neighbor_wrong(picks, points=X, rank=3)
    return float(exact.mean()), float(hit3.mean())


def oracle_of(X: np.ndarray, scale: float, lapse: float, seed: int) -> oracles.TripletOracle:
    return oracles.TripletOracle.from_points(X, noise=scale, model="human", lapse=lapse, random_state=seed)


def offline(X: np.ndarray, scale: float, lapse: float, budgets: list[int], seed: int,
            params: dict | None = None) -> list[tuple[float, float]]:
    """The learner as the registry makes it (one question per head per call, refits finished in the
    call; ``params`` its parameters, the registry's defaults otherwise), scored at each budget of one
    run (anytime)."""
    n = len(X)
    oracle = oracle_of(X, scale, lapse, seed + 7)
    planner = make_planner(DEFAULT_NN_ALGORITHM, n, question_kind="triplet", random_state=seed, **(params or {}))
    total, out = 0, []
    for per_item in sorted(budgets):
        while total < per_item * n:
            qs = planner.next_questions(min(n, per_item * n - total))
            planner.observe(oracle.answer(qs))
            total += len(qs)
        out.append(scores(np.asarray(planner.neighbor_graph(k=1).neighbors)[:, 0], X))
    return [out[sorted(budgets).index(b)] for b in budgets]


def peer(X: np.ndarray, scale: float, lapse: float, budgets: list[int], seed: int, dims=(2, 3, 5, 8),
         kernels=("ste", "tste")) -> list[tuple[float, float]]:
    """Random triplets answered by the same noise model + the best embedding (of ``dims`` x ``kernels``
    and the line), at each budget."""
    n = len(X)
    rng = np.random.default_rng([seed, 7])
    q = oracles.random_triplet_questions(n, max(budgets) * n, rng)
    a = np.asarray(oracle_of(X, scale, lapse, seed + 11).answer([tuple(map(int, r)) for r in q]))
    t = np.column_stack([a[:, 0], a[:, 3], np.where(a[:, 3] == a[:, 1], a[:, 2], a[:, 1])])
    out = []
    for b in budgets:
        emb = select_embedding(t[: b * n], n, dims=dims, kernels=kernels, random_state=seed).embedding
        out.append(scores(embedding_neighbors(emb, 1)[:, 0], X))
    return out
