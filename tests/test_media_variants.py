"""Images served by handle in a study whose catch trials are copies (``webapp.handles.varied``): two servings of
one item share neither a prefix of their bytes nor their decoded pixels, yet differ by at most a level per
channel (PNG, GIF, lossless WebP) or, a JPEG encoded again with its own tables, by what a re-save loses and
less than a level more on average; a study whose
catch trials are not copies serves the upload; sound and video are served as uploaded, and said so."""
from __future__ import annotations

import io
import random
import struct
import zlib

import pytest
from helpers import SECRET
from PIL import Image, ImageChops, ImageFilter, JpegImagePlugin

from webapp import catches, handles
from workers.store.config import StudyConfig
from workers.store.studies import Item, create_study

N_ITEMS = 6
#: What benchmarks/bots.py's "media bytes" bot compares.
SAME_BYTES = 128


def picture(n: int, size: int = 96) -> Image.Image:
    """A smooth RGB picture with some grain of its own for item ``n`` (seeded)."""
    rng = random.Random(n)
    grain = Image.frombytes("L", (size, size), rng.randbytes(size * size))
    ramp = Image.linear_gradient("L").resize((size, size)).rotate(37 * n)
    return Image.merge("RGB", (ramp, ImageChops.blend(ramp, grain, 0.3), grain)).filter(ImageFilter.GaussianBlur(1))


def encoded(image: Image.Image, fmt: str, **options) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


FORMATS = {"image/png": ("PNG", {}), "image/jpeg": ("JPEG", {"quality": 85}), "image/gif": ("GIF", {}),
           "image/webp": ("WEBP", {"lossless": True})}


def media_study(conn, study_id: str, media_type: str, how: str = "none") -> dict[int, bytes]:
    """A study of N_ITEMS pictures of ``media_type``: ``how`` "none" (neither positions nor labels: catch trials
    of copies), "positions" or "features" (a label and a numeric feature); returns the uploads."""
    fmt, options = FORMATS[media_type]
    media = {i: encoded(picture(i).convert("P") if fmt == "GIF" else picture(i), fmt, **options)
             for i in range(N_ITEMS)}
    items = [Item(id=f"img{i}", kind="image", media_type=media_type,
                  position=(float(i),) if how == "positions" else None,
                  label=f"l{i % 2}" if how == "features" else None,
                  features={"v": float(i % 2) + 0.01 * i} if how == "features" else None)
             for i in range(N_ITEMS)]
    config = StudyConfig.from_dict({"name": study_id, "random_state": 0})
    create_study(conn, config, items, media=media, study_id=study_id)
    return media


def served(client, study_id: str, index: int) -> bytes:
    """The item's media as a rater's page gets it, by a handle of its own (each call a new one)."""
    response = client.get(f"/media/{study_id}/h/{handles.fresh_handle(SECRET, study_id, index)}")
    assert response.status_code == 200
    return response.data


def pixels(data: bytes) -> Image.Image:
    with Image.open(io.BytesIO(data)) as image:
        return image.convert("RGB")


def largest_difference(a: Image.Image, b: Image.Image) -> tuple[int, float]:
    """(the largest difference of a channel, the mean of every pixel's largest channel difference)."""
    r, g, b_ = ImageChops.difference(a, b).split()
    histogram = ImageChops.lighter(ImageChops.lighter(r, g), b_).histogram()
    return max(v for v, n in enumerate(histogram) if n), sum(v * n for v, n in enumerate(histogram)) / sum(histogram)


@pytest.mark.parametrize("media_type", sorted(FORMATS))
def test_two_servings_of_an_image_in_a_copies_study_share_no_prefix_nor_pixels_but_look_alike(app, conn, media_type):
    media = media_study(conn, "copies", media_type)
    client = app.test_client()
    for index in (0, 3):
        a, b = served(client, "copies", index), served(client, "copies", index)
        assert a[:SAME_BYTES] != b[:SAME_BYTES]  # not even their first bytes are one file's
        pa, pb, upload = pixels(a), pixels(b), pixels(media[index])
        assert pa.size == pb.size == upload.size
        assert pa.tobytes() != pb.tobytes()  # nor their decoded pixels
        worst, mean = largest_difference(pa, upload)
        if media_type == "image/jpeg":  # encoded again with its own tables: a re-save's loss and under a level more
            with Image.open(io.BytesIO(media[index])) as image:
                resaved = encoded(image, "JPEG", qtables=image.quantization,
                                  subsampling=JpegImagePlugin.get_sampling(image))
            assert mean - largest_difference(pixels(resaved), upload)[1] < 0.75
        else:  # lossless: at most one level of one channel per pixel
            assert worst == 1
        # the first row, a sample of a few pixels: two servings differ there too (the change is dense)
        assert pa.crop((0, 0, pa.size[0], 1)).tobytes() != pb.crop((0, 0, pb.size[0], 1)).tobytes()


