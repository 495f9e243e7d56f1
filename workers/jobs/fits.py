"""Refits beside the update passes: a process of the worker's own that runs engine fit tasks (and a
second one for other work that must not hold a pass up, such as the answer check).

A learner whose questions come from a fitted model (``engine.duels``) hands each refit to the pool
set up here as a pure task (``engine.duels.FitTask``) and takes the result at the first pass after
it is ready, so a pass applies answers and refills pools in bounded time however long a fit takes.
Nothing here is the only copy of anything: the refit under way is described in the saved engine
state, and a worker that dies with a fit running hands the same task over again when it (or another
worker) loads the state. Must never import Flask.
"""
from __future__ import annotations

import logging
import math
import multiprocessing
import os
import signal
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from engine.registry import run_fit_task
from workers.jobs import faults

#: Fit results kept for planners reloaded from their state (after a failed pass, another job) to take.
KEPT_FITS = 16
#: Times one fit is started again at once after the process running it died (killed by hand or by the kernel's
#: out-of-memory killer). A fit whose process keeps dying is then started again only after FIT_RETRY_DELAY_S,
#: doubling each time: meanwhile the learner keeps its last fit and the passes go on applying answers (each
#: death is an incident on the Overview). Failing every pass instead stopped the study's learning until the
#: worker gave up and was replaced (33-38 s in benchmarks/faults.py, which kills a fit process three times a
#: minute).
FIT_RETRIES = 2
FIT_RETRY_DELAY_S = 30.0


def _fit(task: Any) -> Any:
    """What the fit process runs: the task (``PROXIMA_FAULT=in_fit:...`` crashes or hangs it first)."""
    faults.fault("in_fit")
    return run_fit_task(task)


log = logging.getLogger(__name__)


def _dead(executor: ProcessPoolExecutor | None) -> list[tuple[int, int | None]]:
    """(pid, exit status) of each process of ``executor`` that is no longer running, or ``[(0, None)]``
    for an executor the standard library has marked broken after reaping its dead process already."""
    if executor is None:
        return []
    dead = [(p.pid, p.exitcode) for p in list((executor._processes or {}).values()) if not p.is_alive()]
    if not dead and getattr(executor, "_broken", False):
        dead = [(0, None)]
    return dead


def _how(status: int | None) -> str:
    if status is None:
        return "ended"
    return f"was killed by signal {-status}" if status < 0 else f"exited with status {status}"


#: How much lower the fit processes run than the web tier and the passes (``nice``): on a machine whose
#: cores serve raters too, a refit takes the CPU they leave (load.py at 1,000 raters on 2 cores: at the
#: same priority the web tier served 60% of the offered answers)
FIT_NICENESS = 10


#: How often a fit process checks that the worker that started it is still alive (seconds)
PARENT_CHECK_SECONDS = 1.0


def _exit_with(parent: int) -> None:
    """End this fit process once the worker that started it (``parent``, its pid as the worker gave it)
    is gone: a worker killed (kill -9, out of memory, a supervisor's restart) never shuts its pool
    down, and its fit processes would otherwise live on, holding their memory (~500 MB at 50,000
    items) and, mid-fit, a core. The pid comes from the worker, not from ``os.getppid()`` here: a
    worker killed while this process was still starting has already left it to init."""
    while True:
        if os.getppid() != parent:
            os._exit(0)
        time.sleep(PARENT_CHECK_SECONDS)


#: The names the worker's processes show in ``ps``, ``top`` and the kernel's out-of-memory reports (Linux's
#: process name, at most 15 characters): which of a worker's children fits and which checks raters.
FIT_PROCESS_NAME = "proxima fit"
CHECK_PROCESS_NAME = "proxima check"


def _name_this_process(name: str) -> None:
    """Give this process ``name`` where the system shows one (Linux: ``/proc/self/comm``); else nothing."""
    try:
        with open("/proc/self/comm", "w") as comm:
            comm.write(name[:15])
    except OSError:
        pass


def _child_setup(blas_threads: int, parent: int, name: str = FIT_PROCESS_NAME) -> None:
    # Ctrl-C goes to the worker, which shuts the pool down; BLAS on as many threads as asked
    _name_this_process(name)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with, args=(parent,), name="parent watch", daemon=True).start()
    os.nice(FIT_NICENESS)
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=blas_threads or None, user_api="blas")


