"""Saving and loading engine state in Redis: numpy arrays as .npy bytes, the rest as JSON.

A planner's ``to_state()`` is a nested dict of numpy arrays and JSON-safe values; arrays
are lifted out into their own hash fields (``array:<path>``) and referenced from the JSON
skeleton, so nothing is pickled. The states of a study's algorithms and its answer-log
cursor are written inside the caller's one transaction. Must never import Flask.
"""
from __future__ import annotations

import io
import json

import numpy as np

from . import keys

FORMAT_VERSION = 1
_ARRAY_REF = "__array__"


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


def save(pipeline, study_id: str, algorithm: str, state: dict) -> None:
    """Replace one algorithm's engine state (call inside MULTI, with the cursor, to make it atomic)."""
    fields = encode_state(state)
    pipeline.delete(keys.engine(study_id, algorithm))
    pipeline.hset(keys.engine(study_id, algorithm), mapping=fields)


def load(conn, study_id: str, algorithm: str) -> dict | None:
    """One algorithm's saved state, None before its first update."""
    return decode_state(conn.hgetall(keys.engine(study_id, algorithm)))


def save_cursor(pipeline, study_id: str, cursor: str) -> None:
    pipeline.set(keys.cursor(study_id), cursor)


def load_cursor(conn, study_id: str) -> str:
    """The id of the last answer applied to the engines ("0-0" before any)."""
    raw = conn.get(keys.cursor(study_id))
    return raw.decode() if raw else "0-0"
