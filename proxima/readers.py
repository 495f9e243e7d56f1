"""The readers a study has online and offline alike: the same export files, turned into pandas,
numpy and networkx objects the same way. A source (``RemoteStudy`` or ``ExportedStudy``) only says
how to get a file's text; everything else is here.
"""
from __future__ import annotations

import csv
import io
import json
from typing import TYPE_CHECKING

import numpy as np

from .errors import ProximaError

if TYPE_CHECKING:
    import networkx as nx
    import pandas as pd

# Column types of the answers, raters and items tables (a column not named here, such as a new
# question kind's, keeps the type pandas reads).
INTEGER_COLUMNS = ("index", "head", "a", "b", "choice", "probe", "response_ms", "answers", "catch", "catch_failed",
                   "skipped", "repeats")
NUMBER_COLUMNS = ("value", "median_response_ms", "too_fast_share", "self_agreement", "answer_check_p")
BOOLEAN_COLUMNS = ("fallback", "answer_check_flagged", "flagged", "completed", "excluded")
TIME_COLUMNS = ("answered_at", "issued_at", "last_answer_at")
TEXT_COLUMNS = ("study", "answer_id", "rater", "algorithm", "kind", "flags", "question_id", "debrief", "id", "label",
                "text", "head_id", "a_id", "b_id", "choice_id", "completion_code", "code_kind", "answer_check_rule")


def _pandas():
    try:
        import pandas as pd
    except ImportError:
        raise ProximaError("this reader returns a pandas DataFrame: install pandas, or the client with "
                           "its readers (pip install ./client from a clone of Proxima)") from None
    return pd


def table(text: str) -> pd.DataFrame:
    """A CSV export as a DataFrame with typed columns: whole numbers as nullable integers, 1/0 columns
    as booleans, times as UTC timestamps, text as text (empty cells: empty text, not NaN)."""
    pd = _pandas()
    header = next(csv.reader(io.StringIO(text)), [])
    text_columns = [c for c in header if c in TEXT_COLUMNS]
    frame = pd.read_csv(io.StringIO(text), dtype={c: str for c in text_columns}, keep_default_na=False,
                        na_values={c: [""] for c in header if c not in text_columns})
    for column in frame.columns:
        if column in INTEGER_COLUMNS:
            frame[column] = pd.to_numeric(frame[column]).astype("Int64")
        elif column in NUMBER_COLUMNS:
            frame[column] = pd.to_numeric(frame[column]).astype(float)
        elif column in BOOLEAN_COLUMNS:
            frame[column] = frame[column].fillna(0).astype(int).astype(bool)
        elif column in TIME_COLUMNS:
            frame[column] = pd.to_datetime(frame[column], utc=True, format="ISO8601")
    return frame


def triplet_array(text: str) -> np.ndarray:
    """Rows ``i,j,k`` (an optional header line) as an int array of shape (n, 3): cblearn's list-order."""
    rows = []
    for line in text.splitlines():
        parts = line.strip().split(",")
        if len(parts) == 3 and all(p.strip().lstrip("-").isdigit() for p in parts):
            rows.append([int(p) for p in parts])
    return np.asarray(rows, dtype=np.int64).reshape(-1, 3)


def graph_from_document(doc: dict, items: list[dict] | None = None) -> nx.DiGraph:
    """A graph export (JSON) as a networkx DiGraph: one node per item id (with its index and, when known,
    kind, label and text), one edge per (item, neighbour) with rank, estimate, lower, upper, samples, certified and
    predicted (True for a neighbour of an item added to the study later, predicted from features, not measured;
    False in an export that has no such field)."""
    import networkx as nx

    graph = nx.DiGraph(study=doc.get("study"), algorithm=doc.get("algorithm"), method=doc.get("method"),
                       k=doc.get("k"), question_kind=doc.get("question_kind"))
    by_id = {item["id"]: item for item in items or []}
    for index, item_id in enumerate(doc["items"]):
        attrs = {"index": index}
        attrs.update({k: by_id[item_id][k] for k in ("kind", "label", "text") if by_id.get(item_id, {}).get(k)})
        graph.add_node(item_id, **attrs)
    for edge in doc["edges"]:
        graph.add_edge(edge["source"], edge["target"],
                       **{k: edge[k] for k in ("rank", "estimate", "lower", "upper", "samples", "certified")},
                       predicted=bool(edge.get("predicted", False)))
    return graph


def embedding_frame(doc: dict) -> pd.DataFrame:
    """An embedding export (JSON) as a DataFrame: one row per item id, columns x1 … xd; ``attrs`` hold the study,
    algorithm, method, dim and fit_quality (the share of the learner's own answered triplets it places right,
    in-sample: docs/exports.md)."""
    pd = _pandas()
    frame = pd.DataFrame(doc["coordinates"], index=pd.Index(doc["items"], name="item"),
                         columns=[f"x{d + 1}" for d in range(doc["dim"])], dtype=float)
    frame.attrs.update({k: doc.get(k) for k in ("study", "algorithm", "method", "dim", "fit_quality")})
    return frame


class StudyReaders:
    """``.answers()``, ``.triplets()``, ``.graph()``, ``.embedding()``, ``.raters()``, ``.items()`` on top of
    ``_export_text(what, fmt, algorithm)`` (the text of one export) and ``_item_rows()``."""

    id: str

    def _export_text(self, what: str, fmt: str, algorithm: str | None = None) -> str:
        raise NotImplementedError

    def _item_rows(self) -> list[dict]:
        raise NotImplementedError

    def answers(self) -> pd.DataFrame:
        """One row per answer, every question kind, in the order the server accepted them: rater,
        algorithm, kind, the items shown (index and id), the choice or value, flags, response_ms, times."""
        return table(self._export_text("answers", "csv"))

    def triplets(self) -> np.ndarray:
        """Every triplet the answers imply, shape (n, 3), rows (i, j, k): item i was judged closer to j
        than to k (cblearn's list-order; attention checks, repeats, skips, excluded raters left out)."""
        return triplet_array(self._export_text("triplets", "csv"))

    def graph(self, algorithm: str | None = None) -> nx.DiGraph:
        """The learned nearest-neighbour graph of ``algorithm`` (a label; default the study's first)."""
        return graph_from_document(json.loads(self._export_text("graph", "json", algorithm)), self._item_rows())

    def embedding(self, algorithm: str | None = None) -> pd.DataFrame:
        """The coordinates an embedding learner fitted (default the study's first that has one)."""
        return embedding_frame(json.loads(self._export_text("embedding", "json", algorithm)))

    def raters(self) -> pd.DataFrame:
        """One row per rater: answers, median response time, attention checks, self-agreement, the answer
        check, flagged, excluded, completed."""
        return table(self._export_text("raters", "csv"))

    def items(self) -> pd.DataFrame:
        """One row per item, in index order (the indices of ``triplets()`` and the answers' item columns)."""
        pd = _pandas()
        rows = []
        for row in self._item_rows():  # features: a dict from the server, "feature:NAME" columns in a package
            features = {f"feature:{k}": v for k, v in (row.get("features") or {}).items()}
            rows.append({**{k: v for k, v in row.items() if k != "features"}, **features})
        columns = ["index", "id", "kind", "label", "text", "color", "media_type"]
        columns += sorted({c for row in rows for c in row if c.startswith("feature:")})
        frame = pd.DataFrame([{c: row.get(c) for c in columns} for row in rows], columns=columns).set_index("index")
        for column in columns:
            if column.startswith("feature:"):
                frame[column] = pd.to_numeric(frame[column]).astype(float)
        return frame

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id!r}>"

