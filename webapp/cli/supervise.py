"""Process supervision for ``proxima serve``: restart crashed children with backoff, make children
die with their parent, one live serve per instance folder, and a sweep for studies left waiting.

Linux gets PR_SET_PDEATHSIG through ctypes; elsewhere each child also checks its parent's pid at
start. Must never import the engine or Flask.
"""
from __future__ import annotations

import ctypes
import fcntl
import os
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import redis

if TYPE_CHECKING:
    from typing import Any

    from redis import Redis


PR_SET_PDEATHSIG = 1
LOCK_FILE = "serve.lock"
#: Restarts allowed within the window before serve gives up on a child (a crash loop).
MAX_RESTARTS, RESTART_WINDOW_S = 5, 60.0
FIRST_BACKOFF_S, MAX_BACKOFF_S = 0.5, 8.0
#: A child that ran this long before it exited was no crash at start: its next restart waits FIRST_BACKOFF_S again
#: (a Redis or worker killed three times a minute came back after 4-8 s, not 0.5: benchmarks/faults.py).
STAYED_UP_S = 10.0
#: Seconds between sweeps for studies whose answer log is ahead of their engines.
SWEEP_INTERVAL_S = 10.0


def die_with_parent(parent_pid: int) -> Callable[[], None]:
    """A ``preexec_fn``: the child gets SIGTERM when the process that started it dies (Linux), and
    exits at once if that parent is already gone (the race between fork and prctl)."""
    def preexec() -> None:
        if sys.platform.startswith("linux"):
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
            except (OSError, AttributeError):
                pass  # no prctl: the parent-pid check below and the lock's takeover still hold
        if os.getppid() != parent_pid:
            os._exit(1)
    return preexec


class InstanceBusy(Exception):
    """Another live ``proxima serve`` holds this instance folder."""


