"""Hostile study uploads are refused before they cost memory or reach a page: zip slip (parent,
absolute and drive paths, symbolic links), decompression bombs (declared sizes, members whose
header lies, many members), images with more pixels than a browser should decode, YAML alias
bombs, and file names or texts carrying markup, which are stored as text and shown escaped."""
from __future__ import annotations

import io
import stat
import struct
import zipfile
import zlib

import pytest
from helpers import upload_study, zip_of
from test_security import XSS, assert_inert, tiny_png

from workers.store import uploads
from workers.store.config import ConfigError
from workers.store.studies import MAX_MEDIA_BYTES, StudyError, list_studies

PNG = tiny_png()


def with_declared_size(data: bytes, name: str, size: int, local_too: bool = False) -> bytes:
    """The archive with the uncompressed size of member ``name`` rewritten (central directory, and
    the local header if ``local_too``): a member that lies about how big it is."""
    raw = bytearray(data)
    encoded = name.encode()
    central = raw.find(b"PK\x01\x02")
    while central != -1:
        name_len = struct.unpack_from("<H", raw, central + 28)[0]
        if bytes(raw[central + 46:central + 46 + name_len]) == encoded:
            struct.pack_into("<I", raw, central + 24, size)
            if local_too:
                local = struct.unpack_from("<I", raw, central + 42)[0]
                struct.pack_into("<I", raw, local + 22, size)
        central = raw.find(b"PK\x01\x02", central + 4)
    return bytes(raw)


def png_of_size(width: int, height: int) -> bytes:
    """A real PNG whose header claims ``width`` x ``height`` (its CRC fixed, its pixels few)."""
    data = bytearray(PNG)
    ihdr = data.find(b"IHDR")
    struct.pack_into(">II", data, ihdr + 4, width, height)
    struct.pack_into(">I", data, ihdr + 17, zlib.crc32(bytes(data[ihdr:ihdr + 17])) & 0xFFFFFFFF)
    return bytes(data)


def refused(callable_, *args, match: str):
    with pytest.raises((StudyError, ConfigError), match=match):
        callable_(*args)


# ------------------------------------------------------------------------------ zip slip


@pytest.mark.parametrize("name", ["../evil.png", "items/../../evil.png", "/etc/evil.png", "\\evil.png",
                                  "items\\..\\..\\evil.png", "C:/evil.png", "c:evil.png"])
def test_zip_slip_names_are_refused(name):
    archive = zip_of({"a.png": PNG, "b.png": PNG, name: PNG})
    refused(uploads.items_from_zip, archive, "items.zip", match="absolute or parent-directory")


def test_symbolic_links_in_the_archive_are_refused():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        archive.writestr("a.png", PNG)
        archive.writestr("b.png", PNG)
        link = zipfile.ZipInfo("c.png")
        link.create_system = 3  # unix
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(link, "/etc/passwd")
    refused(uploads.items_from_zip, buf.getvalue(), "items.zip", match="symbolic link")


# ------------------------------------------------------------------------------ bombs


def test_a_small_archive_declaring_a_huge_total_is_refused_before_anything_is_decompressed(monkeypatch):
    archive = zip_of({"a.png": PNG, "b.png": PNG, "c.png": PNG})
    bomb = archive
    for name in ("a.png", "b.png", "c.png"):  # 3 x 1 GiB declared, a few hundred bytes on disk
        bomb = with_declared_size(bomb, name, 1024 * 1024 * 1024)
    assert len(bomb) < 2000
    opened = []
    monkeypatch.setattr(zipfile.ZipFile, "open", lambda self, *a, **k: opened.append(a) or pytest.fail("opened"))
    refused(uploads.items_from_zip, bomb, "bomb.zip", match="would unpack to 3072 MiB; at most 2048 MiB")
    assert opened == []


def test_a_member_over_the_per_file_limit_is_refused_before_it_is_read(monkeypatch):
    bomb = with_declared_size(zip_of({"a.png": PNG, "b.png": PNG, "c.png": PNG}), "b.png", MAX_MEDIA_BYTES + 1)
    refused(uploads.items_from_zip, bomb, "bomb.zip", match="b.png is 10240 KiB; items may be at most 10 MiB")


def test_a_real_zip_bomb_member_is_never_inflated_past_its_limit():
    zeros = zip_of({"a.png": PNG, "b.png": PNG, "c.png": b"\x89PNG\r\n\x1a\n" + bytes(20 * 1024 * 1024)})
    assert len(zeros) < 64 * 1024  # 20 MiB of zeros in a few KiB
    refused(uploads.items_from_zip, zeros, "zeros.zip", match="items may be at most 10 MiB")


def test_a_member_that_understates_its_size_is_cut_off_and_refused():
    big = b"\x89PNG\r\n\x1a\n" + bytes(5 * 1024 * 1024)
    liar = with_declared_size(zip_of({"a.png": PNG, "b.png": PNG, "c.png": big}), "c.png", 100, local_too=True)
    refused(uploads.items_from_zip, liar, "liar.zip", match="cannot read c.png")


