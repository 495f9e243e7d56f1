"""Proxima's web app: rater pages, the researcher dashboard and the JSON API.

Configuration order: defaults, then ``<instance>/proxima.cfg``, then ``PROXIMA_*``
environment variables (and ``REDIS_URL``), then ``test_config``. Web processes keep no
state another process needs; everything shared lives in Redis.
"""
from __future__ import annotations

import logging
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # Flask is imported where an app is made, not here: the commands import this package without loading Flask
    from flask import Flask, Response


ROOT = Path(__file__).resolve().parent.parent

#: Sent with every page: scripts, styles and fonts only from this site (no inline scripts or
#: style attributes), no plug-ins, no framing, forms post only here. Media and the item
#: thumbnails are same-site too; ``data:``/``blob:`` images are for markdown images and charts.
CONTENT_SECURITY_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
                           "media-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
                           "form-action 'self'")
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",  # frame-ancestors for browsers without CSP level 2
    # the rater link carries Prolific/MTurk ids in its query: never send it to another site
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=(), payment=(), usb=(), interest-cohort=()",
}
#: Endpoints whose responses may be cached (static files, item media); every other response is
#: personal (tokens, CSRF tokens, study data) and is sent with ``Cache-Control: no-store``.
CACHEABLE_ENDPOINTS = frozenset({"static", "raters.media", "raters.shown_media"})


#: What deploy/proxima.env holds where a deployment must put its own value.
PLACEHOLDER = "CHANGE-ME"


def _secret_key(instance_path: str) -> str:
    """A per-instance secret kept in the instance folder, so every web process signs alike."""
    path = Path(instance_path) / "secret_key"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        Path(instance_path).mkdir(parents=True, exist_ok=True)
        key = secrets.token_hex(32)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process won the race
            return path.read_text().strip()
        with os.fdopen(fd, "w") as fh:
            fh.write(key)
        return key


#: SECURITY_HEADERS as (lower-case name, name, value), for ``add_security_headers``.
_SECURITY_HEADER_ITEMS = tuple((name.lower(), name, value) for name, value in SECURITY_HEADERS.items())


def add_security_headers(response: Response) -> Response:
    """``after_request``: the security headers (unless the view set its own), and no-store on everything
    personal."""
    from flask import current_app, request

    headers = response.headers
    # one pass over the response's few headers, instead of one search per security header (setdefault)
    present = {name.lower() for name, _ in headers.items()}
    headers.extend([(name, value) for lower, name, value in _SECURITY_HEADER_ITEMS if lower not in present])
    if request.endpoint not in CACHEABLE_ENDPOINTS:
        response.headers["Cache-Control"] = "no-store"
    hsts = current_app.config.get("HSTS_SECONDS")
    if hsts and request.is_secure:
        response.headers.setdefault("Strict-Transport-Security", f"max-age={int(hsts)}")
    return response


def instance_config(test_config: dict | None = None) -> dict:
    """The configuration ``create_app`` would use (defaults, ``proxima.cfg``, ``PROXIMA_*``, the
    instance's secret key), without connecting to Redis: for commands that only need settings,
    such as checking a completion code."""
    return _configured_app(test_config).config


