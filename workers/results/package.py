"""A study's data package: everything a lab deposits (OSF, a journal's data archive) in one folder or
zip, described by a Frictionless ``datapackage.json`` with a table schema for every CSV
(docs/data-package.md): items (and their media files), answers, raters, exclusions with their
reasons, implied triplets, every learner's graph, embeddings and forests, the study config, consent
and instructions text, the platform's version and commit, and the seeds.

Raters get pseudonymous ids (R0001, ... in the order of their first answer) unless recruitment ids
are asked for. ``proxima.read_export`` reads what this writes. Must never import Flask.
"""
from __future__ import annotations

import csv
import io
import json
import mimetypes
import os
import re
import subprocess
import tempfile
import time
import zipfile
from collections.abc import Callable
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from engine.registry import FOREST_ALGORITHMS
from workers.results.exports import (
    GRAPH_CSV_COLUMNS,
    ExportError,
    _json,
    describe_fit,
    embedding_document,
    forest_document,
    nn_graph,
)
from workers.store import answers as answer_log
from workers.store import keys
from workers.store.backup import set_aside_answers
from workers.store.raters import CSV_COLUMNS as RATER_COLUMNS
from workers.store.raters import rater_table
from workers.store.studies import get_items, get_media, get_study

if TYPE_CHECKING:
    from redis import Redis

#: The version of this layout; ``proxima.read_export`` reads packages of this version.
PACKAGE_VERSION = 1
ROOT = Path(__file__).resolve().parents[2]

# Table Schema field types of the columns we know; any other column (a new question kind's) is a string.
_INTEGER = {"index", "head", "a", "b", "choice", "probe", "response_ms", "answers", "catch", "catch_failed",
            "skipped", "repeats", "rank", "source_index", "target_index", "samples", "i", "j", "k"}
_NUMBER = {"value", "median_response_ms", "too_fast_share", "self_agreement", "answer_check_p", "estimate", "lower",
           "upper"}
_BOOLEAN = {"fallback", "answer_check_flagged", "flagged", "completed", "excluded", "certified", "heldout",
            "predicted"}
_DATETIME = {"answered_at", "issued_at", "last_answer_at"}

DESCRIPTIONS = {
    "items": "One row per item, in index order (the indices every other table uses); file: the item's media file.",
    "answers": "One row per answer in the order the server accepted them, every question kind, with its flags "
               "(catch_pass/catch_fail: attention checks; repeat_agree/repeat_disagree: validation repeats; "
               "skipped; too_fast; late) and response time.",
    "raters": "One row per rater: answers, attention checks, self-agreement, the answer check, flags, exclusion.",
    "triplets": "Every triplet the answers imply, in cblearn's list-order (i was judged closer to j than to k): "
                "attention checks, repeats, skips and excluded raters' answers left out.",
    "exclusions": "Every rater and answer left out of the learners (or only flagged), with the reason.",
}
FIELD_DESCRIPTIONS = {
    "rater": "Pseudonymous rater id (R0001, ...) unless the package was made with recruitment ids.",
    "i": "Item index of the anchor.", "j": "Item index judged closer to i.", "k": "Item index judged farther from i.",
    "flags": "Comma-separated quality flags.", "response_ms": "Milliseconds from showing the question to the answer.",
    "kind": "The question kind (triplet, rating, ...).",
    "heldout": "1: the answer to a held-out question (uniformly random, asked like any other, never learned from: "
               "it scores the learners' models); see the proxima section's heldout.",
    "predicted": "1: a neighbour of an item added to the study after its learner was built, predicted from the "
                 "items' features (the graph JSON's prediction says how), not measured by any answer.",
}


class PackageError(ValueError):
    """A data package that cannot be written; the message says why."""


#: The server's distribution name (pyproject.toml; "proxima" on PyPI is another project).
DISTRIBUTION = "proxima-similarity"


@lru_cache(maxsize=1)
def platform_version() -> dict:
    """{"version": the installed server's version, "commit": the source's git commit or None}."""
    try:
        from importlib.metadata import version

        release = version(DISTRIBUTION)
    except Exception:  # noqa: BLE001 - an uninstalled checkout still names its commit
        release = None
    commit = os.environ.get("PROXIMA_COMMIT") or None
    if commit is None and (ROOT / ".git").exists():
        try:
            out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                                 timeout=10, check=False)
            commit = out.stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            commit = None
    return {"name": "proxima", "version": release, "commit": commit}


