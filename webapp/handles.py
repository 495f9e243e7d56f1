"""Opaque per-question names of shown items (handles), and the padding that keeps their media apart.

A rater's page never sees an item's index or id: every item a question shows is named by a handle new for
that question and that position, so the same item shown twice (a catch trial's copy) or in two questions
has unrelated handles. A handle is ``base64url(nonce + index XOR pad + tag)``: the nonce is drawn from
the question's random seed (kept in its sealed token) and its position, the pad is a keyed PRF of the
nonce, the tag a truncated MAC of (study, nonce, encrypted index). Decoding needs the secret key and
checks the tag and the study, so a forged handle or one of another study is refused. Media are served by
handle, with random trailing bytes the format ignores, so neither the size nor a hash of the bytes says
that two shown items are one. Text, HTML and colour items carry their content on the wire: nothing here
hides that two of them are the same. Standard library only (web processes load no numpy).
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import secrets
from collections.abc import Callable, Sequence
from functools import lru_cache

NONCE_BYTES = 9
INDEX_BYTES = 4
TAG_BYTES = 11
#: Characters of a handle: 24 bytes, base64url without padding.
HANDLE_CHARS = 32
#: Kinds of item whose content is on the wire (the payload carries it): a copy of one is readable.
CONTENT_ON_THE_WIRE = frozenset({"text", "html", "color"})


class InvalidHandle(ValueError):
    """A handle this server did not make for this study."""


@lru_cache(maxsize=8)
def _keys(secret_key: str) -> tuple[bytes, bytes, bytes]:
    # keys of their own (nonce, pad, tag), none of them the key that signs sessions or tokens
    root = hmac.new(secret_key.encode(), b"proxima.handles.v1", hashlib.sha256).digest()
    return tuple(hmac.new(root, label, hashlib.sha256).digest() for label in (b"nonce", b"pad", b"tag"))


def new_seed() -> str:
    """A question's random seed (12 bytes, base64url): its handles are drawn from it and kept in its token."""
    return secrets.token_urlsafe(12)


def _seal(keys: tuple[bytes, bytes, bytes], study_id: str, nonce: bytes, index: int) -> str:
    _, pad_key, tag_key = keys
    pad = hmac.new(pad_key, nonce, hashlib.sha256).digest()[:INDEX_BYTES]
    hidden = bytes(a ^ b for a, b in zip(index.to_bytes(INDEX_BYTES, "big"), pad, strict=True))
    tag = hmac.new(tag_key, study_id.encode() + b"\n" + nonce + hidden, hashlib.sha256).digest()[:TAG_BYTES]
    return base64.urlsafe_b64encode(nonce + hidden + tag).decode()


def question_handles(secret_key: str, study_id: str, seed: str, shown: Sequence[int]) -> list[str]:
    """The handles of a question's shown items (``shown``: item indices in display order), one per position."""
    keys = _keys(secret_key)
    return [_seal(keys, study_id, hmac.new(keys[0], f"{seed}\n{position}".encode(), hashlib.sha256)
                  .digest()[:NONCE_BYTES], int(index))
            for position, index in enumerate(shown)]


def fresh_handle(secret_key: str, study_id: str, index: int) -> str:
    """A handle of one item outside a question (an image in the instructions), from a random nonce."""
    return _seal(_keys(secret_key), study_id, os.urandom(NONCE_BYTES), int(index))


def shown_index(secret_key: str, study_id: str | None, handle: object, previous_keys: Sequence[str] = ()) -> int:
    """The item index a handle names; InvalidHandle when no key of ours made it for this study. The one
    decoding function: the media route reads handles with it, and so do tests and simulators that hold the
    server's secret key and answer from the truth (nothing on the wire reads them); those may pass
    ``study_id=None``, which reads the index without checking the tag (they know the study)."""
    if not isinstance(handle, str) or len(handle) != HANDLE_CHARS:
        raise InvalidHandle(handle)
    try:
        raw = base64.urlsafe_b64decode(handle.encode())
    except (binascii.Error, ValueError):
        raise InvalidHandle(handle) from None
    nonce, hidden, tag = raw[:NONCE_BYTES], raw[NONCE_BYTES:-TAG_BYTES], raw[-TAG_BYTES:]
    for key in (secret_key, *previous_keys):
        _, pad_key, tag_key = _keys(key)
        if study_id is not None:
            want = hmac.new(tag_key, study_id.encode() + b"\n" + nonce + hidden, hashlib.sha256).digest()
            if not hmac.compare_digest(want[:TAG_BYTES], tag):
                continue
        pad = hmac.new(pad_key, nonce, hashlib.sha256).digest()[:INDEX_BYTES]
        return int.from_bytes(bytes(a ^ b for a, b in zip(hidden, pad, strict=True)), "big")
    raise InvalidHandle(handle)


def picked_indices(handles: Sequence[str], shown: Sequence[int], offered: Sequence[str],
                   picks: Sequence[str]) -> list[int] | None:
    """The item indices of ``picks`` (handles) by their place among the question's ``handles`` (of the
    items ``shown``, in order); None when one is not among ``offered`` (the handles an answer may pick:
    a head is not one, even when a candidate is its copy)."""
    at = dict(zip(handles, shown, strict=True))
    allowed = set(offered)
    if any(p not in allowed for p in picks):
        return None
    return [int(at[p]) for p in picks]


# ---------------------------------------------------------------------------------------------- media
#: Trailing padding: a random length from 0 to PAD_SHARE of the file's size (at least PAD_MIN_SPAN bytes),
#: so two copies of one item differ in size by as much as two items of a folder of alike files.
PAD_SHARE = 0.5
PAD_MIN_SPAN = 4096
#: Where a format's decoders stop reading, so bytes after it are ignored: PNG's IEND chunk, JPEG's EOI
#: marker, GIF's trailer. WebP (a RIFF size in its header), audio and video are left as they are:
#: trailing bytes there are read by some decoders as a broken frame or chunk.
_ENDS = {"image/png": b"IEND\xaeB`\x82", "image/jpeg": b"\xff\xd9", "image/gif": b";"}
_SVG = "image/svg+xml"


def padded(data: bytes, media_type: str | None) -> bytes:
    """``data`` with random trailing bytes its format ignores (an XML comment for SVG); unchanged for a
    format where that is unsafe or a file that does not end as its format says."""
    n = secrets.randbelow(max(PAD_MIN_SPAN, int(PAD_SHARE * len(data))) + 1)
    if media_type == _SVG:
        return data + b"<!--" + base64.b64encode(os.urandom(n * 3 // 4 + 1))[:n] + b"-->"
    end = _ENDS.get(media_type or "")
    if end is None or not data.endswith(end):
        return data
    return data + os.urandom(n)


def identifier(secret_key: str, study_id: str, ids: Sequence[str]) -> Callable[[dict], str]:
    """``item payload -> item id`` for a simulated rater answering from the truth (``simulation.crowd``
    ``Identify``): the index its handle names, looked up in the study's item ids (in the study's order)."""
    return lambda item: ids[shown_index(secret_key, study_id, item["handle"])]
