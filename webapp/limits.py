"""Request rate limits kept in Redis, so they hold across every web process: answers and question
requests per rater session and per client address, login attempts per client address.

Each limit is a token bucket in the GCRA form (one key holding the bucket's "theoretical arrival
time"): ``rate`` requests per second sustained, at most ``burst`` at once. All the buckets of one
request are checked and charged by one Lua script (one round trip), all or none. The clock is
Redis's ``TIME``, so web processes on machines with skewed clocks agree.

Keys (built in ``workers.store.keys``; the rater buckets carry the study's ``{hash tag}`` so the
script's keys share one Cluster slot): ``keys.rate_rater`` (answers + question requests of one rater
session), ``keys.rate_address`` (the same, of one client address), ``keys.rate_codes`` (completion
codes first shown to one client address), ``keys.rate_login`` (login attempts of one client address).

Must never import the engine or the workers' numpy code.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import redis
from flask import Flask, current_app, render_template, request, session

from workers.store import keys
from workers.store.lua import Script

from .errors import ApiError
from .rater_session import request_rater
from .storage import get_redis

if TYPE_CHECKING:
    from flask.typing import ResponseReturnValue


STUDY_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")

#: Endpoints that count against a rater's (and their address's) answer buckets.
RATER_ENDPOINTS = frozenset({"api.post_answer", "api.get_next_question"})
#: Endpoints that count against a rater's (and their address's) media buckets: an image a rater's page fetches
#: by handle, which in a study of copies is decoded, varied and encoded again per request
#: (``handles.varied``: ~3 ms for a 512 x 512 JPEG, 21 ms for a PNG photo, up to about a second for a 12 MP PNG,
#: benchmarks/media_variants.py), so a client looping on media URLs would take the web processes' CPU.
MEDIA_ENDPOINTS = frozenset({"raters.shown_media"})

DEFAULTS = {
    # A person answers at most one or two questions a second; the burst absorbs retries after a
    # dropped connection and several tabs. 0 switches a limit off.
    "ANSWER_RATE_PER_RATER": 5.0,
    "ANSWER_BURST_PER_RATER": 20,
    # Many raters may share one address (a class behind NAT): generous, but it stops one client
    # that mints a fresh session for every request.
    "ANSWER_RATE_PER_ADDRESS": 50.0,
    "ANSWER_BURST_PER_ADDRESS": 200,
    # Password guessing across many account names from one address (the per-account lockout in
    # ``accounts`` counts failures of one name only).
    "LOGIN_RATE_PER_ADDRESS": 0.2,
    "LOGIN_BURST_PER_ADDRESS": 20,
    # Invalid API tokens from one address (a guesser; a script with a revoked token retrying in a loop): past
    # the burst, no token from the address is checked until the bucket has room again.
    "TOKEN_FAILURE_RATE_PER_ADDRESS": 0.2,
    "TOKEN_FAILURE_BURST_PER_ADDRESS": 20,
    # Media fetched by handle: a screen shows up to 16 items (a grid) and a reload or a slow connection fetches
    # them again; a person looks at a screen for seconds. The rater's bucket holds only where the request
    # carries a rater session (a media request never opens one).
    "MEDIA_RATE_PER_RATER": 20.0,
    "MEDIA_BURST_PER_RATER": 120,
    "MEDIA_RATE_PER_ADDRESS": 200.0,
    "MEDIA_BURST_PER_ADDRESS": 1200,
    # Completion codes first shown to raters of one address in one study: a class behind NAT
    # finishes at human pace; a script minting codes does not.
    "CODE_RATE_PER_ADDRESS": 0.1,
    "CODE_BURST_PER_ADDRESS": 30,
    # Client addresses no limit applies to: none unless configured. Loopback is not exempt by
    # default: behind a reverse proxy on the same host (TRUSTED_PROXIES unset) every client would be
    # "loopback". Simulated crowds and load benchmarks exempt themselves where they need it, e.g.
    # PROXIMA_RATE_LIMIT_EXEMPT_ADDRESSES=127.0.0.1,::1 (a JSON list works too).
    "RATE_LIMIT_EXEMPT_ADDRESSES": (),
}

#: Check and charge every bucket of a request in one step: workers/store/lua/take.lua.
TAKE = Script("take.lua")


@dataclass(frozen=True)
class Bucket:
    """One limit: ``rate`` requests per second sustained, ``burst`` at once, kept under ``key``."""

    key: str
    rate: float
    burst: int
    name: str


def take(conn: redis.Redis, buckets: list[Bucket]) -> tuple[Bucket, float] | None:
    """Charge one request to every bucket, or to none: None when all had room, else the full
    bucket and the seconds until it has room again. Buckets with a rate of 0 are off."""
    buckets = [b for b in buckets if b.rate > 0 and b.burst > 0]
    if not buckets:
        return None
    args = []
    for b in buckets:
        args += [f"{1e6 / b.rate:.0f}", int(b.burst)]
    result = TAKE(conn, more_keys=[b.key for b in buckets], more_args=args)
    if not result:
        return None
    index, wait_us = int(result[0]), int(result[1])
    return buckets[index - 1], wait_us / 1e6


def retry_after(seconds: float) -> str:
    """Whole seconds for a ``Retry-After`` header (at least 1)."""
    return str(max(1, math.ceil(seconds)))


def exempt_addresses(value: str | Iterable[str] | None) -> frozenset[str]:
    """The configured exempt addresses: a list, or one string of addresses separated by commas or spaces
    (as an environment variable gives it)."""
    if not value:
        return frozenset()
    if isinstance(value, str):
        value = value.replace(",", " ").split()
    return frozenset(str(v).strip() for v in value if str(v).strip())


@lru_cache(maxsize=16)
def _exempt_set(value: str | tuple) -> frozenset[str]:
    return exempt_addresses(value)


def exempt(address: str) -> bool:
    """Whether no limit applies to ``address`` (``RATE_LIMIT_EXEMPT_ADDRESSES``, parsed once per setting)."""
    value = current_app.config["RATE_LIMIT_EXEMPT_ADDRESSES"]
    if not value:
        return False
    return address in _exempt_set(value if isinstance(value, str) else tuple(value))


def limit_rater_requests() -> None:
    """``before_request``: refuse a rater's answer or question request over their or their address's limit,
    and a media request by handle over their media limit (:data:`MEDIA_ENDPOINTS`)."""
    if request.endpoint not in RATER_ENDPOINTS and request.endpoint not in MEDIA_ENDPOINTS:
        return None
    study_id = (request.view_args or {}).get("study_id", "")
    address = request.remote_addr or "unknown"
    if not study_id or not set(study_id) <= STUDY_ID_CHARS or len(study_id) > 64:
        return None  # an unknown study is refused by the view itself
    if request.endpoint in MEDIA_ENDPOINTS:
        return _limit_media(study_id, address)
    # a session made here (no study page first) counts against the anonymous-session cap like the page's
    rater = request_rater(get_redis(), study_id)
    if exempt(address):
        return None
    config = current_app.config
    refused = take(get_redis(), [
        Bucket(keys.rate_rater(study_id, rater), float(config["ANSWER_RATE_PER_RATER"]),
               int(config["ANSWER_BURST_PER_RATER"]), "rater"),
        Bucket(keys.rate_address(study_id, address), float(config["ANSWER_RATE_PER_ADDRESS"]),
               int(config["ANSWER_BURST_PER_ADDRESS"]), "address"),
    ])
    _refuse(refused)


def _limit_media(study_id: str, address: str) -> None:
    """Charge a media request by handle to the rater session's media bucket (where the request carries one)
    and the address's; 429 over either."""
    if exempt(address):
        return None
    config = current_app.config
    buckets = [Bucket(keys.rate_media(study_id, "addr", address), float(config["MEDIA_RATE_PER_ADDRESS"]),
                      int(config["MEDIA_BURST_PER_ADDRESS"]), "address")]
    rater = session.get("rater_id")
    if rater:
        buckets.append(Bucket(keys.rate_media(study_id, "rater", rater), float(config["MEDIA_RATE_PER_RATER"]),
                              int(config["MEDIA_BURST_PER_RATER"]), "rater"))
    _refuse(take(get_redis(), buckets), "media requests")