def package_filename(study_id: str) -> str:
    return f"{study_id}-data-package"


def _field(name: str) -> dict:
    field = {"name": name, "type": "string"}
    if name.startswith("feature:"):
        field.update(type="number", description=f"The item's feature '{name[8:]}' (proxima features).")
    elif name in _INTEGER:
        field["type"] = "integer"
    elif name in _NUMBER:
        field["type"] = "number"
    elif name in _BOOLEAN:
        field.update(type="boolean", trueValues=["1"], falseValues=["0"])
    elif name in _DATETIME:
        field["type"] = "datetime"
    if name in FIELD_DESCRIPTIONS:
        field["description"] = FIELD_DESCRIPTIONS[name]
    return field


def _csv_text(columns, rows) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if v is None else int(v) if isinstance(v, bool) else v for k, v in row.items()})
    return buf.getvalue()


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="milliseconds")


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)[:80] or "item"


class _Writer:
    """Collects the package's files into a folder or a zip, and its resources for the descriptor."""

    def __init__(self, put: Callable[[str, bytes], None]) -> None:
        self.put = put
        self.resources: list[dict] = []

    def table(self, name: str, path: str, columns, rows, primary_key: str | None = None,
              description: str | None = None) -> None:
        self.put(path, _csv_text(columns, rows).encode("utf-8"))
        schema: dict = {"fields": [_field(c) for c in columns]}
        if primary_key:
            schema["primaryKey"] = primary_key
        resource = {"name": name, "path": path, "profile": "tabular-data-resource", "format": "csv",
                    "mediatype": "text/csv", "encoding": "utf-8", "schema": schema}
        if description or name in DESCRIPTIONS:
            resource["description"] = description or DESCRIPTIONS[name]
        self.resources.append(resource)

    def document(self, name: str, path: str, doc, description: str) -> None:
        self.put(path, _json(doc).encode("utf-8"))
        self.resources.append({"name": name, "path": path, "format": "json", "mediatype": "application/json",
                               "encoding": "utf-8", "description": description})

    def text(self, name: str, path: str, text: str, description: str) -> None:
        self.put(path, text.encode("utf-8"))
        self.resources.append({"name": name, "path": path, "format": "md", "mediatype": "text/markdown",
                               "encoding": "utf-8", "description": description})


class _Pseudonyms:
    """rater id -> their id in the package, R0001, R0002, … in the order first asked: the answers are
    written first, so raters are numbered by their first answer (or the id itself with ``keep``). Every
    pseudonym has the same width, wide enough for ``n_raters`` (R00001 … from 10,000 raters), so they sort as
    text in their number's order."""

    def __init__(self, keep: bool, n_raters: int = 0) -> None:
        self.keep = keep
        self.width = max(4, len(str(n_raters)))
        self.ids: dict[str, str] = {}

    def __call__(self, rater: str) -> str:
        if self.keep:
            return rater
        if rater not in self.ids:
            self.ids[rater] = f"R{len(self.ids) + 1:0{self.width}d}"
        return self.ids[rater]


def _withdrawals(conn: Redis, study_id: str) -> dict:
    """Raters who withdrew ('proxima forget-rater', the Raters tab): how many, the answers that left with them
    and the date (UTC) of each withdrawal, oldest first. No id of theirs, not even its hash: the package says
    that data was removed and when, never whose."""
    from workers.store.deletion import audit_lines

    lines = [line for _, line in audit_lines(conn, study_id) if line.action == "forget_rater"]
    return {"raters": len(lines), "answers_removed": sum(line.answers for line in lines),
            "dates": [datetime.fromtimestamp(line.at, UTC).date().isoformat() for line in lines]}


def _flag_reason(row: dict) -> str:
    """Why a rater was flagged, in words, from their row of the rater table."""
    reasons = []
    if row["catch_failed"]:
        reasons.append(f"failed {row['catch_failed']} of {row['catch']} attention checks")
    if row["answer_check_flagged"]:
        p = row["answer_check_p"]
        rule = row["answer_check_rule"]
        reasons.append("the answer check found the answers unlike a careful rater's"
                       + (f" (p = {p:.3g})" if p is not None else "") + (f", closest to '{rule}'" if rule else ""))
    if row["self_agreement"] is not None and row["repeats"]:
        reasons.append(f"agreed with themself on {row['self_agreement']:.0%} of {row['repeats']} repeated questions")
    if row["too_fast_share"]:
        reasons.append(f"answered {row['too_fast_share']:.0%} of questions faster than the study's minimum time")
    return "; ".join(reasons) or "flagged"


