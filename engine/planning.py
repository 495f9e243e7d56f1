"""Budget planning before paying: expected nearest-neighbour accuracy against answers per item.

Drives every applicable learner of :mod:`engine.registry` in-process with simulated raters answering
from a :class:`Scenario` (a truth and the human noise model: logistic + lapse): each question kind's
simulated rater (:meth:`engine.kinds.QuestionKind.simulated_rater`, a ``simulation.oracles`` class named
by its kind entry and loaded when a plan runs). The scenarios come from known distances or from a
pilot study's answers (``simulation.noise.fit_pilot``). numpy/scipy (and threadpoolctl) only: must never
import Flask, Redis, RQ, ``webapp``, ``workers`` or ``simulation``.

Every question kind that implies triplets can be planned (:mod:`engine.kinds`): a learner asking
odd-one-out or rank screens is driven with that kind's simulated rater, and the plan compares kinds and
learners by screens, by rater time (each kind's seconds per screen) and by money.

Conventions: ``distances`` ndarray of shape (n_items, n_items), symmetric, zero diagonal; a
triplet row ``(i, j, k)`` means "i is closer to j than to k"; budgets are screens (answers) per item.
"""
from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from . import truth
from .features import check_features
from .graph import RoundPlanner, refill_rounds
from .kinds import DEFAULT_KIND, KINDS, get_kind
from .planners import make_planner, takes_features
from .registry import ALGORITHMS, DEFAULT_NN_ALGORITHM, drive_as_pool
from .truth import check_distance_matrix

if TYPE_CHECKING:
    from .graph import Planner
    from .utils import RandomState

DEFAULT_BUDGETS = (10, 20, 50, 100, 200, 500)
#: Questions per ``next_questions`` call: a live pool refill between two worker passes.
DEFAULT_BATCH = 50
#: Past GROWTH_FROM answers per item a refill grows to BATCH_GROWTH of the answers so far (at least
#: ``batch``): a live worker's pass takes longer as a learner's answers grow (an embedding refit is
#: linear in them), so more answers arrive per pass; and a plan to 500 answers per item stays
#: seconds, not hours. Budgets up to GROWTH_FROM per item (pilots, most paid studies) are unchanged:
#: growing from 20 per item made a 100-item duels plan at 50 per item pessimistic (0.30 against 0.43 live).
GROWTH_FROM = 50
BATCH_GROWTH = 0.05
METRICS = ("exact", "hit3")
METRIC_LABELS = {"exact": "exact NN", "hit3": "hit@3"}


# ---------------------------------------------------------------------------- what can be planned
def plannable_kinds(names: Sequence[str] | None = None) -> list[str]:
    """The question kinds a plan can simulate: those implying triplets (:mod:`engine.kinds`), the default
    kind alone by default; ValueError names an unknown or inapplicable one."""
    fit = [k.name for k in KINDS.values() if k.triplet_derived]
    if not names:
        return [DEFAULT_KIND]
    wrong = [name for name in names if name not in fit]
    if wrong:
        raise ValueError(f"cannot plan {', '.join(map(repr, wrong))} questions: choose from {', '.join(fit)}")
    return [name for name in fit if name in names]


def plannable_algorithms(names: Sequence[str] | None = None, kind: str = DEFAULT_KIND) -> list[str]:
    """The table's learners a study of ``kind`` can run that yield a graph (all of them by default).

    ``names`` picks some of them, in the table's order; ValueError names an unknown or
    inapplicable one.
    """
    fit = [name for name, entry in ALGORITHMS.items() if kind in entry.question_kinds and entry.yields_graph]
    if not names:
        return fit
    wrong = [name for name in names if name not in fit]
    if wrong:
        raise ValueError(f"cannot plan {', '.join(map(repr, wrong))} for {kind} questions: choose from "
                         f"{', '.join(fit)}")
    return [name for name in fit if name in names]


@dataclass(frozen=True)
class Arm:
    """One line of a plan: a learner asking one kind of question (with the kind's settings, e.g. a
    grid's n and k) and a rater's seconds per screen of it."""

    algorithm: str
    kind: str = DEFAULT_KIND
    settings: tuple = ()
    seconds: float = 0.0
    #: whether the learner is given the items' features (``make_planner(..., features=X)``)
    features: bool = False

    @property
    def label(self) -> str:
        with_features = " + features" if self.features else ""
        if self.kind == DEFAULT_KIND:  # the default kind's lines keep the learner's name
            return self.algorithm + with_features
        size = dict(self.settings)
        shape = f" {size['n_reference']}-{size['n_select']}" if "n_reference" in size else ""
        return f"{self.algorithm}{with_features} ({self.kind}{shape})"


