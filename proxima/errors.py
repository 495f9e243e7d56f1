"""The one error of the client: what went wrong, in words, with the server's own message."""
from __future__ import annotations


class ProximaError(RuntimeError):
    """A request the server refused, a server that cannot be reached, or a package that cannot be read.

    ``status`` and ``code`` are the HTTP status and the server's error code when there was a reply."""

    def __init__(self, message: str, status: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
