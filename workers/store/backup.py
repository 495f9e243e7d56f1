"""A study as one portable file: back it up as versioned NDJSON, restore it into any Proxima Redis.

A backup holds what cannot be recomputed: the study's config and status, its stylesheet, its
items (media bytes as base64), the whole answer log in order with its stream ids, the answers set aside,
excluded raters, rater statistics and counters, and what was removed from the study's data (the audit
lines of forgotten raters: when, by whom, how many answers; ``workers.store.deletion``). A restore trusts
none of what the log implies: rater statistics, flags, attention-check and repeat outcomes and completion
are recomputed from the restored log, and a log answering one question twice is refused. Engine states
are not in it (``proxima rebuild`` replays the log into them), nor question pools, issued questions, used tokens or
trained models. A restore leaves out the raters this Redis knows were forgotten since the backup was made
(``leave_out_forgotten``), and ``backups_holding`` finds the backup files that still hold a rater. Also
reads the set-aside answers for the dashboard. Must never import Flask or the engine (numpy).
"""
from __future__ import annotations

import base64
import binascii
import json
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import redis

from workers.store import keys
from workers.store.answers import Answer, answer_problem
from workers.store.config import ConfigError, StudyConfig
from workers.store.deletion import AuditLine, forgotten_in, rater_digest, study_rater_digest
from workers.store.raters import KEPT_RATER_FIELDS, replay_rater_stats
from workers.store.studies import (
    STUDY_STATUSES,
    Item,
    StudyError,
    check_config_for_items,
    check_study_id,
    check_stylesheet,
    get_study,
    set_stylesheet,
)

if TYPE_CHECKING:
    from redis import Redis


FORMAT = "proxima-backup"
#: Version 2 added the ``removed`` records (audit lines of forgotten raters); version 1 files are still read.
VERSION = 2
#: Record types after the header line, in the order a backup writes them.
RECORD_TYPES = ("study", "item", "answer", "set_aside", "excluded_rater", "removed", "raters", "counters",
                "rater_stats", "per_minute", "end")
#: Records that appear at most once (``study`` exactly once).
SINGLE_RECORDS = ("study", "raters", "counters", "rater_stats", "per_minute", "end")
#: The header's counts, checked against the records on restore (a truncated file is refused).
COUNTED = {"items": "item", "answers": "answer", "set_aside": "set_aside", "excluded_raters": "excluded_rater",
           "removed": "removed"}
STREAM_ID = re.compile(r"^(\d+)-(\d+)$")
_STUDY_FIELDS = ("name", "status", "created_at", "n_items")  # besides config, required in the study hash


class BackupError(ValueError):
    """A backup that cannot be written or restored; the message names the line and the problem."""


def _stream_order(entry_id: str) -> tuple[int, int]:
    ms, seq = entry_id.split("-")
    return int(ms), int(seq)


def _text(value: bytes) -> str:
    return value.decode("utf-8")


def _text_hash(raw: dict) -> dict[str, str]:
    return {_text(k): _text(v) for k, v in raw.items()}


# ---------------------------------------------------------------------------- set-aside answers
def set_aside_answers(conn: Redis, study_id: str) -> list[dict]:
    """Answers no engine could use, oldest first: ``{"answer_id", "reason", "rater", "algorithm",
    "kind", "fields"}`` (``fields``: the log entry as stored, empty if it is gone from the log).

    They stay in the answer log; the update job and ``rebuild`` skip them and keep the reason.
    """
    reasons = _text_hash(conn.hgetall(keys.poisoned(study_id)))
    ids = sorted(reasons, key=_stream_order)
    with conn.pipeline(transaction=False) as pipe:
        for answer_id in ids:
            pipe.xrange(keys.answers(study_id), min=answer_id, max=answer_id)
        entries = pipe.execute()
    out = []
    for answer_id, found in zip(ids, entries, strict=True):
        fields = _text_hash(found[0][1]) if found else {}
        out.append({"answer_id": answer_id, "reason": reasons[answer_id], "rater": fields.get("rater"),
                    "algorithm": fields.get("algorithm"), "kind": fields.get("kind"), "fields": fields})
    return out


# ---------------------------------------------------------------------------- backup
def _line(record: dict) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


def _generator() -> str:
    try:
        from importlib.metadata import version

        return f"proxima {version('proxima')}"
    except Exception:  # noqa: BLE001 - an uninstalled checkout still writes backups
        return "proxima"