class FitPool:
    """``processes`` processes (spawned, so no lock or Redis connection is inherited) running fits.

    Fits of one study and algorithm are identified by the task's key: asking again for a fit that
    is running or done gives the same future (a learner reloaded from its state after a failed
    pass finds its refit where it left it)."""

    def __init__(self, processes: int = 1, blas_threads: int = 1) -> None:
        if processes < 1:
            raise ValueError(f"a fit pool needs at least one process, got {processes}")
        self.processes = int(processes)
        self.blas_threads = int(blas_threads)
        self._executor: ProcessPoolExecutor | None = None
        self._futures: OrderedDict[tuple, Future] = OrderedDict()
        self._restarts: dict[tuple, int] = {}
        self._retry_at: dict[tuple, float] = {}
        self._jobs: dict[tuple, tuple[Future, float]] = {}
        self._side: ProcessPoolExecutor | None = None
        #: what :meth:`heal` found and replaced, oldest first, for the worker to report (see ``replaced``)
        self.replaced: list[dict] = []
        self._unreported: list[dict] = []

    def _pool(self) -> ProcessPoolExecutor:
        if self._executor is None:
            self._executor = ProcessPoolExecutor(max_workers=self.processes,
                                                 mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=_child_setup, initargs=(self.blas_threads, os.getpid()))
        return self._executor

    def heal(self) -> list[dict]:
        """Replace the fit or check process that died (kill -9, the out-of-memory killer) before anything
        is handed to it: a dead process leaves its pool broken, and every later submit would fail (each
        update pass of every study with it). Fits it was running are started again by :meth:`future`
        when their planner next asks; a check is started again at its next turn. Returns what was
        replaced (also kept in ``replaced``), each ``{"what", "pid", "how", "at"}``."""
        found = []
        for what, attr in (("fit process", "_executor"), ("check process", "_side")):
            executor = getattr(self, attr)
            for pid, status in _dead(executor):
                found.append({"what": what, "pid": pid, "how": _how(status), "at": time.time()})
            if _dead(executor):
                self._drop(attr)
        for event in found:
            log.warning("the worker's %s (pid %s) %s; a new one takes its work", event["what"], event["pid"],
                        event["how"])
        self.replaced.extend(found)
        del self.replaced[:-KEPT_FITS]
        self._unreported.extend(found)
        return found

    def take_unreported(self) -> list[dict]:
        """What :meth:`heal` replaced (wherever it was called from) since the last call."""
        taken, self._unreported = self._unreported, []
        return taken

    def _drop(self, attr: str, wait: bool = False) -> None:
        """Shut a pool down (its live processes terminated) so the next use starts a new one. What it ran and had
        not finished is forgotten: a future of a pool shut down before it saw its process die may never be done
        (the checks beside the passes then waited for it for good, and no check ran again), so a fit is submitted
        again when next asked for and a check starts at its next turn."""
        executor = getattr(self, attr)
        setattr(self, attr, None)
        if executor is None:
            return
        if attr == "_side":
            self._jobs = {k: v for k, v in self._jobs.items() if v[0].done()}
        else:
            self._futures = OrderedDict((k, f) for k, f in self._futures.items() if f.done())
        for process in list((executor._processes or {}).values()):
            if process.is_alive():
                process.terminate()
        executor.shutdown(wait=wait, cancel_futures=True)

    def _submit(self, task: Any) -> Future:
        try:
            return self._pool().submit(_fit, task)
        except BrokenProcessPool:  # died since heal() looked: replace it now
            self.heal()
            return self._pool().submit(_fit, task)

    def future(self, key: tuple, task: Any) -> Future:
        """The future of ``task`` (submitted now unless running or done; again if its process died)."""
        f = self._futures.get(key)
        if f is not None and f.done() and isinstance(f.exception(), BrokenProcessPool):
            # its fit process was killed (out of memory, by hand): a new process fits again, at once up to
            # FIT_RETRIES times, then after a delay that doubles (until then the fit is not done: no pass waits)
            tries = self._restarts.get(key, 0)
            if tries >= FIT_RETRIES:
                delay = FIT_RETRY_DELAY_S * 2 ** (tries - FIT_RETRIES)
                if key not in self._retry_at:
                    log.warning("the fit %s lost its process %d times; started again in %.0f s (until then the "
                                "learner keeps its last fit)", "/".join(map(str, key[:2])), tries + 1, delay)
                if time.monotonic() < self._retry_at.setdefault(key, time.monotonic() + delay):
                    return _NOT_YET
                del self._retry_at[key]
            self._restarts[key] = tries + 1
            self.heal()
            f = None
        if f is None:
            f = self._futures[key] = self._submit(task)
        self._futures.move_to_end(key)
        while len(self._futures) > KEPT_FITS:
            self._futures.popitem(last=False)
        return f

    def _side_pool(self) -> ProcessPoolExecutor:
        if self._side is None:
            self._side = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_child_setup,
                                             initargs=(self.blas_threads, os.getpid(), CHECK_PROCESS_NAME))
        return self._side

    def beside(self, key: tuple, fn: Any, *args: Any, every: float = 0.0) -> None:
        """Run ``fn(*args)`` in a process of its own beside the fits (so refits never wait behind it),
        unless the last run under ``key`` is still going or started less than ``every`` seconds ago
        (its failure is logged by ``fn`` itself)."""
        f, started = self._jobs.get(key, (None, -math.inf))
        if (f is not None and not f.done()) or time.monotonic() - started < every:
            return
        try:
            self._jobs[key] = (self._side_pool().submit(fn, *args), time.monotonic())
        except BrokenProcessPool:  # the check process died since heal() looked
            self.heal()
            self._jobs[key] = (self._side_pool().submit(fn, *args), time.monotonic())
        while len(self._jobs) > 4 * KEPT_FITS:
            self._jobs.pop(next(iter(self._jobs)))

    def running(self, key: tuple) -> bool:
        """Whether the last run of ``beside`` under ``key`` is still going."""
        f = self._jobs.get(key, (None, 0.0))[0]
        return f is not None and not f.done()

    def fitter(self, study_id: str, label: str) -> StudyFitter:
        return StudyFitter(self, study_id, label)

    def shutdown(self, wait: bool = True) -> None:
        """Stop the processes, a fit or check under way included (the saved state describes a refit
        under way, and a check only ever adds flags: the next worker does either again)."""
        self._drop("_executor", wait)
        self._drop("_side", wait)
        self._futures.clear()
        while len(self._restarts) > KEPT_FITS:
            self._restarts.pop(next(iter(self._restarts)))
        while len(self._retry_at) > KEPT_FITS:
            self._retry_at.pop(next(iter(self._retry_at)))


