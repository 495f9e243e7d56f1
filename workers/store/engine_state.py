"""Saving and loading engine state in Redis: a checkpoint plus a journal of what each pass changed.

A planner's ``to_state()`` is a nested dict of numpy arrays and JSON-safe values. Arrays are lifted
out of it (``Lifted``: a JSON skeleton referencing arrays by path), so nothing is pickled.

Why a journal of differences. Writing the whole state (n x n arrays, ~40 MB at n = 1,000) in every
update pass made Redis spend tens of ms per EXEC and rewrite its AOF every few seconds. A pass now
commits, in the same MULTI as the answer-log cursor, one journal entry holding only the array elements
and skeleton that differ from the previous committed state (``make_delta``: bitwise comparison, changed
elements as flat indices + values, whole arrays only where most of one changed; a planner that labels
its arrays with the rows it changed, ``row_changes``, gets only those rows compared: O(changed rows x
n) per pass instead of O(n²)). The stored state is the checkpoint (``keys.engine``) with the journal
entries after its sequence number applied in order (``load_stored``), so it is exactly the state the
last pass committed whatever the planner does: replay needs no determinism from the engine (replaying
the answers instead would need every planner to be deterministic across issued, expired and pruned
questions). When the journal has grown to about the state's size a checkpoint is written into
``keys.engine_checkpoint`` outside any transaction in pieces of at most ``CHUNK_BYTES`` (other clients'
commands run between them), then renamed onto ``keys.engine`` in one short MULTI that also trims the
journal (``swap_checkpoint``); a crash anywhere leaves the old checkpoint and the journal, which
together still give the committed state.

Fields of ``keys.engine``: ``skeleton`` (JSON) and ``array:<path>`` (.npy bytes; a large one
continued in ``array#<i>:<path>``), ``version`` (a random token, new at every committed change:
a process keeping a learner in memory checks with one HGET that the stored state is still the one
it wrote), ``lineage`` (a random token, new at every whole-state save: journal entries of another
lineage are ignored) and ``seq`` (the last journal entry the checkpoint includes). A state saved
before journals (format 1, no lineage) still loads; the next pass starts a lineage with a whole save.
Must never import Flask or the engine.
"""
from __future__ import annotations

import io
import json
import secrets
import zipfile
from dataclasses import dataclass, field

import numpy as np
import redis

from workers.store import keys

#: Format of the skeleton document; format 1 (no chunked arrays) still loads.
FORMAT_VERSION = 2
READABLE_FORMATS = (1, 2)
_ARRAY_REF = "__array__"
#: Hash field of a saved state holding its version: a random token, new at every committed change.
VERSION_FIELD = "version"
LINEAGE_FIELD = "lineage"
SEQ_FIELD = "seq"
#: A checkpoint is written in commands of at most this many bytes (Redis serves others in between).
CHUNK_BYTES = 1 << 20
#: A changed array is stored whole in a journal entry once its changed elements would take this
#: share of its size as (index, value) pairs.
SPARSE_SHARE = 0.5
#: zlib level of journal entries (1: fastest; level 6 took 5-10x longer for a few percent less)
JOURNAL_ZLIB_LEVEL = 1


# ---------------------------------------------------------------------------- lifted states
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


