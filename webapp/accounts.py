"""Researcher accounts, researcher login sessions and failed-login counters in Redis.

Passwords are hashed with werkzeug's ``generate_password_hash`` (scrypt); nothing here
stores or logs a password. Used by the web app and the CLI; must never import Flask.
The keys (``keys.user``, ``keys.users``, ``keys.login_failures``, ``keys.researcher_session``)
are not per study, so they carry no ``{hash tag}``; every script and transaction here touches one key.
"""
from __future__ import annotations

import re
import secrets
import time

import redis
from werkzeug.security import check_password_hash, generate_password_hash

from workers.store import keys
from workers.store.lua import Script

FIRST_ACCOUNT = "admin"
MIN_PASSWORD_LENGTH = 10
MAX_PASSWORD_LENGTH = 1024
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_.@-]{0,63}$")


#: The account keys by the names the CLI knows them (built in ``workers.store.keys``).
user_key, users_key, login_failures_key = keys.user, keys.users, keys.login_failures


class AccountError(ValueError):
    """A bad account name or password, an existing or unknown account; the message says which."""


def normalize_name(name: str) -> str:
    return (name or "").strip().lower()


def check_name(name: str) -> str:
    name = normalize_name(name)
    if not NAME_PATTERN.match(name):
        raise AccountError(f"account name {name!r} is not valid: use 1-64 letters, digits, '_', '.', '@' or '-', "
                           "starting with a letter or digit")
    return name


def check_password(password: str) -> str:
    if len(password) < MIN_PASSWORD_LENGTH:
        raise AccountError(f"the password is too weak: use at least {MIN_PASSWORD_LENGTH} characters")
    if len(password) > MAX_PASSWORD_LENGTH:
        raise AccountError(f"the password is too long: use at most {MAX_PASSWORD_LENGTH} characters")
    return password


def generate_password() -> str:
    """A random password of about 120 bits, easy to copy from a terminal, never starting with "-" (given on a
    command line, one that did was read as an option)."""
    while True:
        password = secrets.token_urlsafe(15)
        if not password.startswith("-"):
            return password


CREATE = Script("account_create.lua")
SET_PASSWORD = Script("account_set_password.lua")
CLAIM_ATTEMPT = Script("login_attempt.lua")


def create_user(conn: redis.Redis, name: str, password: str) -> str:
    """Create an account; returns its normalized name. AccountError if it exists or the input is bad."""
    name = check_name(name)
    password_hash = generate_password_hash(check_password(password))
    if not CREATE(conn, keys={"user": user_key(name)},
                  args={"password_hash": password_hash, "epoch": secrets.token_hex(8), "now": f"{time.time():.3f}"}):
        raise AccountError(f"account {name!r} already exists (change its password with 'proxima user passwd {name}')")
    conn.sadd(users_key(), name)
    return name


def remove_user(conn: redis.Redis, name: str) -> None:
    name = normalize_name(name)
    # the hash is what logins read: deleting it first locks the account out at once
    if not conn.delete(user_key(name)):
        conn.srem(users_key(), name)
        raise AccountError(f"there is no account {name!r}")
    conn.srem(users_key(), name)


def set_password(conn: redis.Redis, name: str, password: str) -> None:
    """Change the password and log out every session of the account (a new epoch)."""
    name = normalize_name(name)
    password_hash = generate_password_hash(check_password(password))
    args = {"password_hash": password_hash, "epoch": secrets.token_hex(8), "now": f"{time.time():.3f}"}
    if not SET_PASSWORD(conn, keys={"user": user_key(name)}, args=args):
        raise AccountError(f"there is no account {name!r}")


def list_users(conn: redis.Redis) -> list[dict]:
    """Every account as {"name", "created_at"}, sorted by name."""
    names = sorted(n.decode() for n in conn.smembers(users_key()))
    with conn.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.hget(user_key(name), "created_at")
        created = pipe.execute()
    return [{"name": name, "created_at": float(c) if c else None}
            for name, c in zip(names, created, strict=True) if c is not None]


def count_users(conn: redis.Redis) -> int:
    return int(conn.scard(users_key()))


# A hash of a random password: checked when the account does not exist, so a login for an
# unknown name takes as long as one with a wrong password and reveals nothing.
_DUMMY_HASH: list[str] = []


