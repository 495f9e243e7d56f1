"""The ``proxima`` command (``[project.scripts]`` in pyproject.toml points at :func:`main`)."""
from .serve import GUNICORN_LIMITS, GUNICORN_THREADS, SERVE_WEB_WORKERS, main

__all__ = ["GUNICORN_LIMITS", "GUNICORN_THREADS", "SERVE_WEB_WORKERS", "main"]
