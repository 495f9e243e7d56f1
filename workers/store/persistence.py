"""Redis's own files after a deletion: what was deleted must leave them too.

Redis keeps every write in its append-only file (AOF) until the file is rewritten, and an RDB snapshot keeps
the data of the moment it was taken, so a forgotten rater or a deleted study stays on disk after the keys are
gone. ``rewrite_files`` asks Redis to rewrite its AOF from what it holds now (BGREWRITEAOF, after any rewrite
begun before the deletion has ended) and to replace an RDB snapshot (BGSAVE), waits for both, and, where
Redis's folder can be read from here, counts the copies of given texts left in its files. Must never import
Flask or the engine.
"""
from __future__ import annotations

import mmap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import redis

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from redis import Redis

#: Seconds between looks at INFO persistence while Redis writes a file in the background.
POLL_SECONDS = 0.05
#: How long a rewrite or snapshot may take before the command gives up waiting for it (it goes on in Redis).
DEFAULT_TIMEOUT = 600.0
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


class PersistenceError(RuntimeError):
    """Redis did not do what was asked of its files; the message says what and where to look."""


@dataclass(frozen=True)
class FilesReport:
    """What ``rewrite_files`` asked Redis to do, what it did, and what the files hold afterwards."""

    asked: tuple[str, ...]  # what Proxima asked Redis to do, in words
    aof: bool  # the AOF is on
    rewritten: bool  # a rewrite begun after the deletion finished without error
    snapshot_replaced: bool  # an RDB snapshot taken after the deletion replaced the old one
    checked: tuple[str, ...] = ()  # the files read for copies (names in Redis's folder); () when none was sought
    copies: dict[str, int] = field(default_factory=dict)  # file name -> copies found (only files with some)
    unverified: str | None = None  # why the files could not be read from here; None when they were

    @property
    def clean(self) -> bool:
        """Whether the files were read and hold no copy."""
        return self.unverified is None and not self.copies

    def lines(self) -> list[str]:
        """The report in words, one line each, for the command line and the dashboard."""
        out = [f"Asked Redis to {'; '.join(self.asked)}." if self.asked else "Asked Redis nothing about its files."]
        if not self.aof:
            out.append("Redis keeps no append-only file (appendonly no).")
        if self.unverified is not None:
            out.append(f"Could not check Redis's files: {self.unverified}. Check them where Redis runs "
                       "(the AOF and any RDB file in its 'dir').")
        elif not self.checked:
            out.append("Redis's files now hold only what Redis holds (nothing was looked for in them).")
        elif self.copies:
            found = ", ".join(f"{name} ({n})" for name, n in sorted(self.copies.items()))
            out.append(f"Redis's files still hold copies: {found}. (A short id can also match unrelated bytes; "
                       "'grep -c' on those files shows where.)")
        else:
            out.append(f"Checked {len(self.checked)} file(s) of Redis's folder ({', '.join(self.checked) or 'none'}): "
                       "no copy left.")
        return out


def _wait(conn: Redis, done: Callable[[dict], bool], timeout: float, what: str) -> dict:
    """INFO persistence once ``done`` says so; PersistenceError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        info = conn.info("persistence")
        if done(info):
            return info
        if time.monotonic() > deadline:
            raise PersistenceError(f"Redis did not finish {what} within {timeout:.0f} s; it may still be at it "
                                   "(INFO persistence), so run the command again later")
        time.sleep(POLL_SECONDS)


def _idle(info: dict) -> bool:
    return not (int(info.get("aof_rewrite_in_progress", 0)) or int(info.get("aof_rewrite_scheduled", 0))
                or int(info.get("rdb_bgsave_in_progress", 0)))


def _ask_when_idle(conn: Redis, ask: Callable[[], object], timeout: float, refused: str, doing: str) -> dict:
    """Wait out any background write already running (it began before the deletion and would write the
    deleted data again), ask for a new one (``ask``), and wait for it to end; returns Redis's INFO then."""
    while True:
        _wait(conn, _idle, timeout, "a background write it had begun")
        try:
            ask()
            break
        except redis.ResponseError as exc:
            if "in progress" not in str(exc):
                raise PersistenceError(f"Redis refused to {refused}: {exc}") from None
    return _wait(conn, _idle, timeout, doing)


def rewrite_aof(conn: Redis, timeout: float = DEFAULT_TIMEOUT) -> None:
    """BGREWRITEAOF and wait for it to end. A rewrite (or snapshot) already running began before the
    deletion and would write the deleted data again, so it is waited out and a new one asked for."""
    info = _ask_when_idle(conn, conn.bgrewriteaof, timeout, "rewrite its append-only file",
                          "rewriting its append-only file")
    if info.get("aof_last_bgrewrite_status") != "ok":
        raise PersistenceError("Redis's rewrite of its append-only file failed (aof_last_bgrewrite_status: "
                               f"{info.get('aof_last_bgrewrite_status')}); its log says why")


def replace_snapshot(conn: Redis, timeout: float = DEFAULT_TIMEOUT) -> None:
    """BGSAVE after the deletion and wait for it: the RDB file then holds only what Redis holds now."""
    asked_at = int(conn.time()[0])
    info = _ask_when_idle(conn, conn.bgsave, timeout, "write a new snapshot", "writing its snapshot")
    if info.get("rdb_last_bgsave_status") != "ok" or int(info.get("rdb_last_save_time", 0)) < asked_at:
        raise PersistenceError(f"Redis's snapshot failed (rdb_last_bgsave_status: {info.get('rdb_last_bgsave_status')})"
                               "; its log says why")


