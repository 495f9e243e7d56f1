"""Who a rater request comes from: the rater id kept in the browser session, or a new anonymous one
counted against the study's cap of anonymous sessions per client address. The rater pages, the JSON
API and the rate limits all ask this one module; it must never import the engine's numpy code."""
from __future__ import annotations

import secrets
from typing import TYPE_CHECKING

from flask import request, session

from workers.store import keys

from .errors import ApiError
from .questions_answers import load_study

if TYPE_CHECKING:
    from redis import Redis

    from workers.store.studies import Study


ANONYMOUS_CAP_MESSAGE = ("too many anonymous sessions of this study were opened from your network address in "
                         "the last hour; open the study link you were given (with your participant id) or try later")


def current_rater() -> str:
    """The rater id of this browser session, minting an anonymous one on first use."""
    rater = session.get("rater_id")
    if not rater:
        rater = f"anon-{secrets.token_hex(8)}"
        session["rater_id"] = rater
    return rater


def request_rater(conn: Redis, study_id: str) -> str:
    """The rater id of a question or answer request: the session's, or a new anonymous one counted
    against the study's anonymous-session cap exactly as the study page counts it, so a client that
    skips the page (or drops its cookie) opens no more sessions; ApiError 429 over the cap."""
    rater = session.get("rater_id")
    if rater:
        return rater
    if not anonymous_session_allowed(conn, load_study(conn, study_id)):
        raise ApiError(429, "too_many_sessions", ANONYMOUS_CAP_MESSAGE, headers={"Retry-After": "3600"},
                       retry_after=3600)
    return current_rater()


def anonymous_session_allowed(conn: Redis, study: Study) -> bool:
    """Count a new anonymous rater session of this address in the study (an hour's window); False
    once the address opened the study's ``anonymous_sessions_per_address`` of them."""
    key = keys.anonymous_sessions(study.id, request.remote_addr or "unknown")
    with conn.pipeline() as pipe:
        pipe.set(key, 0, ex=3600, nx=True)  # the window starts with the first session
        pipe.incr(key)
        opened = pipe.execute()[1]
    return int(opened) <= study.config.limits.anonymous_sessions_per_address