def _refuse(refused: tuple[Bucket, float] | None, what: str = "requests") -> None:
    """Nothing when every bucket had room, else ApiError 429 naming the full bucket and when to try again."""
    if refused is None:
        return None
    bucket, wait = refused
    who = "this rater session" if bucket.name == "rater" else "your network address"
    raise ApiError(429, "rate_limited",
                   f"too many {what} from {who} (at most {bucket.rate:g} per second); "
                   f"wait {retry_after(wait)} s and send it again",
                   headers={"Retry-After": retry_after(wait)}, retry_after=int(retry_after(wait)))


def limit_code(study_id: str) -> bool:
    """Charge one completion code to the client address's bucket of the study; False when it is full."""
    address = request.remote_addr or "unknown"
    if exempt(address):
        return True
    config = current_app.config
    return take(get_redis(), [Bucket(keys.rate_codes(study_id, address), float(config["CODE_RATE_PER_ADDRESS"]),
                                     int(config["CODE_BURST_PER_ADDRESS"]), "codes")]) is None


def refuse_blocked_tokens() -> None:
    """Before an API token is checked: 429 while the client address is blocked for sending invalid tokens."""
    address = request.remote_addr or "unknown"
    if exempt(address):
        return
    wait = get_redis().pttl(keys.token_blocked(address))
    if wait and wait > 0:
        _refuse_tokens(wait / 1000.0)