def arms(algorithms: Sequence[str] | None, kinds: Sequence[str] | None = None, settings: dict | None = None,
         seconds: dict | None = None, features: bool = False) -> list[Arm]:
    """Every (learner, kind) pair to plan: ``algorithms`` (default: every learner of each kind) asking each
    of ``kinds`` (default: the default kind) with ``settings`` per kind (its defaults otherwise) and a
    rater's ``seconds`` per screen per kind (the kind's stated default otherwise, :mod:`engine.kinds`)."""
    out = []
    for kind in plannable_kinds(kinds):
        entry = get_kind(kind)
        values = entry.check_settings((settings or {}).get(kind))
        names = plannable_algorithms(algorithms, kind) if not algorithms else [
            a for a in plannable_algorithms(None, kind) if a in algorithms]
        if algorithms:
            unknown = [a for a in algorithms if a not in ALGORITHMS]
            if unknown:
                raise ValueError(f"unknown algorithm {unknown[0]!r}; choose one of {', '.join(ALGORITHMS)}")
        per_screen = float((seconds or {}).get(kind) or entry.screen_seconds(values))
        for name in names:
            out.append(Arm(name, kind, tuple(sorted(values.items())), per_screen))
            if features and takes_features(name):  # the same learner told the items' features, beside it
                out.append(Arm(name, kind, tuple(sorted(values.items())), per_screen, features=True))
    if not out:
        raise ValueError("no learner of the table asks these question kinds")
    return out


def check_budgets(budgets: Sequence[float]) -> np.ndarray:
    b = np.unique(np.asarray(list(budgets), dtype=np.float64))
    if b.size == 0 or not np.all(np.isfinite(b)) or b[0] <= 0:
        raise ValueError("budgets must be positive numbers of answers per item")
    return b


@dataclass(frozen=True)
class Scenario:
    """One world the simulated raters answer from: ``distances`` (n_items, n_items) and the human
    noise model in the same units (logistic ``scale``, ``lapse`` rate)."""

    distances: np.ndarray
    scale: float
    lapse: float

    def __post_init__(self) -> None:
        D = check_distance_matrix(self.distances)
        if len(D) < 4:
            raise ValueError("planning needs at least 4 items")
        if not (self.scale >= 0 and math.isfinite(self.scale)) or not 0 <= self.lapse <= 1:
            raise ValueError("the noise scale must be >= 0 and the lapse rate in [0, 1]")
        object.__setattr__(self, "distances", D)

    @property
    def n_items(self) -> int:
        return len(self.distances)

    def oracle(self, random_state: RandomState, kind: str = DEFAULT_KIND, settings: dict | None = None) -> Any:
        """The simulated rater of ``kind`` (:meth:`engine.kinds.QuestionKind.simulated_rater`) on this
        world's distances and noise."""
        entry = get_kind(kind)
        return entry.simulated_rater(self.distances, self.scale, self.lapse, entry.check_settings(settings),
                                     random_state=random_state)


# ---------------------------------------------------------------------------- scoring and driving
def nn_accuracy(picks: np.ndarray, distances: np.ndarray, tol: float = truth.TIE_TOLERANCE) -> tuple[float, float]:
    """(exact, hit@3): shares of items whose pick is a true nearest neighbour (ties count as right) /
    is among the 3 truly nearest (:func:`engine.truth.neighbor_wrong`). An item without a pick (-1)
    counts as wrong."""
    exact = ~truth.neighbor_wrong(picks, distances, tol, rank=1)
    hit3 = ~truth.neighbor_wrong(picks, distances, tol, rank=3)
    return float(exact.mean()), float(hit3.mean())


