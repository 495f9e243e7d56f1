"""Proxima's web app: rater pages, the researcher dashboard and the JSON API.

Configuration order: defaults, then ``<instance>/proxima.cfg``, then ``PROXIMA_*``
environment variables (and ``REDIS_URL``), then ``test_config``. Web processes keep no
state another process needs; everything shared lives in Redis.
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path

from flask import Flask

ROOT = Path(__file__).resolve().parent.parent


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


def create_app(test_config: dict | None = None) -> Flask:
    app = Flask(
        __name__,
        instance_path=os.environ.get("PROXIMA_INSTANCE_PATH") or str(ROOT / "instance"),
        instance_relative_config=True,
        template_folder=str(ROOT / "templates"),
        static_folder=str(ROOT / "static"),
    )
    app.config.from_mapping(
        SECRET_KEY=None,
        REDIS_URL=os.environ.get("REDIS_URL"),
        MAX_CONTENT_LENGTH=64 * 1024,
        JSON_SORT_KEYS=False,
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_SECURE="auto",  # Secure when the request came over https; true/false to force
        WTF_CSRF_TIME_LIMIT=None,  # a CSRF token lives as long as the session it is bound to
        LOGIN_SESSION_SECONDS=12 * 3600,
        LOGIN_MAX_FAILURES=5,  # per account name and client address ...
        LOGIN_FAILURE_WINDOW_SECONDS=15 * 60,  # ... within this window
        TOKEN_TTL_SECONDS=None,
    )
    app.config.from_pyfile("proxima.cfg", silent=True)
    app.config.from_prefixed_env("PROXIMA")
    if test_config:
        app.config.update(test_config)
    if not app.config["SECRET_KEY"]:
        app.config["SECRET_KEY"] = _secret_key(app.instance_path)

    from . import storage

    storage.init_app(app)

    from . import api, auth, dashboard, errors, raters

    errors.init_app(app)
    app.register_blueprint(raters.bp)
    app.register_blueprint(dashboard.bp)
    app.register_blueprint(api.bp)
    auth.init_app(app)  # last: it exempts rater routes from CSRF and guards every other endpoint
    return app
