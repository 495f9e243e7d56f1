"""Researcher login: the login/logout pages, the app-wide login check, CSRF protection.

Default deny: every endpoint requires a logged-in researcher unless it is listed below as
public (rater pages, media, static files, login, health and the two rater API routes), so
a route someone adds later is protected without a decorator. Accounts live in Redis
(``accounts``); the login is kept in Flask's signed session cookie. A program reaches the JSON
API (``/api/``) with a researcher API token instead (``Authorization: Bearer <token>``,
``api_tokens``): no cookie and no CSRF token, since a browser never sends the header on its own.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from flask import Blueprint, Flask, current_app, flash, g, jsonify, redirect, render_template, request, session, url_for
from flask.sessions import SecureCookieSessionInterface
from flask_wtf.csrf import CSRFError
from flask_wtf.csrf import CSRFProtect as _CSRFProtect

from . import accounts, api_tokens, limits
from .errors import ApiError
from .storage import get_redis

if TYPE_CHECKING:
    from flask.typing import ResponseReturnValue


bp = Blueprint("auth", __name__)


class CSRFProtect(_CSRFProtect):
    """Flask-WTF's CSRF check, skipped for a request authenticated by an API token: a cross-site page
    can make a browser send cookies, never an ``Authorization`` header, so such a request is no forgery."""

    def protect(self, *args: Any, **kwargs: Any) -> None:
        if g.get("api_token") is not None:
            return None
        return super().protect(*args, **kwargs)


csrf = CSRFProtect()
#: Methods a read-only API token may use.
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: POST routes that change no study, which a read-only API token may use too: building the data package.
READ_POST_ENDPOINTS = frozenset({"researcher_api.post_package_build"})

# Blueprints whose every route is for raters or anonymous visitors. Nothing on them may
# show researcher data (tests/test_auth.py checks the rater pages and the URL map).
PUBLIC_BLUEPRINTS = frozenset({"raters", "auth"})
# Single public endpoints on otherwise protected blueprints.
PUBLIC_ENDPOINTS = frozenset({"static", "api.health", "api.get_next_question", "api.post_answer",
                              "metrics.metrics"})  # /metrics does its own check (researcher, token or address)
# Rater routes exempt from CSRF. An answer is only accepted with a question token that
# the server signed for this rater session and that is used once; a cross-site page
# cannot read such a token (the question is fetched with a same-origin GET), so a forged
# cross-site POST has nothing valid to send. Raters never have a CSRF token to send.
# A preview answer (researcher-only) writes nothing, so there is nothing for a forged request to change.
CSRF_EXEMPT_ENDPOINTS = ("api.post_answer", "preview.answer")

SESSION_KEYS = ("researcher", "researcher_epoch", "login_at", "researcher_session")


class SessionInterface(SecureCookieSessionInterface):
    """Flask's signed-cookie session, with ``SESSION_COOKIE_SECURE = "auto"``: Secure over https."""

    def get_cookie_secure(self, app: Flask) -> bool:
        secure = app.config["SESSION_COOKIE_SECURE"]
        if secure == "auto":
            return request.is_secure
        return bool(secure)


def is_public(endpoint: str) -> bool:
    blueprint, dot, _ = endpoint.partition(".")
    return endpoint in PUBLIC_ENDPOINTS or (bool(dot) and blueprint in PUBLIC_BLUEPRINTS)


def current_researcher() -> str | None:
    """The logged-in researcher's account name, or None. A changed password, a removed account
    or an expired login ends the session."""
    if "researcher" in g:
        return g.researcher
    g.researcher = None
    name = session.get("researcher")
    if name:
        login_at = session.get("login_at") or 0
        config, conn = current_app.config, get_redis()
        max_age = config["LOGIN_SESSION_SECONDS"]
        epoch = accounts.session_epoch(conn, name)
        # the server-side record ends with logout, the idle timeout or the lifetime, whatever the cookie says
        owner = accounts.session_owner(conn, session.get("researcher_session"), config["LOGIN_IDLE_SECONDS"],
                                       max_age)
        if (time.time() - login_at <= max_age and epoch is not None and epoch == session.get("researcher_epoch")
                and owner == name):
            g.researcher = name
        else:
            for key in SESSION_KEYS:
                session.pop(key, None)
    return g.researcher


def safe_next(target: str | None) -> str:
    """``target`` if it is a path on this site, else the dashboard (no open redirects)."""
    fallback = url_for("dashboard.index")
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return fallback
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in target):  # browsers drop tabs/newlines: "/\t/evil"
        return fallback
    parts = urlsplit(target)
    if parts.scheme or parts.netloc:
        return fallback
    return target