def backup_lines(conn: Redis, study_id: str, chunk: int = 5000) -> Iterator[str]:
    """The study as NDJSON lines (each ending in a newline): a header, then one record per line.

    The log is read up to its last answer when the backup starts; a running study keeps taking
    answers meanwhile (pause it first for a backup that matches its statistics exactly).
    Raises StudyNotFound before yielding anything.
    """
    get_study(conn, study_id)  # StudyNotFound before the first line
    with conn.pipeline(transaction=True) as pipe:  # one consistent snapshot of the small keys
        pipe.hgetall(keys.study(study_id))
        pipe.lrange(keys.items(study_id), 0, -1)
        pipe.hkeys(keys.media(study_id))
        pipe.xrevrange(keys.answers(study_id), count=1)
        pipe.xlen(keys.answers(study_id))
        pipe.hgetall(keys.poisoned(study_id))
        pipe.smembers(keys.excluded_raters(study_id))
        pipe.smembers(keys.raters(study_id))
        pipe.hgetall(keys.counters(study_id))
        pipe.hgetall(keys.rater_stats(study_id))
        pipe.hgetall(keys.answers_per_minute(study_id))
        pipe.get(keys.stylesheet(study_id))
        pipe.xrange(keys.audit(study_id))
        (study, items, media_keys, last, n_answers, poisoned, excluded, raters, counters, rater_stats,
         per_minute, stylesheet, removed) = pipe.execute()
    last_id = _text(last[0][0]) if last else None
    set_aside = {k: v for k, v in _text_hash(poisoned).items()
                 if last_id is not None and _stream_order(k) <= _stream_order(last_id)}
    study = _text_hash(study)
    config = json.loads(study.pop("config"))
    with_media = {int(k) for k in media_keys}
    counts = {"items": len(items), "answers": int(n_answers), "set_aside": len(set_aside),
              "excluded_raters": len(excluded), "removed": len(removed)}
    yield _line({"format": FORMAT, "version": VERSION, "study": study_id,
                 "created": datetime.now(tz=UTC).isoformat(timespec="seconds"), "generator": _generator(),
                 "counts": counts})
    record = {"type": "study", "fields": study, "config": config}
    if stylesheet is not None:
        record["stylesheet"] = _text(stylesheet)
    yield _line(record)
    for index, raw in enumerate(items):
        record = {"type": "item", "index": index, "item": json.loads(raw)}
        if index in with_media:
            data = conn.hget(keys.media(study_id), str(index))
            if data is not None:
                record["media"] = base64.b64encode(data).decode("ascii")
        yield _line(record)
    written, after = 0, "-"
    while last_id is not None and written < counts["answers"]:
        entries = conn.xrange(keys.answers(study_id), min=after, max=last_id, count=chunk)
        if not entries:
            break
        for entry_id, fields in entries:
            yield _line({"type": "answer", "id": _text(entry_id), "fields": _text_hash(fields)})
        written += len(entries)
        after = f"({_text(entries[-1][0])}"
    if written != counts["answers"]:  # the log was trimmed or deleted while we read it
        raise BackupError(f"the answer log of study {study_id} changed while it was backed up "
                          f"({written} of {counts['answers']} answers read); run the backup again")
    for answer_id in sorted(set_aside, key=_stream_order):
        yield _line({"type": "set_aside", "answer": answer_id, "reason": set_aside[answer_id]})
    for rater in sorted(_text(r) for r in excluded):
        yield _line({"type": "excluded_rater", "rater": rater})
    for entry_id, fields in removed:  # what left the study's data, so a reader knows the log is not whole
        yield _line({"type": "removed", "id": _text(entry_id), "fields": _text_hash(fields)})
    yield _line({"type": "raters", "raters": sorted(_text(r) for r in raters)})
    yield _line({"type": "counters", "fields": _text_hash(counters)})
    yield _line({"type": "rater_stats", "fields": _text_hash(rater_stats)})
    yield _line({"type": "per_minute", "fields": _text_hash(per_minute)})
    # the lines before this one: header, study, the counted records, raters, counters, rater_stats, per_minute
    yield _line({"type": "end", "lines": 6 + sum(counts.values())})  # a file cut short lacks this line