def charge_invalid_token() -> None:
    """After an invalid API token: charge the client address; past its burst, block it and refuse (429)."""
    address = request.remote_addr or "unknown"
    if exempt(address):
        return
    config = current_app.config
    conn = get_redis()
    refused = take(conn, [Bucket(keys.rate_token_failures(address), float(config["TOKEN_FAILURE_RATE_PER_ADDRESS"]),
                                 int(config["TOKEN_FAILURE_BURST_PER_ADDRESS"]), "tokens")])
    if refused is not None:
        conn.set(keys.token_blocked(address), "1", px=max(1, int(1000 * refused[1])))
        _refuse_tokens(refused[1])


def _refuse_tokens(seconds: float) -> None:
    wait = retry_after(seconds)
    raise ApiError(429, "too_many_invalid_tokens",
                   f"too many invalid API tokens were sent from your address; no token from it is checked for "
                   f"{wait} s: check the token (the dashboard's account page lists yours) and try again then",
                   headers={"Retry-After": wait}, retry_after=int(wait))


def limit_logins() -> ResponseReturnValue | None:
    """``before_request``: refuse login attempts from an address over its limit (429, the login page)."""
    if request.endpoint != "auth.login" or request.method != "POST":
        return None
    address = request.remote_addr or "unknown"
    if exempt(address):
        return None
    config = current_app.config
    refused = take(get_redis(), [Bucket(keys.rate_login(address), float(config["LOGIN_RATE_PER_ADDRESS"]),
                                        int(config["LOGIN_BURST_PER_ADDRESS"]), "login")])
    if refused is None:
        return None
    wait = retry_after(refused[1])
    error = f"Too many login attempts from your address. Wait {wait} seconds and try again."
    return render_template("auth/login.html", next_url="/", username="", error=error), 429, {"Retry-After": wait}


def init_app(app: Flask) -> None:
    """Register the limits; call before the CSRF check so a flood is refused before any other work.
    The defaults are in ``DEFAULTS`` (``create_app`` loads them before the config file and environment)."""
    for name, value in DEFAULTS.items():
        app.config.setdefault(name, value)
    app.before_request(limit_rater_requests)
    app.before_request(limit_logins)
