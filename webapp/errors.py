"""One error type and one error shape for the JSON API: ``{"error": {"code", "message"}}``."""
from __future__ import annotations

from flask import Flask, jsonify, request
from werkzeug.exceptions import HTTPException


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, **extra):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.extra = extra


def _json_error(status: int, code: str, message: str, **extra):
    body = {"error": {"code": code, "message": message, **extra}}
    return jsonify(body), status


def _wants_json() -> bool:
    return request.path.startswith("/api/")


def init_app(app: Flask) -> None:
    @app.errorhandler(ApiError)
    def handle_api_error(err: ApiError):
        return _json_error(err.status, err.code, err.message, **err.extra)

    @app.errorhandler(HTTPException)
    def handle_http_error(err: HTTPException):
        if not _wants_json():
            return err
        code = (err.name or "error").lower().replace(" ", "_")
        return _json_error(err.code or 500, code, err.description or err.name)

    @app.errorhandler(Exception)
    def handle_unexpected(err: Exception):
        app.logger.exception("unhandled error on %s", request.path)
        if not _wants_json():
            return "Internal server error — the error was logged.", 500
        return _json_error(500, "internal_error", "the server failed to handle this request; it was logged")