def test_one_handle_is_served_the_same_picture_each_time_and_another_handle_another(app, conn):
    media_study(conn, "copies", "image/png")
    client = app.test_client()
    handle = handles.fresh_handle(SECRET, "copies", 2)
    first, again = (client.get(f"/media/copies/h/{handle}").data for _ in range(2))
    assert pixels(first).tobytes() == pixels(again).tobytes()  # a reload: the same variant, padded anew
    assert first != again
    assert pixels(served(client, "copies", 2)).tobytes() != pixels(first).tobytes()


@pytest.mark.parametrize("how", ["positions", "features"])
@pytest.mark.parametrize("media_type", ["image/png", "image/jpeg"])
def test_only_a_study_whose_catch_trials_are_copies_varies_its_images(app, conn, how, media_type):
    media = media_study(conn, "known", media_type, how)
    copies = media_study(conn, "copies", media_type)
    client = app.test_client()
    for index in range(N_ITEMS):
        data = served(client, "known", index)
        assert data.startswith(media[index])  # the upload as it is, padded after its end
        assert pixels(data).tobytes() == pixels(media[index]).tobytes()
        varied = served(client, "copies", index)
        assert not varied.startswith(copies[index][:SAME_BYTES])
        assert pixels(varied).tobytes() != pixels(copies[index]).tobytes()


def wav(n: int) -> bytes:
    """A short WAV of its own for item ``n``."""
    samples = bytes(random.Random(n).randbytes(800))
    header = struct.pack("<4sI4s4sIHHIIHH4sI", b"RIFF", 36 + len(samples), b"WAVE", b"fmt ", 16, 1, 1, 8000, 8000,
                         1, 8, b"data", len(samples))
    return header + samples


def test_sound_in_a_copies_study_is_served_as_uploaded_and_the_researcher_is_told(app, conn):
    items = [Item(id=f"s{i}", kind="audio", media_type="audio/wav") for i in range(N_ITEMS)]
    config = StudyConfig.from_dict({"name": "sounds", "random_state": 0})
    create_study(conn, config, items, media={i: wav(i) for i in range(N_ITEMS)}, study_id="sounds")
    client = app.test_client()
    assert served(client, "sounds", 1) == wav(1)  # nothing varies a sound: a program comparing bytes finds a copy
    assert catches.items_catch_warning(config, items) == catches.COPIES_OF_FILES
    # images alone: no such warning (their copies are sent as variants)
    images = [Item(id=f"i{i}", kind="image", media_type="image/png") for i in range(N_ITEMS)]
    assert catches.items_catch_warning(config, images) is None


def test_an_image_that_cannot_be_varied_is_served_as_uploaded():
    frames = [picture(i, 32) for i in range(2)]
    out = io.BytesIO()
    frames[0].save(out, "GIF", save_all=True, append_images=frames[1:])
    assert handles.varied(out.getvalue(), "image/gif", b"seed") is None  # an animation
    assert handles.varied(b"\x89PNG\r\n\x1a\n not a picture", "image/png", b"seed") is None
    big = Image.new("L", (handles.VARY_MAX_PIXELS // 1000 + 1, 1000))
    assert handles.varied(encoded(big, "PNG"), "image/png", b"seed") is None
    assert zlib.crc32(handles.varied(encoded(picture(1), "PNG"), "image/png", b"seed")) == zlib.crc32(
        handles.varied(encoded(picture(1), "PNG"), "image/png", b"seed"))  # a seed: one variant


def test_images_sent_as_uploaded_in_a_copies_study_are_named_when_it_is_created(conn):
    """A study of copies whose images include some that cannot be varied (CMYK, an animation) is told which, at
    create (``catches.prepare``, as `proxima create` and the New study form call it); all variable: no warning."""
    from workers.store.studies import get_study

    config = StudyConfig.from_dict({"name": "mixed", "random_state": 0})
    media = {i: encoded(picture(i), "JPEG", quality=85) for i in range(N_ITEMS)}
    items = [Item(id=f"img{i}", kind="image", media_type="image/jpeg") for i in range(N_ITEMS)]
    create_study(conn, config, items, media=media, study_id="varied-all")
    assert catches.prepare(conn, get_study(conn, "varied-all")) is None
    media[2] = encoded(picture(2).convert("CMYK"), "JPEG", quality=85)
    frames = io.BytesIO()
    picture(4, 32).save(frames, "GIF", save_all=True, append_images=[picture(5, 32)])
    media[4] = frames.getvalue()
    items[4] = Item(id="img4", kind="image", media_type="image/gif")
    create_study(conn, config, items, media=media, study_id="varied-some")
    warning = catches.prepare(conn, get_study(conn, "varied-some"))
    assert warning == catches.UNVARIED_IMAGES.format(count="2", examples="img2, img4")
    assert not handles.can_vary(media[2], "image/jpeg") and handles.can_vary(media[0], "image/jpeg")
