"""One error type and one error shape for the JSON API: ``{"error": {"code", "message"}}``."""
from __future__ import annotations

from collections.abc import Mapping

import redis
from flask import Flask, jsonify, request
from werkzeug.exceptions import HTTPException, RequestURITooLarge

#: The longest URL (path and query) the app takes; gunicorn lets through up to 8190 bytes (its
#: hard maximum) so that a long URL on /api/ is refused here, in the API's own error shape.
MAX_URL_LENGTH = 4096


class ApiError(Exception):
    """A refused API request: HTTP status, a stable machine-readable code and a sentence for people.

    ``headers`` go on the response (e.g. ``Retry-After`` of a 429); ``extra`` keys join the error body.
    """

    def __init__(self, status: int, code: str, message: str, headers: Mapping[str, str] | None = None,
                 **extra: object) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})
        self.extra = extra


def _json_error(status: int, code: str, message: str, headers: Mapping[str, str] | None = None, **extra):
    body = {"error": {"code": code, "message": message, **extra}}
    response = jsonify(body)
    response.status_code = status
    response.headers.update(headers or {})
    return response


def _wants_json() -> bool:
    return request.path.startswith("/api/")


def refuse_long_urls() -> None:
    """``before_request``: a URL longer than ``MAX_URL_LENGTH`` gets a 414 (JSON on /api/)."""
    environ = request.environ
    length = len(environ.get("RAW_URI") or "") or (len(environ.get("PATH_INFO", ""))
                                                   + len(environ.get("QUERY_STRING", "")) + 1)
    if length > MAX_URL_LENGTH:
        raise RequestURITooLarge(f"the URL is {length} characters long; at most {MAX_URL_LENGTH} are taken")


def init_app(app: Flask) -> None:
    app.before_request(refuse_long_urls)

    @app.errorhandler(ApiError)
    def handle_api_error(err: ApiError):
        return _json_error(err.status, err.code, err.message, err.headers, **err.extra)

    @app.errorhandler(HTTPException)
    def handle_http_error(err: HTTPException):
        if not _wants_json():
            return err
        code = (err.name or "error").lower().replace(" ", "_")
        # keep what the exception says about itself: Allow of a 405, Retry-After of a 429
        headers = {k: v for k, v in err.get_headers() if k.lower() != "content-type"}
        return _json_error(err.code or 500, code, err.description or err.name, headers)

    @app.errorhandler(redis.ConnectionError)
    @app.errorhandler(redis.TimeoutError)
    @app.errorhandler(redis.BusyLoadingError)
    def handle_storage_down(err: Exception):
        # Redis is down or restarting. The answer script is all or nothing and a retried token is
        # stored at most once, so the client should simply retry the same request shortly.
        app.logger.warning("storage unavailable on %s: %s", request.path, err)
        message = ("the study's storage is briefly unavailable; retry the same request in a few seconds "
                   "(an answer sent again with the same token is stored only once)")
        if not _wants_json():
            return message, 503, {"Retry-After": "5"}
        return _json_error(503, "storage_unavailable", message, {"Retry-After": "5"})

    @app.errorhandler(Exception)
    def handle_unexpected(err: Exception):
        app.logger.exception("unhandled error on %s", request.path)
        if not _wants_json():
            return "Internal server error — the error was logged.", 500
        return _json_error(500, "internal_error", "the server failed to handle this request; it was logged")
