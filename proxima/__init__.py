"""Proxima's Python client: a study's results on your own machine, from a running server or from a
data package.

    >>> import proxima
    >>> study = proxima.connect("https://study.example.org", "prx_...").study("shoes-3f2a1c")
    >>> answers = study.answers()          # pandas DataFrame, one row per answer
    >>> package = proxima.read_export("shoes-3f2a1c-data-package.zip")  # the same readers, offline

Both give ``.answers()``, ``.triplets()``, ``.graph()``, ``.embedding()``, ``.raters()``, ``.status()``,
``.items()`` and ``.media()``. Installed alone by the light distribution ``proxima-similarity-client``
(client/pyproject.toml: requests, numpy, pandas, networkx). This package talks HTTP and reads files only:
it never imports the server's modules (webapp, workers, engine).
"""
from __future__ import annotations

from .client import Client, RemoteStudy, connect
from .errors import ProximaError
from .package import ExportedStudy, read_export

__all__ = ["Client", "ExportedStudy", "ProximaError", "RemoteStudy", "connect", "read_export"]
