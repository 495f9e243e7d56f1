"""Researcher API tokens: a program (``proxima.connect``, curl, R) reads studies without a browser login.

A token is ``prx_<id>_<secret>``: the id names the stored record, the secret is 256 random bits that
are shown once and kept only as their SHA-256 (a hash of a random secret needs no slow password hash:
nothing can be guessed). Each token acts for the account that made it, reads one study or every
study, and only a read-write token may change anything. Used by the web app and the CLI; must never
import Flask. Keys: ``keys.api_token``, ``keys.api_tokens`` (not per study: no ``{hash tag}``).
"""
from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time

import redis

from workers.store import keys

PREFIX = "prx"
ACCESS = ("read", "write")
MAX_NAME_LENGTH = 80
MAX_EXPIRES_DAYS = 3650
_TOKEN_PATTERN = re.compile(r"^prx_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$")
_FIELDS = ("owner", "name", "study", "access", "created_at", "last_used_at")


class TokenError(ValueError):
    """A token that cannot be made or revoked; the message says why in a researcher's words."""


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _record(token_id: str, raw: dict) -> dict:
    f = {k.decode(): v.decode() for k, v in raw.items()}
    last, expires = f.get("last_used_at"), f.get("expires_at")
    return {"id": token_id, "owner": f.get("owner", ""), "name": f.get("name", ""), "study": f.get("study") or None,
            "access": f.get("access", "read"), "created_at": float(f.get("created_at") or 0),
            "last_used_at": float(last) if last else None, "expires_at": float(expires) if expires else None}


def create_token(conn: redis.Redis, owner: str, name: str, study: str | None = None, access: str = "read",
                 expires_days: int | None = None) -> tuple[str, dict]:
    """A new token for account ``owner``: (the token, to show once; its record). ``study`` None: every study;
    ``expires_days`` None: until revoked."""
    name = " ".join((name or "").split())
    if not name:
        raise TokenError("give the token a name that says what it is for (e.g. 'laptop analysis')")
    if len(name) > MAX_NAME_LENGTH:
        raise TokenError(f"a token's name has at most {MAX_NAME_LENGTH} characters")
    if access not in ACCESS:
        raise TokenError(f"a token's access is 'read' (read-only) or 'write' (read-write), not {access!r}")
    if expires_days is not None and not 1 <= int(expires_days) <= MAX_EXPIRES_DAYS:
        raise TokenError(f"a token expires after 1 to {MAX_EXPIRES_DAYS} days, not {expires_days}")
    if not conn.exists(keys.user(owner)):
        raise TokenError(f"there is no account {owner!r}")
    if study is not None and not conn.sismember(keys.studies(), study):
        raise TokenError(f"there is no study {study!r}; a token is for one existing study or for every study")
    token_id, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
    record = {"secret_hash": _digest(secret), "owner": owner, "name": name, "study": study or "", "access": access,
              "created_at": f"{time.time():.3f}"}
    if expires_days is not None:
        record["expires_at"] = f"{time.time() + int(expires_days) * 86400:.3f}"
    with conn.pipeline() as pipe:
        pipe.hset(keys.api_token(token_id), mapping=record)
        pipe.sadd(keys.api_tokens(), token_id)
        pipe.execute()
    return f"{PREFIX}_{token_id}_{secret}", _record(token_id, {k.encode(): v.encode() for k, v in record.items()})


def list_tokens(conn: redis.Redis, owner: str | None = None) -> list[dict]:
    """Every token (of ``owner`` if given), newest first, without secrets."""
    ids = sorted(t.decode() for t in conn.smembers(keys.api_tokens()))
    with conn.pipeline(transaction=False) as pipe:
        for token_id in ids:
            pipe.hgetall(keys.api_token(token_id))
        raws = pipe.execute()
    records = [_record(token_id, raw) for token_id, raw in zip(ids, raws, strict=True) if raw]
    return sorted((r for r in records if owner is None or r["owner"] == owner), key=lambda r: -r["created_at"])


def revoke_token(conn: redis.Redis, token_id: str, owner: str | None = None) -> dict:
    """Delete a token (only ``owner``'s, if given); it stops working at once. Returns its record."""
    token_id = (token_id or "").strip()
    if token_id.startswith(f"{PREFIX}_"):  # the whole token pasted: its id is the second part
        token_id = token_id.split("_")[1]
    raw = conn.hgetall(keys.api_token(token_id)) if re.fullmatch(r"[0-9a-f]{12}", token_id) else {}
    record = _record(token_id, raw) if raw else None
    if record is None or (owner is not None and record["owner"] != owner):
        raise TokenError(f"there is no token {token_id!r}" + (" of yours" if owner else ""))
    with conn.pipeline() as pipe:
        pipe.delete(keys.api_token(token_id))
        pipe.srem(keys.api_tokens(), token_id)
        pipe.execute()
    return record


def verify_token(conn: redis.Redis, token: str) -> dict | None:
    """The record of a valid token (its account still exists), noting when it was used; None otherwise."""
    match = _TOKEN_PATTERN.match(token or "")
    if not match:
        return None
    token_id, secret = match.groups()
    raw = conn.hgetall(keys.api_token(token_id))
    if not raw or not hmac.compare_digest(raw.get(b"secret_hash", b"").decode(), _digest(secret)):
        return None
    record = _record(token_id, raw)
    if record["expires_at"] is not None and time.time() >= record["expires_at"]:
        return None
    if not conn.exists(keys.user(record["owner"])):  # a removed account's tokens end with it
        return None
    conn.hset(keys.api_token(token_id), "last_used_at", f"{time.time():.3f}")
    return record
