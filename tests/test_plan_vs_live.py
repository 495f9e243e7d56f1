"""proxima plan against a live study (issue 18): the accuracy the plan predicts is what the same study
reaches when simulated raters answer through the real serving path (Redis, the rater API, the update
jobs' passes, the dashboard's learner summary). A small known case here; benchmarks/plan_vs_live.py
measures larger ones (docs/researcher/paid-study.md)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import drain

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from harness import clustered_truth, live_curve  # noqa: E402

from engine.planning import Scenario, plan  # noqa: E402
from engine.registry import DEFAULT_NN_ALGORITHM  # noqa: E402
from simulation.oracles import HUMAN_LAPSE  # noqa: E402

BUDGETS = [8, 25]


@pytest.fixture(autouse=True)
def in_process_updates(monkeypatch):
    """The harness's burst worker (``run_queued_jobs``, after every round of the crowd) replaced by
    tests/helpers.drain: the queued update jobs' own passes and end steps in this process, without RQ around
    each job (hundreds of them here) and without the 0.1 s a served study's job waits for a crowd's next answer
    (nothing answers while it runs); a refit running beside the passes is still waited for. Other tests run
    the real worker."""
    from workers.store import queue

    monkeypatch.setattr(queue, "run_queued_jobs", drain)


def test_the_plan_predicts_what_a_live_study_of_pairs_reaches(app, conn):
    D = clustered_truth(20, seed=1, cluster=2, spread=0.4)  # ten pairs: each item's neighbour is its partner
    scale, lapse = 0.03, HUMAN_LAPSE
    runs = plan([Scenario(D, scale, lapse)], ["duels"], BUDGETS, runs=8).exact[0]
    lives = np.array([live_curve(app, conn, D, scale, lapse, "duels", BUDGETS, seed, raters=5) for seed in (1, 2, 3)])
    predicted, live = runs.mean(axis=0), lives.mean(axis=0)
    assert live[-1] >= 0.65 and predicted[-1] >= 0.65, (live, predicted)  # learnable: the answer is known
    # 20 items: one item is 0.05 and a run's accuracy varies by ~0.1, so the gap is judged against the
    # standard error of the two means (3 SE, at least 0.1); benchmarks/plan_vs_live.py measures it at scale
    se = np.sqrt(runs.var(axis=0, ddof=1) / len(runs) + lives.var(axis=0, ddof=1) / len(lives))
    assert np.all(np.abs(live - predicted) <= np.maximum(0.1, 3 * se)), (live, predicted, se)


def test_the_plan_predicts_what_a_live_study_of_a_thousand_items_reaches(conn):
    """The default learner at 1,000 items, driven as a study runs it: 100 simulated raters take pooled
    questions and answer through the storage calls the rater API makes (the answer script schedules the
    update; RQ passes apply the answers, fit and refill the pools; hit@3 is read from the summary the
    dashboard shows), against the plan (the same learner driven in-process, refills of 100)."""
    D = clustered_truth(1000, seed=2, cluster=5, spread=0.3)
    scale, lapse = 0.002, HUMAN_LAPSE
    budgets = [10, 20]
    predicted = plan([Scenario(D, scale, lapse)], [DEFAULT_NN_ALGORITHM], budgets, runs=1, batch=100).hit3[0][0]
    live = live_curve(None, conn, D, scale, lapse, DEFAULT_NN_ALGORITHM, budgets, seed=11, raters=100,
                      through="store", metric="hit3")
    # learnable: random picks hit 3 of 999 (.003); the plan (deterministic: seed 0, fits inside the calls)
    # reached .39 at 20 per item; the broken live path lost .3-.8 of it
    assert predicted[-1] >= 0.35, predicted
    assert live[-1] >= 0.25, (live, predicted)
    # one live run is not deterministic: its refits run beside the passes (the worker's fit process) and a
    # stage lands in whichever pass is running when it is done, so one seed varies by run and machine:
    # .37-.43 in four runs on a quiet machine, .34 and .48 in runs of CI on a loaded one. The gap is judged
    # against that spread (.12); the benchmark (benchmarks/plan_vs_live.py) averages seeds at scale
    assert np.all(np.abs(live - predicted) <= 0.12), (live, predicted)
