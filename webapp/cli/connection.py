"""How a ``proxima`` command finds the instance folder and reaches Redis.

Without ``REDIS_URL`` the commands use the instance folder's embedded Redis: the one a running
``proxima serve`` started, or a temporary one started for the command. Never imports Flask.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

import click
import redis

from .. import ROOT
from .embedded import EmbeddedRedis, EmbeddedRedisError, running_url

if TYPE_CHECKING:
    from redis import Redis



def instance_path() -> Path:
    return Path(os.environ.get("PROXIMA_INSTANCE_PATH") or ROOT / "instance")


@contextlib.contextmanager
def redis_connection() -> Redis:
    """A Redis client: REDIS_URL, else the running embedded server, else a temporary one."""
    url = os.environ.get("REDIS_URL") or running_url(instance_path())
    if url:
        conn = redis.Redis.from_url(url)
        try:
            conn.ping()
        except (redis.RedisError, OSError) as exc:
            raise click.ClickException(f"cannot reach Redis at REDIS_URL: {exc}") from None
        yield conn
        return
    server = EmbeddedRedis(instance_path())
    try:
        url = server.start()
    except EmbeddedRedisError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        yield redis.Redis.from_url(url)
    finally:
        server.stop()
