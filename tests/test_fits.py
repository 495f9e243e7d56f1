"""Refits beside the update passes (workers.jobs.fits): a real process runs a learner's fit task and
gives exactly the fit a pass would have made inside itself; a killed fit process costs a retry, not
the fit."""
from __future__ import annotations

import os
import signal
import time

import numpy as np
from helpers import wait_for
from scipy.spatial.distance import cdist

from engine import duels
from engine.planners import make_planner
from engine.registry import drive_as_pool
from workers.jobs.fits import FitPool


def _task(n=30, seed=0):
    X = np.random.default_rng(seed).random((n, 2))
    D = cdist(X, X)
    rng = np.random.default_rng(seed + 1)
    q = np.array([rng.choice(n, 3, replace=False) for _ in range(20 * n)])
    closer = D[q[:, 0], q[:, 1]] <= D[q[:, 0], q[:, 2]]
    trip = np.where(closer[:, None], q, q[:, [0, 2, 1]])
    return duels.FitTask(n, trip, (2, 4, 1), {}, {}, 7)


def _wait(handle, seconds=120.0):
    wait_for(handle.done, seconds, interval=0.05, what="the fit process giving a result")
    return handle.result()


def test_a_fit_in_the_pool_process_is_the_fit_made_in_place():
    task = _task()
    pool = FitPool(1)
    try:
        got = _wait(pool.fitter("study", "duels").fit(task))
    finally:
        pool.shutdown()
    want = duels.run_fit(task)
    assert set(got) == set(want) == {1, 2, 4}
    for d in want:
        np.testing.assert_array_equal(got[d], want[d])


def test_asking_again_for_a_running_fit_gives_the_same_future():
    task = _task(seed=3)
    pool = FitPool(1)
    try:
        fitter = pool.fitter("study", "duels")
        a, b = fitter.fit(task), fitter.fit(task)
        assert pool.future(a.key, task) is pool.future(b.key, task)
        other = pool.fitter("another-study", "duels").fit(task)
        assert other.key != a.key
        _wait(a)
    finally:
        pool.shutdown()


def test_a_killed_fit_process_is_replaced_and_the_fit_done_again():
    task = _task(n=60, seed=5)
    pool = FitPool(1)
    try:
        handle = pool.fitter("study", "duels").fit(task)
        procs = list(pool._executor._processes.values())
        assert procs
        os.kill(procs[0].pid, signal.SIGKILL)
        got = _wait(handle)
    finally:
        pool.shutdown()
    np.testing.assert_array_equal(got[2], duels.run_fit(task)[2])


def test_a_fit_whose_process_keeps_dying_is_retried_later_and_never_fails_the_passes(monkeypatch):
    """Killed more than FIT_RETRIES times, the fit is not done (a pass plans from the learner's last fit) until
    its next start after FIT_RETRY_DELAY_S; before, its broken future failed every pass of the study."""
    from concurrent.futures.process import BrokenProcessPool

    from workers.jobs import fits

    monkeypatch.setattr(fits, "FIT_RETRY_DELAY_S", 1.0)
    task = _task(n=400, seed=6)  # a fit of some seconds: killed while it runs
    pool = FitPool(1)
    try:
        handle = pool.fitter("study", "duels").fit(task)
        for _ in range(fits.FIT_RETRIES + 1):
            wait_for(lambda: pool._executor is not None and pool._executor._processes, 60, interval=0.02,
                     what="the fit process")
            os.kill(next(iter(pool._executor._processes.values())).pid, signal.SIGKILL)
            broken = pool._futures[handle.key]
            wait_for(broken.done, 60, interval=0.02, what="the fit's future failing")
            assert isinstance(broken.exception(), BrokenProcessPool)
            handle.done()  # asked again: started again, or (the last time) waiting for its next start
        assert not handle.done()  # not failed: the passes go on without it
        started = time.monotonic()
        got = _wait(handle)  # started again after the delay, in a new process
        assert time.monotonic() - started >= 0.5
    finally:
        pool.shutdown()
    np.testing.assert_array_equal(got[2], duels.run_fit(task)[2])


def test_a_pool_driven_learner_takes_its_refits_from_the_fit_process():
    n = 40
    X = np.random.default_rng(0).random((n, 2))
    D = cdist(X, X)
    pool = FitPool(1)
    try:
        p = drive_as_pool(make_planner("duels", n, question_kind="triplet", random_state=0),
                          pool.fitter("study", "duels"))
        deadline = time.monotonic() + 120
        while p.n_fits_ < 2:
            assert time.monotonic() < deadline
            q = np.asarray(p.next_questions(40))
            first = D[q[:, 0], q[:, 1]] <= D[q[:, 0], q[:, 2]]
            p.observe([(h, a, b, a if f else b) for (h, a, b), f in zip(q.tolist(), first, strict=True)])
            time.sleep(0.02)
    finally:
        pool.shutdown()
    assert p.embedding_ is not None and p.cands_.max() >= 0