def ask(planner: Planner, budget: int, window: int | None = None) -> list[tuple[int, int, int]]:
    """Up to ``budget`` questions, planned as a live study's worker plans a pool refill: a learner
    working in rounds (``window`` not None: a :class:`engine.graph.RoundPlanner`) opens more rounds
    while its open ones have too few distinct questions, then asks the open rounds' least-asked
    questions again (:func:`engine.graph.refill_rounds`, as ``workers.jobs.learners.Learner.plan``)."""
    if window is None:
        return list(planner.next_questions(budget))
    return refill_rounds(cast(RoundPlanner, planner), budget, window)[0]


def simulate_curve(name: str, scenario: Scenario, budgets: Sequence[float], seed: int = 0,
                   batch: int = DEFAULT_BATCH, params: dict | None = None,
                   max_seconds: float | None = None, kind: str = DEFAULT_KIND,
                   settings: dict | None = None, features: np.ndarray | None = None
                   ) -> tuple[np.ndarray, np.ndarray, float, float]:
    """Run one learner as a live study does (a pool refill of ``batch`` questions -> simulated
    answers -> ``observe``; refills grow past GROWTH_FROM answers per item) and score its graph at
    every budget. ``params`` are the algorithm's
    parameters (the table's defaults otherwise). Returns (exact, hit@3) arrays of shape
    (len(budgets),), the CPU seconds spent and the answers per item at which the learner stopped asking
    (NaN: it asked to the largest budget). A learner that stops asking keeps its last graph.
    ``max_seconds``: CPU seconds the run may take; budgets it has not reached by then are NaN. ``kind``:
    the question kind it asks (budgets are then screens per item), with the kind's ``settings``.
    ``features``: the items' features, given to the learner as a study with features gives them."""
    n = scenario.n_items
    budgets = check_budgets(budgets)
    params = dict(params or {})
    entry = get_kind(kind)
    values = entry.check_settings(settings)
    # a pool refill, as in a live study (workers.jobs.learners.Learner)
    planner = drive_as_pool(make_planner(name, n, question_kind=kind, random_state=seed, features=features,
                                         **entry.planner_params(values), **params))
    # a planner in rounds has its rounds widened as the worker's pool refill widens them (refill_rounds, from the
    # study's window, 1 by default: workers.jobs.update_pass), whatever kind it asks
    algorithm = ALGORITHMS[name]
    window = params.get("window", 1) if algorithm.rounds else None
    oracle = scenario.oracle(np.random.default_rng([seed, 7919]), kind, values)
    exact, hit3 = np.full(len(budgets), np.nan), np.full(len(budgets), np.nan)
    total, stopped = 0, False
    t0 = time.process_time()
    for b, per_item in enumerate(budgets):
        mark = int(round(per_item * n))
        while total < mark and not stopped:
            if max_seconds is not None and time.process_time() - t0 > max_seconds:
                return exact, hit3, time.process_time() - t0, math.nan
            step = int(batch) if total < GROWTH_FROM * n else max(int(batch), int(BATCH_GROWTH * total))
            questions = ask(planner, min(step, mark - total), window)
            if not questions:
                stopped = True
                break
            planner.observe(oracle.answer(questions))
            total += len(questions)
        picks = np.asarray(planner.neighbor_graph(k=1).neighbors, dtype=np.int64)[:, 0]
        exact[b], hit3[b] = nn_accuracy(picks, scenario.distances)
    return exact, hit3, time.process_time() - t0, (total / n if stopped else math.nan)


def _run(job):
    arm, scenario, budgets, seed, batch, params, max_seconds, features = job
    # One BLAS thread per simulation: the plan runs simulations side by side in processes, and a
    # multi-threaded BLAS spinning on small L-BFGS-B problems on a busy machine made the embedding
    # learners several times slower (duels, 300 items: 16 -> 3.5 CPU s to 20 answers per item).
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        return simulate_curve(arm.algorithm, scenario, budgets, seed, batch, params, max_seconds, arm.kind,
                              dict(arm.settings), features if arm.features else None)


class _LongestFirst:
    """The order a pool of processes takes the runs in (``runs`` consecutive runs per learner), so
    the processes end together: every learner's first run before any second one, then a run of the
    learner whose first run took the most CPU time (one not finished yet counts as the longest)."""

    def __init__(self, learners: int, runs: int) -> None:
        self.runs = runs
        self.left = [list(range(a * runs, (a + 1) * runs)) for a in range(learners)]
        self.cost = [math.inf] * learners

    def next(self) -> int | None:
        """The run to start next, None when every run has started."""
        fresh = [a for a, left in enumerate(self.left) if len(left) == self.runs]
        todo = fresh[:1] or [a for a, left in enumerate(self.left) if left]
        return self.left[max(todo, key=lambda a: self.cost[a])].pop(0) if todo else None

    def finished(self, run: int, seconds: float) -> None:
        a = run // self.runs
        if math.isinf(self.cost[a]):
            self.cost[a] = seconds