@dataclass
class Lifted:
    """A state as a JSON skeleton (arrays replaced by ``{"__array__": path}``) and its arrays.

    Never changed in place once built (a checkpoint writer may still be reading it)."""

    skeleton: str
    arrays: dict[str, np.ndarray]
    #: path -> the array's ``row_changes`` label when the planner handed it out (see ``_delta``)
    marks: dict[str, object] = field(default_factory=dict)

    @classmethod
    def of(cls, state: dict, copy: bool = False) -> Lifted:
        """``copy``: copy the arrays (a planner's ``to_state`` may hand out arrays it goes on changing).

        Arrays carrying ``row_changes`` (a planner's ``to_state(copy=False)`` views, e.g.
        ``engine.anntri.RowTracked``) keep that label in ``marks``, copied or not."""
        arrays: dict[str, np.ndarray] = {}
        marks: dict[str, object] = {}
        skeleton = json.dumps(_lift_arrays(state, "state", arrays))
        for path, arr in arrays.items():
            if arr.dtype == object:
                raise ValueError(f"engine state array {path} has dtype object; store plain numeric arrays")
            mark = getattr(arr, "row_changes", None)
            if mark is not None:
                marks[path] = mark
            if type(arr) is not np.ndarray:  # noqa: E721 -- keep plain arrays (a view, no copy)
                arr = arrays[path] = arr.view(np.ndarray)
            if copy:
                arrays[path] = np.array(arr, copy=True, order="C")
        return cls(skeleton, arrays, marks)

    def state(self) -> dict:
        return _restore_arrays(json.loads(self.skeleton), self.arrays)

    @property
    def nbytes(self) -> int:
        return len(self.skeleton) + sum(int(a.nbytes) for a in self.arrays.values())


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def _fields_of(lifted: Lifted, chunk_bytes: int | None = None) -> dict[str, bytes]:
    doc = {"format": FORMAT_VERSION, "state": json.loads(lifted.skeleton)}
    fields = {"skeleton": json.dumps(doc).encode()}
    for path, arr in lifted.arrays.items():
        data = _npy(arr)
        if chunk_bytes is None or len(data) <= chunk_bytes:
            fields[f"array:{path}"] = data
            continue
        for i, start in enumerate(range(0, len(data), chunk_bytes)):
            fields[f"array:{path}" if i == 0 else f"array#{i}:{path}"] = data[start:start + chunk_bytes]
    return fields


def _lifted_of(fields: dict[bytes, bytes]) -> Lifted | None:
    if b"skeleton" not in fields:
        return None
    doc = json.loads(fields[b"skeleton"])
    if doc.get("format") not in READABLE_FORMATS:
        raise ValueError(f"engine state format {doc.get('format')} is not supported "
                         f"(expected one of {READABLE_FORMATS})")
    pieces: dict[str, dict[int, bytes]] = {}
    for name, data in fields.items():
        if not name.startswith(b"array"):
            continue
        head, _, path = name.decode().partition(":")
        index = 0 if head == "array" else int(head[len("array#"):])
        pieces.setdefault(path, {})[index] = data
    arrays = {}
    for path, parts in pieces.items():
        data = b"".join(parts[i] for i in range(len(parts)))
        arrays[path] = np.load(io.BytesIO(data), allow_pickle=False)
    return Lifted(json.dumps(doc["state"]), arrays)


def encode_state(state: dict) -> dict[str, bytes]:
    """Hash fields for a planner state: ``skeleton`` (JSON) plus one ``array:<path>`` per array."""
    return _fields_of(Lifted.of(state))


def decode_state(fields: dict[bytes, bytes]) -> dict | None:
    lifted = _lifted_of(fields)
    return None if lifted is None else lifted.state()


def new_version() -> str:
    return secrets.token_hex(8)


# ---------------------------------------------------------------------------- journal entries
def _as_bits(arr: np.ndarray) -> np.ndarray | None:
    """The array's elements as unsigned integers of the same width (bitwise comparison: NaN == NaN)."""
    if arr.dtype.itemsize not in (1, 2, 4, 8) or arr.dtype.kind not in "biufcm":
        return None
    return np.ascontiguousarray(arr).reshape(-1).view(f"u{arr.dtype.itemsize}")


def make_delta(old: Lifted, new: Lifted, lineage: str, seq: int) -> bytes | None:
    """One journal entry turning ``old`` into ``new`` (None if they are equal): an .npz of a JSON
    ``header`` (lineage, seq, the new skeleton if it changed, which arrays are whole, sparse, grown at
    the end or gone) and the arrays: ``f<k>`` whole, ``i<k>``/``v<k>`` flat indices and new values,
    ``a<k>`` the rows added at the end."""
    return _delta(old, new, lineage, seq, None)


