"""How a ``proxima`` command finds the instance folder and reaches Redis, and says which it acts on.

The instance folder is ``--instance PATH`` (on the ``proxima`` group, so every command has it), else
PROXIMA_INSTANCE_PATH, else ``instance/`` beside the code. Without ``REDIS_URL`` the commands use the
instance folder's embedded Redis: the one a running ``proxima serve`` started, or a temporary one started
for the command; a temporary one is refused when the folder was not named and a ``proxima serve`` runs
for another folder (the command would act on a Redis no server reads). Never imports Flask.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import click
import redis

from .. import ROOT
from .embedded import EmbeddedRedis, EmbeddedRedisError, running_url
from .supervise import LOCK_FILE

if TYPE_CHECKING:
    from redis import Redis

#: The environment variable naming the instance folder (``--instance`` sets it for the command and its children).
INSTANCE_VARIABLE = "PROXIMA_INSTANCE_PATH"


def instance_path() -> Path:
    return Path(os.environ.get(INSTANCE_VARIABLE) or ROOT / "instance")


def instance_named() -> bool:
    """Whether the instance folder was named (``--instance`` or PROXIMA_INSTANCE_PATH), not the default."""
    return bool(os.environ.get(INSTANCE_VARIABLE))


def use_instance(path: Path | None) -> None:
    """``--instance PATH``: the command and every process it starts use this instance folder."""
    if path is not None:
        os.environ[INSTANCE_VARIABLE] = str(Path(path).expanduser().resolve())


def say(line: str) -> None:
    """What a command acts on, on standard error (a piped export stays clean)."""
    click.echo(line, err=True)


def describe_url(url: str) -> str:
    """A Redis URL without its password: ``redis://host:port/db``."""
    parts = urlsplit(url)
    host = parts.hostname or "localhost"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path or ''}"


@dataclass(frozen=True)
class RunningServe:
    """A live ``proxima serve``: its pid and the instance folder whose lock it holds."""

    pid: int
    instance: Path


def running_serves() -> list[RunningServe]:
    """Every ``proxima serve`` of this user running on this machine, found by the lock each holds on its
    instance folder's ``serve.lock`` (the kernel's table of file locks, /proc/locks; Linux). Empty where
    that cannot be read."""
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return []
    held: dict[int, set[int]] = {}  # pid -> inodes it holds a flock on
    for line in lines:
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[4].isdigit():
            held.setdefault(int(fields[4]), set()).add(int(fields[5].rsplit(":", 1)[-1]))
    found = []
    for pid, inodes in sorted(held.items()):
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue  # another user's process, or gone
        for fd in fds:
            try:
                target = Path(os.readlink(fd))
                if target.name == LOCK_FILE and target.stat().st_ino in inodes:
                    found.append(RunningServe(pid, target.parent))
            except OSError:
                continue
    return found


#: The web server's base URL, written by ``proxima serve`` into its instance folder beside its lock.
WEB_URL_FILE = "web.url"


def running_web_url(inst: Path) -> str | None:
    """The base URL of the web server of the ``proxima serve`` running for ``inst``, None when no serve holds
    that folder's lock (a file left by a serve that stopped is not trusted)."""
    if not any(s.instance.resolve() == Path(inst).resolve() for s in running_serves()):
        return None
    try:
        return (Path(inst) / WEB_URL_FILE).read_text().strip() or None
    except OSError:
        return None


def redis_url_of_serve(doing: str) -> str:
    """REDIS_URL, else the Redis of the running 'proxima serve' of the instance folder (commands that never
    start a Redis of their own: worker, sweep); says which."""
    inst = instance_path()
    url = os.environ.get("REDIS_URL")
    if url:
        say(f"Redis: {describe_url(url)} (REDIS_URL)")
        return url
    url = running_url(inst)
    if not url:
        raise click.ClickException(f"no Redis to {doing}: no 'proxima serve' runs for the instance folder {inst}; "
                                   "set REDIS_URL, give --instance PATH (the folder of the running serve), or "
                                   "start 'proxima serve' first")
    say(f"Redis: the running 'proxima serve' of instance folder {inst}")
    return url


def refuse_beside_other_serves(inst: Path, would: str = "start a private Redis in") -> None:
    """Refuse to act on the default instance folder (a private Redis there, its secret key) while a serve runs
    for another folder: the researcher almost surely meant that server's."""
    if instance_named():
        return
    others = [s for s in running_serves() if s.instance.resolve() != inst.resolve()]
    if others:
        where = "; ".join(f"pid {s.pid} for {s.instance}" for s in others)
        first = others[0].instance
        raise click.ClickException(
            f"no instance folder was named, and a 'proxima serve' is running for another one ({where}). This "
            f"command would {would} {inst}, which that server never reads. Say which: "
            f"'proxima --instance {first} ...' (or PROXIMA_INSTANCE_PATH={first}) for that server's studies, or "
            f"'proxima --instance {inst} ...' to use the folder beside the code anyway.")


@contextlib.contextmanager
def redis_connection() -> Redis:
    """A Redis client: REDIS_URL, else the running embedded server, else a temporary one; says which."""
    inst = instance_path()
    url = os.environ.get("REDIS_URL")
    if url:
        say(f"Redis: {describe_url(url)} (REDIS_URL)")
    else:
        url = running_url(inst)
        if url:
            say(f"Redis: the running 'proxima serve' of instance folder {inst}")
    if url:
        conn = redis.Redis.from_url(url)
        try:
            conn.ping()
        except (redis.RedisError, OSError) as exc:
            raise click.ClickException(f"cannot reach Redis at {describe_url(url)}: {exc}") from None
        yield conn
        return
    refuse_beside_other_serves(inst)
    say(f"Redis: a private one for this command, on instance folder {inst} (no 'proxima serve' runs for it)")
    server = EmbeddedRedis(inst)
    try:
        url = server.start()
    except EmbeddedRedisError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        yield redis.Redis.from_url(url)
    finally:
        server.stop()