def require_login() -> ResponseReturnValue | None:
    """``before_request`` for the whole app: refuse researcher endpoints to anonymous clients."""
    endpoint = request.endpoint
    if endpoint is None or is_public(endpoint):
        return None  # unknown URLs go on to their 404/405
    if request.path.startswith("/api/") and bearer_token() is not None:
        token_login()
        return None
    if current_researcher():
        return None
    if request.path.startswith("/api/"):
        raise ApiError(401, "login_required", "log in as a researcher to use this route (POST /login)")
    target = request.full_path.rstrip("?") if request.method in ("GET", "HEAD") else None
    return redirect(url_for("auth.login", next=target))


def bearer_token() -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None without one."""
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" else None


def token_login() -> None:
    """Authenticate this API request by its bearer token, or refuse it (401/403, in words): the token must
    be valid, cover the study in the URL, and be read-write for anything but reading."""
    limits.refuse_blocked_tokens()
    record = api_tokens.verify_token(get_redis(), bearer_token() or "")
    if record is None:
        limits.charge_invalid_token()  # a guesser is refused (429) past its burst
        raise ApiError(401, "invalid_api_token",
                       "this API token is not valid: it was mistyped, revoked or has expired, or its account was "
                       "removed; "
                       "make a new one on the dashboard's account page or with 'proxima token create'",
                       headers={"WWW-Authenticate": 'Bearer realm="proxima"'})
    study = (request.view_args or {}).get("study_id")
    if record["study"] and study is not None and study != record["study"]:
        raise ApiError(403, "token_not_for_study",
                       f"this API token reads only study '{record['study']}', not '{study}'; "
                       "make a token for every study or for this one")
    if (record["access"] != "write" and request.method not in READ_METHODS
            and request.endpoint not in READ_POST_ENDPOINTS):
        raise ApiError(403, "read_only_token",
                       "this API token is read-only; changing a study needs a read-write token")
    g.researcher = record["owner"]
    g.api_token = record


def token_study() -> str | None:
    """The one study this request's API token is limited to (None: a login, or a token for every study)."""
    record = g.get("api_token")
    return record["study"] if record else None


def client_address() -> str:
    return request.remote_addr or "unknown"


@bp.route("/login", methods=["GET", "POST"])
def login() -> ResponseReturnValue:
    next_url = safe_next(request.values.get("next"))
    if request.method == "GET":
        if current_researcher():
            return redirect(next_url)
        return render_template("auth/login.html", next_url=next_url, username="")
    name = accounts.normalize_name(request.form.get("username", ""))
    password = request.form.get("password", "")
    conn, ip, config = get_redis(), client_address(), current_app.config
    wait = accounts.claim_login_attempt(conn, name, ip, config["LOGIN_MAX_FAILURES"],
                                        config["LOGIN_FAILURE_WINDOW_SECONDS"])
    if wait:
        minutes = -(-wait // 60)
        error = (f"Too many failed logins for this account from your address. "
                 f"Wait {minutes} minute{'s' if minutes != 1 else ''} and try again.")
        return render_template("auth/login.html", next_url=next_url, username=name, error=error), 429
    epoch = accounts.verify_password(conn, name, password)
    if epoch is None:  # already counted as a failure by claim_login_attempt
        error = "Wrong account name or password."
        return render_template("auth/login.html", next_url=next_url, username=name, error=error), 401
    accounts.clear_login_failures(conn, name, ip)
    session.clear()  # a fresh session: nothing from before the login (no fixation, no stale CSRF token)
    session.update(researcher=name, researcher_epoch=epoch, login_at=time.time(),
                   researcher_session=accounts.start_session(conn, name, config["LOGIN_IDLE_SECONDS"]))
    return redirect(next_url)


@bp.post("/logout")
def logout() -> ResponseReturnValue:
    accounts.end_session(get_redis(), session.get("researcher_session"))  # every copy of the cookie ends
    session.clear()
    flash("You are logged out.")
    return redirect(url_for("auth.login"))


def csrf_failed(err: CSRFError) -> ResponseReturnValue:
    if request.path.startswith("/api/"):
        body = {"error": {"code": "csrf_failed", "message": f"{err.description} Send the token of the page's "
                          "<meta name=\"csrf-token\"> in an X-CSRFToken header."}}
        return jsonify(body), 400
    message = "This form expired or came from another site. Reload the page and try again."
    if request.endpoint == "auth.login":
        return render_template("auth/login.html", next_url=safe_next(request.values.get("next")),
                               username="", error=message), 400
    return render_template("auth/refused.html", message=message), 400


def init_app(app: Flask) -> None:
    """Call after every blueprint is registered: the login check must run before the CSRF check."""
    app.session_interface = SessionInterface()
    app.register_blueprint(bp)
    app.before_request(require_login)
    limits.init_app(app)  # before the CSRF check: a flood is refused before anything else is done
    csrf.init_app(app)
    for endpoint in CSRF_EXEMPT_ENDPOINTS:
        csrf.exempt(app.view_functions[endpoint])
    app.register_error_handler(CSRFError, csrf_failed)

    @app.context_processor
    def researcher_context():
        return {"current_researcher": g.get("researcher")}