def advance_delta(old: Lifted, live: Lifted, lineage: str, seq: int) -> tuple[bytes | None, Lifted]:
    """``make_delta(old, live)`` and the state after it, made by writing the changed elements into
    ``old``'s own arrays (arrays that changed shape or mostly changed are copied whole): no copy of the
    whole state per pass. ``old`` is changed in place, so only for a state nobody else reads (no
    checkpoint writer); ``live`` may hold the planner's own arrays, which are never kept."""
    kept: dict[str, np.ndarray] = {}
    delta = _delta(old, live, lineage, seq, kept)
    return delta, Lifted(live.skeleton, kept, dict(live.marks))


def _changed_rows(old: Lifted, new: Lifted, path: str, arr: np.ndarray) -> np.ndarray | None:
    """The rows of a 2-D array that may differ between ``old`` and ``new`` when the planner told
    (``marks``: both states handed out by the same planner, ``new`` later), else None (compare all)."""
    mark_new, mark_old = new.marks.get(path), old.marks.get(path)
    if mark_new is None or mark_old is None or arr.ndim != 2:
        return None
    try:
        rows = mark_new.rows_since(mark_old)
    except Exception:  # noqa: BLE001 -- an unknown label: compare everything
        return None
    return None if rows is None else np.asarray(rows, dtype=np.int64)


def _sparse_pays(changed: np.ndarray, arr: np.ndarray) -> bool:
    """Whether sending only the ``changed`` flat positions of ``arr`` (index + value each) costs
    less than ``SPARSE_SHARE`` of sending it whole."""
    return len(changed) * (8 + arr.dtype.itemsize) < SPARSE_SHARE * max(arr.nbytes, 1)


def _appended_to(before: np.ndarray | None, arr: np.ndarray) -> bool:
    """Whether ``arr`` is ``before`` with rows added at the end (same dtype and row shape, the old rows
    unchanged, bit for bit)."""
    if before is None or arr.ndim == 0 or before.ndim != arr.ndim or before.dtype != arr.dtype:
        return False
    if before.shape[1:] != arr.shape[1:] or not 0 < len(before) < len(arr):
        return False
    return np.ascontiguousarray(arr[: len(before)]).tobytes() == np.ascontiguousarray(before).tobytes()