def _configured_app(test_config: dict | None = None) -> Flask:
    from flask import Flask

    from . import limits

    app = Flask(
        __name__,
        instance_path=os.environ.get("PROXIMA_INSTANCE_PATH") or str(ROOT / "instance"),
        instance_relative_config=True,
        template_folder=str(ROOT / "templates"),
        static_folder=str(ROOT / "static"),
    )
    app.config.from_mapping(
        SECRET_KEY=None,
        # keys used before the current one (PROXIMA_PREVIOUS_SECRET_KEYS: a JSON list or comma-separated): the
        # completion codes, question tokens and rater sessions they signed stay valid (``previous_secret_keys``)
        PREVIOUS_SECRET_KEYS=(),
        REDIS_URL=os.environ.get("REDIS_URL"),
        MAX_CONTENT_LENGTH=64 * 1024,
        JSON_SORT_KEYS=False,
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_SECURE="auto",  # Secure when the request came over https; true/false to force
        WTF_CSRF_TIME_LIMIT=None,  # a CSRF token lives as long as the session it is bound to
        LOGIN_SESSION_SECONDS=12 * 3600,  # a login's lifetime
        LOGIN_IDLE_SECONDS=2 * 3600,  # ... and how long it lasts without a request
        LOGIN_MAX_FAILURES=5,  # per account name and client address ...
        LOGIN_FAILURE_WINDOW_SECONDS=15 * 60,  # ... within this window
        TOKEN_TTL_SECONDS=None,
        TRUSTED_PROXIES=0,  # reverse proxies in front whose X-Forwarded-For/-Proto are believed
        PUBLIC_URL=None,  # e.g. https://study.example.org: the base of every link a researcher copies
        HSTS_SECONDS=365 * 24 * 3600,  # Strict-Transport-Security on https responses (0: not sent)
        METRICS_TOKEN=None,  # /metrics for a Prometheus scraper sending "Authorization: Bearer <token>"
        METRICS_ALLOWED_ADDRESSES=None,  # ... or from these addresses/networks ("10.0.0.5,10.1.0.0/16")
        DASHBOARD_REFRESH_SECONDS=10,  # a study page's graph, raters table and flagged count (its numbers: 3 s)
        **limits.DEFAULTS,
    )
    app.config.from_pyfile("proxima.cfg", silent=True)
    app.config.from_prefixed_env("PROXIMA")
    if test_config:
        app.config.update(test_config)
    if not app.config["SECRET_KEY"]:
        app.config["SECRET_KEY"] = _secret_key(app.instance_path)
    if str(app.config["SECRET_KEY"]).startswith(PLACEHOLDER):
        raise RuntimeError("PROXIMA_SECRET_KEY is still the placeholder of deploy/proxima.env: set it to a long random "
                           "value (python3 -c \"import secrets; print(secrets.token_hex(32))\")")
    app.config["PREVIOUS_SECRET_KEYS"] = previous_secret_keys(app)
    # Flask reads rater and researcher sessions signed with these as well
    app.config["SECRET_KEY_FALLBACKS"] = list(app.config["PREVIOUS_SECRET_KEYS"])
    return app


def previous_secret_keys(app: Flask) -> tuple[str, ...]:
    """The secret keys used before ``SECRET_KEY``, newest first: ``PREVIOUS_SECRET_KEYS`` (a list, or text
    with the keys separated by commas), then the key the instance folder generated, if ``SECRET_KEY`` was
    set to another one (``PROXIMA_SECRET_KEY``, as a server is set up after a first trial): completion codes
    already shown to raters were made with it, and must still verify. The switch is logged once."""
    given = app.config.get("PREVIOUS_SECRET_KEYS") or ()
    if isinstance(given, str):
        given = given.split(",")
    keys = [str(k).strip() for k in given if str(k).strip()]
    current = app.config["SECRET_KEY"]
    stored_path = Path(app.instance_path) / "secret_key"
    try:
        stored = stored_path.read_text().strip()
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        stored = ""
    if stored and stored != current and stored not in keys:
        keys.append(stored)
        if stored_path not in _TOLD:
            _TOLD.add(stored_path)
            logging.getLogger("proxima").warning(
                "the secret key is set (PROXIMA_SECRET_KEY) and differs from the one this instance generated "
                "(%s): that one is kept as a previous key, so completion codes already shown to raters still "
                "verify; list it in PROXIMA_PREVIOUS_SECRET_KEYS if you move the instance folder", stored_path)
    return tuple(k for k in dict.fromkeys(keys) if k != current)


_TOLD: set[Path] = set()


def create_app(test_config: dict | None = None) -> Flask:
    app = _configured_app(test_config)
    # JSON_SORT_KEYS is a Flask 2 setting; Flask 3's JSON provider reads its own attribute
    app.json.sort_keys = bool(app.config["JSON_SORT_KEYS"])
    proxies = int(app.config["TRUSTED_PROXIES"] or 0)
    if proxies:  # the client's address (rate limits) and https (Secure cookies) as the proxy saw them
        from werkzeug.middleware.proxy_fix import ProxyFix

        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=proxies, x_proto=proxies, x_host=proxies)

    from . import storage

    storage.init_app(app)

    from . import api, auth, dashboard, errors, i18n, metrics, preview, raters, researcher_api

    metrics.init_app(app)  # first: its timer starts before any other before_request runs
    errors.init_app(app)
    i18n.init_app(app)  # the rater pages' texts in the study's language
    app.register_blueprint(raters.bp)
    app.register_blueprint(dashboard.bp)
    app.register_blueprint(api.bp)
    app.register_blueprint(researcher_api.bp)
    app.register_blueprint(preview.bp)
    auth.init_app(app)  # last: it exempts rater routes from CSRF and guards every other endpoint
    app.after_request(add_security_headers)
    return app
