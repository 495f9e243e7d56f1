"""A study's data package, read offline: ``proxima.read_export(path)`` takes the folder or the zip that
``proxima export --package`` or the dashboard wrote (docs/data-package.md) and gives the same readers
as a study on a running server."""
from __future__ import annotations

import csv
import io
import json
import zipfile
from pathlib import Path, PurePosixPath

from .errors import ProximaError
from .readers import StudyReaders

#: The package layouts this reader knows (``proxima.package_version`` in datapackage.json).
PACKAGE_VERSIONS = (1,)


class ExportedStudy(StudyReaders):
    """A data package on disk. ``descriptor`` is its datapackage.json; ``config`` the study's config."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise ProximaError(f"there is no data package at {self.path}")
        self._zip: zipfile.ZipFile | None = None
        self._prefix = ""
        if self.path.is_dir():
            if not (self.path / "datapackage.json").is_file():
                raise ProximaError(f"{self.path} has no datapackage.json: it is not a Proxima data package")
        else:
            try:
                self._zip = zipfile.ZipFile(self.path)
            except zipfile.BadZipFile:
                raise ProximaError(f"{self.path} is neither a folder nor a zip file") from None
            found = [n for n in self._zip.namelist() if PurePosixPath(n).name == "datapackage.json"]
            if not found:
                raise ProximaError(f"{self.path} holds no datapackage.json: it is not a Proxima data package")
            self._prefix = min(found, key=len)[: -len("datapackage.json")]
        self.descriptor = json.loads(self.read_bytes("datapackage.json"))
        info = self.descriptor.get("proxima") or {}
        if info.get("package_version") not in PACKAGE_VERSIONS:
            raise ProximaError(f"{self.path} is not a Proxima data package this client reads (layout version "
                               f"{info.get('package_version')!r}; known: {PACKAGE_VERSIONS}); update proxima")
        self.info = info
        self.id = info["study"]
        self.study_document = json.loads(self.read_bytes("study.json"))

    # -- files
    def has(self, name: str) -> bool:
        if self._zip is not None:
            try:
                self._zip.getinfo(self._prefix + name)
            except KeyError:
                return False
            return True
        return (self.path / name).is_file()

    def read_bytes(self, name: str) -> bytes:
        if not self.has(name):
            raise ProximaError(f"the data package {self.path} has no file {name}")
        if self._zip is not None:
            return self._zip.read(self._prefix + name)
        return (self.path / name).read_bytes()

    def read_text(self, name: str) -> str:
        return self.read_bytes(name).decode("utf-8")

    # -- what the readers need
    @property
    def config(self) -> dict:
        return self.study_document["config"]

    def _learner(self, want: str, algorithm: str | None) -> dict:
        learners = self.info.get("learners", [])
        if algorithm is None:
            algorithm = (self.info.get("defaults") or {}).get(want)
            if algorithm is None:
                raise ProximaError(f"study '{self.id}' has no algorithm with a {want} in this package")
        for learner in learners:
            if learner["label"] == algorithm:
                if want not in learner:
                    why = learner.get(f"{want}_missing") or f"algorithm '{algorithm}' has no {want}"
                    raise ProximaError(f"the package has no {want} of '{algorithm}': {why}")
                return learner
        labels = ", ".join(learner["label"] for learner in learners)
        raise ProximaError(f"study '{self.id}' has no algorithm '{algorithm}'; its algorithms: {labels}")

    def _export_text(self, what: str, fmt: str, algorithm: str | None = None) -> str:
        if what in ("graph", "embedding"):
            return self.read_text(self._learner(what, algorithm)[what])
        return self.read_text(f"{what}.csv")

    def _item_rows(self) -> list[dict]:
        rows = csv.DictReader(io.StringIO(self.read_text("items.csv")))
        return [{k: int(v) if k == "index" else (v or None) for k, v in row.items()} for row in rows]

    def status(self) -> dict:
        """The dashboard's numbers when the package was made."""
        return json.loads(self.read_text("status.json"))

    def exclusions(self):
        """Every rater and answer left out of the learners (or only flagged), with the reason."""
        from .readers import table

        return table(self.read_text("exclusions.csv"))

    def media(self, index: int) -> bytes:
        """The media file of item ``index`` (if the package was made with media)."""
        rows = self._item_rows()
        if not 0 <= int(index) < len(rows):
            raise ProximaError(f"there is no item {index}; the items are 0..{len(rows) - 1}")
        name = rows[int(index)].get("file")
        if not name:
            raise ProximaError(f"item {index} has no media file in this package")
        return self.read_bytes(name)


def read_export(path: str | Path) -> ExportedStudy:
    """Open a data package (a folder or a .zip) with the readers of a study on a server."""
    return ExportedStudy(path)