def _add_sparse(header: dict, payload: dict, path: str, changed: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Record ``path`` in the delta as its changed flat positions and their new values; returns
    ``values``."""
    k = len(header["sparse"])
    header["sparse"].append(path)
    payload[f"i{k}"] = changed.astype(np.int64)
    payload[f"v{k}"] = values
    return values


def _delta(old: Lifted, new: Lifted, lineage: str, seq: int, kept: dict | None) -> bytes | None:
    header = {"lineage": lineage, "seq": int(seq), "skeleton": None if new.skeleton == old.skeleton else new.skeleton,
              "full": [], "sparse": [], "appended": [], "removed": sorted(set(old.arrays) - set(new.arrays))}
    payload: dict[str, np.ndarray] = {}
    for path, arr in new.arrays.items():
        before = old.arrays.get(path)
        if _appended_to(before, arr):
            # rows added at the end of a log (a planner's answers): only the new rows, not the whole log
            k = len(header["appended"])
            header["appended"].append(path)
            payload[f"a{k}"] = np.ascontiguousarray(arr[len(before):])
            if kept is not None:
                kept[path] = np.concatenate([before, payload[f"a{k}"]])
            continue
        if before is not None and before.shape == arr.shape and before.dtype == arr.dtype:
            rows = _changed_rows(old, new, path, arr)
            if rows is not None and _as_bits(arr[:0]) is not None:
                # only the rows the planner reports changed: O(changed rows x n), not O(n²)
                width = arr.shape[1]
                sub_new, sub_old = arr[rows], before[rows]
                r, c = np.nonzero(_as_bits(sub_new).reshape(sub_new.shape) != _as_bits(sub_old).reshape(sub_old.shape))
                changed = rows[r] * width + c
                if len(changed) == 0:
                    if kept is not None:
                        kept[path] = before
                    continue
                if _sparse_pays(changed, arr):
                    values = _add_sparse(header, payload, path, changed, sub_new[r, c])
                    if kept is not None:
                        if before.flags.writeable and before.flags.c_contiguous:
                            before[rows[r], c] = values
                            kept[path] = before
                        else:
                            kept[path] = np.array(arr, copy=True, order="C")
                    continue
            a, b = _as_bits(arr), _as_bits(before)
            if a is None:
                if arr.tobytes() == before.tobytes():
                    if kept is not None:
                        kept[path] = before
                    continue
            else:
                changed = np.flatnonzero(a != b)
                if len(changed) == 0:
                    if kept is not None:
                        kept[path] = before
                    continue
                if _sparse_pays(changed, arr):
                    values = _add_sparse(header, payload, path, changed,
                                         np.ascontiguousarray(arr).reshape(-1)[changed])
                    if kept is not None:
                        flat = before.reshape(-1)
                        if np.shares_memory(flat, before) and flat.flags.writeable:
                            flat[changed] = values
                            kept[path] = before
                        else:  # not an array of our own we may write into: keep a copy instead
                            kept[path] = np.array(arr, copy=True, order="C")
                    continue
        payload[f"f{len(header['full'])}"] = arr
        header["full"].append(path)
        if kept is not None:
            kept[path] = np.array(arr, copy=True, order="C")
    if (header["skeleton"] is None and not header["full"] and not header["sparse"] and not header["appended"]
            and not header["removed"]):
        return None
    return _npz({"header": np.frombuffer(json.dumps(header).encode(), dtype=np.uint8), **payload})


def _npz(arrays: dict[str, np.ndarray]) -> bytes:
    """An .npz (as ``np.savez_compressed`` writes it, read by ``np.load``) deflated at level 1: a pass's
    journal entry shrinks about 3x (sorted flat indices compress well) for ~1 ms, so Redis appends and
    fsyncs a third of the bytes per pass. Entries written uncompressed (before this) load alike."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=JOURNAL_ZLIB_LEVEL) as zf:
        for name, arr in arrays.items():
            with zf.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(arr), allow_pickle=False)
    return buf.getvalue()


def entry_size(delta: bytes) -> int:
    """A journal entry's size as arrays (uncompressed): what replaying it costs. Checkpoints fall due by
    this size, so compressing entries does not let the journal grow longer before one."""
    with zipfile.ZipFile(io.BytesIO(delta)) as zf:
        return sum(info.file_size for info in zf.infolist())


def delta_header(delta: bytes) -> dict:
    with np.load(io.BytesIO(delta), allow_pickle=False) as z:
        return json.loads(z["header"].tobytes())


def apply_delta(lifted: Lifted, delta: bytes) -> tuple[Lifted, dict]:
    """``lifted`` with one journal entry applied (a new object; ``lifted`` is not changed) and the
    entry's header."""
    with np.load(io.BytesIO(delta), allow_pickle=False) as z:
        header = json.loads(z["header"].tobytes())
        arrays = {p: a for p, a in lifted.arrays.items() if p not in header["removed"]}
        for k, path in enumerate(header["full"]):
            arrays[path] = z[f"f{k}"]
        for k, path in enumerate(header["sparse"]):
            arr = np.array(arrays[path], copy=True)
            arr.reshape(-1)[z[f"i{k}"]] = z[f"v{k}"]
            arrays[path] = arr
        for k, path in enumerate(header.get("appended", ())):
            arrays[path] = np.concatenate([arrays[path], z[f"a{k}"]])
    return Lifted(header["skeleton"] or lifted.skeleton, arrays), header


# ---------------------------------------------------------------------------- stored states
@dataclass
class Stored:
    """One algorithm's stored state: the checkpoint with its journal applied."""

    lifted: Lifted | None
    version: str | None
    lineage: str | None  # None for a state saved before journals (format 1): not appendable
    seq: int  # the last journal entry applied (the checkpoint's own for an empty journal)
    checkpoint_seq: int = 0
    journal: list[tuple[int, int]] = field(default_factory=list)  # (seq, array bytes) of entries after the checkpoint

    @property
    def state(self) -> dict | None:
        return None if self.lifted is None else self.lifted.state()

    @property
    def journal_bytes(self) -> int:
        return sum(n for _, n in self.journal)