#: Answers the learners never get, by design, and why (their flags or algorithm say which).
_NOT_LEARNED = (
    (lambda a: a.algorithm == answer_log.CATCH_ALGORITHM, "attention check (an answer with a known right "
                                                          "choice, not a similarity judgement)"),
    (lambda a: a.algorithm == answer_log.REPEAT_ALGORITHM, "validation repeat (a question asked again to "
                                                           "measure self-agreement; counted once)"),
    (lambda a: a.skipped, "skipped: the rater chose \"can't decide\""),
)


def _answer_exclusion(answer, rename: Callable[[str], str]) -> dict | None:
    """The row of ``exclusions.csv`` of an answer no learner is given by design, else None."""
    for applies, reason in _NOT_LEARNED:
        if applies(answer):
            return {"what": "answer", "rater": rename(answer.rater), "answer_id": answer.id, "reason": reason,
                    "effect": "kept in answers.csv, never given to a learner"}
    return None


def _rater_exclusions(conn: Redis, study_id: str, rename: Callable[[str], str], rows: list[dict]) -> list[dict]:
    """Rows of ``exclusions.csv``: raters excluded or flagged, then answers set aside by a learner."""
    out = []
    excluded = {r.decode() for r in conn.smembers(keys.excluded_raters(study_id))}
    for row in rows:
        if row["rater"] in excluded:
            reason = "excluded by the researcher"
            if row["flagged"]:
                reason += f" (flagged: {_flag_reason(row)})"
            out.append({"what": "rater", "rater": rename(row["rater"]), "answer_id": "", "reason": reason,
                        "effect": "every answer of the rater left out of the learners and of triplets.csv"})
        elif row["flagged"]:
            out.append({"what": "rater", "rater": rename(row["rater"]), "answer_id": "",
                        "reason": _flag_reason(row),
                        "effect": "flagged only: the answers are used (exclude the rater to leave them out)"})
    for entry in set_aside_answers(conn, study_id):
        out.append({"what": "answer", "rater": rename(entry["rater"]) if entry["rater"] else "",
                    "answer_id": entry["answer_id"], "reason": f"set aside: {entry['reason']}",
                    "effect": "left out of the learners"})
    return out


#: ``write_package`` reports its progress after this many answers written.
PROGRESS_EVERY = 2000