def _run_in_processes(work: list, results: list, jobs: int, runs: int,
                      finished: Callable[[int], None] | None = None) -> None:
    """Run ``work`` in ``jobs`` forked processes, longest first (:class:`_LongestFirst`), into ``results``."""
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    order = _LongestFirst(len(work) // runs, runs)
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
        running = {}
        while True:
            while len(running) < jobs and (w := order.next()) is not None:
                running[pool.submit(_run, work[w])] = w
            if not running:
                break
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                w = running.pop(future)
                results[w] = future.result()
                order.finished(w, results[w][2])
                if finished is not None:
                    finished(w)


# ---------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class Reach:
    """Answers per item a learner needs to reach a target: ``value`` (interpolated between
    budgets), ``bound`` "=" (reached between two budgets), "<=" (already at the first budget) or
    ">" (not within the largest budget; ``value`` is that budget)."""

    value: float
    bound: str

    def text(self) -> str:
        return {"=": "", "<=": "<= ", ">": "> "}[self.bound] + f"{self.value:,.0f}"


def reach(budgets: np.ndarray, curve: np.ndarray, target: float) -> Reach:
    """First budget at which ``curve`` reaches ``target``, interpolated linearly between budgets."""
    for b in range(len(budgets)):
        if not np.isfinite(curve[b]):  # not simulated (time limit): beyond the last budget reached
            return Reach(float(budgets[max(b - 1, 0)]), ">")
        if curve[b] >= target - 1e-12:
            if b == 0:
                return Reach(float(budgets[0]), "<=")
            lo, hi = curve[b - 1], curve[b]
            share = (target - lo) / max(hi - lo, 1e-12)
            return Reach(float(budgets[b - 1] + share * (budgets[b] - budgets[b - 1])), "=")
    return Reach(float(budgets[-1]), ">")


@dataclass(frozen=True)
class Plan:
    """Expected accuracy of each learner (rows of ``algorithms``) by answers per item.

    ``algorithms`` are the lines' labels (a learner's name; with its kind for another kind than the
    default, :class:`Arm`), ``arms`` the lines themselves. ``exact`` and ``hit3``: ndarray of shape
    (n_algorithms, n_runs, n_budgets) at screens per item; each run is a seed
    (and, for a pilot, one bootstrap replicate of its fit), so the spread over runs is the
    uncertainty. ``seconds``: CPU seconds per (algorithm, run). ``source`` says what the simulated
    raters answered from.
    """

    algorithms: tuple[str, ...]
    budgets: np.ndarray
    n_items: int
    exact: np.ndarray
    hit3: np.ndarray
    seconds: np.ndarray
    source: str
    spread: str
    arms: tuple = ()
    #: (n_algorithms, n_runs): answers per item at which a run's learner stopped asking (NaN: it did not)
    stopped: np.ndarray | None = None

    def rater_hours(self, name: str, per_item: float) -> float:
        """Hours of raters' time ``per_item`` screens per item of line ``name`` take."""
        arm = self.arms[self.algorithms.index(name)] if self.arms else Arm(name)
        seconds = arm.seconds or get_kind(arm.kind).screen_seconds(get_kind(arm.kind).check_settings(None))
        return per_item * self.n_items * seconds / 3600

    def curve(self, name: str, metric: str = "exact") -> np.ndarray:
        """(n_runs, n_budgets) accuracies of one learner."""
        if metric not in METRICS:
            raise ValueError(f"metric must be one of {METRICS}")
        return getattr(self, metric)[self.algorithms.index(name)]

    def reach(self, name: str, target: float, metric: str = "exact") -> tuple[Reach, Reach]:
        """Answers per item to reach ``target``: on the mean curve, and on the worst run (the safe buy)."""
        runs = self.curve(name, metric)
        return reach(self.budgets, runs.mean(axis=0), target), reach(self.budgets, runs.min(axis=0), target)

    def best(self, target: float, metric: str = "exact") -> str | None:
        """The learner reaching ``target`` on the fewest answers (mean curve), if any does."""
        reached = [(self.reach(name, target, metric)[0].value, name) for name in self.algorithms
                   if self.reach(name, target, metric)[0].bound != ">"]
        return min(reached)[1] if reached else None

    def fastest(self, target: float, metric: str = "exact") -> str | None:
        """The line reaching ``target`` in the fewest hours of raters' time (mean curve), if any does."""
        reached = [(self.rater_hours(name, self.reach(name, target, metric)[0].value), name)
                   for name in self.algorithms if self.reach(name, target, metric)[0].bound != ">"]
        return min(reached)[1] if reached else None

    @property
    def cut_short(self) -> list[str]:
        """The learners some of whose runs did not reach the largest budget within the time limit."""
        return [name for a, name in enumerate(self.algorithms) if np.isnan(self.exact[a]).any()]

    def to_dict(self) -> dict:
        """JSON-safe: what the dashboard draws (means, min and max over runs, per learner; null at a
        budget some run did not reach within the time limit)."""
        def finite(values):
            return [round(float(x), 4) if np.isfinite(x) else None for x in values]

        def stats(a):
            return {"mean": finite(a.mean(axis=0)), "min": finite(a.min(axis=0)), "max": finite(a.max(axis=0))}
        def kind(a):
            arm = self.arms[a] if self.arms else Arm(self.algorithms[a])
            return {"kind": arm.kind, "settings": dict(arm.settings), "seconds_per_screen": arm.seconds}

        return {"version": 1, "n_items": self.n_items, "budgets": self.budgets.tolist(), "source": self.source,
                "spread": self.spread, "runs": int(self.exact.shape[1]),
                "algorithms": {name: {"exact": stats(self.exact[a]), "hit3": stats(self.hit3[a]),
                                      "cpu_seconds": round(float(self.seconds[a].mean()), 2),
                                      "notes": curve_notes(self, a), **kind(a)}
                               for a, name in enumerate(self.algorithms)}}


def plan(scenarios: Sequence[Scenario], algorithms: Sequence[str] | None = None,
         budgets: Sequence[float] = DEFAULT_BUDGETS, runs: int = 3, batch: int = DEFAULT_BATCH, jobs: int = 1,
         source: str = "", spread: str = "seeds", params: dict | None = None,
         max_seconds: float | None = None, kinds: Sequence[str] | None = None, settings: dict | None = None,
         seconds: dict | None = None, progress: Callable[[str, int, int, float, bool], None] | None = None,
         features: Any = None) -> Plan:
    """Simulate every learner ``runs`` times to the largest budget; run r uses seed r and
    ``scenarios[r % len(scenarios)]`` (one scenario per bootstrap replicate of a pilot fit).
    ``params`` maps a learner's name to its parameters (e.g. a study's). ``jobs`` > 1 runs the
    simulations in that many processes. ``max_seconds`` bounds the whole plan's CPU time per
    process: each run gets an equal share and stops at the budgets it reached (the rest NaN,
    :attr:`Plan.cut_short`). ``kinds``: the question kinds to compare (every learner asking each; the
    default kind alone by default), with ``settings`` and a rater's ``seconds`` per screen per kind
    (:func:`arms`); budgets are then screens per item. ``progress(line, runs done, runs in all, CPU
    seconds of the run, whether the time limit stopped it)`` is called as each run ends (a plan may
    take minutes). ``features`` (n_items, n_features): every learner that uses item features is planned
    twice, without and with them (its line labelled "+ features")."""
    X = None if features is None else check_features(features, scenarios[0].n_items if scenarios else 0)
    lines = arms(algorithms, kinds, settings, seconds, features=X is not None)
    names = [arm.label for arm in lines]
    budgets = check_budgets(budgets)
    if not scenarios:
        raise ValueError("need at least one scenario to plan from")
    n = scenarios[0].n_items
    if any(s.n_items != n for s in scenarios):
        raise ValueError("every scenario must have the same items")
    runs = int(runs)
    if runs < 1:
        raise ValueError("runs must be >= 1")
    params = params or {}
    jobs = max(1, min(int(jobs), len(names) * runs))
    share = None if max_seconds is None else float(max_seconds) * jobs / (len(names) * runs)
    work = [(arm, scenarios[r % len(scenarios)], budgets, r, int(batch), params.get(arm.algorithm), share, X)
            for arm in lines for r in range(runs)]
    results: list = [None] * len(work)
    done = 0

    def finished(w: int) -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(work[w][0].label, done, len(work), float(results[w][2]), bool(np.isnan(results[w][0]).any()))

    if jobs == 1:
        for w, job in enumerate(work):
            results[w] = _run(job)
            finished(w)
    else:
        _run_in_processes(work, results, jobs, runs, finished)
    shape = (len(names), runs, len(budgets))
    exact = np.array([r[0] for r in results]).reshape(shape)
    hit3 = np.array([r[1] for r in results]).reshape(shape)
    cpu = np.array([r[2] for r in results]).reshape(shape[:2])
    stopped = np.array([r[3] for r in results]).reshape(shape[:2])
    return Plan(tuple(names), budgets, n, exact, hit3, cpu, source, spread, tuple(lines), stopped)


def default_jobs() -> int:
    return max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


def triplets_from_answers(rows: Iterable[Sequence[int]] | np.ndarray) -> np.ndarray:
    """(head, a, b, winner) answer rows -> (head, winner, loser) triplets."""
    a = np.asarray(rows, dtype=np.int64).reshape(-1, 4)
    loser = np.where(a[:, 3] == a[:, 1], a[:, 2], a[:, 1])
    return np.column_stack([a[:, 0], a[:, 3], loser])


# ---------------------------------------------------------------------------- the printed table
def curve_notes(p: Plan, a: int) -> list[str]:
    """What a reader of line ``a``'s curve should know: that it stopped asking (the graph is final), that it
    is the very same as an earlier line's (the two asked alike), or that it falls with more answers."""
    notes = []
    stops = p.stopped[a] if p.stopped is not None else np.full(p.exact.shape[1], np.nan)
    if np.isfinite(stops).any():
        done = stops[np.isfinite(stops)]
        lo, hi = round(float(done.min())), round(float(done.max()))
        notes.append(f"stopped asking in {len(done)} of {len(stops)} runs, at {lo}" + (f"-{hi}" if hi > lo else "")
                     + " screens per item: it had nothing left to ask (every neighbour certified, or its "
                     "questions used up), so its graph stays as it was at larger budgets.")
    def kind(line: int) -> str:
        return p.arms[line].kind if p.arms else DEFAULT_KIND

    # (only lines asking the same kind can have asked alike, and curves pinned at 0 or 1 tell nothing apart)
    informative = bool(np.any((p.exact[a] > 0) & (p.exact[a] < 1)) or np.any((p.hit3[a] > 0) & (p.hit3[a] < 1)))
    for other in range(a):
        if (informative and kind(other) == kind(a) and np.array_equal(p.exact[a], p.exact[other], equal_nan=True)
                and np.array_equal(p.hit3[a], p.hit3[other], equal_nan=True)):
            notes.append(f"the same accuracy as {p.algorithms[other]} in every run at every budget: on these "
                         "simulated raters the two learned the same graphs (a rule that sets them apart, "
                         "such as ANNTri's triangle bounds, decided nothing here).")
            break
    mean, sd = p.exact[a].mean(axis=0), p.exact[a].std(axis=0)
    for b in range(1, len(p.budgets)):
        peak = int(np.nanargmax(mean[:b])) if np.isfinite(mean[:b]).any() else None
        if peak is not None and np.isfinite(mean[b]) and mean[b] < mean[peak] - max(0.05, sd[peak] + sd[b]):
            notes.append(f"exact accuracy falls from {mean[peak]:.2f} at {p.budgets[peak]:g} to {mean[b]:.2f} at "
                         f"{p.budgets[b]:g} screens per item, more than the runs spread: this learner's graph gets "
                         "worse with more answers on these raters; buy the budget at its peak or choose "
                         "another line.")
            break
    return notes


def format_plan(p: Plan, target: float | None = None, metric: str = "exact", pay: float | None = None,
                currency: str = "$", wage: float | None = None) -> list[str]:
    """The plan as text lines: per line (a learner asking a kind), accuracy (mean ± sd over runs) at each
    budget with the screens, the raters' hours and the cost it means (``pay`` per screen, or ``wage``
    per hour of raters' time); then the screens, hours (and money) needed to reach ``target``, cheapest
    first by rater time."""
    n = p.n_items

    def cost(name, per_item):
        if wage is not None:
            return f"{currency}{p.rater_hours(name, per_item) * wage:,.2f}"
        return f"{currency}{per_item * n * pay:,.2f}" if pay is not None else None

    priced = pay is not None or wage is not None
    kinds = sorted({arm.kind for arm in p.arms}) if p.arms else [DEFAULT_KIND]
    lines = [f"Plan for {n} items; simulated raters answer from {p.source}.",
             f"Accuracy: mean ± sd over {p.exact.shape[1]} runs ({p.spread}); exact = the pick is a true "
             "nearest neighbour, hit@3 = among the 3 nearest."]
    if p.arms:
        seconds = {arm.kind: arm.seconds for arm in p.arms}
        lines.append("Rater time per screen: " + ", ".join(f"{k} {seconds[k]:.1f} s" for k in kinds)
                     + " (engine/kinds.py's stated defaults and their sources; --seconds KIND=S for a pilot's)."
                     + (f" Cost: {currency}{wage:g} per hour of raters' time." if wage is not None else ""))
    header = ["screens/item", "screens", "rater h"] + (["cost"] if priced else []) + ["exact", "hit@3"]
    for a, name in enumerate(p.algorithms):
        arm = p.arms[a] if p.arms else Arm(name)
        label = name + (" (default)" if arm.algorithm == DEFAULT_NN_ALGORITHM else "")
        lines += ["", f"{label}: {ALGORITHMS[arm.algorithm].description}",
                  f"  CPU {p.seconds[a].mean():.1f} s per run"
                  + (" (time limit: budgets marked - were not reached in every run)" if name in p.cut_short else "")]
        rows = []
        for b, per_item in enumerate(p.budgets):
            ex, h3 = p.exact[a, :, b], p.hit3[a, :, b]
            cells = ([f"{ex.mean():.2f} ± {ex.std():.2f}", f"{h3.mean():.2f} ± {h3.std():.2f}"]
                     if np.isfinite(ex).all() else ["-", "-"])
            rows.append([f"{per_item:g}", f"{int(round(per_item * n)):,}", f"{p.rater_hours(name, per_item):,.1f}"]
                        + ([cost(name, per_item)] if priced else []) + cells)
        widths = [max(len(r[c]) for r in [header] + rows) for c in range(len(header))]
        for r in [header] + rows:
            lines.append("  " + "  ".join(cell.rjust(w) for cell, w in zip(r, widths, strict=True)))
        lines += [f"  Note: {note}" for note in curve_notes(p, a)]
    if target is not None:
        lines += ["", f"To reach {METRIC_LABELS[metric]} accuracy {target:.2f} (screens per item; mean curve, "
                  "and the worst run for a safe buy; then raters' hours):"]
        width = max(len(name) for name in p.algorithms)
        for name in p.algorithms:
            mean, worst = p.reach(name, target, metric)
            extra = ""
            if mean.bound != ">":
                extra = f" = {int(round(mean.value * n)):,} screens, {p.rater_hours(name, mean.value):,.1f} h"
                if priced:
                    extra += f" = {cost(name, mean.value)}"
                    if worst.bound != ">":
                        extra += f" (safe: {cost(name, worst.value)})"
            lines.append(f"  {name:<{width}} {mean.text():>8} (worst run {worst.text()}){extra}")
        best = p.best(target, metric)
        fastest = p.fastest(target, metric)
        if best and fastest and fastest != best:
            lines.append(f"  Fewest screens: {best}; least rater time: {fastest}.")
        elif best:
            lines.append(f"  Cheapest: {best}.")
        elif p.cut_short:
            # the time limit ended the runs: the larger budgets were not simulated, not found wanting
            reached = ", ".join(f"{name} up to {p.reach(name, target, metric)[0].value:g}" for name in p.cut_short)
            lines.append(f"  No line reached {target:.2f} in the budgets simulated before the time limit stopped "
                         f"the runs ({reached} screens per item); raise --max-seconds (or lower --runs) to "
                         "simulate the larger budgets.")
        else:
            lines.append(f"  No line reaches {target:.2f} within {p.budgets[-1]:g} screens per item; "
                         "try larger --budgets or a lower --target.")
    return lines