def test_too_many_members_are_refused():
    members = {f"{i:05}.png": b"" for i in range(uploads.MAX_ZIP_MEMBERS + 1)}
    refused(uploads.items_from_zip, zip_of(members, zipfile.ZIP_STORED), "many.zip",
            match=f"holds {uploads.MAX_ZIP_MEMBERS + 1} entries; at most {uploads.MAX_ZIP_MEMBERS}")


@pytest.mark.parametrize("width,height", [(7000, 7000), (100_000, 100_000), (2**31 - 1, 2**31 - 1)])
def test_images_with_too_many_pixels_are_refused(width, height):
    archive = zip_of({"a.png": PNG, "b.png": PNG, "huge.png": png_of_size(width, height)})
    refused(uploads.items_from_zip, archive, "pixels.zip",
            match="huge.png (is .* pixels; images may have at most|has far more than) 40")


def test_a_gif_with_a_huge_canvas_is_refused():
    from PIL import Image

    out = io.BytesIO()
    Image.new("P", (2, 2)).save(out, "GIF")
    gif = bytearray(out.getvalue())
    struct.pack_into("<HH", gif, 6, 65535, 65535)  # the logical screen
    archive = zip_of({"a.png": PNG, "b.png": PNG, "huge.gif": bytes(gif)})
    refused(uploads.items_from_zip, archive, "gif.zip",
            match="huge.gif (is 65535 x 65535 pixels|has far more than 40 megapixels)")


def test_ordinary_images_pass():
    items, media = uploads.items_from_zip(zip_of({"a.png": PNG, "b.png": png_of_size(4000, 3000),
                                                    "c.png": PNG}), "ok.zip")
    assert [item.id for item in items] == ["a", "b", "c"] and len(media) == 3


# ------------------------------------------------------------------------------ configs


BILLION_LAUGHS = b"""
name: laughs
a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]
i: [*h, *h, *h, *h, *h, *h, *h, *h, *h, *h]
"""


@pytest.mark.parametrize("data,filename,match", [
    (BILLION_LAUGHS, "laughs.yaml", "more than 100000 values"),
    (b"name: loop\nparams: &p {again: *p}\n", "loop.yaml", "more than 100000 values"),
    (b"name: x\ninstructions: " + b"y" * (1024 * 1024), "big.yaml", "a config may be at most 1024 KiB"),
    (b'{"name": "deep", "params": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "deep.json", "nested too deeply"),
    (b"name: !!python/object/apply:os.system ['true']\n", "tag.yaml", "not valid YAML"),
])
def test_hostile_configs_are_refused(data, filename, match):
    refused(uploads.config_from_yaml_bytes, data, filename, match=match)


def test_a_config_bomb_through_the_form_is_refused_and_creates_nothing(researcher_client, conn):
    csv = b"text\na\nb\nc\n"
    response = upload_study(researcher_client, csv, "items.csv", config=(BILLION_LAUGHS, "laughs.yaml"))
    assert response.status_code == 400 and "more than 100000 values" in response.get_data(as_text=True)
    assert list_studies(conn) == []


# ------------------------------------------------------------------------------ markup in names and texts


def test_file_names_and_texts_with_markup_are_stored_as_text_and_shown_escaped(researcher_client, app, conn):
    hostile = XSS[1].replace("/", "")  # a file name cannot hold "/"
    archive = zip_of({f"{hostile}.png": PNG, "b.png": PNG, "c.png": PNG})
    response = upload_study(researcher_client, archive, "items.zip", name="Pictures " + XSS[0])
    assert response.status_code == 302, response.get_data(as_text=True)[:500]
    study_id = response.headers["Location"].rsplit("/", 1)[1]
    assert_inert(researcher_client.get(f"/studies/{study_id}").get_data(as_text=True), "dashboard overview")
    page = researcher_client.get(f"/studies/{study_id}?tab=learning").get_data(as_text=True)  # lists the items
    assert_inert(page, "dashboard of an upload with hostile names")
    assert "&#34;&gt;&lt;img src=x onerror=" in page
    rater = app.test_client()
    question = rater.get(f"/api/studies/{study_id}/questions/next").get_json()["question"]
    # the id is data, shown to the researcher; a rater's page is never told it (items go by handles)
    assert all("id" not in item for item in [question["head"], *question["candidates"]])

    texts = "text,id\n" + "".join(f'"{x.replace(chr(34), chr(34) * 2)}",t{i}\n' for i, x in enumerate(XSS))
    response = upload_study(researcher_client, texts.encode(), "texts.csv")
    assert response.status_code == 302
    page = researcher_client.get(response.headers["Location"] + "?tab=learning").get_data(as_text=True)
    assert_inert(page, "dashboard of hostile texts")
    assert "&lt;script&gt;window.__xss" in page


def test_a_hostile_upload_name_is_escaped_in_the_error(researcher_client, conn):
    # (a double quote would end the multipart header's filename="..." field, so none here)
    response = upload_study(researcher_client, b"not a zip", "<img src=x onerror=alert(1)>.zip")
    assert response.status_code == 400
    html = response.get_data(as_text=True)
    assert_inert(html, "upload error")
    assert "is not a ZIP archive" in html and "&lt;img src=x" in html
    assert list_studies(conn) == []
