"""Every export of a study, used alike by ``proxima export`` and the dashboard: answers (CSV,
JSONL), triplets (cblearn list-order), raters (CSV: checks, flags, skips, debriefs), the learned
nearest-neighbour graph (JSON, CSV edge list, GraphML), comparison forests (JSON,
docs/forest-schema.md) and embeddings (CSV, JSON; docs/exports.md). Also triplet import.

Functions return text chunks so large studies stream. Must never import Flask.
"""
from __future__ import annotations

import csv
import io
import json
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import networkx as nx
import numpy as np

from engine.registry import FOREST_ALGORITHMS
from engine.triplet_csv import parse_triplets
from workers.jobs.learners import IMPORTED, Learner, fresh_learners
from workers.jobs.predicted import predicted_for, study_features
from workers.store import answers as answer_log
from workers.store import engine_state, keys
from workers.store.queue import schedule_update
from workers.store.studies import StudyError, get_items, get_study

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from redis import Redis

    from workers.store.studies import Item


#: (what, format) -> (media type, file extension)
FORMATS = {
    ("answers", "csv"): ("text/csv", "csv"),
    ("answers", "jsonl"): ("application/x-ndjson", "jsonl"),
    ("triplets", "csv"): ("text/csv", "csv"),
    ("odd_one_out", "txt"): ("text/plain", "txt"),
    ("odd_one_out", "zip"): ("application/zip", "zip"),
    ("items", "tsv"): ("text/tab-separated-values", "tsv"),
    ("graph", "json"): ("application/json", "json"),
    ("graph", "csv"): ("text/csv", "csv"),
    ("graph", "graphml"): ("application/graphml+xml", "graphml"),
    ("forest", "json"): ("application/json", "json"),
    ("model", "json"): ("application/json", "json"),
    ("raters", "csv"): ("text/csv", "csv"),
    ("embedding", "csv"): ("text/csv", "csv"),
    ("embedding", "json"): ("application/json", "json"),
}
GRAPH_CSV_COLUMNS = ("source", "target", "source_index", "target_index", "rank", "estimate", "lower", "upper",
                     "samples", "certified", "predicted")


class ExportError(ValueError):
    """An export that cannot be made; the message says what is available instead."""


@dataclass(frozen=True)
class Export:
    media_type: str
    filename: str
    chunks: object  # iterable of str


def _learner(conn: Redis, study, algorithm: str | None, what: str) -> Learner:
    """The learner to export: the named algorithm, else the study's first that can give ``what`` (graph or
    forest; every learner may have an embedding: :func:`embedding_document` asks each for its coordinates)."""
    fits = {"graph": lambda a: True, "forest": lambda a: a.algorithm in FOREST_ALGORITHMS}[what]
    choices = [a for a in study.config.algorithms if fits(a)]
    if algorithm is not None:
        alg = study.config.get_algorithm(algorithm)
        if alg is None:
            labels = ", ".join(a.label for a in study.config.algorithms)
            raise ExportError(f"study '{study.id}' has no algorithm '{algorithm}'; its algorithms are: {labels}")
        if alg not in choices:
            raise ExportError(f"algorithm '{algorithm}' is a {alg.algorithm}, which has no {what} to export")
    elif not choices:
        raise ExportError(f"study '{study.id}' has no algorithm that builds a {what}")
    else:
        graph_first = sorted(choices, key=lambda a: not a.learns_graph)
        alg = graph_first[0]
    return _load(conn, study, alg)


def _load(conn: Redis, study, alg) -> Learner:
    """The learner of ``alg`` as last saved (a fresh one before its first update)."""
    state = engine_state.load(conn, study.id, alg.label)
    if state is None:
        return fresh_learners(conn, study, [alg])[alg.label]
    learner = Learner.from_state(alg, study.config, state)
    learner.sync_items(study.n_items)
    return learner


def _number(x) -> float | None:
    """A JSON-safe number: None for NaN and ±infinity (strict parsers such as JavaScript's
    ``JSON.parse`` or R's jsonlite reject ``NaN``/``Infinity``; docs/exports.md)."""
    x = float(x)
    return x if math.isfinite(x) else None


def _finite(doc):
    """``doc`` with every non-finite float replaced by None (recursively through lists and dicts)."""
    if isinstance(doc, float):
        return doc if math.isfinite(doc) else None
    if isinstance(doc, dict):
        return {k: _finite(v) for k, v in doc.items()}
    if isinstance(doc, (list, tuple)):
        return [_finite(v) for v in doc]
    return doc


def _json(doc, indent: int | None = 1) -> str:
    """Strict JSON: a number that is not finite is written as null (docs/exports.md)."""
    return json.dumps(_finite(doc), indent=indent, allow_nan=False)


