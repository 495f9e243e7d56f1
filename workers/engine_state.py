"""Saving and loading engine state in Redis: numpy arrays as .npy bytes, the rest as JSON.

A planner's ``to_state()`` is a nested dict of numpy arrays and JSON-safe values; arrays
are lifted out into their own hash fields (``array:<path>``) and referenced from the JSON
skeleton, so nothing is pickled. The states of a study's algorithms and its answer-log
cursor are written inside the caller's one transaction. Every save also writes a fresh random
``version`` field, so a process keeping a learner in memory can tell with one HGET whether the
stored state is still the one it saved (another writer, a rebuild or a restore changes it).
Must never import Flask.
"""
from __future__ import annotations

import io
import json
import secrets

import numpy as np

from . import keys

FORMAT_VERSION = 1
_ARRAY_REF = "__array__"
#: Hash field of a saved state holding its version: a random token, new at every save.
VERSION_FIELD = "version"


def _lift_arrays(value, path: str, arrays: dict):
    if isinstance(value, np.ndarray):
        arrays[path] = value
        return {_ARRAY_REF: path}
    if isinstance(value, dict):
        return {str(k): _lift_arrays(v, f"{path}.{k}", arrays) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_lift_arrays(v, f"{path}.{i}", arrays) for i, v in enumerate(value)]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _restore_arrays(value, arrays: dict):
    if isinstance(value, dict):
        if set(value) == {_ARRAY_REF}:
            return arrays[value[_ARRAY_REF]]
        return {k: _restore_arrays(v, arrays) for k, v in value.items()}
    if isinstance(value, list):
        return [_restore_arrays(v, arrays) for v in value]
    return value


def encode_state(state: dict) -> dict[str, bytes]:
    """Hash fields for a planner state: ``skeleton`` (JSON) plus one ``array:<path>`` per array."""
    arrays: dict[str, np.ndarray] = {}
    skeleton = _lift_arrays(state, "state", arrays)
    fields = {"skeleton": json.dumps({"format": FORMAT_VERSION, "state": skeleton}).encode()}
    for path, arr in arrays.items():
        if arr.dtype == object:
            raise ValueError(f"engine state array {path} has dtype object; store plain numeric arrays")
        buf = io.BytesIO()
        np.save(buf, arr, allow_pickle=False)
        fields[f"array:{path}"] = buf.getvalue()
    return fields


def decode_state(fields: dict[bytes, bytes]) -> dict | None:
    if b"skeleton" not in fields:
        return None
    doc = json.loads(fields[b"skeleton"])
    if doc.get("format") != FORMAT_VERSION:
        raise ValueError(f"engine state format {doc.get('format')} is not supported (expected {FORMAT_VERSION})")
    arrays = {
        name.decode()[len("array:"):]: np.load(io.BytesIO(data), allow_pickle=False)
        for name, data in fields.items() if name.startswith(b"array:")
    }
    return _restore_arrays(doc["state"], arrays)


def new_version() -> str:
    return secrets.token_hex(8)


def save(pipeline, study_id: str, algorithm: str, state: dict) -> str:
    """Replace one algorithm's engine state (call inside MULTI, with the cursor, to make it atomic).

    Returns the state's new version (see ``load_version``)."""
    fields = encode_state(state)
    version = new_version()
    fields[VERSION_FIELD] = version.encode()
    pipeline.delete(keys.engine(study_id, algorithm))
    pipeline.hset(keys.engine(study_id, algorithm), mapping=fields)
    return version


def load(conn, study_id: str, algorithm: str) -> dict | None:
    """One algorithm's saved state, None before its first update."""
    return decode_state(conn.hgetall(keys.engine(study_id, algorithm)))


def load_with_version(conn, study_id: str, algorithm: str) -> tuple[dict | None, str | None]:
    """(state, version) read in one step; the version is None for a state saved without one."""
    fields = conn.hgetall(keys.engine(study_id, algorithm))
    version = fields.get(VERSION_FIELD.encode())
    return decode_state(fields), version.decode() if version else None


def load_version(conn, study_id: str, algorithm: str) -> str | None:
    """The version of the saved state (one HGET): equal to the version a save returned exactly while
    nothing else has replaced, restored or deleted that state since. None if there is none."""
    version = conn.hget(keys.engine(study_id, algorithm), VERSION_FIELD)
    return version.decode() if version else None


def save_cursor(pipeline, study_id: str, cursor: str) -> None:
    pipeline.set(keys.cursor(study_id), cursor)


def load_cursor(conn, study_id: str) -> str:
    """The id of the last answer applied to the engines ("0-0" before any)."""
    raw = conn.get(keys.cursor(study_id))
    return raw.decode() if raw else "0-0"