def write_package(conn: Redis, study_id: str, put: Callable[[str, bytes], None], rater_ids: bool = False,
                  status: dict | None = None, media: bool = True,
                  progress: Callable[[int, int], None] | None = None) -> dict:
    """Write the package's files through ``put(relative path, bytes)``; returns the descriptor (also written).

    ``status`` is the dashboard's numbers at export time (``webapp.stats.study_stats``), kept as
    status.json; ``media=False`` leaves the items' media files out; ``progress(answers written, answers in
    the log)`` is called every ``PROGRESS_EVERY`` answers and once all are written (the background build's
    progress bar)."""
    study = get_study(conn, study_id)
    config = study.config
    items = get_items(conn, study_id)
    ids = [item.id for item in items]
    w = _Writer(put)
    total = answer_log.count_answers(conn, study_id)
    # every answer's response time goes into the medians (the dashboard's table reads the latest 2,000)
    raters = rater_table(conn, study_id, limit=max(1, total))
    known = ({r.decode() for r in conn.smembers(keys.raters(study_id))}
             | {r.decode() for r in conn.smembers(keys.excluded_raters(study_id))} | {row["rater"] for row in raters})
    rename = _Pseudonyms(keep=rater_ids, n_raters=len(known))

    item_rows = []
    # the researcher's numeric item features (proxima features), one column each: "feature:NAME"
    feature_names = sorted({name for item in items for name in (item.features or {})})
    for index, item in enumerate(items):
        row = {"index": index, "id": item.id, "kind": item.kind, "label": item.label, "text": item.text,
               "color": item.color, "media_type": item.media_type, "file": "",
               **{f"feature:{name}": (item.features or {}).get(name) for name in feature_names}}
        data = get_media(conn, study_id, index) if media and item.media_type else None
        if data is not None:
            ext = mimetypes.guess_extension(item.media_type or "") or ".bin"
            row["file"] = f"media/{index:05d}-{_safe(item.id)}{ext}"
            put(row["file"], data)
        item_rows.append(row)
    w.table("items", "items.csv", ("index", "id", "kind", "label", "text", "color", "media_type", "file",
                                   *(f"feature:{name}" for name in feature_names)),
            item_rows, primary_key="index")

    not_learned: list[dict] = []  # collected in the same pass over the log as the answers
    held_out = [0]  # the held-out answers counted in the same pass

    def logged():
        for answer in answer_log.iter_answers(conn, study_id):
            held_out[0] += answer.heldout
            exclusion = _answer_exclusion(answer, rename)
            if exclusion is not None:
                not_learned.append(exclusion)
            yield answer

    def answer_rows():
        written = 0
        for written, row in enumerate(answer_log.answer_rows(logged(), ids, study_id), start=1):
            row["rater"] = rename(row["rater"])
            yield row
            if progress is not None and written % PROGRESS_EVERY == 0:
                progress(written, max(total, written))  # answers may arrive while the package is written
        if progress is not None:
            progress(written, max(total, written))

    w.table("answers", "answers.csv", answer_log.CSV_COLUMNS, answer_rows(), primary_key="answer_id")
    # raters with no answer in the log (excluded before answering, counters only) are numbered after the rest
    for rater in sorted({r.decode() for r in conn.smembers(keys.raters(study_id))}
                        | {r.decode() for r in conn.smembers(keys.excluded_raters(study_id))}
                        | {row["rater"] for row in raters}):
        rename(rater)

    columns = [c for c in RATER_COLUMNS if rater_ids or c != "completion_code"]
    w.table("raters", "raters.csv", columns,
            ({**r, "rater": rename(r["rater"]),
              "last_answer_at": None if r["last_answer_at"] is None else _iso(r["last_answer_at"])} for r in raters),
            primary_key="rater")
    w.table("exclusions", "exclusions.csv", ("what", "rater", "answer_id", "reason", "effect"),
            _rater_exclusions(conn, study_id, rename, raters) + not_learned)

    excluded = {r.decode() for r in conn.smembers(keys.excluded_raters(study_id))}
    lines = "".join(answer_log.export_triplets(answer_log.iter_answers(conn, study_id), excluded))
    w.table("triplets", "triplets.csv", ("i", "j", "k"),
            (dict(zip(("i", "j", "k"), line.split(","), strict=True)) for line in lines.splitlines() if line))

    learners = []
    for index, alg in enumerate(config.algorithms):
        entry = {"label": alg.label, "algorithm": alg.algorithm, "question_kind": alg.question_kind,
                 "seed": None if config.random_state is None else int(config.random_state) + index}
        doc = nn_graph(conn, study_id, alg.label)
        slug = _safe(alg.label)
        w.table(f"graph-{slug.lower()}", f"graphs/{slug}.csv", GRAPH_CSV_COLUMNS, doc["edges"],
                description=f"The nearest-neighbour graph learned by '{alg.label}' ({alg.algorithm}), k = {doc['k']}: "
                            "one row per (item, neighbour), estimate with its lower and upper bound.")
        w.document(f"graph-{slug.lower()}-json", f"graphs/{slug}.json", doc,
                   "The same graph as JSON (docs/exports.md), with k and the method.")
        entry["graph"] = f"graphs/{slug}.json"
        if alg.algorithm in FOREST_ALGORITHMS:
            w.document(f"forest-{slug.lower()}", f"forests/{slug}.json", forest_document(conn, study_id, alg.label),
                       f"The comparison forest of '{alg.label}' (docs/forest-schema.md).")
            entry["forest"] = f"forests/{slug}.json"
        try:  # any learner may have fitted an embedding (embedding learners, duels)
            emb = embedding_document(conn, study_id, alg.label)
        except ExportError as exc:
            entry["embedding_missing"] = str(exc)
        else:
            columns = ("item", *(f"x{d + 1}" for d in range(emb["dim"])))
            w.table(f"embedding-{slug.lower()}", f"embeddings/{slug}.csv", columns,
                    ({"item": item, **{f"x{d + 1}": v for d, v in enumerate(row)}}
                     for item, row in zip(emb["items"], emb["coordinates"], strict=True)),
                    description=f"{describe_fit(emb)} Defined up to rotation, reflection, shift and scale.")
            w.document(f"embedding-{slug.lower()}-json", f"embeddings/{slug}.json", emb,
                       "The same embedding as JSON, with its dimension, fit quality and the fit's progress.")
            entry["embedding"] = f"embeddings/{slug}.json"
            entry["embedding_dim"] = emb["dim"]
            entry["embedding_fit"] = emb["fit_quality"]["share_predicted"]
        learners.append(entry)

    study_doc = {"id": study.id, "name": config.name, "status": study.status, "created_at": study.created_at,
                 "n_items": study.n_items, "config": config.to_dict()}
    w.document("study", "study.json", study_doc, "The study and its config as the server ran it.")
    if config.instructions:
        w.text("instructions", "instructions.md", config.instructions, "The instructions raters read.")
    if config.consent:
        w.text("consent", "consent.md", config.consent, "The consent text raters agreed to before answering.")
    if status is not None:  # it names raters in places (a rebuild's excluded raters): pseudonyms there too
        w.document("status", "status.json", _renamed(status, rename, [r["rater"] for r in raters]),
                   "The dashboard's numbers when the package was made.")

    defaults = {}
    for want, key in (("graph", "graph"), ("embedding", "embedding")):
        having = [e for e in learners if key in e]
        if having:  # as the exports pick without --algorithm: the first, graph learners first
            graph_first = sorted(having, key=lambda e: not _learns_graph(config, e["label"]))
            defaults[want] = graph_first[0]["label"]
    descriptor = {
        "name": f"proxima-{study.id}".lower(),
        "title": config.name,
        "description": f"Answers and learned results of the Proxima study '{config.name}' ({study.n_items} items).",
        "created": datetime.now(tz=UTC).isoformat(timespec="seconds"),
        "profile": "data-package",
        "resources": w.resources,
        "proxima": {
            "package_version": PACKAGE_VERSION, "study": study.id, "exported_at": time.time(),
            "platform": platform_version(), "rater_ids": "recruitment" if rater_ids else "pseudonymous",
            "seeds": {"random_state": config.random_state,
                      "learners": {e["label"]: e["seed"] for e in learners},
                      "note": "each learner is seeded with random_state + its position in the config"
                              if config.random_state is not None else
                              "the study set no random_state: its questions were drawn unseeded"},
            "learners": learners, "defaults": defaults, "excluded_raters": len(excluded),
            "withdrawals": _withdrawals(conn, study_id),
            "heldout": {"share": config.heldout_share, "answers": held_out[0],
                        "note": "each learner's questions were held out at random with this probability: their "
                                "answers (heldout = 1 in answers.csv) were never learned from and score the "
                                "learners' models (the Learning tab's held-out curves)"},
        },
    }
    put("datapackage.json", json.dumps(descriptor, indent=1).encode("utf-8"))
    return descriptor