def nn_graph(conn: Redis, study_id: str, algorithm: str | None = None) -> dict:
    """The learned k-NN graph as a JSON-safe document: ``{"study", "algorithm", "k", "items",
    "edges": [{"source", "target", "source_index", "target_index", "rank", "estimate", "lower",
    "upper", "samples", "certified", "predicted"}], "prediction"}`` (distances in [0, 1] for ratings; None
    where unknown). Items added to the study after a learner of a fixed item set was built get edges
    predicted from their features (``predicted`` true, no estimate, no samples; ``workers.jobs.predicted``),
    and ``prediction`` says how (None when no edge is predicted)."""
    study = get_study(conn, study_id)
    learner = _learner(conn, study, algorithm, "graph")
    items = get_items(conn, study_id)
    ids = [item.id for item in items]
    k = int(learner.algorithm.params.get("k", 1))
    g = learner.graph(k)
    # an edge no answer has touched is a guess where the learner counts its answers (a pair planner's estimate
    # reads 0.0, "identical"): the item has no neighbour yet
    blind = learner.guessed(g)
    edges = []
    for i in range(len(g.neighbors)):  # items added to a forest appear once their routing starts
        for rank, j in enumerate(g.neighbors[i].tolist()):
            if j < 0 or blind[i, rank]:
                continue
            edges.append({"source": ids[i], "target": ids[j], "source_index": i, "target_index": int(j),
                          "rank": rank + 1, "estimate": _number(g.estimates[i, rank]),
                          "lower": _number(g.lower[i, rank]), "upper": _number(g.upper[i, rank]),
                          "samples": int(g.samples[i, rank]), "certified": bool(g.certified[i]),
                          "predicted": False})
    found = predicted_for(learner, study_features(conn, study), k) if len(g.neighbors) < len(ids) else None
    if found is not None:
        for i, row in zip(found.items.tolist(), found.neighbors.tolist(), strict=True):
            edges.extend({"source": ids[i], "target": ids[j], "source_index": i, "target_index": int(j),
                          "rank": rank + 1, "estimate": None, "lower": None, "upper": None, "samples": 0,
                          "certified": False, "predicted": True} for rank, j in enumerate(row))
    prediction = None if found is None else {"by": found.by, "about": found.about, "items": len(found.items)}
    return {"study": study.id, "algorithm": learner.label, "method": learner.algorithm.algorithm,
            "question_kind": learner.algorithm.question_kind, "k": g.neighbors.shape[1],
            "created_at": time.time(), "items": ids, "edges": edges, "prediction": prediction}


def graph_csv(doc: dict) -> Iterator[str]:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=GRAPH_CSV_COLUMNS, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    for edge in doc["edges"]:
        writer.writerow({k: "" if v is None else v for k, v in edge.items()})
    yield buf.getvalue()


def graph_graphml(doc: dict, items: Iterable[Item]) -> str:
    """GraphML (networkx writes it; Gephi, igraph and networkx read it): one node per item, one
    directed edge per (item, neighbour) with the edge's numbers as attributes."""
    graph = nx.DiGraph(study=doc["study"], algorithm=doc["algorithm"], k=doc["k"])
    for index, item in enumerate(items):
        attrs = {"index": index, "kind": item.kind}
        attrs.update({k: v for k, v in (("label", item.label), ("text", item.text), ("color", item.color))
                      if v is not None})
        graph.add_node(item.id, **attrs)
    for edge in doc["edges"]:
        attrs = {k: edge[k] for k in ("rank", "estimate", "lower", "upper", "samples", "certified", "predicted")
                 if edge.get(k) is not None}
        graph.add_edge(edge["source"], edge["target"], **attrs)
    buf = io.BytesIO()
    nx.write_graphml(graph, buf, encoding="utf-8")
    return buf.getvalue().decode("utf-8")


def forest_document(conn: Redis, study_id: str, algorithm: str | None = None) -> dict:
    study = get_study(conn, study_id)
    learner = _learner(conn, study, algorithm, "forest")
    doc = learner.planner.to_json()  # every forest planner describes itself as JSON
    doc["study"] = study.id
    doc["algorithm"] = learner.label
    doc["items"] = [item.id for item in get_items(conn, study_id)]
    return doc


def _fitted(conn: Redis, study, algorithm: str | None) -> tuple[Learner, np.ndarray]:
    """The learner whose embedding to export and its coordinates: the named algorithm, else the study's first
    (graph learners first, as the other exports pick) that has fitted an embedding. Any learner may have one:
    an embedding learner's embedding, or the one candidate duels fits to pick its shortlists
    (``engine.registry.fitted_coordinates``)."""
    if algorithm is not None:
        alg = study.config.get_algorithm(algorithm)
        if alg is None:
            labels = ", ".join(a.label for a in study.config.algorithms)
            raise ExportError(f"study '{study.id}' has no algorithm '{algorithm}'; its algorithms are: {labels}")
        learner = _load(conn, study, alg)
        X = learner.fitted_coordinates()
        if X is None:
            raise ExportError(f"algorithm '{alg.label}' ({alg.algorithm}) has no fitted embedding: it fits none, or "
                              "has not fitted one yet (too few answers)")
        return learner, X
    for alg in sorted(study.config.algorithms, key=lambda a: not a.learns_graph):
        learner = _load(conn, study, alg)
        X = learner.fitted_coordinates()
        if X is not None:
            return learner, X
    raise ExportError(f"no algorithm of study '{study.id}' has fitted an embedding yet (learners that fit one do "
                      "so once they have some answers)")