def _text(value: bytes | None) -> str | None:
    return value.decode() if value else None


def load_stored(conn: redis.Redis, study_id: str, algorithm: str) -> Stored:
    """The stored state as of the last committed pass (checkpoint and journal read in one MULTI)."""
    with conn.pipeline(transaction=True) as pipe:
        pipe.hgetall(keys.engine(study_id, algorithm))
        pipe.lrange(keys.engine_journal(study_id, algorithm), 0, -1)
        fields, entries = pipe.execute()
    lifted = _lifted_of(fields)
    lineage = _text(fields.get(LINEAGE_FIELD.encode()))
    seq = int(fields.get(SEQ_FIELD.encode()) or 0)
    stored = Stored(lifted, _text(fields.get(VERSION_FIELD.encode())), lineage, seq, seq)
    if lifted is None or lineage is None:
        return stored
    for entry in entries:
        header = delta_header(entry)
        if header["lineage"] != lineage or header["seq"] <= stored.seq:
            continue  # left over from another lineage, or already in the checkpoint
        if header["seq"] != stored.seq + 1:
            raise ValueError(f"engine journal of {study_id}/{algorithm} jumps from {stored.seq} to {header['seq']}")
        stored.lifted, _ = apply_delta(stored.lifted, entry)
        stored.seq = header["seq"]
        stored.journal.append((stored.seq, entry_size(entry)))
    return stored


def load(conn: redis.Redis, study_id: str, algorithm: str) -> dict | None:
    """One algorithm's state as of the last committed pass, None before its first update."""
    return load_stored(conn, study_id, algorithm).state


def load_with_version(conn: redis.Redis, study_id: str, algorithm: str) -> tuple[dict | None, str | None]:
    """(state, version) read in one step; the version is None for a state saved without one."""
    stored = load_stored(conn, study_id, algorithm)
    return stored.state, stored.version


def load_version(conn: redis.Redis, study_id: str, algorithm: str) -> str | None:
    """The version of the saved state (one HGET): equal to the version a save returned exactly while
    nothing else has replaced, restored or deleted that state since. None if there is none."""
    version = conn.hget(keys.engine(study_id, algorithm), VERSION_FIELD)
    return version.decode() if version else None


def save_lifted(pipeline: redis.client.Pipeline, study_id: str, algorithm: str, lifted: Lifted) -> tuple[str, str]:
    """Replace one algorithm's state by ``lifted`` as a new lineage with an empty journal (call inside
    MULTI, with the cursor, to make it atomic). Returns (version, lineage)."""
    fields = _fields_of(lifted)
    version, lineage = new_version(), new_version()
    fields.update({VERSION_FIELD: version.encode(), LINEAGE_FIELD: lineage.encode(), SEQ_FIELD: b"0"})
    pipeline.delete(keys.engine(study_id, algorithm), keys.engine_journal(study_id, algorithm),
                    keys.engine_checkpoint(study_id, algorithm))
    pipeline.hset(keys.engine(study_id, algorithm), mapping=fields)
    return version, lineage


def save_lifted_chunked(conn: redis.Redis, pipeline: redis.client.Pipeline, study_id: str, algorithm: str,
                        lifted: Lifted, chunk_bytes: int = CHUNK_BYTES) -> tuple[str, str]:
    """``save_lifted`` for a large state (hundreds of MB at n = 5,000): its fields are written first
    into the checkpoint key through ``conn``, outside any transaction, in commands of at most
    ``chunk_bytes`` (Redis serves other clients in between), and ``pipeline`` (inside MULTI, with the
    cursor) only renames them in place, so the EXEC is short. A crash before the EXEC leaves a
    checkpoint of a lineage nobody stored, which the next save or swap replaces. The caller holds the
    study's update lock (nothing else writes the checkpoint key meanwhile)."""
    version, lineage = new_version(), new_version()
    write_checkpoint(conn, study_id, algorithm, lifted, lineage, 0, chunk_bytes)
    engine = keys.engine(study_id, algorithm)
    pipeline.delete(engine, keys.engine_journal(study_id, algorithm))
    pipeline.rename(keys.engine_checkpoint(study_id, algorithm), engine)
    pipeline.hset(engine, VERSION_FIELD, version)
    return version, lineage


