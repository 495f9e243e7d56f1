"""Opaque per-question names of shown items (handles), and the padding that keeps their media apart.

A rater's page never sees an item's index or id: every item a question shows is named by a handle new for
that question and that position, so the same item shown twice (a catch trial's copy) or in two questions
has unrelated handles. A handle is ``base64url(nonce + index XOR pad + tag)``: the nonce is drawn from
the question's random seed (kept in its sealed token) and its position, the pad is a keyed PRF of the
nonce, the tag a truncated MAC of (study, nonce, encrypted index). Decoding needs the secret key and
checks the tag and the study, so a forged handle or one of another study is refused. Media are served by
handle, with random trailing bytes the format ignores, so neither the size nor a hash of the bytes says
that two shown items are one; in a study whose catch trials are copies an image is a variant per handle
(``varied``: tiles of it one level up or down, encoded again), so neither its first bytes nor its decoded
pixels say it either: only a judgement of how alike two pictures look does. Text, HTML and colour items
carry their content on the wire: nothing here hides that two of them are the same. Standard library only
(web processes load no numpy); Pillow, imported where an image is varied.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import secrets
import zlib
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


@lru_cache(maxsize=32)
def _key(secret_key: str, label: bytes) -> bytes:
    # keys of their own (nonce, pad, tag, vary), none of them the key that signs sessions or tokens
    root = hmac.new(secret_key.encode(), b"proxima.handles.v1", hashlib.sha256).digest()
    return hmac.new(root, label, hashlib.sha256).digest()


def _keys(secret_key: str) -> tuple[bytes, bytes, bytes]:
    return tuple(_key(secret_key, label) for label in (b"nonce", b"pad", b"tag"))


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


# ------------------------------------------------------------------------------------- image variants
#: Image types a study of copy catch trials serves as a variant per handle (``varied``): decoded and encoded
#: again in their own format with a change no one sees, so two handles of one item share neither their bytes
#: nor their exact pixels. Sound and video are served as uploaded (and padded where safe).
VARIED_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
#: Share of a variant's tiles (VARY_TILE) moved by one level, half up and half down, in one colour channel
#: drawn per tile (in all three for a JPEG; alpha untouched): dense, so a sample of a few pixels, a first row
#: or a first block of two servings differs too, not only the whole image.
VARY_SHARE = 0.5
#: Side in pixels of the square tiles a variant moves as one (aligned with a JPEG's 8 x 8 blocks): a tile
#: compresses as the image around it does, where single pixels moved at random made a flat 4.6 KB PNG 95 KB.
VARY_TILE = 8
#: ... or smaller, so that an image has at least this many tiles across and down (a 16 x 16 icon: single pixels).
VARY_TILES_ACROSS = 16
#: Largest image varied (width x height): a larger one is served as uploaded (padded), its copy found by a
#: comparison of bytes. A PNG photo of 12 MP varies in about a second of CPU (79 ms per megapixel,
#: benchmarks/media_variants.py); more would let a rater's requests hold a web process.
VARY_MAX_PIXELS = 12_000_000
#: A lossy WebP's variant is encoded at this quality (its own is not in the file); a lossless one with this
#: effort and method (lower than Pillow's default 80 and 4: 0.15 s of CPU for a 1024 x 1024 photo).
WEBP_QUALITY = 90
WEBP_EFFORT = 25
WEBP_METHOD = 2
#: zlib's strategy for a PNG variant: run lengths only, a fifth of the default's CPU (a 1024 x 1024 photo:
#: 51 ms, not 255) for a file about a tenth larger (benchmarks/media_variants.py).
PNG_STRATEGY = zlib.Z_RLE
#: Modes whose colour channels are varied as they are (the alpha channel of LA and RGBA is kept).
_BANDS = {"L": 1, "LA": 1, "RGB": 3, "RGBA": 3}
#: PNG chunks copied from the upload into its variant: how a browser renders the colours and the size.
_PNG_KEPT = (b"gAMA", b"cHRM", b"sRGB", b"pHYs")


def variant_seed(secret_key: str, handle: str) -> bytes:
    """The seed of a handle's variant: keyed, so the change cannot be computed from the handle and undone
    (the code is public), and fixed per handle, so a page's reloads get the same image and averaging many
    servings of one handle recovers nothing."""
    return hmac.new(_key(secret_key, b"vary"), handle.encode(), hashlib.sha256).digest()


def _vary_pixels(image, rng, together: bool = False):
    """The image with VARY_SHARE of its VARY_TILE-pixel square tiles one level up or down (half each), in one
    colour channel drawn per tile, or in every colour channel with ``together`` (a JPEG: a change of one
    channel's tile rarely outlives its quantisation, one of the luma does); alpha is kept. For a palette
    image: its palette entries each one level up or down in one channel and their order drawn anew (every
    index byte and every pixel's colour change by one level). None for another mode (L, LA, RGB, RGBA, P)."""
    from PIL import Image, ImageChops

    if image.mode == "P":
        return _vary_palette(image, rng)
    colour = _BANDS.get(image.mode)
    if colour is None:
        return None
    width, height = image.size
    side = max(1, min(VARY_TILE, min(width, height) // VARY_TILES_ACROSS))
    across, down = -(-width // side), -(-height // side)
    tiles = Image.frombytes("L", (across, down), rng.randbytes(across * down))
    span = max(1, round(256 * VARY_SHARE / (2 * (1 if together else colour))))
    # a tile's random byte v moves colour band b up where low_b <= v < low_b + span, down in the next span
    raise_, lower = [], []
    for band in range(len(image.getbands())):
        low = 0 if together else 2 * span * band
        moved = band < colour
        raise_ += [int(moved and low <= v < low + span) for v in range(256)]
        lower += [int(moved and low + span <= v < low + 2 * span) for v in range(256)]
    tiles = Image.merge(image.mode, [tiles] * len(image.getbands()))

    def mask(table: list[int]):  # a tile's move, then as large as the image (a tile a square of pixels)
        return (tiles.point(table).resize((across * side, down * side), Image.Resampling.NEAREST)
                .crop((0, 0, width, height)))

    return ImageChops.subtract(ImageChops.add(image, mask(raise_)), mask(lower))


def _vary_palette(image, rng):
    """``_vary_pixels`` of a palette image."""
    from PIL import Image

    palette = image.getpalette() or []
    colours = len(palette) // 3
    order = list(range(colours))
    rng.shuffle(order)  # old index i -> order[i]
    moved = bytearray(3 * colours)
    for i in range(colours):
        rgb = palette[3 * i:3 * i + 3]
        channel = rng.randrange(3)
        rgb[channel] = min(255, max(0, rgb[channel] + rng.choice((-1, 1))))
        moved[3 * order[i]:3 * order[i] + 3] = bytes(rgb)
    indices = Image.frombytes("L", image.size, image.tobytes()).point(order + list(range(colours, 256)))
    out = Image.frombytes("P", image.size, indices.tobytes())
    out.putpalette(bytes(moved))
    transparency = image.info.get("transparency")
    if isinstance(transparency, int) and transparency < colours:
        out.info["transparency"] = order[transparency]
    elif isinstance(transparency, bytes):
        alphas = bytearray(b"\xff" * colours)
        for i, a in enumerate(transparency[:colours]):
            alphas[order[i]] = a
        out.info["transparency"] = bytes(alphas)
    return out


def _png_chunks(data: bytes, wanted: tuple[bytes, ...]) -> list[tuple[bytes, bytes]]:
    """The chunks of a PNG named in ``wanted``, in order, as (type, data)."""
    out, at = [], 8
    while at + 8 <= len(data):
        length = int.from_bytes(data[at:at + 4], "big")
        kind = data[at + 4:at + 8]
        if kind in wanted:
            out.append((kind, data[at + 8:at + 8 + length]))
        if kind == b"IEND":
            break
        at += 12 + length
    return out


def _header_varies(image) -> bool:
    """Whether an opened (not yet decoded) image is one :func:`varied` varies: a still PNG, JPEG, GIF or WebP
    of at most VARY_MAX_PIXELS in a mode ``_vary_pixels`` moves (L, LA, RGB, RGBA or a palette)."""
    return (image.size[0] * image.size[1] <= VARY_MAX_PIXELS and getattr(image, "n_frames", 1) == 1
            and image.format in ("PNG", "JPEG", "GIF", "WEBP") and (image.mode == "P" or image.mode in _BANDS))


def can_vary(data: bytes, media_type: str | None) -> bool:
    """Whether :func:`varied` serves this upload as a variant (from its header alone, nothing decoded): False for
    what is sent as uploaded, whose copies a comparison of bytes finds (``catches.UNVARIED_IMAGES``)."""
    if media_type not in VARIED_TYPES:
        return False
    import io

    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            return _header_varies(image)
    except (OSError, ValueError, SyntaxError, EOFError, TypeError, KeyError, Image.DecompressionBombError):
        return False


def varied(data: bytes, media_type: str | None, seed: bytes) -> bytes | None:
    """A variant of an image for one handle (``seed``: ``variant_seed``): decoded, turned upright by its EXIF
    orientation (as a browser shows it; the EXIF, whose thumbnail would be a copy's tell, is not kept), its
    tiles moved by one level (``_vary_pixels``), and encoded again in its own format as the upload was: a JPEG
    with its own quantisation tables, chroma subsampling and colour profile, and a comment of random bytes
    after its first segment (no two servings share a prefix); a PNG losslessly with its colour chunks; a GIF
    with its palette (in a new order); a WebP lossless when it was, else at quality WEBP_QUALITY. None where
    this cannot be done (not a type of VARIED_TYPES, an animation, a mode not varied, more than
    VARY_MAX_PIXELS, a file Pillow cannot read): the caller serves the upload."""
    if media_type not in VARIED_TYPES:
        return None
    import io
    import random

    from PIL import Image, ImageOps, JpegImagePlugin, PngImagePlugin

    rng = random.Random(seed)
    try:
        # the header first: nothing larger than VARY_MAX_PIXELS is decoded (far below Pillow's own bomb limit,
        # so no warnings filter is needed, which threads of a web process would share)
        image = Image.open(io.BytesIO(data))
        if not _header_varies(image):
            return None
        image.load()
        upright = ImageOps.exif_transpose(image) if image.getexif().get(0x0112, 1) != 1 else image
        variant = _vary_pixels(upright, rng, together=image.format == "JPEG")
        if variant is None:
            return None
        out = io.BytesIO()
        icc = {"icc_profile": image.info["icc_profile"]} if image.info.get("icc_profile") else {}
        if image.format == "JPEG":
            sampling = JpegImagePlugin.get_sampling(image)
            variant.save(out, "JPEG", qtables=image.quantization, progressive=bool(image.info.get("progressive")),
                         comment=rng.randbytes(rng.randrange(8, 64)), dpi=image.info.get("dpi", (72, 72)),
                         **({"subsampling": sampling} if sampling != -1 else {}), **icc)
        elif image.format == "PNG":
            kept = PngImagePlugin.PngInfo()
            for kind, chunk in _png_chunks(data, _PNG_KEPT):
                kept.add(kind, chunk)
            transparency = variant.info.get("transparency", image.info.get("transparency"))
            variant.save(out, "PNG", pnginfo=kept, compress_type=PNG_STRATEGY,
                         **({"transparency": transparency} if transparency is not None else {}), **icc)
        elif image.format == "GIF":
            transparency = variant.info.get("transparency")
            variant.save(out, "GIF", optimize=False, **({"transparency": transparency} if transparency is not None
                                                        else {}))
        else:
            lossless = data[12:16] == b"VP8L"
            variant.save(out, "WEBP", lossless=lossless, exact=True, **icc,
                         **({"quality": WEBP_EFFORT, "method": WEBP_METHOD} if lossless else {"quality": WEBP_QUALITY}))
        return out.getvalue()
    except (OSError, ValueError, SyntaxError, EOFError, TypeError, KeyError, Image.DecompressionBombError):
        return None