# ---------------------------------------------------------------------------- reading a backup
@dataclass
class Backup:
    """A parsed, validated backup file."""

    version: int
    study_id: str
    created: str
    study_fields: dict[str, str]
    config: dict
    items: list[dict] = field(default_factory=list)
    media: dict[int, bytes] = field(default_factory=dict)
    answers: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    set_aside: dict[str, str] = field(default_factory=dict)
    excluded_raters: list[str] = field(default_factory=list)
    #: audit lines of removals from the study's data (forgotten raters), by their stream id
    removed: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    raters: list[str] = field(default_factory=list)
    hashes: dict[str, dict[str, str]] = field(default_factory=dict)  # counters, rater_stats, per_minute
    stylesheet: str | None = None
    #: answers the live path would have refused, set aside by the restore's own checks: they count for nothing
    refused: set[str] = field(default_factory=set)


def _fail(line: int, message: str) -> BackupError:
    return BackupError(f"line {line}: {message}")


def _string_map(value, line: int, what: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise _fail(line, f"{what} must be an object of text values")
    return value


def _check_header(doc, line: int = 1) -> tuple[int, str, str, dict]:
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise _fail(line, f"not a Proxima backup (the first line must be a JSON header with \"format\": \"{FORMAT}\")")
    version = doc.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise _fail(line, "the header's 'version' must be an integer")
    if version > VERSION:
        raise _fail(line, f"backup format version {version} was written by a newer Proxima; "
                          f"this one reads version {VERSION}")
    if version < 1:
        raise _fail(line, f"backup format version {version} is not supported")
    study_id = doc.get("study")
    try:
        check_study_id(study_id)
    except StudyError as exc:
        raise _fail(line, f"header: {exc}") from None
    counts = doc.get("counts")
    if isinstance(counts, dict) and version < 2:
        counts = {"removed": 0, **counts}  # version 1 had no removed records
    if not isinstance(counts, dict) or any(not isinstance(counts.get(name), int) or counts[name] < 0
                                           for name in COUNTED):
        raise _fail(line, f"the header's 'counts' must give {', '.join(COUNTED)} as numbers")
    return version, study_id, str(doc.get("created", "")), counts


def _parse_record(backup: Backup, record: dict, line: int, state: dict) -> None:
    kind = record["type"]
    if kind == "study":
        fields = _string_map(record.get("fields"), line, "the study's 'fields'")
        missing = [name for name in _STUDY_FIELDS if name not in fields]
        if missing:
            raise _fail(line, f"the study's fields lack {', '.join(missing)}")
        if fields["status"] not in STUDY_STATUSES:
            raise _fail(line, f"the study's status {fields['status']!r} is not one of {', '.join(STUDY_STATUSES)}")
        try:
            float(fields["created_at"])
        except ValueError:
            raise _fail(line, f"the study's created_at {fields['created_at']!r} is not a unix time") from None
        if not isinstance(record.get("config"), dict):
            raise _fail(line, "the study's 'config' must be an object")
        try:
            StudyConfig.from_dict(record["config"])
        except ConfigError as exc:
            raise _fail(line, f"the study's config: {exc}") from None
        if record.get("stylesheet") is not None:
            try:
                backup.stylesheet = check_stylesheet("the study's stylesheet", record["stylesheet"])
            except (StudyError, TypeError) as exc:
                raise _fail(line, str(exc)) from None
        backup.study_fields, backup.config = dict(fields), record["config"]
    elif kind == "item":
        if record.get("index") != len(backup.items):
            raise _fail(line, f"expected item index {len(backup.items)}, got {record.get('index')!r} "
                              "(items must come in order 0, 1, 2, ...)")
        try:
            Item.from_dict(record.get("item"))
        except (StudyError, TypeError, ValueError) as exc:
            raise _fail(line, f"item {record.get('index')}: {exc}") from None
        if "media" in record:
            try:
                backup.media[len(backup.items)] = base64.b64decode(record["media"], validate=True)
            except (binascii.Error, TypeError, ValueError):
                raise _fail(line, f"item {record['index']}: 'media' is not valid base64") from None
        backup.items.append(record["item"])
    elif kind == "answer":
        answer_id = record.get("id")
        if not isinstance(answer_id, str) or not STREAM_ID.match(answer_id) or answer_id == "0-0":
            raise _fail(line, f"answer id {answer_id!r} is not a stream id like 1700000000000-0")
        if state["last_answer"] is not None and _stream_order(answer_id) <= _stream_order(state["last_answer"]):
            raise _fail(line, f"answer {answer_id} is not after answer {state['last_answer']} (the log must be "
                              "in order)")
        fields = _string_map(record.get("fields"), line, f"answer {answer_id}: 'fields'")
        if not fields:
            raise _fail(line, f"answer {answer_id} has no fields")
        state["last_answer"] = answer_id
        state["answer_lines"][answer_id] = line
        backup.answers.append((answer_id, fields))
    elif kind == "set_aside":
        if not isinstance(record.get("answer"), str) or not isinstance(record.get("reason"), str):
            raise _fail(line, "a set-aside record needs 'answer' (an answer id) and 'reason' (text)")
        backup.set_aside[record["answer"]] = record["reason"]
        state["set_aside_lines"][record["answer"]] = line
    elif kind == "excluded_rater":
        if not isinstance(record.get("rater"), str) or not record["rater"]:
            raise _fail(line, "an excluded-rater record needs 'rater' (a rater id)")
        backup.excluded_raters.append(record["rater"])
    elif kind == "removed":
        entry_id = record.get("id")
        if not isinstance(entry_id, str) or not STREAM_ID.match(entry_id):
            raise _fail(line, f"removed record id {entry_id!r} is not a stream id like 1700000000000-0")
        fields = _string_map(record.get("fields"), line, "a removed record's 'fields'")
        try:
            AuditLine.from_fields(fields)
        except (KeyError, ValueError):
            raise _fail(line, "a removed record needs action, at, by, rater_sha256 and answers") from None
        if backup.removed and _stream_order(entry_id) <= _stream_order(backup.removed[-1][0]):
            raise _fail(line, f"removed record {entry_id} is not after {backup.removed[-1][0]}")
        backup.removed.append((entry_id, fields))
    elif kind == "raters":
        raters = record.get("raters")
        if not isinstance(raters, list) or not all(isinstance(r, str) and r for r in raters):
            raise _fail(line, "'raters' must be a list of rater ids")
        backup.raters = raters
    elif kind == "end":
        if record.get("lines") != line - 1:
            raise _fail(line, f"the 'end' record counts {record.get('lines')!r} lines before it, not {line - 1}; "
                              "the file was edited")
    else:  # counters, rater_stats, per_minute
        backup.hashes[kind] = _string_map(record.get("fields"), line, f"{kind} 'fields'")


def read_backup(lines: Iterable[str | bytes]) -> Backup:
    """Parse and check a whole backup; raises BackupError naming the first bad line."""
    backup: Backup | None = None
    counts: dict = {}
    seen = dict.fromkeys(RECORD_TYPES, 0)
    state = {"last_answer": None, "answer_lines": {}, "set_aside_lines": {}}
    line = 0
    for line, text in enumerate(lines, start=1):
        if isinstance(text, bytes):
            try:
                text = text.decode("utf-8")
            except UnicodeDecodeError:
                raise _fail(line, "is not UTF-8 text") from None
        if not text.strip():
            raise _fail(line, "is empty (a backup has one JSON record per line)")
        try:
            record = json.loads(text)
        except json.JSONDecodeError as exc:
            raise _fail(line, f"is not valid JSON ({exc.msg} at column {exc.colno}); the file may be damaged "
                              "or cut short") from None
        if backup is None:
            version, study_id, created, counts = _check_header(record, line)
            backup = Backup(version, study_id, created, {}, {})
            continue
        if not isinstance(record, dict) or record.get("type") not in RECORD_TYPES:
            kind = record.get("type") if isinstance(record, dict) else None
            raise _fail(line, f"unknown record type {kind!r}; expected one of {', '.join(RECORD_TYPES)}")
        kind = record["type"]
        if seen["end"]:
            raise _fail(line, "follows the 'end' record (the file was edited or joined with another)")
        if kind in SINGLE_RECORDS and seen[kind]:
            raise _fail(line, f"a second '{kind}' record (a backup has one)")
        if kind != "study" and not seen["study"]:
            raise _fail(line, "the 'study' record must come right after the header")
        seen[kind] += 1
        _parse_record(backup, record, line, state)
    if backup is None:
        raise BackupError("the backup is empty")
    if not seen["study"]:
        raise _fail(line, "the backup ends before its 'study' record")
    if not seen["end"]:
        raise _fail(line, "the backup ends without its 'end' record: the file is incomplete (cut short?)")
    for name, kind in COUNTED.items():
        if seen[kind] != counts[name]:
            raise _fail(line, f"the backup ends with {seen[kind]} {name.replace('_', ' ')} but its header "
                              f"promises {counts[name]}; the file is incomplete or was edited")
    _check_whole(backup, state)
    return backup


def _check_whole(backup: Backup, state: dict) -> None:
    """Checks across records: items fit the config, set-aside answers exist, every answer is readable."""
    n_items = backup.study_fields["n_items"]
    if not n_items.isdigit() or int(n_items) != len(backup.items):
        raise BackupError(f"the study record says n_items={n_items!r} but the backup holds {len(backup.items)} items")
    try:
        check_config_for_items(StudyConfig.from_dict(backup.config), [Item.from_dict(i) for i in backup.items])
    except StudyError as exc:
        raise BackupError(f"the items do not fit the study's config: {exc}") from None
    config = StudyConfig.from_dict(backup.config)
    lines = state["answer_lines"]
    _refuse_duplicate_questions(backup, lines)
    for answer_id, line in state["set_aside_lines"].items():
        if answer_id not in lines:
            raise _fail(line, f"set-aside answer {answer_id} is not in the backup's answer log")
    for answer_id, fields in backup.answers:
        if answer_id in backup.set_aside:
            continue  # kept as logged, however malformed: it was set aside with its reason
        try:
            answer = Answer.from_stream(answer_id.encode(), {k.encode(): v.encode() for k, v in fields.items()})
        except (KeyError, ValueError) as exc:
            raise _fail(lines[answer_id], f"answer {answer_id} cannot be read ({type(exc).__name__}: {exc}) and is "
                                          "not marked as set aside") from None
        # the live path's checks: an answer it would have refused is kept in the log but set aside
        # with its reason, so no engine learns from it
        problem = answer_problem(answer, int(n_items), config)
        if problem is not None:
            backup.set_aside[answer_id] = f"restore: {problem}"
            backup.refused.add(answer_id)


def _refuse_duplicate_questions(backup: Backup, lines: dict[str, int]) -> None:
    """A question is answered once (its token is used up): a log with two answers to one question id
    was edited or joined with another. Imported answers (no question id) are exempt."""
    first: dict[str, str] = {}
    duplicates = []
    for answer_id, fields in backup.answers:
        qid = fields.get("qid", "")
        if not qid:
            continue
        if qid in first:
            duplicates.append(f"{qid} (answers {first[qid]} and {answer_id}, lines {lines[first[qid]]} and "
                              f"{lines[answer_id]})")
        else:
            first[qid] = answer_id
    if duplicates:
        shown = "; ".join(duplicates[:5]) + (f"; and {len(duplicates) - 5} more" if len(duplicates) > 5 else "")
        raise BackupError(f"the answer log answers one question twice: question {shown}. A question is answered "
                          "once, so the file was edited or joined with another; nothing was restored")


def _replayed(backup: Backup) -> tuple[dict[str, str], dict[str, str], set[str], dict[str, int]]:
    """What a restore derives from the answer log instead of taking it from the file: each answer's
    outcome flags, the rater statistics (``raters.replay_rater_stats``; only what a rater typed, the
    debrief, is kept from the file), the raters and the answers per algorithm. Answers the live path
    would have refused (or that cannot be read) count for nothing; ones set aside later (by an update
    pass) were accepted and count, as they did."""
    config = StudyConfig.from_dict(backup.config)
    answers = []
    for answer_id, fields in backup.answers:
        if answer_id in backup.refused:
            continue
        try:
            answers.append(Answer.from_stream(answer_id.encode(), {k.encode(): v.encode() for k, v in fields.items()}))
        except (KeyError, ValueError):
            continue  # unreadable: kept in the log, set aside in the file with its reason (_check_whole)
    flags, rater_stats = replay_rater_stats(answers, config, backup.items)
    for name, value in backup.hashes.get("rater_stats", {}).items():
        rater, what = keys.split_rater_field(name)
        if rater and what in KEPT_RATER_FIELDS:
            rater_stats[name] = value
    per_algorithm: dict[str, int] = {}
    for answer in answers:
        field = keys.counter_field("answers", answer.algorithm)
        per_algorithm[field] = per_algorithm.get(field, 0) + 1
    return flags, rater_stats, {answer.rater for answer in answers}, per_algorithm


# ---------------------------------------------------------------------------- forgotten raters
def _raters_named(backup: Backup) -> set[str]:
    """Every rater id the backup holds: in its answers, raters, exclusions and statistics."""
    named = {fields.get("rater", "") for _, fields in backup.answers} | set(backup.raters) | set(backup.excluded_raters)
    named |= {keys.split_rater_field(name)[0] for name in backup.hashes.get("rater_stats", {})}
    return named - {""}


def leave_out_forgotten(conn: Redis, backup: Backup, target: str) -> dict[str, int]:
    """Take out of ``backup`` every rater this Redis knows was forgotten from its study (or from ``target``),
    the study still here or deleted since: their answers, set-aside marks, exclusion, statistics and answers
    per minute. Returns {rater: answers left out}; the restore keeps them forgotten."""
    gone = forgotten_in(conn, {backup.study_id, target}, _raters_named(backup))
    if not gone:
        return {}
    left_out = dict.fromkeys(sorted(gone), 0)
    dropped: set[str] = set()
    kept = []
    minutes = dict(backup.hashes.get("per_minute", {}))
    for answer_id, fields in backup.answers:
        if fields.get("rater") not in gone:
            kept.append((answer_id, fields))
            continue
        left_out[fields["rater"]] += 1
        dropped.add(answer_id)
        try:
            minute = str(int(float(fields.get("answered_at") or 0) // 60))
        except ValueError:
            continue
        if minute in minutes:
            remaining = int(minutes[minute]) - 1
            if remaining > 0:
                minutes[minute] = str(remaining)
            else:
                del minutes[minute]
    backup.answers = kept
    backup.set_aside = {k: v for k, v in backup.set_aside.items() if k not in dropped}
    backup.refused -= dropped
    backup.excluded_raters = [r for r in backup.excluded_raters if r not in gone]
    backup.raters = [r for r in backup.raters if r not in gone]
    backup.hashes["rater_stats"] = {k: v for k, v in backup.hashes.get("rater_stats", {}).items()
                                    if keys.split_rater_field(k)[0] not in gone}
    backup.hashes["per_minute"] = minutes
    return left_out


def backups_holding(folders: Iterable[Path], study_id: str, rater: str) -> list[tuple[Path, int]]:
    """The backup files (``*.ndjson`` in ``folders``) of ``study_id`` that hold anything of ``rater``, with how
    many of their answers; read line by line, files that are not backups skipped."""
    needle = json.dumps(rater, ensure_ascii=False)[1:-1].encode()
    found = []
    for folder in folders:
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.ndjson")):
            try:
                with path.open("rb") as fh:
                    header = json.loads(fh.readline() or b"null")
                    if not (isinstance(header, dict) and header.get("format") == FORMAT
                            and header.get("study") == study_id):
                        continue
                    answers, named = 0, False
                    for raw in fh:
                        if needle not in raw:
                            continue
                        record = json.loads(raw)
                        if record.get("type") == "answer" and record.get("fields", {}).get("rater") == rater:
                            answers += 1
                        elif record.get("type") in ("raters", "excluded_rater", "rater_stats") and (
                                rater in record.get("raters", ()) or record.get("rater") == rater
                                or any(keys.split_rater_field(k)[0] == rater for k in record.get("fields", {}))):
                            named = True
            except (OSError, ValueError):
                continue
            if answers or named:
                found.append((path, answers))
    return found


# ---------------------------------------------------------------------------- restore
@dataclass(frozen=True)
class RestoreReport:
    study_id: str
    source_study: str
    items: int
    answers: int
    set_aside: int
    created: str
    #: raters forgotten on this Redis after the backup was made: left out, they stay forgotten ({rater: answers})
    forgotten_left_out: dict[str, int] = field(default_factory=dict)


def _derived_keys(study_id: str, labels: list[str]) -> list[str]:
    """Keys a restore clears: whatever an earlier study of this id left behind besides its study hash."""
    per_study = [keys.items, keys.media, keys.answers, keys.pool_targets, keys.finished, keys.active_raters,
                 keys.issued, keys.issued_questions, keys.raters, keys.excluded_raters, keys.answers_per_minute,
                 keys.counters, keys.cursor, keys.refresh_latencies, keys.poisoned, keys.engine_stats,
                 keys.update_scheduled, keys.rater_stats, keys.stylesheet, keys.audit]
    names = [make(study_id) for make in per_study]
    for label in labels:
        names += [keys.pool(study_id, label), keys.engine(study_id, label)]
    return names


def restore_study(conn: Redis, lines: Iterable[str | bytes], as_id: str | None = None) -> RestoreReport:
    """Restore a backup as a new study (its own id, or ``as_id``), all or nothing.

    Reads and checks the whole file first, then writes every key in one MULTI guarded by WATCH on
    the study, so a failure or a crash leaves no half-restored study. Refuses an id in use.
    Engine state is not written: run ``rebuild`` (or let a worker's first update replay the log).
    """
    backup = read_backup(lines)
    try:
        target = check_study_id(as_id) if as_id is not None else backup.study_id
    except StudyError as exc:
        raise BackupError(f"--as: {exc}") from None
    labels = [a.label for a in StudyConfig.from_dict(backup.config).algorithms]
    left_out = leave_out_forgotten(conn, backup, target)
    flags, rater_stats, raters, per_algorithm = _replayed(backup)
    # statistics, flags, check outcomes and codes come from the log, never from the file
    hashes = {"rater_stats": rater_stats, "per_minute": backup.hashes.get("per_minute", {}),
              "counters": {**{k: v for k, v in backup.hashes.get("counters", {}).items()
                              if not k.startswith("answers:")}, **{k: str(v) for k, v in per_algorithm.items()}}}
    config_json = json.dumps(backup.config, sort_keys=True)
    with conn.pipeline(transaction=True) as pipe:
        pipe.watch(keys.study(target))
        if pipe.exists(keys.study(target)):
            pipe.reset()
            raise BackupError(f"a study with id '{target}' already exists; restore it under another id with "
                              "--as NEW_ID")
        pipe.multi()
        pipe.delete(*_derived_keys(target, labels))
        pipe.hset(keys.study(target), mapping={**backup.study_fields, "config": config_json})
        if backup.items:
            pipe.rpush(keys.items(target), *[json.dumps(item, sort_keys=True) for item in backup.items])
        if backup.stylesheet:
            set_stylesheet(conn, target, backup.stylesheet, pipeline=pipe)
        if backup.media:
            pipe.hset(keys.media(target), mapping={str(i): data for i, data in backup.media.items()})
        for answer_id, fields in backup.answers:
            if answer_id in flags:
                fields = {**fields, "flags": flags[answer_id]}
            pipe.xadd(keys.answers(target), fields, id=answer_id)
        if backup.set_aside:
            pipe.hset(keys.poisoned(target), mapping=backup.set_aside)
        if backup.excluded_raters:
            pipe.sadd(keys.excluded_raters(target), *backup.excluded_raters)
        for entry_id, fields in backup.removed:
            pipe.xadd(keys.audit(target), fields, id=entry_id)
        # raters forgotten before (the backup's audit lines) or since (left out) stay forgotten in the new study
        forgotten = {fields.get("rater_sha256") for _, fields in backup.removed} | {rater_digest(r) for r in left_out}
        if forgotten - {None, ""}:
            pipe.sadd(keys.forgotten_raters(target), *sorted(forgotten - {None, ""}))
        for rater, n in left_out.items():
            pipe.sadd(keys.forgotten_anywhere(), study_rater_digest(target, rater))
            pipe.xadd(keys.audit(target), AuditLine(action="forget_rater", at=time.time(), by="restore",
                                                    rater_sha256=rater_digest(rater), answers=n).to_fields())
        if raters:
            pipe.sadd(keys.raters(target), *sorted(raters))
        for name, make in (("counters", keys.counters), ("rater_stats", keys.rater_stats),
                           ("per_minute", keys.answers_per_minute)):
            if hashes.get(name):
                pipe.hset(make(target), mapping=hashes[name])
        pipe.sadd(keys.studies(), target)
        try:
            pipe.execute()
        except redis.WatchError:
            raise BackupError(f"a study with id '{target}' was created while restoring; nothing was written; "
                              "restore it under another id with --as NEW_ID") from None
        except redis.RedisError as exc:
            # EXEC runs every queued command even when one fails: take the partial study away again
            conn.srem(keys.studies(), target)
            conn.delete(keys.study(target), *_derived_keys(target, labels))
            raise BackupError(f"the restore of study '{target}' failed and was undone: {exc}") from None
    return RestoreReport(study_id=target, source_study=backup.study_id, items=len(backup.items),
                         answers=len(backup.answers), set_aside=len(backup.set_aside), created=backup.created,
                         forgotten_left_out=left_out)