def _renamed(doc, rename: Callable[[str], str], raters: list[str]):
    """``doc`` with every rater id in its strings (alone or in a message) replaced by the package's id."""
    ids = sorted((r for r in raters if rename(r) != r), key=len, reverse=True)
    if not ids:
        return doc
    # a rater id is made of letters, digits and _.:@- (answers.RATER_ID_PATTERN): match whole ids only
    pattern = re.compile(r"(?<![A-Za-z0-9_.:@-])(" + "|".join(map(re.escape, ids)) + r")(?![A-Za-z0-9_.:@-])")

    def walk(value):
        if isinstance(value, str):
            return pattern.sub(lambda m: rename(m.group(1)), value)
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [walk(v) for v in value]
        return value

    return walk(doc)


def _learns_graph(config, label: str) -> bool:
    alg = config.get_algorithm(label)
    return bool(alg and alg.learns_graph)


def write_package_folder(conn: Redis, study_id: str, folder: str | Path, **options: Any) -> dict:
    """Write the package into ``folder`` (made if missing; it must be empty)."""
    folder = Path(folder)
    if folder.exists() and any(folder.iterdir()):
        raise PackageError(f"{folder} is not empty; choose a new folder (or a .zip file) for the package")
    folder.mkdir(parents=True, exist_ok=True)

    def put(path: str, data: bytes) -> None:
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)

    return write_package(conn, study_id, put, **options)


def write_package_zip(conn: Redis, study_id: str, target: str | Path | IO[bytes] | None = None,
                      **options: Any) -> IO[bytes] | None:
    """Write the package as a zip (its files under one folder named after the study) to ``target``
    (a path or a binary file); without a target, return a spooled temporary file positioned at 0."""
    out = target if target is not None else tempfile.SpooledTemporaryFile(max_size=32 * 1024 * 1024)
    top = package_filename(study_id)
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        write_package(conn, study_id, lambda path, data: archive.writestr(f"{top}/{path}", data), **options)
    if target is None:
        out.seek(0)
        return out
    return None
