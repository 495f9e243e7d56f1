"""Items and configs uploaded from the browser (a ZIP of media files or a CSV of texts, a YAML config),
and items given on the command line as a path (a folder, a ZIP or a CSV).

Everything is read in memory (nothing is extracted to disk), so a member name like
``../../etc/passwd`` cannot land anywhere; such names are still refused, with every other
sign of a hostile or broken archive: symbolic links, too many members, too many uncompressed
bytes in all or in one file (checked on the declared sizes before anything is decompressed,
and no member is read past its declared size), images of more pixels than a browser should
decode, files whose content is not what their extension says. Configs are refused when large
or when YAML aliases would expand them past a node budget. Must never import Flask or the engine.
"""
from __future__ import annotations

import io
import json
import posixpath
import re
import stat
import zipfile
from pathlib import Path

import yaml

from workers.store.config import ConfigError, StudyConfig
from workers.store.studies import (
    ITEM_EXTENSIONS,
    MAX_MEDIA_BYTES,
    Item,
    StudyError,
    item_from_file,
    items_from_csv,
    items_from_csv_text,
    items_from_folder,
)

MAX_ZIP_MEMBERS = 100_000
MAX_ZIP_TOTAL_BYTES = 2 * 1024 * 1024 * 1024
#: An archive unpacking past MAX_PADDED_BYTES to more than MAX_ZIP_RATIO times its own size is refused: image,
#: audio and video files are compressed already (a PNG or JPEG barely shrinks in a ZIP), so such an archive is
#: padding, and every unpacked byte of it would sit in Redis (a 290 KB archive of zero-padded images became
#: 285 MB there).
MAX_ZIP_RATIO = 20
MAX_PADDED_BYTES = 64 * 1024 * 1024
MAX_CONFIG_BYTES = 1024 * 1024
#: Most values (after YAML aliases are expanded) a config may hold: "billion laughs" stays small
#: as YAML but explodes when validated or stored as JSON.
MAX_CONFIG_NODES = 100_000
_SKIPPED = ("__MACOSX/", ".DS_Store", "Thumbs.db")

def _check_member_name(filename: str, name: str) -> None:
    """Refuse the member names that would escape a folder if the archive were ever extracted."""
    parts = name.replace("\\", "/").split("/")
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name) or ".." in parts or "\x00" in name:
        raise StudyError(f"{filename}: member {name!r} has an absolute or parent-directory ('..') path; "
                         "the archive is refused (zip the item files themselves, with plain relative names)")


def items_from_zip(data: bytes, filename: str = "items.zip", max_members: int = MAX_ZIP_MEMBERS,
                   max_total_bytes: int = MAX_ZIP_TOTAL_BYTES) -> tuple[list[Item], dict[int, bytes]]:
    """One item per image/audio/video file of a ZIP (sorted by path); ids are the file names' stems."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError):
        raise StudyError(f"{filename} is not a ZIP archive; upload a .zip of image, audio or video files "
                         "or a .csv of texts") from None
    with archive:
        infos = archive.infolist()
        if len(infos) > max_members:
            raise StudyError(f"{filename} holds {len(infos)} entries; at most {max_members} are allowed")
        for info in infos:
            _check_member_name(filename, info.filename)
            if info.create_system == 3 and stat.S_ISLNK(info.external_attr >> 16):
                raise StudyError(f"{filename}: member {info.filename!r} is a symbolic link; the archive is refused "
                                 "(zip the item files themselves)")
        members = [i for i in infos if not i.is_dir()
                   and not any(s in i.filename for s in _SKIPPED)
                   and not posixpath.basename(i.filename).startswith(".")]
        total = sum(i.file_size for i in members)
        if total > max_total_bytes:
            raise StudyError(f"{filename} would unpack to {total // (1024 * 1024)} MiB; at most "
                             f"{max_total_bytes // (1024 * 1024)} MiB are allowed")
        if total > MAX_PADDED_BYTES and total > MAX_ZIP_RATIO * len(data):
            raise StudyError(f"{filename} would unpack to {total / 2**20:.0f} MiB from {len(data) / 2**20:.1f} MiB "
                             f"({total / max(len(data), 1):.0f} times its size); image, audio and video files are "
                             f"compressed already, so an archive unpacking to more than {MAX_ZIP_RATIO} times its "
                             f"size (past {MAX_PADDED_BYTES // 2**20} MiB) holds padding and is refused: "
                             "upload the files as they are")
        allowed = ", ".join(sorted(ITEM_EXTENSIONS))
        items, media, seen = [], {}, {}
        for info in sorted(members, key=lambda i: i.filename):
            name = info.filename
            stem, ext = posixpath.splitext(posixpath.basename(name))
            if ext.lower() not in ITEM_EXTENSIONS:
                raise StudyError(f"{filename}: {name} is not an image, audio, video or HTML file "
                                 f"(allowed extensions: {allowed}); remove it from the archive")
            if info.file_size > MAX_MEDIA_BYTES:
                raise StudyError(f"{filename}: {name} is {info.file_size // 1024} KiB; items may be at most "
                                 f"{MAX_MEDIA_BYTES // (1024 * 1024)} MiB each")
            if stem in seen:
                raise StudyError(f"{filename}: {name} and {seen[stem]} would both be item '{stem}'; "
                                 "give every file its own name")
            seen[stem] = name
            try:
                # reads at most the declared size: a member that lies about its size fails its CRC check
                with archive.open(info) as fh:
                    content = fh.read(MAX_MEDIA_BYTES + 1)
            except (zipfile.BadZipFile, RuntimeError, NotImplementedError, OSError, EOFError) as exc:
                raise StudyError(f"{filename}: cannot read {name} ({exc}); encrypted or damaged archives "
                                 "are not supported") from None
            try:
                item, data = item_from_file(filename, name, stem, content)
            except StudyError as exc:
                message = str(exc)
                raise StudyError(message if message.startswith(f"{filename}:") else f"{filename}: {name}: {message}") \
                    from None
            items.append(item)
            if data is not None:
                media[len(items) - 1] = data
    if not items:
        raise StudyError(f"{filename} holds no media files or HTML items (allowed extensions: {allowed})")
    return items, media


def items_from_csv_bytes(data: bytes, filename: str = "items.csv") -> list[Item]:
    """Text items from uploaded CSV bytes: decoded here, parsed by ``studies.items_from_csv_text``
    (a ``text`` column, optional ``id`` and ``label``, any other column a numeric feature)."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise StudyError(f"{filename} is not UTF-8 text (byte {exc.start}); save it as CSV UTF-8") from None
    return items_from_csv_text(text, filename)