def _dummy_hash() -> str:
    if not _DUMMY_HASH:
        _DUMMY_HASH.append(generate_password_hash(secrets.token_hex(16)))
    return _DUMMY_HASH[0]


def verify_password(conn: redis.Redis, name: str, password: str) -> str | None:
    """The account's session epoch if ``password`` is right, else None (unknown or wrong alike)."""
    name = normalize_name(name)
    password_hash, epoch = (None, None)
    if NAME_PATTERN.match(name):
        password_hash, epoch = conn.hmget(user_key(name), ["password_hash", "epoch"])
    if password_hash is None or len(password) > MAX_PASSWORD_LENGTH:
        check_password_hash(_dummy_hash(), password[:MAX_PASSWORD_LENGTH])
        return None
    if not check_password_hash(password_hash.decode(), password):
        return None
    return epoch.decode() if epoch else ""


def session_epoch(conn: redis.Redis, name: str) -> str | None:
    """The account's current epoch (None if it no longer exists); a session whose epoch differs is stale."""
    epoch = conn.hget(user_key(normalize_name(name)), "epoch")
    return epoch.decode() if epoch is not None else None


def ensure_first_account(conn: redis.Redis) -> str | None:
    """On an instance with no accounts, create ``admin`` with a random password and return it (else None)."""
    if count_users(conn):
        return None
    password = generate_password()
    try:
        create_user(conn, FIRST_ACCOUNT, password)
    except AccountError:  # another process created it first (or an orphaned hash exists)
        return None
    return password


def login_blocked_for(conn: redis.Redis, name: str, ip: str, limit: int) -> int:
    """Seconds until this (name, address) may try again, or 0 if it has fewer than ``limit`` failures."""
    key = login_failures_key(normalize_name(name), ip)
    with conn.pipeline(transaction=False) as pipe:
        pipe.get(key)
        pipe.ttl(key)
        failures, ttl = pipe.execute()
    if failures is None or int(failures) < limit:
        return 0
    return max(int(ttl), 1)


def record_login_failure(conn: redis.Redis, name: str, ip: str, window_seconds: int) -> int:
    """Count one failed login; the window starts at the first failure. Returns the count."""
    key = login_failures_key(normalize_name(name), ip)
    with conn.pipeline() as pipe:
        pipe.set(key, 0, ex=window_seconds, nx=True)
        pipe.incr(key)  # INCR keeps the TTL set above
        _, count = pipe.execute()
    return int(count)


def clear_login_failures(conn: redis.Redis, name: str, ip: str) -> None:
    conn.delete(login_failures_key(normalize_name(name), ip))


def claim_login_attempt(conn: redis.Redis, name: str, ip: str, limit: int, window_seconds: int) -> int:
    """Reserve one password check for this (name, address): 0 when allowed (counted as a failure
    until ``clear_login_failures`` on success), else the seconds until it may try again."""
    key = login_failures_key(normalize_name(name), ip)
    return int(CLAIM_ATTEMPT(conn, keys={"failures": key}, args={"limit": int(limit), "window": int(window_seconds)}))


session_key = keys.researcher_session


def start_session(conn: redis.Redis, name: str, idle_seconds: int) -> str:
    """Record a researcher login server-side; the returned id goes into the signed cookie."""
    session_id = secrets.token_urlsafe(24)
    key = session_key(session_id)
    with conn.pipeline() as pipe:
        pipe.hset(key, mapping={"name": normalize_name(name), "login_at": f"{time.time():.3f}"})
        pipe.expire(key, int(idle_seconds))
        pipe.execute()
    return session_id


def session_owner(conn: redis.Redis, session_id: str, idle_seconds: int, lifetime_seconds: int) -> str | None:
    """The account name of a live login, extending its idle timeout; None once it was ended (logout,
    idle too long, older than ``lifetime_seconds``)."""
    if not isinstance(session_id, str) or not session_id:
        return None
    key = session_key(session_id)
    with conn.pipeline() as pipe:
        pipe.hmget(key, ["name", "login_at"])
        pipe.expire(key, int(idle_seconds))
        (name, login_at), _ = pipe.execute()
    if name is None or login_at is None or time.time() - float(login_at) > lifetime_seconds:
        conn.delete(key)
        return None
    return name.decode()


def end_session(conn: redis.Redis, session_id: object) -> None:
    if isinstance(session_id, str) and session_id:
        conn.delete(session_key(session_id))
