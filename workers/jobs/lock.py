"""The study's update lock: one writer of a study's engine states at a time (update jobs, rebuilds,
deletions). Taken over at once from a holder that died (its Redis connection is gone), so a crashed
worker does not hold the study up. Must never import Flask.
"""
from __future__ import annotations

import contextlib
import secrets
import time
from typing import TYPE_CHECKING

import redis

from workers.store import keys
from workers.store.lua import Script

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from redis import Redis


LOCK_TIMEOUT_SECONDS = 600

_SWAP = Script("lock_swap.lua")  # replace or release the lock only while it holds the value we read


def _holder_gone(conn: Redis, value: str, run_id: str) -> bool:
    """Whether the lock value names a holder whose Redis connection no longer exists.

    The value is ``<server run id>:<client id>:<nonce>``: a holder killed with SIGKILL loses its
    connection at once, and a restarted server has a new run id. Where CLIENT LIST is not
    allowed (some managed Redis), the holder counts as alive and the lock's expiry applies.
    """
    parts = value.split(":")
    if len(parts) != 3 or not parts[1].isdigit():
        return False
    if parts[0] != run_id:
        return True
    try:
        listed = conn.execute_command("CLIENT", "LIST", "ID", parts[1])
    except redis.ResponseError:
        return False
    listed = listed.decode() if isinstance(listed, bytes) else str(listed)
    return f"id={parts[1]} " not in listed


@contextlib.contextmanager
def study_lock(conn: Redis, study_id: str, timeout: float = LOCK_TIMEOUT_SECONDS,
               wait: float = LOCK_TIMEOUT_SECONDS) -> Iterator[Callable[[], None]]:
    """Hold the study's update lock: one writer of its engine states at a time.

    Waits up to ``wait`` seconds for a live holder, takes the lock over at once from a dead one
    (see ``_holder_gone``); the lock expires ``timeout`` seconds after it was last taken or
    renewed (``renew``). Correctness does not rest on the lock (the update's MULTI is guarded by
    WATCH on the cursor): it only keeps two workers from doing the same work.
    Yields a ``renew()`` callable that restarts the expiry.
    """
    key = keys.update_lock(study_id)
    ttl_ms = int(timeout * 1000)
    # a connection of our own, kept open while we hold the lock: its client id names us
    holder = redis.Redis(connection_pool=conn.connection_pool, single_connection_client=True)
    try:
        run_id = holder.info("server")["run_id"]
        value = f"{run_id}:{holder.client_id()}:{secrets.token_hex(4)}"
        deadline = time.monotonic() + wait
        while not holder.set(key, value, nx=True, px=ttl_ms):
            current = holder.get(key)
            if current is not None and _holder_gone(holder, current.decode(), run_id):
                if _SWAP(holder, keys={"lock": key}, args={"expected": current, "new_value": value, "ttl_ms": ttl_ms}):
                    break
                continue
            if time.monotonic() >= deadline:
                raise TimeoutError(f"the update lock of study {study_id} is held by another worker")
            time.sleep(0.05)

        def renew() -> None:
            _SWAP(holder, keys={"lock": key}, args={"expected": value, "new_value": value, "ttl_ms": ttl_ms})

        try:
            yield renew
        finally:
            _SWAP(holder, keys={"lock": key}, args={"expected": value, "new_value": "", "ttl_ms": 0})
    finally:
        holder.close()
