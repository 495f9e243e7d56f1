"""A running Proxima server, reached with a researcher API token (``proxima token create`` or the
dashboard's account page): ``proxima.connect(url, token).study(id)``."""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import requests

from .errors import ProximaError
from .readers import StudyReaders

if TYPE_CHECKING:
    from .package import ExportedStudy

#: Seconds to wait for the server (a large study's answers take a while to export).
TIMEOUT = 300


class Client:
    """One server and one token; ``study(id)`` opens a study, ``studies()`` lists those the token sees."""

    def __init__(self, url: str, token: str | None = None, timeout: float = TIMEOUT) -> None:
        token = token or os.environ.get("PROXIMA_TOKEN")
        if not token:
            raise ProximaError("connect needs a researcher API token: make one on the dashboard's account page "
                               "or with 'proxima token create', then proxima.connect(url, token)")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.session = requests.Session()
        self.session.headers.update({"Authorization": f"Bearer {token}", "Accept": "application/json"})

    def request(self, method: str, path: str, **kwargs) -> requests.Response:
        """One API request; a refusal becomes a ProximaError carrying the server's message."""
        try:
            response = self.session.request(method, f"{self.url}/api/{path.lstrip('/')}", timeout=self.timeout,
                                            **kwargs)
        except requests.RequestException as exc:
            raise ProximaError(f"cannot reach the Proxima server at {self.url}: {exc}") from None
        if response.status_code >= 400:
            try:
                error = response.json()["error"]
                message, code = error["message"], error["code"]
            except (ValueError, KeyError, TypeError):
                message, code = response.text[:300] or response.reason, None
            raise ProximaError(f"{self.url} refused {method} /api/{path.lstrip('/')} ({response.status_code}): "
                               f"{message}", status=response.status_code, code=code)
        return response

    def studies(self) -> list[dict]:
        """The studies this token may read: id, name, status, n_items, answers, question_kind, algorithms."""
        return self.request("GET", "studies").json()["studies"]

    def study(self, study_id: str) -> RemoteStudy:
        return RemoteStudy(self, study_id)

    def __repr__(self) -> str:
        return f"<proxima.Client {self.url}>"


class RemoteStudy(StudyReaders):
    """One study on a running server. Each reader asks the server for the current data, so a running
    study gives newer answers at every call."""

    def __init__(self, client: Client, study_id: str) -> None:
        self.client = client
        self.id = study_id
        self.details = client.request("GET", f"studies/{study_id}").json()  # an unknown study fails here

    @property
    def config(self) -> dict:
        """The study's config as the server runs it."""
        return self.details["config"]

    def status(self) -> dict:
        """The dashboard's numbers now: answers, raters, fallback rate, each algorithm's progress, …"""
        return self.client.request("GET", f"studies/{self.id}/stats").json()

    def _export_text(self, what: str, fmt: str, algorithm: str | None = None) -> str:
        params = {"format": fmt, **({"algorithm": algorithm} if algorithm else {})}
        response = self.client.request("GET", f"studies/{self.id}/export/{what}", params=params)
        response.encoding = "utf-8"
        return response.text

    def _item_rows(self) -> list[dict]:
        return self.details["items"]

    def media(self, index: int) -> bytes:
        """The media file (image, audio, video) of item ``index``."""
        return self.client.request("GET", f"studies/{self.id}/items/{int(index)}/media").content

    def download_package(self, path: str | Path, rater_ids: bool = False, wait: float | None = None,
                         poll: float = 0.5) -> ExportedStudy:
        """Save the study's data package as a zip at ``path`` and open it (``rater_ids``: keep recruitment ids).
        The server builds it in the background (a build under way is joined; a built one still current is
        reused); this waits for it, at most ``wait`` seconds (default: the client's timeout)."""
        import time

        from .package import read_export

        params = {"rater_ids": "1"} if rater_ids else None
        status = self.client.request("POST", f"studies/{self.id}/package/build", params=params).json()
        deadline = time.monotonic() + (self.client.timeout if wait is None else wait)
        while status["state"] in ("queued", "running"):
            if time.monotonic() > deadline:
                raise ProximaError(f"the data package of study '{self.id}' is still being built ({status['message']}); "
                                   "call download_package again to keep waiting")
            time.sleep(poll)
            status = self.client.request("GET", f"studies/{self.id}/package/status", params=params).json()
        if status["state"] not in ("finished", "stale"):  # stale: answers arrived since it was built
            raise ProximaError(f"the data package of study '{self.id}' was not built: {status['message']}")
        response = self.client.request("GET", f"studies/{self.id}/package", params=params)
        Path(path).write_bytes(response.content)
        return read_export(path)

    def set_status(self, action: str) -> str:
        """``start``, ``pause``, ``resume`` or ``close`` the study (needs a read-write token); the new status."""
        return self.client.request("POST", f"studies/{self.id}/status", json={"action": action}).json()["status"]


def connect(url: str, token: str | None = None) -> Client:
    """A client of the Proxima server at ``url`` (e.g. ``https://study.example.org``) acting with ``token``
    (default: the ``PROXIMA_TOKEN`` environment variable)."""
    return Client(url, token)