def items_from_upload(data: bytes, filename: str) -> tuple[list[Item], dict[int, bytes]]:
    """Items from an uploaded .zip (media) or .csv (texts), chosen by the file's name and checked by its bytes."""
    lower = filename.lower()
    if lower.endswith(".zip"):
        return items_from_zip(data, filename)
    if lower.endswith(".csv"):
        if data.startswith(b"PK\x03\x04"):
            raise StudyError(f"{filename} is a ZIP archive, not a CSV; rename it to .zip")
        return items_from_csv_bytes(data, filename), {}
    raise StudyError(f"{filename or 'the items file'} must be a .zip of image/audio/video files or a .csv of texts")


def _check_config_size(filename: str, doc) -> None:
    """Refuse a document of more than MAX_CONFIG_NODES values, counting each alias use again."""
    budget = MAX_CONFIG_NODES
    stack = [doc]
    while stack:
        value = stack.pop()
        budget -= 1
        if budget < 0:
            raise ConfigError(f"{filename} holds more than {MAX_CONFIG_NODES} values (after expanding YAML "
                              "aliases); a study config needs far fewer")
        if isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)


def config_from_yaml_bytes(data: bytes, filename: str = "config.yaml") -> StudyConfig:
    """A study config from an uploaded YAML or JSON file; errors name the file and the field."""
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{filename} is {len(data) // 1024} KiB; a config may be at most "
                          f"{MAX_CONFIG_BYTES // 1024} KiB")
    try:
        text = data.decode("utf-8-sig")
        doc = json.loads(text) if filename.lower().endswith(".json") else yaml.safe_load(text)
    except UnicodeDecodeError:
        raise ConfigError(f"{filename} is not UTF-8 text") from None
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"{filename} is not valid YAML/JSON: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{filename} is nested too deeply") from None
    _check_config_size(filename, doc)
    try:
        return StudyConfig.from_dict(doc)
    except ConfigError as exc:
        raise ConfigError(f"{filename}: {exc}") from None


def items_from_path(path: str | Path) -> tuple[list[Item], dict[int, bytes] | None]:
    """Items (and media) from a folder of media files, a .zip of them, or a CSV of texts."""
    path = Path(path)
    if not path.exists():
        raise StudyError(f"items path {path} does not exist")
    if path.is_dir():
        return items_from_folder(path)
    if path.suffix.lower() == ".zip":
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise StudyError(f"cannot read items archive {path}: {exc.strerror or exc}") from None
        return items_from_zip(data, path.name)
    return items_from_csv(path), None