def save(pipeline: redis.client.Pipeline, study_id: str, algorithm: str, state: dict) -> str:
    """Replace one algorithm's engine state (call inside MULTI, with the cursor, to make it atomic).

    Returns the state's new version (see ``load_version``)."""
    return save_lifted(pipeline, study_id, algorithm, Lifted.of(state))[0]


def append_delta(pipeline: redis.client.Pipeline, study_id: str, algorithm: str, delta: bytes) -> str:
    """Commit one journal entry (call inside MULTI, with the cursor). Returns the state's new version."""
    version = new_version()
    pipeline.rpush(keys.engine_journal(study_id, algorithm), delta)
    pipeline.hset(keys.engine(study_id, algorithm), VERSION_FIELD, version)
    return version


# ---------------------------------------------------------------------------- checkpoints
def write_checkpoint(conn: redis.Redis, study_id: str, algorithm: str, lifted: Lifted, lineage: str, seq: int,
                     chunk_bytes: int = CHUNK_BYTES) -> int:
    """Write ``lifted`` (the state after journal entry ``seq`` of ``lineage``) into the checkpoint key,
    in commands of at most ``chunk_bytes``, outside any transaction; ``swap_checkpoint`` puts it in
    place. Returns the bytes written."""
    key = keys.engine_checkpoint(study_id, algorithm)
    fields = _fields_of(lifted, chunk_bytes)
    conn.unlink(key)
    batch, size, written = {}, 0, 0
    for name, data in fields.items():
        if batch and size + len(data) > chunk_bytes:
            conn.hset(key, mapping=batch)
            batch, size = {}, 0
        batch[name] = data
        size += len(data)
        written += len(data)
    batch.update({LINEAGE_FIELD: lineage, SEQ_FIELD: str(int(seq))})
    conn.hset(key, mapping=batch)
    return written


def swap_checkpoint(conn: redis.Redis, study_id: str, algorithm: str, lineage: str, seq: int) -> bool:
    """Put a written checkpoint in place of the stored one and drop the journal entries it includes,
    in one MULTI, if the stored state is still of ``lineage`` and its checkpoint older; otherwise
    discard it. Returns whether it was put in place. The state's version does not change."""
    engine, journal = keys.engine(study_id, algorithm), keys.engine_journal(study_id, algorithm)
    checkpoint = keys.engine_checkpoint(study_id, algorithm)
    with conn.pipeline(transaction=True) as pipe:
        while True:
            try:
                pipe.watch(engine, journal, checkpoint)
                current_lineage, current_seq, version = pipe.hmget(engine, LINEAGE_FIELD, SEQ_FIELD, VERSION_FIELD)
                written_lineage, written_seq = pipe.hmget(checkpoint, LINEAGE_FIELD, SEQ_FIELD)
                ok = (_text(current_lineage) == lineage and _text(written_lineage) == lineage
                      and int(written_seq or -1) == seq and int(current_seq or 0) < seq)
                pipe.multi()
                if not ok:
                    pipe.unlink(checkpoint)
                    pipe.execute()
                    return False
                pipe.unlink(engine)
                pipe.rename(checkpoint, engine)
                pipe.hset(engine, VERSION_FIELD, version)
                # the journal holds the entries after the old checkpoint, in order: drop those now included
                pipe.ltrim(journal, seq - int(current_seq or 0), -1)
                pipe.execute()
                return True
            except redis.WatchError:
                continue


def save_cursor(pipeline: redis.client.Pipeline, study_id: str, cursor: str) -> None:
    pipeline.set(keys.cursor(study_id), cursor)


def load_cursor(conn: redis.Redis, study_id: str) -> str:
    """The id of the last answer applied to the engines ("0-0" before any)."""
    raw = conn.get(keys.cursor(study_id))
    return raw.decode() if raw else "0-0"