class InstanceLock:
    """An exclusive ``flock`` on ``<instance>/serve.lock`` held for the life of a serve; the file
    lists the serve's pid and its children's pids, so a serve that died without cleaning up (kill -9)
    can be taken over: the lock is free (the kernel dropped it) and leftover children are stopped."""

    def __init__(self, instance_path: str | Path) -> None:
        self.path = Path(instance_path) / LOCK_FILE
        self.fd: int | None = None
        #: the pid of the serve that died holding this instance (found by ``acquire``), None after a clean stop
        self.took_over_from: int | None = None

    def acquire(self) -> list[int]:
        """Take the lock; returns the pids of a dead serve's children that were still running (now stopped)."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.read(fd, 4096).decode(errors="replace").split()
            os.close(fd)
            pid = owner[0] if owner else "?"
            raise InstanceBusy(f"another 'proxima serve' (pid {pid}) is running for {self.path.parent}; "
                               "stop it first, or give this one its own PROXIMA_INSTANCE_PATH") from None
        self.fd = fd
        previous = os.read(fd, 4096).decode(errors="replace").split()
        # a serve that stopped cleanly emptied the file: one whose pid is still in it died (kill -9, a crash)
        self.took_over_from = int(previous[0]) if previous and previous[0].isdigit() else None
        stopped = [pid for pid in (int(p) for p in previous[1:] if p.isdigit())
                   if _stop_leftover(pid, self.path.parent)]
        self.record([])
        return stopped

    def record(self, child_pids: list[int]) -> None:
        if self.fd is None:
            return
        os.ftruncate(self.fd, 0)
        os.lseek(self.fd, 0, os.SEEK_SET)
        os.write(self.fd, " ".join(str(p) for p in [os.getpid(), *child_pids]).encode())

    def release(self) -> None:
        if self.fd is not None:
            os.ftruncate(self.fd, 0)
            os.close(self.fd)  # closing drops the flock
            self.fd = None


def _is_ours(pid: int, instance: Path) -> bool:
    """Whether ``pid`` is still a process a serve of ``instance`` started: a recorded pid may since
    belong to another program, or to another instance's serve (same kinds of process)."""
    proc = Path(f"/proc/{pid}")
    try:
        cmdline = (proc / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    if any(b"redis-server" in arg for arg in cmdline[:1]):
        # the embedded server works in the instance's data folder (redis-server chdirs to its --dir;
        # it rewrites its command line, so that cannot tell)
        try:
            return Path(os.readlink(proc / "cwd")) == (instance / "redis").resolve()
        except OSError:
            return False
    if not any(word in arg for arg in cmdline for word in (b"webapp", b"gunicorn")):
        return False
    try:
        environ = (proc / "environ").read_bytes().split(b"\0")
    except OSError:
        return False  # not ours to read: not ours to stop
    return f"PROXIMA_INSTANCE_PATH={instance}".encode() in environ


def _stop_leftover(pid: int, instance: Path, timeout: float = 10.0) -> bool:
    if not _is_ours(pid, instance):
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _is_ours(pid, instance):
        time.sleep(0.1)
    if _is_ours(pid, instance):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return True


#: The exit status of a child asking to be replaced by a fresh process (a worker whose update jobs keep
#: failing, ``proxima worker``): restarted after its backoff like a crash, but never counted as a crash loop
#: (a study whose passes fail everywhere would otherwise stop serve, and every other study with it).
REPLACE_ME = 3


class CrashLoop(Exception):
    """A child kept crashing: ``max_restarts`` restarts within ``RESTART_WINDOW_S`` seconds."""


class Child:
    """One supervised process: ``start`` makes it (a Popen-like object with ``poll``/``pid``), the
    leader of its own process group (``start_new_session``). When it exits, what is left of its group
    (a killed gunicorn master's workers, still holding the listening socket) gets SIGTERM at once and
    SIGKILL when the backoff is over, before the process is started again."""

    def __init__(self, name: str, start: Callable[[], object], max_restarts: int = MAX_RESTARTS) -> None:
        self.name = name
        self._start = start
        self.max_restarts = max_restarts
        self.process = None
        self.restarts: deque[float] = deque()
        self.restart_at: float | None = None
        self.backoff = FIRST_BACKOFF_S
        self.last_status = None
        self.replacing = False  # the exit being restarted was REPLACE_ME, not a crash

    def start(self) -> None:
        self.process = self._start()
        self.restart_at = None

    @property
    def pid(self) -> int | None:
        return getattr(self.process, "pid", None)

    def check(self, now: float, say: Callable[[str], None]) -> None:
        """Restart the process after its backoff if it exited; CrashLoop when it keeps crashing."""
        if self.restart_at is None:
            status = self.process.poll() if self.process is not None else None
            if status is None:
                if self.restarts and now - self.restarts[-1] > STAYED_UP_S:
                    self.backoff = FIRST_BACKOFF_S  # it has stayed up: the next crash starts over
                return
            self.last_status = status
            self._signal_group(signal.SIGTERM)
            while self.restarts and now - self.restarts[0] > RESTART_WINDOW_S:
                self.restarts.popleft()
            if status == REPLACE_ME:
                say(f"the {self.name} asked to be replaced (status {status}: see its messages above); starting a "
                    f"new one in {self.backoff:.1f} s")
                self.restart_at = now + self.backoff
                self.backoff = min(MAX_BACKOFF_S, self.backoff * 2)
                self.replacing = True
                return
            if len(self.restarts) >= self.max_restarts:
                raise CrashLoop(f"the {self.name} exited {len(self.restarts) + 1} times within "
                                f"{RESTART_WINDOW_S:.0f} s (last exit status {status}; its own messages are "
                                "above); giving up")
            say(f"the {self.name} exited (status {status}); restarting it in {self.backoff:.1f} s")
            self.restart_at = now + self.backoff
            self.backoff = min(MAX_BACKOFF_S, self.backoff * 2)
            return
        if now >= self.restart_at:
            self._signal_group(signal.SIGKILL)
            if not self.replacing:
                self.restarts.append(now)
            self.replacing = False
            try:
                self.start()
            except Exception as exc:  # noqa: BLE001 - a failed start counts as one more crash
                say(f"the {self.name} did not start again: {exc}")
                self.process = _Exited(1)
                self.restart_at = None

    def _signal_group(self, signum: int) -> None:
        if self.pid is None:
            return
        try:
            os.killpg(self.pid, signum)  # the group the exited process led (start_new_session)
        except (ProcessLookupError, PermissionError):
            pass  # nothing left of it


class _Exited:
    """Stands for a process that could not be started (counts as an exit)."""

    pid = None

    def __init__(self, status: int):
        self.status = status

    def poll(self) -> int:
        return self.status


class Sweeper:
    """Every ``interval`` seconds, queue an update for a study whose log was ahead of its engine at
    the previous sweep too and whose cursor has not moved since: the web process that should have
    queued it died between setting the update flag and enqueueing (the flag then blocks others).

    The sweep's update job has one id per study, so a study waiting behind a long job (a rebuild,
    a busy worker) is queued once, not once per sweep."""

    def __init__(self, url: str, interval: float = SWEEP_INTERVAL_S) -> None:
        self.url = url
        self.interval = interval
        self.next_at = time.monotonic() + interval
        self.behind: dict[str, bytes] = {}
        self._conn = None

    def maybe_sweep(self, now: float) -> list[str]:
        if now < self.next_at:
            return []
        self.next_at = now + self.interval
        try:
            if self._conn is None:
                self._conn = redis.Redis.from_url(self.url, socket_timeout=5, socket_connect_timeout=2)
            return self.sweep(self._conn)
        except (redis.RedisError, OSError):
            return []  # Redis restarting: the next sweep tries again

    def sweep(self, conn: Redis) -> list[str]:
        from workers.store import keys
        from workers.store.queue import queue_sweep_update
        from workers.store.studies import list_studies

        queued, behind = [], {}
        for study in list_studies(conn):
            with conn.pipeline(transaction=False) as pipe:
                pipe.xrevrange(keys.answers(study.id), count=1)
                pipe.get(keys.cursor(study.id))
                last, cursor = pipe.execute()
            cursor = cursor or b"0-0"
            if not last or last[0][0] == cursor:
                continue
            behind[study.id] = cursor
            if self.behind.get(study.id) != cursor:
                continue
            if queue_sweep_update(conn, study.id):
                queued.append(study.id)
        self.behind = behind
        return queued


def sweep_job_id(study_id: str) -> str:
    """The id of the sweep's update job of a study (one at a time): ``workers.store.queue.sweep_job_id``."""
    from workers.store.queue import sweep_job_id as job_id

    return job_id(study_id)


def popen(args: list[str], **kwargs: Any) -> subprocess.Popen:
    """``subprocess.Popen`` for a child that dies with this process."""
    return subprocess.Popen(args, preexec_fn=die_with_parent(os.getpid()), **kwargs)  # noqa: PLW1509
