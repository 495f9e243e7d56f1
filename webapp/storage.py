"""The web app's one Redis client, created from ``REDIS_URL`` and kept in ``app.extensions``."""
from __future__ import annotations

import redis
from flask import Flask, current_app

EXTENSION = "proxima_redis"


def init_app(app: Flask) -> None:
    url = app.config.get("REDIS_URL")
    if not url:
        raise RuntimeError(
            "REDIS_URL is not set. Start Proxima with 'proxima serve' (which runs its own Redis) "
            "or set REDIS_URL=redis://host:6379/0"
        )
    app.extensions[EXTENSION] = redis.Redis.from_url(url, health_check_interval=30)


def get_redis() -> redis.Redis:
    return current_app.extensions[EXTENSION]
