"""Helpers of the load benchmark (``load.py``): percentiles, plain tables, per-process CPU and
memory from psutil, the gunicorn access log and py-spy profiles.

Imports no project code, so the load-generator processes stay light.
"""
from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import psutil

#: gunicorn ``--access-logformat``: worker pid, the load step the client sent the request in
#: (``X-Load-Step`` header), method, path, status, request time in microseconds.
ACCESS_LOG_FORMAT = "%(p)s %({x-load-step}i)s %(m)s %(U)s %(s)s %(D)s"
ACCESS_LINE = re.compile(r"^<(\d+)> (\S+) (\S+) (\S+) (\d{3}) (\d+)$")


def percentile(values, q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def fmt(x, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and x != x):
        return "—"
    if isinstance(x, float):
        if abs(x) >= 100:
            return f"{x:,.0f}"
        return f"{x:.{digits}g}"
    return str(x)


def table(header: list[str], rows: list[list]) -> None:
    cells = [[fmt(c) if not isinstance(c, str) else c for c in row] for row in rows]
    widths = [max(len(str(h)), *(len(r[i]) for r in cells)) if cells else len(str(h)) for i, h in enumerate(header)]
    print(" | ".join(str(h).rjust(w) for h, w in zip(header, widths, strict=True)))
    print("-+-".join("-" * w for w in widths))
    for r in cells:
        print(" | ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))


# ---------------------------------------------------------------------------- processes
def tree_cpu_seconds(proc: psutil.Process) -> float:
    """CPU seconds (user + system) of a process, its reaped children and its live descendants.

    Reaped children (an RQ worker's job processes, Redis's AOF-rewrite child) count through the
    parent's ``children_user``/``children_system`` once waited for; a live one counts itself until
    then, so differences between two calls are right as children come and go.
    """
    try:
        t = proc.cpu_times()
        total = t.user + t.system + t.children_user + t.children_system
        kids = proc.children(recursive=True)
    except psutil.Error:
        return math.nan
    for kid in kids:
        try:
            k = kid.cpu_times()
            total += k.user + k.system
        except psutil.Error:
            continue
    return total


def tree_rss(proc: psutil.Process) -> list[int]:
    """Resident bytes of the process and of each live descendant (first entry: the process)."""
    try:
        out = [proc.memory_info().rss]
        kids = proc.children(recursive=True)
    except psutil.Error:
        return []
    for kid in kids:
        try:
            out.append(kid.memory_info().rss)
        except psutil.Error:
            continue
    return out


@dataclass
class GroupSample:
    cpu: float
    rss_total: int
    rss_max: int


@dataclass
class ProcessGroups:
    """Named roots (a gunicorn master, RQ workers, redis-server, load generators) sampled together;
    each root counts with its descendants (gunicorn workers, RQ job processes, AOF rewrites)."""

    groups: dict[str, list[int]]
    _procs: dict[int, psutil.Process] = field(default_factory=dict)

    def _proc(self, pid: int) -> psutil.Process | None:
        if pid not in self._procs:
            try:
                self._procs[pid] = psutil.Process(pid)
            except psutil.Error:
                return None
        return self._procs[pid]

    def sample(self) -> dict[str, GroupSample]:
        out = {}
        for name, pids in self.groups.items():
            cpu, total, biggest = 0.0, 0, 0
            for pid in pids:
                proc = self._proc(pid)
                if proc is None:
                    continue
                seconds = tree_cpu_seconds(proc)
                cpu += 0.0 if math.isnan(seconds) else seconds
                rss = tree_rss(proc)
                total += sum(rss)
                biggest = max([biggest, *rss])
            out[name] = GroupSample(cpu, total, biggest)
        return out


def machine_busy_seconds() -> float:
    """CPU seconds every core of the machine has spent busy (not idle or waiting for I/O)."""
    t = psutil.cpu_times()
    # guest time is already part of user time; steal is time the hypervisor gave to someone else
    return t.user + t.system + getattr(t, "nice", 0.0) + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)


# ---------------------------------------------------------------------------- access log
def read_access_log(path: Path) -> dict[tuple[int, str], list[float]]:
    """Server-side request times (ms) by (load step, request kind) from the gunicorn access log.

    Kinds: ``question`` (GET .../questions/next), ``answer`` (POST .../answers), ``page`` (the
    rater page) and ``other``. Lines without a step header (health checks) are skipped.
    """
    out: dict[tuple[int, str], list[float]] = defaultdict(list)
    with Path(path).open() as fh:
        for line in fh:
            m = ACCESS_LINE.match(line.strip())
            if not m or not m.group(2).isdigit():
                continue
            out[(int(m.group(2)), request_kind(m.group(3), m.group(4)))].append(int(m.group(6)) / 1000.0)
    return out


def request_kind(method: str, path: str) -> str:
    if method == "GET" and path.endswith("/questions/next"):
        return "question"
    if method == "POST" and path.endswith("/answers"):
        return "answer"
    if method == "GET" and path.startswith("/s/"):
        return "page"
    return "other"


# ---------------------------------------------------------------------------- py-spy
FRAME = re.compile(r"^(?P<func>.+?) \((?P<file>[^():]+)(?::(?P<line>\d+))?\)$")


def read_collapsed(path: Path) -> list[tuple[list[str], int]]:
    """py-spy ``--format raw`` output: (frames outermost first, samples) per line."""
    stacks = []
    with Path(path).open() as fh:
        for line in fh:
            line = line.rstrip("\n")
            if not line:
                continue
            stack, _, count = line.rpartition(" ")
            if not count.isdigit():
                continue
            stacks.append((stack.split(";"), int(count)))
    return stacks


def short_frame(frame: str) -> str:
    """``func (path/to/file.py:12)`` -> ``func (file.py)``; project files keep their package."""
    m = FRAME.match(frame.strip())
    if not m:
        return frame.strip()
    file = m.group("file")
    parts = Path(file).parts
    for anchor in ("webapp", "workers", "engine"):
        if anchor in parts:
            file = "/".join(parts[parts.index(anchor):])
            break
    else:
        if "site-packages" in parts:
            rest = parts[parts.index("site-packages") + 1:]
            file = "/".join(rest[:1] + rest[-1:]) if len(rest) > 1 else "/".join(rest)
        else:
            file = parts[-1] if parts else file
    return f"{m.group('func')} ({file})"


def profile_summary(stacks: list[tuple[list[str], int]], top: int = 12,
                    groups: dict[str, tuple[str, ...]] | None = None,
                    project: tuple[str, ...] = ("webapp/", "workers/", "engine/")) -> dict:
    """Where the samples go.

    ``top``: functions by own samples (innermost frame). ``inclusive``: functions of the
    ``project`` folders by the share of samples with them anywhere on the stack. ``groups`` maps
    a label to frame substrings; a sample counts for a label when any frame holds any of them
    (a substring starting with ``!``: when no frame holds the rest).
    """
    total = sum(c for _, c in stacks) or 1
    own: dict[str, int] = defaultdict(int)
    inclusive: dict[str, int] = defaultdict(int)
    for frames, count in stacks:
        frames = [f for f in frames if FRAME.match(f.strip())]
        if frames:
            own[short_frame(frames[-1])] += count
        for name in {short_frame(f) for f in frames if any(p in f for p in project)}:
            inclusive[name] += count
    shares = {}
    for label, needles in (groups or {}).items():
        hit = 0
        for frames, count in stacks:
            text = ";".join(frames)
            if any((n[1:] not in text) if n.startswith("!") else (n in text) for n in needles):
                hit += count
        shares[label] = hit / total
    return {"samples": total,
            "top": [(name, n / total) for name, n in sorted(own.items(), key=lambda kv: -kv[1])[:top]],
            "inclusive": [(name, n / total) for name, n in sorted(inclusive.items(), key=lambda kv: -kv[1])[:top]],
            "groups": shares}
