"""Crash testing: ``PROXIMA_FAULT=<point>:<action>`` makes a worker (or its fit process) crash (``crash``:
SIGKILL itself), hang (``pause``: write its pid to ``PROXIMA_FAULT_FILE`` if set, then sleep until
killed) or fail (``raise``: a pass that raises, every time, as a broken library would) at a named point
of an update pass that applies answers (``workers.jobs.update_pass``): ``after_read``, ``after_observe``,
``before_exec``, ``after_exec``, ``before_swap`` (a checkpoint written, not yet put in place:
``workers.jobs.checkpoints``), or ``in_fit`` (in the worker's fit process, a refit handed over to it
under way: ``workers.jobs.fits``). Unset (always, outside tests) a point costs one ``None`` check. Must
never import Flask.
"""
from __future__ import annotations

import os
import signal
import sys
import time

FAULT_POINTS = ("after_read", "after_observe", "before_exec", "after_exec", "before_swap", "in_fit")
FAULT_ACTIONS = ("crash", "pause", "raise")


def parse_fault(spec: str | None) -> tuple[str, str] | None:
    """``"<point>:<action>"`` as a pair, None for an unset variable."""
    if not spec:
        return None
    point, _, action = spec.partition(":")
    if point not in FAULT_POINTS or action not in FAULT_ACTIONS:
        raise ValueError(f"PROXIMA_FAULT={spec!r}: expected <point>:<action> with point one of "
                         f"{', '.join(FAULT_POINTS)} and action one of {', '.join(FAULT_ACTIONS)}")
    return point, action


FAULT = parse_fault(os.environ.get("PROXIMA_FAULT"))


def fault(point: str) -> None:
    """Crash or hang here if PROXIMA_FAULT names this point (only ever set by crash tests): ``crash``
    SIGKILLs this process; ``pause`` writes its pid to ``PROXIMA_FAULT_FILE`` (if set) and sleeps until killed."""
    if FAULT is None or FAULT[0] != point:
        return
    print(f"PROXIMA_FAULT: {FAULT[1]} at {point} (pid {os.getpid()})", file=sys.stderr, flush=True)
    if FAULT[1] == "crash":
        os.kill(os.getpid(), signal.SIGKILL)
    if FAULT[1] == "raise":
        raise RuntimeError(f"PROXIMA_FAULT: a failure injected at {point}")
    marker = os.environ.get("PROXIMA_FAULT_FILE")
    if marker:
        with open(marker, "w") as fh:
            fh.write(f"{os.getpid()}\n")
    while True:
        time.sleep(3600)