def fit_quality(conn: Redis, study_id: str, label: str, X: np.ndarray) -> dict:
    """How well an embedding predicts its own learner's answers: the share of the triplets those answers
    imply (excluded raters left out) in which the chosen item is the nearer one. The embedding was fitted to
    (most of) these answers, so this is an in-sample figure; a share on answers it never saw would be lower.
    Chance is 0.5; answers that imply no triplets (ratings) give no figure."""
    excluded = {r.decode() for r in conn.smembers(keys.excluded_raters(study_id))}
    rows = [(head, winner, y if winner == x else x)
            for ans in answer_log.iter_answers(conn, study_id)
            if ans.algorithm == label and ans.rater not in excluded
            for head, x, y, winner in ans.triplets()]
    t = np.asarray(rows, dtype=np.int64).reshape(-1, 3)
    t = t[(t < len(X)).all(axis=1)]
    share = None
    if len(t):
        near = np.sum((X[t[:, 0]] - X[t[:, 1]]) ** 2, axis=1)
        far = np.sum((X[t[:, 0]] - X[t[:, 2]]) ** 2, axis=1)
        share = round(float(np.mean(near < far)), 4)
    return {"triplets": int(len(t)), "share_predicted": share, "chance": 0.5, "in_sample": True,
            "about": "share of this learner's own answered triplets (excluded raters left out) the embedding "
                     "places the right way round; it was fitted to them, so a held-out share would be lower"}


def describe_fit(doc: dict) -> str:
    """One line on an embedding: its learner, dimension and fit quality."""
    quality = doc["fit_quality"]
    share = quality["share_predicted"]
    said = (f"places {share:.0%} of its {quality['triplets']:,} answered triplets the right way round (in-sample; "
            "chance 50%)" if share is not None else "its answers imply no triplets to score it by")
    return f"Embedding of '{doc['algorithm']}' ({doc['method']}): {doc['dim']} dimension(s); {said}."


def embedding_document(conn: Redis, study_id: str, algorithm: str | None = None) -> dict:
    """The learned embedding: ``{"study", "algorithm", "method", "dim", "items", "coordinates"
    (one row of ``dim`` numbers per item, in item order), "fit_quality" (:func:`fit_quality`), "fit" (the
    learner's progress: answers, fits, ...)}``, of any learner that has fitted one (embedding learners,
    duels). Coordinates are defined up to rotation, reflection, shift and scale."""
    study = get_study(conn, study_id)
    learner, X = _fitted(conn, study, algorithm)
    X = np.asarray(X, dtype=np.float64)
    ids = [item.id for item in get_items(conn, study_id)][: len(X)]
    X = X[: len(ids)]
    return {"study": study.id, "algorithm": learner.label, "method": learner.algorithm.algorithm,
            "dim": int(X.shape[1]), "created_at": time.time(), "items": ids,
            "coordinates": [[_number(v) for v in row] for row in X.tolist()],
            "fit_quality": fit_quality(conn, study_id, learner.label, X), "fit": learner.progress()}


#: A web process asks a learner whether it has fitted an embedding by loading it, unless the table's memory
#: model says the learner is larger than this (n x n bounds of a large study): such a learner's link is offered
#: and its download says whether it has one.
PROBE_BYTES = 256e6


def embedding_labels(conn: Redis, study_id: str) -> list[str]:
    """The labels of a study's algorithms that have fitted an embedding now (the Downloads tab offers theirs):
    of the entries that fit coordinates at all (``coordinates``), those that have (asked by loading them)."""
    study = get_study(conn, study_id)
    answers = answer_log.count_answers(conn, study_id)
    return [alg.label for alg in study.config.algorithms if alg.entry.coordinates
            and (alg.entry.memory.bytes(study.n_items, answers) > PROBE_BYTES
                 or _load(conn, study, alg).fitted_coordinates() is not None)]


def embedding_csv(doc: dict) -> Iterator[str]:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["item", *(f"x{d + 1}" for d in range(doc["dim"]))])
    for item, row in zip(doc["items"], doc["coordinates"], strict=True):
        writer.writerow([item, *("" if v is None else repr(v) for v in row)])
    yield buf.getvalue()