def _config(conn: Redis, *names: str) -> dict[str, str] | None:
    try:
        found = {}
        for name in names:
            found.update(conn.config_get(name))
        return {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
                for k, v in found.items()}
    except redis.ResponseError:  # a managed Redis often refuses CONFIG
        return None


def local_folder(conn: Redis, config: dict[str, str] | None) -> tuple[Path | None, str | None]:
    """(Redis's folder, None) when its files can be read from this machine, else (None, why not)."""
    if config is None:
        return None, "Redis refused CONFIG GET, so where it keeps its files is unknown"
    kwargs = conn.connection_pool.connection_kwargs
    host = kwargs.get("host")
    if not kwargs.get("path") and host not in LOOPBACK:
        return None, f"Redis runs on {host}, so its files are on that machine"
    folder = Path(config.get("dir", ""))
    if not folder.is_dir():
        return None, f"Redis's folder {folder} is not on this machine (a container or another user's)"
    return folder, None


def redis_files(folder: Path, config: dict[str, str]) -> list[Path]:
    """Redis's data files in ``folder``: the AOF (one file, or Redis 7's folder of base and incremental files
    with its manifest) and the RDB snapshot, those that exist."""
    found = []
    for name in (config.get("appendfilename"), config.get("dbfilename")):
        if name and (folder / name).is_file():
            found.append(folder / name)
    if config.get("appenddirname") and (folder / config["appenddirname"]).is_dir():
        found += sorted(p for p in (folder / config["appenddirname"]).iterdir() if p.is_file())
    return found


def count_copies(path: Path, needles: Iterable[bytes]) -> int:
    """How many times any of ``needles`` occurs in the file (0 for a file gone meanwhile)."""
    try:
        with path.open("rb") as fh:
            if path.stat().st_size == 0:
                return 0
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
                total = 0
                for needle in needles:
                    start = data.find(needle)
                    while start != -1:
                        total += 1
                        start = data.find(needle, start + 1)
                return total
    except FileNotFoundError:
        return 0


def _copies(folder: Path, config: dict[str, str], needles: list[bytes]) -> tuple[list[Path], dict[str, int]]:
    files = redis_files(folder, config)
    copies = {str(p.relative_to(folder)): n for p in files if (n := count_copies(p, needles))}
    return files, copies


def rewrite_files(conn: Redis, needles: Iterable[str | bytes] = (), timeout: float = DEFAULT_TIMEOUT) -> FilesReport:
    """Make Redis's files hold only what Redis holds now: rewrite the AOF, replace an RDB snapshot, and
    count the copies of ``needles`` left in the files where they can be read from here.

    While it asks, Redis's compression of stored strings (``rdbcompression``) is off, so every value in
    the rewritten files can be read by the check; the setting is put back afterwards. Redis 7 deletes the
    files a rewrite replaced a moment after it ends; the check waits for that (up to ``timeout``)."""
    wanted = [n.encode() if isinstance(n, str) else n for n in needles if n]
    config = _config(conn, "dir", "appendonly", "appendfilename", "appenddirname", "dbfilename", "save",
                     "rdbcompression")
    folder, unverified = local_folder(conn, config)
    info = conn.info("persistence")
    aof = bool(int(info.get("aof_enabled", 0)))
    rdb_file = folder is not None and bool(config.get("dbfilename")) and (folder / config["dbfilename"]).is_file()
    snapshots = rdb_file or bool(config and config.get("save")) or (config is None and not aof)
    asked: list[str] = []
    compression = config.get("rdbcompression") if config else None
    if folder is not None and compression == "yes":
        try:
            conn.config_set("rdbcompression", "no")
        except redis.ResponseError:  # CONFIG SET refused: values stored compressed may hide from the check
            compression = None
            unverified = "Redis refused CONFIG SET rdbcompression, so values it stores compressed cannot be read"
            folder = None
    try:
        if aof:
            rewrite_aof(conn, timeout)
            asked.append("rewrite its append-only file from what it holds now (BGREWRITEAOF)")
        if snapshots:
            replace_snapshot(conn, timeout)
            asked.append("replace its snapshot with one taken now (BGSAVE)")
    finally:
        if folder is not None and compression == "yes":
            conn.config_set("rdbcompression", compression)
    if folder is None:
        return FilesReport(tuple(asked), aof, aof, bool(snapshots), unverified=unverified)
    if not wanted:
        return FilesReport(tuple(asked), aof, aof, bool(snapshots))
    deadline = time.monotonic() + timeout
    while True:
        files, copies = _copies(folder, config, wanted)
        # only a file a rewrite replaced (Redis 7 deletes it in the background) is worth waiting for
        leftover = [name for name in copies if _replaced_by_rewrite(folder, config, name)]
        if not leftover or time.monotonic() > deadline:
            break
        time.sleep(POLL_SECONDS)
    return FilesReport(tuple(asked), aof, aof, bool(snapshots), tuple(str(p.relative_to(folder)) for p in files),
                       copies)


def _replaced_by_rewrite(folder: Path, config: dict[str, str], name: str) -> bool:
    """Whether ``name`` is one of Redis 7's AOF files that its manifest no longer lists as in use."""
    dirname = config.get("appenddirname")
    if not dirname or not name.startswith(dirname + "/"):
        return False
    manifests = sorted((folder / dirname).glob("*.manifest"))
    if not manifests:
        return False
    in_use = set()
    for line in manifests[0].read_text(errors="replace").splitlines():
        parts = line.split()
        if "file" in parts and "type" in parts and parts[parts.index("type") + 1] in ("b", "i"):
            in_use.add(parts[parts.index("file") + 1])
    base = name.split("/", 1)[1]
    return base not in in_use and not base.endswith(".manifest")