#: The future of a fit waiting for its next start (FIT_RETRY_DELAY_S): never done.
_NOT_YET: Future = Future()


class _Handle:
    """What a planner holds for a fit handed over: ``done()`` / ``result()`` of its future, which
    is submitted again if the process running it died."""

    def __init__(self, pool: FitPool, key: tuple, task: Any) -> None:
        self.pool, self.key, self.task = pool, key, task

    def done(self) -> bool:
        return self.pool.future(self.key, self.task).done()

    def result(self) -> Any:
        return self.pool.future(self.key, self.task).result()


class StudyFitter:
    """The ``fitter`` of one study's learner: fits go to the worker's pool under the study's name."""

    def __init__(self, pool: FitPool, study_id: str, label: str) -> None:
        self.pool, self.study_id, self.label = pool, study_id, label

    def fit(self, task: Any) -> _Handle:
        key = (self.study_id, self.label, getattr(task, "n_items", None), task.key)
        handle = _Handle(self.pool, key, task)
        handle.done()  # submit now
        return handle


_pool: FitPool | None = None
_redis_url: str | None = None


def use_fit_processes(processes: int, blas_threads: int = 1, redis_url: str | None = None) -> None:
    """Run this process's refits (and, given ``redis_url``, its answer checks) in ``processes``
    processes beside its passes (0: inside the passes, as tests and in-process runs do: the same fits
    at the same answers, deterministic)."""
    global _pool, _redis_url
    if _pool is not None:
        _pool.shutdown(wait=False)
    _pool = FitPool(processes, blas_threads) if processes > 0 else None
    _redis_url = redis_url


def run_beside(key: tuple, fn: Any, *args: Any, every: float = 0.0) -> bool:
    """Run ``fn(redis_url, *args)`` in a process beside the passes and the fits (one run at a time per
    ``key``, at most one start per ``every`` seconds); False where this process has no pool or no Redis
    address for it (the caller runs the work itself)."""
    if _pool is None or not _redis_url:
        return False
    _pool.beside(key, fn, _redis_url, *args, every=every)
    return True


def running_beside(key: tuple) -> bool:
    """Whether work started by ``run_beside`` under ``key`` is still going in this process's pool."""
    return _pool is not None and _pool.running(key)


def heal() -> list[dict]:
    """Replace this process's fit or check process if it died (see :meth:`FitPool.heal`); what was replaced,
    here or since the last call (a fit's own retry replaces its process too)."""
    if _pool is None:
        return []
    _pool.heal()
    return _pool.take_unreported()


def fitter_for(study_id: str, label: str) -> StudyFitter | None:
    """The fitter a study's learner hands its refits to in this process (None: fits in the pass)."""
    return None if _pool is None else _pool.fitter(study_id, label)


def shutdown() -> None:
    use_fit_processes(0)