def embedding_chunks(doc: dict, fmt: str) -> Iterable[str]:
    """An embedding document as the export's text: JSON, or the CSV of coordinates."""
    return [_json(doc)] if fmt == "json" else embedding_csv(doc)


def export(conn: Redis, study_id: str, what: str, fmt: str, algorithm: str | None = None, model: str | None = None
           ) -> Export:
    """One export of a study; raises ExportError (or StudyNotFound) saying what was wrong.

    ``algorithm`` picks the learner for graph, forest and embedding exports; ``model`` the trained model
    (smerf, treerank, ranking_forest, simforest) for ``what="model"``."""
    if (what, fmt) not in FORMATS:
        offered = ", ".join(f"{w} as {f}" for w, f in FORMATS)
        raise ExportError(f"cannot export {what} as {fmt}; available: {offered}")
    get_study(conn, study_id)  # StudyNotFound before anything else
    media_type, ext = FORMATS[(what, fmt)]
    if what == "model" and model is None:
        raise ExportError("say which trained model to export: smerf, treerank, ranking_forest or simforest")
    suffix = f"-{model}" if what == "model" else (f"-{algorithm}" if algorithm else "")
    filename = f"{study_id}-{what}{suffix}.{ext}"
    if what == "answers":
        ids = [item.id for item in get_items(conn, study_id)]
        writer = answer_log.export_csv if fmt == "csv" else answer_log.export_jsonl
        chunks = writer(answer_log.iter_answers(conn, study_id), ids, study_id)
    elif what == "triplets":
        excluded = {r.decode() for r in conn.smembers(keys.excluded_raters(study_id))}
        chunks = answer_log.export_triplets(answer_log.iter_answers(conn, study_id), excluded)
    elif what == "odd_one_out":
        excluded = {r.decode() for r in conn.smembers(keys.excluded_raters(study_id))}
        rows = answer_log.export_odd_one_out(answer_log.iter_answers(conn, study_id), excluded)
        chunks = rows if fmt == "txt" else [_odd_one_out_zip("".join(rows), get_items(conn, study_id))]
    elif what == "items":
        items = get_items(conn, study_id)
        chunks = [answer_log.export_item_table([i.id for i in items], [i.label for i in items])]
    elif what == "graph":
        doc = nn_graph(conn, study_id, algorithm)
        if fmt == "json":
            chunks = [_json(doc)]
        elif fmt == "csv":
            chunks = graph_csv(doc)
        else:
            chunks = [graph_graphml(doc, get_items(conn, study_id))]
    elif what == "embedding":
        chunks = embedding_chunks(embedding_document(conn, study_id, algorithm), fmt)
    elif what == "raters":
        from workers.store.raters import export_raters_csv

        chunks = export_raters_csv(conn, study_id)
    elif what == "model":
        from workers.results.models import ModelError, model_export

        try:
            chunks = [_json(model_export(conn, study_id, model), indent=None)]
        except ModelError as exc:
            raise ExportError(str(exc)) from None
    else:
        chunks = [_json(forest_document(conn, study_id, algorithm), indent=None)]
    return Export(media_type, filename, chunks)


def _odd_one_out_zip(rows: str, items: list[Item]) -> bytes:
    """The SPoSE/VICE layout with its item table: ``triplets.txt`` (rows ``i j k``, odd one last, 0-based)
    and ``items.tsv`` (index, id, label), one zip."""
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("triplets.txt", rows)
        zf.writestr("items.tsv", answer_log.export_item_table([i.id for i in items], [i.label for i in items]))
    return buf.getvalue()


def import_triplets(conn: Redis, study_id: str, text: str, source: str = "file", rater: str = "import") -> int:
    """Append list-order triplets to the study's log as imported answers (rater ``rater``,
    algorithm ``import``); all or nothing. Returns how many were imported.

    Imported triplets are exported with the rest and used by ``random_triplets`` learners; the
    adaptive learners only use answers to the questions they chose themselves.
    """
    study = get_study(conn, study_id)
    try:
        rows = parse_triplets(text, study.n_items, source)
    except ValueError as exc:
        raise StudyError(str(exc)) from None
    now = repr(time.time())
    with conn.pipeline(transaction=True) as pipe:
        for i, j, k in rows:
            pipe.xadd(keys.answers(study_id), {
                "qid": "", "rater": rater, "kind": "triplet", "head": i, "a": j, "b": k, "choice": j, "value": "",
                "probe": "", "algorithm": IMPORTED, "fallback": 0, "issued_at": now, "answered_at": now,
                "response_ms": "", "flags": "imported",
            })
        if rows:
            pipe.sadd(keys.raters(study_id), rater)
            pipe.hincrby(keys.counters(study_id), keys.counter_field("answers", IMPORTED), len(rows))
        pipe.execute()
    if rows:
        schedule_update(conn, study_id)
    return len(rows)