_WORKER = """
import sys, time
from workers.jobs.fits import FitPool
pool = FitPool(1)
pool._pool().submit(time.sleep, 0).result()  # the fit process is up
print(" ".join(str(p.pid) for p in pool._executor._processes.values()), flush=True)
time.sleep(600)
"""


def test_the_fit_process_of_a_killed_worker_ends_with_it():
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    worker = subprocess.Popen([sys.executable, "-c", _WORKER], cwd=root, stdout=subprocess.PIPE, text=True)
    try:
        fit_pids = [int(p) for p in worker.stdout.readline().split()]
        assert fit_pids and all(_alive(p) for p in fit_pids)
        worker.kill()  # kill -9: the pool is never shut down
        worker.wait(30)
        wait_for(lambda: not any(_alive(p) for p in fit_pids), timeout=60, what="the fit process to end")
    finally:
        if worker.poll() is None:
            worker.kill()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_fit_process_whose_worker_died_before_it_started_ends():
    """A fit process watches the worker that started it by the pid the worker gave it: one whose worker
    was killed while it was still starting (already left to init when its setup ran) ends at once, and
    one whose worker lives goes on."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    code = ("import sys, time; from workers.jobs.fits import _child_setup; _child_setup(1, int(sys.argv[1])); "
            "time.sleep(float(sys.argv[2])); print('lived')")
    orphan = subprocess.run([sys.executable, "-c", code, str(gone.pid), "60"], cwd=root, capture_output=True,
                            text=True, timeout=30)
    assert orphan.returncode == 0 and "lived" not in orphan.stdout
    watched = subprocess.run([sys.executable, "-c", code, str(os.getpid()), "2.5"], cwd=root, capture_output=True,
                             text=True, timeout=30)
    assert watched.returncode == 0 and "lived" in watched.stdout, watched.stderr


def _dead_pool(pool, attr):
    executor = getattr(pool, attr)
    return executor is not None and (getattr(executor, "_broken", False)
                                     or any(not p.is_alive() for p in executor._processes.values()))


def test_a_fit_process_killed_while_idle_is_replaced_before_any_study_hands_it_a_fit():
    """The process died between fits (kill -9, the out-of-memory killer): another study's next fit is
    not refused by the dead pool (every pass of every study failed with BrokenProcessPool), and what was
    replaced is reported for the Overview."""
    task = _task(n=30, seed=7)
    pool = FitPool(1)
    try:
        _wait(pool.fitter("study-a", "duels").fit(task))
        pid = next(iter(pool._executor._processes.values())).pid
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: _dead_pool(pool, "_executor"), 30, what="the pool seeing its process die")
        got = _wait(pool.fitter("study-b", "duels").fit(_task(n=30, seed=8)))
        assert set(got) == {1, 2, 4}
        assert [(e["what"], e["pid"] in (pid, 0)) for e in pool.replaced] == [("fit process", True)]
        assert pid not in [p.pid for p in pool._executor._processes.values()]
    finally:
        pool.shutdown()


def test_a_killed_check_process_is_replaced_at_the_next_heal_and_runs_the_next_check():
    pool = FitPool(1)
    try:
        pool.beside(("check", "s"), time.sleep, 0)
        wait_for(lambda: not pool.running(("check", "s")), 30, what="the first check")
        pid = next(iter(pool._side._processes.values())).pid
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: _dead_pool(pool, "_side"), 30, what="the pool seeing its check process die")
        found = pool.heal()
        assert [e["what"] for e in found] == ["check process"]
        assert found[0]["how"] == "was killed by signal 9" or found[0]["pid"] == 0  # 0: reaped before heal looked
        assert pool.heal() == []  # healed once
        pool.beside(("check", "s"), time.sleep, 0)
        wait_for(lambda: not pool.running(("check", "s")), 30, what="the next check in a new process")
        assert pool._jobs[("check", "s")][0].exception() is None
    finally:
        pool.shutdown()


def test_the_fit_and_check_processes_say_which_is_which():
    """``ps``, ``top`` and the kernel's out-of-memory reports name a worker's children by what they do, so an
    operator (and benchmarks/faults.py) can tell the fit process from the check process without guessing."""
    import sys

    import psutil

    if not sys.platform.startswith("linux"):
        return  # the name is set where the system shows one (Linux); elsewhere nothing is promised
    pool = FitPool(1)
    try:
        _wait(pool.fitter("study-a", "duels").fit(_task(n=30, seed=7)))
        pool.beside(("check", "s"), time.sleep, 0)
        wait_for(lambda: not pool.running(("check", "s")), 30, what="the check")
        fit = [psutil.Process(p.pid).name() for p in pool._executor._processes.values()]
        check = [psutil.Process(p.pid).name() for p in pool._side._processes.values()]
        assert fit == ["proxima fit"] and check == ["proxima check"]
    finally:
        pool.shutdown()
