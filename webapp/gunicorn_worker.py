"""The gunicorn worker ``proxima serve`` (and deploy/proxima-web.service) runs: gunicorn's threaded
worker, except that the requests gunicorn itself refuses before the app sees them (a request line over
``--limit-request-line``, too many or too large headers) get the app's JSON error shape
``{"error": {"code", "message"}}`` instead of gunicorn's HTML page. Imports neither Flask nor the engine.
"""
from __future__ import annotations

import json
import socket
from typing import Any

from gunicorn import util
from gunicorn.http.errors import LimitRequestHeaders, LimitRequestLine
from gunicorn.workers.gthread import ThreadWorker

#: gunicorn's refusals answered in JSON: (status, reason, error code, message).
JSON_REFUSALS = (
    (LimitRequestLine, 414, "URI Too Long", "request_uri_too_long",
     "the request line is longer than {limit} bytes; shorten the URL (send data in the request body)"),
    (LimitRequestHeaders, 431, "Request Header Fields Too Large", "request_header_fields_too_large",
     "the request's headers are too many or too large"),
)


def json_error_response(status: int, reason: str, code: str, message: str) -> bytes:
    """A whole HTTP/1.1 response carrying the JSON error shape; the connection is closed after it."""
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    head = (f"HTTP/1.1 {status} {reason}\r\nConnection: close\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode("latin-1")
    return head + body


class JsonErrorWorker(ThreadWorker):
    """gunicorn's gthread worker answering its own refusals in the JSON error shape."""

    def handle_error(self, req: Any, client: socket.socket, addr: Any, exc: BaseException) -> None:
        for kind, status, reason, code, message in JSON_REFUSALS:
            if isinstance(exc, kind):
                self.log.warning("Invalid request from ip=%s: %s", (addr or ("",))[0], exc)
                try:
                    util.write_nonblock(client, json_error_response(
                        status, reason, code, message.format(limit=self.cfg.limit_request_line)))
                except Exception:  # noqa: BLE001 - the client may be gone, as gunicorn's own handler allows
                    self.log.debug("Failed to send error message.")
                return
        super().handle_error(req, client, addr, exc)
