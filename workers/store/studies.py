"""Studies and their items in Redis: create, load, list; items from a folder or a CSV.

Every write goes through ``keys``; functions that write accept ``pipeline=None`` so a
caller can fold them into one transaction. Must never import Flask or the engine.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
import re
import secrets
import time
from dataclasses import asdict, dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING

import nh3

from engine.kinds import DEFAULT_KIND, get_kind
from engine.registry import warning_for
from workers.store import keys
from workers.store.config import ALGORITHM_TABLE, LABELLED_ALGORITHMS, StudyConfig, default_algorithm
from workers.store.css import CssRefused, check_css

if TYPE_CHECKING:
    from collections.abc import Iterator

    from redis import Redis
    from redis.client import Pipeline


ITEM_KINDS = ("color", "image", "text", "audio", "video", "html")
STUDY_STATUSES = ("running", "paused", "closed")
#: What a researcher may do to a study's status (the dashboard's buttons and the researcher API):
#: action -> (status it sets, statuses it may be taken from)
STATUS_ACTIONS = {"start": ("running", ("paused",)), "pause": ("paused", ("running",)),
                  "resume": ("running", ("paused",)), "close": ("closed", ("running", "paused"))}
STUDY_ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
MEDIA_TYPES = {
    ".png": ("image", "image/png"),
    ".jpg": ("image", "image/jpeg"),
    ".jpeg": ("image", "image/jpeg"),
    ".gif": ("image", "image/gif"),
    ".webp": ("image", "image/webp"),
    ".mp3": ("audio", "audio/mpeg"),
    ".wav": ("audio", "audio/wav"),
    ".ogg": ("audio", "audio/ogg"),
    ".mp4": ("video", "video/mp4"),
    ".webm": ("video", "video/webm"),
}
#: HTML item files (a formatted text stimulus): read as UTF-8, checked against HTML_TAGS and
#: HTML_ATTRIBUTES, stored sanitised (nh3) in the item itself, shown inside the rater's page.
HTML_EXTENSIONS = (".html", ".htm")
MAX_HTML_BYTES = 20_000
#: What an HTML item may use: text formatting and structure, no scripts, links, forms, frames, media
#: or inline styles (a study's stylesheet styles items through their ``class``).
HTML_TAGS = frozenset({
    "p", "br", "hr", "div", "span", "b", "strong", "i", "em", "u", "s", "small", "mark", "sub", "sup", "code",
    "pre", "kbd", "q", "blockquote", "cite", "abbr", "h1", "h2", "h3", "h4", "h5", "h6", "ul", "ol", "li", "dl",
    "dt", "dd", "table", "thead", "tbody", "tfoot", "tr", "th", "td", "caption", "ruby", "rt", "rp", "bdi", "bdo",
    "wbr", "del", "ins", "figure", "figcaption", "section", "article", "header", "footer"})
HTML_ATTRIBUTES = frozenset({"class", "title", "lang", "dir", "colspan", "rowspan"})
MAX_MEDIA_BYTES = 10 * 1024 * 1024
#: Extensions a folder or ZIP of items may hold: media files and HTML items.
ITEM_EXTENSIONS = (*MEDIA_TYPES, *HTML_EXTENSIONS)
MAX_CSV_ROWS = 100_000
MAX_TEXT_CHARS = 5000
#: Columns of an items CSV that are not features; every other column is a numeric feature.
CSV_ITEM_COLUMNS = ("id", "text", "label")


class StudyError(ValueError):
    """Items or a study that cannot be used; the message says what to fix."""


class StudyNotFound(LookupError):
    def __init__(self, study_id: str) -> None:
        super().__init__(f"there is no study with id '{study_id}'")
        self.study_id = study_id


@dataclass(frozen=True)
class Item:
    """One thing raters compare. ``position`` is a known ground-truth coordinate (demo studies);
    ``features`` are the researcher's numeric descriptors (name -> value), which the feature
    learners (SMERF, similarity TreeRank) use."""

    id: str
    kind: str
    text: str | None = None
    color: str | None = None
    html: str | None = None
    media_type: str | None = None
    label: str | None = None
    position: tuple[float, ...] | None = None
    features: dict[str, float] | None = None

    def __post_init__(self) -> None:
        if not self.id or len(self.id) > 200:
            raise StudyError(f"item id {self.id!r} must be 1 to 200 characters")
        if self.kind not in ITEM_KINDS:
            raise StudyError(f"item {self.id!r} has kind {self.kind!r}; allowed: {', '.join(ITEM_KINDS)}")
        if self.kind == "text" and not self.text:
            raise StudyError(f"text item {self.id!r} has no text")
        if self.kind == "html":
            if not self.html or not self.html.strip():
                raise StudyError(f"HTML item {self.id!r} has no HTML")
            # whatever built the item (a file, the demo, a stored study), raters only ever get clean HTML
            object.__setattr__(self, "html", sanitize_html(self.html))
        if self.kind == "color" and not re.fullmatch(r"#[0-9a-fA-F]{6}", self.color or ""):
            raise StudyError(f"colour item {self.id!r} needs a colour like #1a2b3c, not {self.color!r}")
        if self.features is not None:
            bad = [name for name, value in self.features.items()
                   if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value)]
            if bad:
                raise StudyError(f"item {self.id!r}: feature(s) {', '.join(map(repr, bad[:5]))} must be finite numbers")

    @classmethod
    def from_dict(cls, data: dict) -> Item:
        data = dict(data)
        if data.get("position") is not None:
            data["position"] = tuple(float(x) for x in data["position"])
        if data.get("features") is not None:
            data["features"] = {str(k): float(v) for k, v in data["features"].items()}
        return cls(**data)

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True)
class Study:
    id: str
    config: StudyConfig
    status: str
    created_at: float
    n_items: int


def new_study_id(name: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:40] or "study"
    return f"{slug}-{secrets.token_hex(3)}"


def check_study_id(study_id: str) -> str:
    if not isinstance(study_id, str) or not STUDY_ID_PATTERN.match(study_id):
        raise StudyError(
            f"study id {study_id!r} must be 1 to 64 lowercase letters, digits or dashes, "
            "starting with a letter or digit"
        )
    return study_id


def create_study(conn: Redis, config: StudyConfig, items: list[Item], media: dict[int, bytes] | None = None,
                 study_id: str | None = None, stylesheet: str | bytes | None = None) -> str:
    """Store a new study with its items (and media bytes by item index) and an optional stylesheet
    for its rater pages (``check_stylesheet``); returns its id."""
    if len(items) < 3:
        raise StudyError(f"a study needs at least 3 items, got {len(items)}")
    ids = [item.id for item in items]
    if len(set(ids)) != len(ids):
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        raise StudyError(f"item ids must be unique; repeated: {', '.join(dupes[:10])}")
    check_config_for_items(config, items)
    check_item_references(config, items)
    css = check_stylesheet("the stylesheet", stylesheet) if stylesheet else None
    study_id = check_study_id(study_id) if study_id else new_study_id(config.name)
    if not conn.hsetnx(keys.study(study_id), "created_at", repr(time.time())):
        raise StudyError(f"a study with id '{study_id}' already exists")
    with conn.pipeline(transaction=True) as pipe:
        pipe.hset(keys.study(study_id), mapping={
            "name": config.name,
            "status": "running",
            "config": config.to_json(),
            "n_items": len(items),
        })
        pipe.rpush(keys.items(study_id), *[json.dumps(item.to_dict(), sort_keys=True) for item in items])
        if media:
            pipe.hset(keys.media(study_id), mapping={str(i): data for i, data in media.items()})
        if css:
            set_stylesheet(conn, study_id, css, pipeline=pipe)
        pipe.sadd(keys.studies(), study_id)
        pipe.execute()
    return study_id


#: ``![alt](item:ID)`` in researcher Markdown: an image showing one of the study's items.
ITEM_REFERENCE = re.compile(r"!\[[^\]]*\]\(\s*<?item:([^\s)>]+)")


def check_item_references(config: StudyConfig, items: list[Item]) -> None:
    """Every item a config names exists: practice questions (head, candidates, items, answer) and
    ``![..](item:ID)`` images in instructions, consent and the finish message (which must name an
    image, audio or video item: a text or colour item has no picture). StudyError names the field."""
    kinds = {item.id: item.kind for item in items}

    def unknown(field_name: str, item_id) -> StudyError:
        return StudyError(f"field '{field_name}' names item {item_id!r}, which is not among the study's "
                          f"{len(items)} items (ids: {', '.join(list(kinds)[:5])}{', ...' if len(kinds) > 5 else ''})")

    for n, p in enumerate(config.practice):
        # every item the practice question names, as its kind's entry lists them (engine/kinds.py)
        for where, item_id in get_kind(p.get("kind", DEFAULT_KIND)).practice_items(p):
            if item_id not in kinds:
                raise unknown(f"practice.{n}.{where}", item_id)
    for field_name, text in (("instructions", config.instructions), ("consent", config.consent),
                             ("completion.message", config.completion.message)):
        for item_id in ITEM_REFERENCE.findall(text or ""):
            if item_id not in kinds:
                raise unknown(field_name, item_id)
            if kinds[item_id] in ("text", "color", "html"):
                raise StudyError(f"field '{field_name}' shows item {item_id!r} as an image, but it is a "
                                 f"{kinds[item_id]} item; only image, audio or video items can be shown there")


#: Said by ``proxima create`` and the dashboard when a study would never end for its raters.
NEVER_ENDS = ("this study never ends: raters get no completion code (set limits.max_questions_per_rater, "
              "e.g. 50, so each rater finishes and is given a code)")


def config_warnings(config: StudyConfig) -> list[str]:
    """What a researcher about to pay raters should know about a valid config: an algorithm the table
    marks for its question kind (``engine.registry.warning_for``: it loses to random questions on human
    answers), no per-rater limit (raters never finish, so get no code), no answer budget, no consent text."""
    out = []
    for alg in config.algorithms:
        warning = warning_for(alg.algorithm, alg.question_kind)
        if warning:
            out.append(f"{alg.label} in a {alg.question_kind} study: {warning.rstrip('.')}")
    if not config.limits.max_questions_per_rater:
        out.append(NEVER_ENDS)
    if not config.limits.answer_budget:
        out.append("no answer budget: the study takes answers until you pause or close it "
                   "(set limits.answer_budget to cap what you pay)")
    if not config.consent:
        out.append("no consent text: raters start without a consent page (set consent)")
    return out


#: Share of the machine's memory a study's learners may take (web processes, Redis and other studies
#: need the rest); ``PROXIMA_WORKER_MEMORY_GB`` says how much a worker machine has instead.
MEMORY_SHARE = 0.75
#: Answers per item a study's memory is planned for when it sets no answer budget.
PLANNED_ANSWERS_PER_ITEM = 100


def worker_memory() -> float:
    """Bytes a worker may give one study's learners: ``PROXIMA_WORKER_MEMORY_GB`` (the worker machine's
    memory, where the web and the workers run on different machines), else this machine's, times
    ``MEMORY_SHARE``."""
    given = os.environ.get("PROXIMA_WORKER_MEMORY_GB")
    if given:
        try:
            return float(given) * 1e9 * MEMORY_SHARE
        except ValueError:
            raise StudyError(f"PROXIMA_WORKER_MEMORY_GB must be a number of gigabytes, not {given!r}") from None
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * MEMORY_SHARE


def check_memory(config: StudyConfig, n_items: int) -> None:
    """Refuse a study whose learners would not fit a worker's memory (``engine.registry.Memory``), saying
    how much they need and which learner of the same question kind fits."""
    answers = config.limits.answer_budget or PLANNED_ANSWERS_PER_ITEM * n_items
    budget = worker_memory()
    need = sum(alg.entry.memory.bytes(n_items, answers) for alg in config.algorithms)
    if need <= budget:
        return
    per_item = answers / max(n_items, 1)
    kind = config.algorithms[0].question_kind
    # the learner to name: the question kind's default where it fits, else the leanest that does
    default = default_algorithm(kind)
    fits = sorted((name != default, e.memory.bytes(n_items, answers), name) for name, e in ALGORITHM_TABLE.items()
                  if kind in e.question_kinds and not e.needs_labels and e.memory.bytes(n_items, answers) <= budget)
    heavy = max(config.algorithms, key=lambda a: a.entry.memory.bytes(n_items, answers))
    advice = (f"; {fits[0][2]} fits ({fits[0][1] / 1e9:.1f} GB)" if fits
              else "; no learner of this question kind fits: use fewer items or a larger worker")
    raise StudyError(
        f"{heavy.algorithm} on {n_items:,} items would need about {need / 1e9:.1f} GB of a worker's memory "
        f"({heavy.entry.memory.describe()}, at {per_item:.0f} answers per item), and a worker here has "
        f"{budget / 1e9:.1f} GB for a study (PROXIMA_WORKER_MEMORY_GB sets a worker machine's memory); at most "
        f"{heavy.entry.memory.max_items(budget, per_item):,} items fit{advice}")


def check_config_for_items(config: StudyConfig, items: list[Item]) -> None:
    """What a config asks of the items: enough of them for a screen of each kind asked (a grid's head and
    references) and for k, labels for supervised forests, and a worker with the memory its learners need."""
    for alg in config.algorithms:
        needed = alg.kind.items_needed(config.settings_of(alg.kind))
        if len(items) < needed:
            raise StudyError(f"a {alg.question_kind} question shows {needed} items, but the study has only "
                             f"{len(items)}; add items or show fewer (e.g. rank.n_reference)")
    check_memory(config, len(items))
    for i, alg in enumerate(config.algorithms):
        k = alg.params.get("k", 1)
        if alg.learns_graph and k > len(items) - 1:
            raise StudyError(f"algorithms.{i}.params.k is {k} but the study has only {len(items)} items; "
                             f"k can be at most {len(items) - 1}")
        if alg.algorithm in LABELLED_ALGORITHMS:
            missing = [item.id for item in items if item.label is None]
            if missing:
                raise StudyError(f"algorithms.{i} is {alg.algorithm}, which learns to classify items and needs a "
                                 f"label for every item; items without one: {', '.join(missing[:10])} (add a "
                                 "'label' column to the items CSV)")
        if alg.entry.takes_labels and alg.params.get("supervised"):
            missing = [item.id for item in items if item.label is None]
            if missing:
                raise StudyError(f"algorithms.{i} is a supervised {alg.algorithm}, which needs a label for every "
                                 f"item; items without one: {', '.join(missing[:10])} (add a 'label' column to the "
                                 "items CSV)")


def add_items(conn: Redis, study_id: str, items: list[Item], media: dict[int, bytes] | None = None) -> int:
    """Append items to a running study. Returns the new count. ``media`` is keyed by the index within ``items``.

    Learners that route added items by asking about them (comparison forests, ``Algorithm.grows``) take any;
    learners of a fixed item set keep asking about their own items only, and an added item gets neighbours
    predicted from its features (``workers.jobs.predicted``): such a study takes items only when its items
    have features and every added item has a row of the same features (``check_added_features``).
    """
    study = get_study(conn, study_id)
    if not items:
        raise StudyError("no items to add")
    existing = get_items(conn, study_id)
    fixed = [a.label for a in study.config.algorithms if not a.entry.grows]
    if fixed:
        check_added_features(existing, items, fixed)
    ids = [item.id for item in items]
    clash = sorted(({item.id for item in existing} & set(ids)) | {i for i in ids if ids.count(i) > 1})
    if clash:
        raise StudyError(f"item ids must be unique in the study; already used: {', '.join(clash[:10])}")
    first = study.n_items
    with conn.pipeline(transaction=True) as pipe:
        pipe.rpush(keys.items(study_id), *[json.dumps(item.to_dict(), sort_keys=True) for item in items])
        if media:
            pipe.hset(keys.media(study_id), mapping={str(first + i): data for i, data in media.items()})
        pipe.hsetnx(keys.study(study_id), "n_items_initial", first)
        pipe.hset(keys.study(study_id), "n_items", first + len(items))
        pipe.delete(keys.finished(study_id))  # the built forests have new items to route
        pipe.execute()
    return first + len(items)


def check_added_features(existing: list[Item], items: list[Item], fixed: list[str]) -> None:
    """Refuse, in words, items added to a study whose learners ``fixed`` learn a fixed item set unless the
    study's items have features and each added item has a row of the same ones, not all one value (a
    placeholder row tells nothing of which items it is like)."""
    growable = [a.name for a in ALGORITHM_TABLE.values() if a.grows]
    try:
        names, _ = feature_matrix(existing)
    except StudyError:
        raise StudyError(
            f"{', '.join(fixed)} learn(s) a fixed set of items: an item added later gets neighbours predicted from "
            "its features, and this study's items have no features. Give the study's items features first "
            "('proxima features STUDY FILE'), then add items with theirs ('proxima add-items STUDY --items FILE "
            f"--features FILE'); or create a new study with every item (only {' and '.join(growable)} studies "
            "take items without features)") from None
    missing = [item.id for item in items if item.features is None]
    if missing:
        raise StudyError(f"{len(missing)} added item(s) have no features: {', '.join(missing[:10])}; the study's "
                         f"items have the features {', '.join(names[:10])}, and an added item needs a row of them "
                         "(--features FILE, or feature columns in the items CSV)")
    for item in items:
        given = item.features or {}
        if sorted(given) != sorted(names):
            lacking = [n for n in names if n not in given]
            extra = [n for n in given if n not in names]
            raise StudyError(f"added item {item.id!r} has not the study's features: "
                             + "; ".join(part for part in (
                                 f"missing {', '.join(lacking[:10])}" if lacking else "",
                                 f"unknown {', '.join(extra[:10])}" if extra else "") if part))
        values = set(given.values())
        if len(names) > 1 and len(values) == 1:
            raise StudyError(f"added item {item.id!r} has the value {values.pop():g} in every feature column: a "
                             "placeholder row tells nothing of which items it is like; give its real features")


def attach_features(existing: list[Item], items: list[Item], features: dict[str, dict[str, float]]) -> list[Item]:
    """``items`` (to be added) with their rows of ``features`` (item id -> name -> value; read from a features
    file). The file may be the study's own extended by the added items: its rows of the study's items must
    then hold the values stored. Ids of neither are refused, and so is an added item without a row."""
    stored = {item.id: item for item in existing}
    adding = {item.id for item in items}
    unknown = sorted(set(features) - adding - set(stored))
    if unknown:
        raise StudyError(f"the features file names item(s) {', '.join(unknown[:10])}, which are neither the study's "
                         "nor among the items added; check its 'id' column")
    changed = sorted(i for i in set(features) & set(stored) if stored[i].features != features[i])
    if changed:
        raise StudyError(f"the features file gives item(s) {', '.join(changed[:10])} of the study other features "
                         "than they have; adding items changes none of the study's ('proxima features' sets them)")
    missing = [item.id for item in items if item.id not in features]
    if missing:
        raise StudyError(f"the features file has no row for {len(missing)} added item(s): {', '.join(missing[:10])}")
    return [Item.from_dict({**item.to_dict(), "features": features[item.id]}) for item in items]


def initial_item_count(conn: Redis, study_id: str, n_items: int) -> int:
    """How many items the study was created with (its engines' fixed item set)."""
    raw = conn.hget(keys.study(study_id), "n_items_initial")
    return int(raw) if raw is not None else n_items


#: Parsed study configs by (study id, stored config JSON): the study's hash is read on every call, so
#: an edit made by any process is seen at once; only the parsing is saved (configs are frozen, so one
#: parsed config may be shared).
_CONFIGS: dict[tuple[str, bytes], StudyConfig] = {}
CONFIGS_KEPT = 64


def _study_from_hash(study_id: str, raw: dict) -> Study:
    stored = raw.get(b"config")
    if stored is None:
        raise StudyNotFound(study_id)
    config = _CONFIGS.get((study_id, stored))
    if config is None:
        config = StudyConfig.from_stored(json.loads(stored))
        if len(_CONFIGS) >= CONFIGS_KEPT:
            _CONFIGS.clear()
        _CONFIGS[(study_id, stored)] = config
    return Study(id=study_id, config=config, status=raw[b"status"].decode(), created_at=float(raw[b"created_at"]),
                 n_items=int(raw[b"n_items"]))


def get_study(conn: Redis, study_id: str) -> Study:
    """The study as stored now (one round trip); StudyNotFound for an unknown or malformed id."""
    if not isinstance(study_id, str) or not STUDY_ID_PATTERN.match(study_id):
        raise StudyNotFound(str(study_id))
    return _study_from_hash(study_id, conn.hgetall(keys.study(study_id)))


#: The study as this process last read it, with its fingerprint, by study id (``current_study``).
_CURRENT: dict[str, tuple[Study, str]] = {}


def study_fingerprint(raw: dict) -> str:
    """What lua/study_guard.lua compares: status|n_items|created_at|SHA-1 of the config, as stored."""
    return "|".join([raw[b"status"].decode(), raw[b"n_items"].decode(), raw[b"created_at"].decode(),
                     hashlib.sha1(raw[b"config"]).hexdigest()])


def current_study(conn: Redis, study_id: str, fresh: bool = False) -> tuple[Study, str, bool]:
    """(study, fingerprint, whether it was read now) for a rater's request: the copy this process read
    last, without a round trip, unless ``fresh`` or never read. The request's script checks the
    fingerprint (lua/study_guard.lua) and refuses to act on a stale copy, so an edit made by any process
    is seen at once. StudyNotFound for an unknown or malformed id (read now)."""
    if not fresh:
        hit = _CURRENT.get(study_id)
        if hit is not None:
            return hit[0], hit[1], False
    if not isinstance(study_id, str) or not STUDY_ID_PATTERN.match(study_id):
        raise StudyNotFound(str(study_id))
    raw = conn.hgetall(keys.study(study_id))
    study = _study_from_hash(study_id, raw)
    fingerprint = study_fingerprint(raw)
    if len(_CURRENT) >= CONFIGS_KEPT and study_id not in _CURRENT:
        _CURRENT.clear()
    _CURRENT[study_id] = (study, fingerprint)
    return study, fingerprint, True


def get_study_and_rater_session(conn: Redis, study_id: str, rater: str) -> tuple[Study, str | None]:
    """``get_study`` and, in the same round trip, the nonce of the browser session that holds the
    recruited ``rater`` id in the study (``keys.rater_sessions``; None when no session claimed it)."""
    if not isinstance(study_id, str) or not STUDY_ID_PATTERN.match(study_id):
        raise StudyNotFound(str(study_id))
    with conn.pipeline(transaction=False) as pipe:
        pipe.hgetall(keys.study(study_id))
        pipe.hget(keys.rater_sessions(study_id), rater)
        raw, nonce = pipe.execute()
    return _study_from_hash(study_id, raw), None if nonce is None else nonce.decode()


def list_studies(conn: Redis) -> list[Study]:
    ids = sorted(s.decode() for s in conn.smembers(keys.studies()))
    studies = []
    for study_id in ids:
        try:
            studies.append(get_study(conn, study_id))
        except StudyNotFound:
            continue
    return sorted(studies, key=lambda s: s.created_at)


def get_items(conn: Redis, study_id: str) -> list[Item]:
    return [Item.from_dict(json.loads(raw)) for raw in conn.lrange(keys.items(study_id), 0, -1)]


def get_media(conn: Redis, study_id: str, index: int) -> bytes | None:
    return conn.hget(keys.media(study_id), str(int(index)))


def set_status(conn: Redis, study_id: str, status: str) -> None:
    if status not in STUDY_STATUSES:
        raise StudyError(f"status must be one of {', '.join(STUDY_STATUSES)}")
    get_study(conn, study_id)
    conn.hset(keys.study(study_id), "status", status)


#: Largest image (width x height) accepted: a small, highly compressed file can ask a rater's
#: browser to decode gigapixels. 40 megapixels is more than any camera photo needs here.
MAX_IMAGE_PIXELS = 40_000_000
# Leading bytes of each media type; a file whose bytes do not match its extension is refused.
_SIGNATURES = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "audio/ogg": (b"OggS",),
    "video/webm": (b"\x1a\x45\xdf\xa3",),
}


def _content_matches(media_type: str, data: bytes) -> bool:
    if media_type == "image/webp":
        return data[:4] == b"RIFF" and data[8:12] == b"WEBP"
    if media_type == "audio/wav":
        return data[:4] == b"RIFF" and data[8:12] == b"WAVE"
    if media_type == "video/mp4":
        return data[4:8] == b"ftyp"
    if media_type == "audio/mpeg":
        return data[:3] == b"ID3" or (len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0)
    return any(data.startswith(sig) for sig in _SIGNATURES.get(media_type, (b"",)))


def _check_image(filename: str, name: str, data: bytes) -> None:
    """Refuse an image of more than MAX_IMAGE_PIXELS. Only the header is read; bytes Pillow cannot
    make sense of beyond the signature are left to the browser (they cannot ask it for many pixels)."""
    import warnings

    from PIL import Image, UnidentifiedImageError


    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as image:
                width, height = image.size
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):  # Pillow's own limit came first
        raise StudyError(f"{filename}: {name} has far more than {MAX_IMAGE_PIXELS // 1_000_000} megapixels; "
                         "scale it down") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, EOFError):
        return
    if width * height > MAX_IMAGE_PIXELS:
        raise StudyError(f"{filename}: {name} is {width} x {height} pixels; images may have at most "
                         f"{MAX_IMAGE_PIXELS // 1_000_000} megapixels (scale it down)")


def check_media(source: str, name: str, data: bytes) -> tuple[str, str]:
    """The one check of a media item's file, for ``proxima create`` (a folder) and the dashboard
    upload (a ZIP) alike: an allowed extension, at most MAX_MEDIA_BYTES, content that is what the
    extension says (a text file named ``x.png`` is refused), images of sane size. Returns
    ``(kind, media_type)``; StudyError names ``source`` and ``name`` otherwise."""
    ext = Path(name).suffix.lower()
    if ext not in MEDIA_TYPES:
        allowed = ", ".join(sorted(MEDIA_TYPES))
        raise StudyError(f"{source}: {name} is not an image, audio or video file (allowed extensions: {allowed})")
    if len(data) > MAX_MEDIA_BYTES:
        raise StudyError(f"{source}: {name} is larger than {MAX_MEDIA_BYTES // (1024 * 1024)} MiB; items may be "
                         f"at most {MAX_MEDIA_BYTES // (1024 * 1024)} MiB each")
    kind, media_type = MEDIA_TYPES[ext]
    if not _content_matches(media_type, data):
        raise StudyError(f"{source}: {name} does not contain {media_type} data although its name "
                         f"ends in {ext}; re-export it in that format")
    if kind == "image":
        _check_image(source, name, data)
    return kind, media_type


def sanitize_html(html: str) -> str:
    """``html`` with everything outside HTML_TAGS / HTML_ATTRIBUTES removed (nh3, the Ammonia
    sanitiser): what a rater's page may insert as an item."""
    return nh3.clean(html, tags=set(HTML_TAGS), attributes={"*": set(HTML_ATTRIBUTES)}, url_schemes=set(),
                     strip_comments=True, link_rel=None)


class _HtmlInventory(HTMLParser):
    """The tags and attributes a document uses, to name what it may not use."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: set[str] = set()
        self.attributes: set[str] = set()

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.attributes.update(name for name, _ in attrs)

    handle_startendtag = handle_starttag


def _upload_text(what: str, data: bytes, limit: int, limit_rule: str, save_what: str) -> str:
    """An uploaded text file's text: at most ``limit`` bytes (else a StudyError naming ``what``, its
    size and ``limit_rule``) and UTF-8, a byte-order mark dropped (else one saying to save
    ``save_what`` as UTF-8)."""
    if len(data) > limit:
        raise StudyError(f"{what} is {len(data) // 1024} KiB; {limit_rule}")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise StudyError(f"{what} is not UTF-8 text (byte {exc.start}); save {save_what} as UTF-8") from None


def check_html(source: str, name: str, data: bytes) -> str:
    """The one check of an HTML item's file: UTF-8, at most MAX_HTML_BYTES, only HTML_TAGS and
    HTML_ATTRIBUTES (a script, a link, an event handler or an inline style is refused, naming it,
    rather than silently dropped), something to show. Returns the sanitised HTML."""
    text = _upload_text(f"{source}: {name}", data, MAX_HTML_BYTES,
                        f"an HTML item may be at most {MAX_HTML_BYTES // 1000} kB (it is shown inside the question)",
                        "it")
    inventory = _HtmlInventory()
    inventory.feed(text)
    inventory.close()
    tags = sorted(inventory.tags - HTML_TAGS - {"html", "head", "body", "meta", "title"})
    attributes = sorted(inventory.attributes - HTML_ATTRIBUTES)
    if tags or attributes:
        what = ", ".join([f"<{t}>" for t in tags] + [f"the attribute '{a}'" for a in attributes][:8])
        raise StudyError(f"{source}: {name} uses {what}, which raters' pages do not allow in an HTML item "
                         f"(no scripts, links, forms, media or inline styles; style items with the study's "
                         f"stylesheet through 'class'). Allowed tags: {', '.join(sorted(HTML_TAGS))}")
    body = re.search(r"<body[^>]*>(.*)</body>", text, re.S | re.I)
    clean = sanitize_html(body.group(1) if body else re.sub(r"<title>.*?</title>", "", text, flags=re.S | re.I))
    if not re.sub(r"<[^>]*>|\s|&nbsp;", "", clean):
        raise StudyError(f"{source}: {name} shows no text; an HTML item needs something for raters to read")
    return clean


def item_from_file(source: str, name: str, item_id: str, data: bytes) -> tuple[Item, bytes | None]:
    """The one way a file becomes an item, for ``proxima create`` (a folder) and the dashboard upload
    (a ZIP) alike: an HTML file is checked and kept as sanitised HTML in the item; any other file
    passes ``check_media`` and its bytes are the item's media. Errors name ``source`` and ``name``."""
    if Path(name).suffix.lower() in HTML_EXTENSIONS:
        item, media = Item(id=item_id, kind="html", html=check_html(source, name, data)), None
    else:
        kind, media_type = check_media(source, name, data)
        item, media = Item(id=item_id, kind=kind, media_type=media_type), data
    return item, media


#: A per-study stylesheet (``proxima create --stylesheet``, the dashboard's upload): at most this size.
MAX_STYLESHEET_BYTES = 100_000


def check_stylesheet(source: str, data: bytes | str) -> str:
    """The one check of a study's stylesheet, for the CLI, the dashboard upload and a restore alike:
    UTF-8 CSS of at most MAX_STYLESHEET_BYTES, parsed by a CSS tokenizer (escapes decoded, as a browser
    reads them) and held to allow-lists of at-rules, properties and functions (``css.check_css``): it
    loads nothing from elsewhere (no @import, no url() but data:image/, no image-set() ...) and holds no
    script. The pages' Content-Security-Policy stays strict as well; refusing here tells the researcher
    what was refused and where. Returns the CSS text."""
    raw = data.encode() if isinstance(data, str) else data
    css = _upload_text(source, raw, MAX_STYLESHEET_BYTES,
                       f"a study's stylesheet may be at most {MAX_STYLESHEET_BYTES // 1000} kB", "the stylesheet")
    if "\x00" in css:
        raise StudyError(f"{source} holds a NUL character; a stylesheet is plain CSS text")
    if "</" in css:
        line = css.count("\n", 0, css.index("</")) + 1
        raise StudyError(f"{source}, line {line}: a study's stylesheet may not use '</' (a stylesheet holds CSS "
                         "only, no HTML)")
    try:
        check_css(css)
    except CssRefused as refused:
        raise StudyError(f"{source}, line {refused.line}, column {refused.column}: a study's stylesheet may not "
                         f"use {refused.what}") from None
    if css.count("{") != css.count("}"):
        raise StudyError(f"{source}: its braces do not balance ({css.count('{')} '{{' and {css.count('}')} '}}'); "
                         "is it CSS?")
    return css


def set_stylesheet(conn: Redis, study_id: str, css: str | None, pipeline: Pipeline | None = None) -> None:
    """Store (or with None remove) the study's checked stylesheet."""
    target = pipeline if pipeline is not None else conn
    if css:
        target.set(keys.stylesheet(study_id), check_stylesheet("the stylesheet", css))
    else:
        target.delete(keys.stylesheet(study_id))


def get_stylesheet(conn: Redis, study_id: str) -> str | None:
    raw = conn.get(keys.stylesheet(study_id))
    return raw.decode() if raw else None


def items_from_folder(folder: str | Path) -> tuple[list[Item], dict[int, bytes]]:
    """One item per image/audio/video file of ``folder`` (sorted by name); ids are file stems."""
    folder = Path(folder)
    if not folder.is_dir():
        raise StudyError(f"items folder {folder} does not exist or is not a folder")
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in ITEM_EXTENSIONS)
    if not files:
        allowed = ", ".join(sorted(ITEM_EXTENSIONS))
        raise StudyError(f"items folder {folder} holds no media files or HTML items (allowed extensions: {allowed})")
    items, media = [], {}
    for index, path in enumerate(files):
        if path.stat().st_size > MAX_MEDIA_BYTES:
            raise StudyError(f"{path.name} is {path.stat().st_size // 1024} KiB; items may be at most "
                             f"{MAX_MEDIA_BYTES // (1024 * 1024)} MiB each")
        item, data = item_from_file(str(folder), path.name, path.stem, path.read_bytes())
        items.append(item)
        if data is not None:
            media[index] = data
    return items, media


def skipped_files(folder: str | Path) -> list[str]:
    """Names of the files in an items folder that ``items_from_folder`` leaves out (not media or HTML;
    hidden files are not counted), sorted, so a command can say what it did not take."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir()
                  if p.is_file() and not p.name.startswith(".") and p.suffix.lower() not in ITEM_EXTENSIONS)



def items_from_csv(path: str | Path) -> list[Item]:
    """Text items from a CSV file (see ``items_from_csv_text`` for the columns)."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except FileNotFoundError:
        raise StudyError(f"items file {path} does not exist") from None
    except UnicodeDecodeError as exc:
        raise StudyError(f"{path} is not UTF-8 text (byte {exc.start}); save it as CSV UTF-8") from None
    except OSError as exc:
        raise StudyError(f"cannot read items file {path}: {exc}") from None
    return items_from_csv_text(text, str(path))


def _feature_value(cell: str | None, filename: str, line: int, column: str) -> float:
    try:
        value = float((cell or "").strip())
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise StudyError(f"{filename}, row {line}, column '{column}': {cell!r} is not a number. Every column "
                         f"besides {', '.join(CSV_ITEM_COLUMNS)} is a numeric feature of the item; fill in the "
                         "cell or remove the column")
    return value


#: The longest cell an uploaded CSV may hold (the csv module's default limit, which any library imported into
#: the process may raise: it is checked here whatever that global says).
CSV_CELL_LIMIT = 131_072


def _csv_rows(reader: csv.DictReader, text: str, filename: str) -> Iterator[tuple[int, dict]]:
    """``(row number, row)`` of a CSV file (the header is row 1); a malformed row raises StudyError naming it:
    a cell past ``CSV_CELL_LIMIT``, or a quote opened and never closed (read leniently, the rest of
    the file would become one cell of that row, so a file of many items looked like one)."""
    line = 1
    too_long = f"not valid CSV: a cell is longer than {CSV_CELL_LIMIT:,} characters"
    try:
        for line, row in enumerate(reader, start=2):
            cells = [*row.values(), *(row.get(None) or ())] if None in row else row.values()
            if any(isinstance(v, str) and len(v) > CSV_CELL_LIMIT for v in cells):
                raise StudyError(f"{filename}, row {line}: {too_long}")
            yield line, row
    except csv.Error as exc:
        why = too_long[len("not valid CSV: "):] if "field limit" in str(exc) else str(exc)
        raise StudyError(f"{filename}, row {line + 1}: not valid CSV: {why}") from None
    try:
        for _ in csv.reader(io.StringIO(text, newline=""), strict=True):
            pass
    except csv.Error as exc:
        if "unexpected end of data" in str(exc):
            raise StudyError(f"{filename}, row {line}: a cell opens a quote (\") that is never closed, so every line "
                             "after it was read into that one cell; close the quote (a quote inside a quoted cell "
                             "is written twice: \"\")") from None


def items_from_csv_text(text: str, filename: str = "items.csv") -> list[Item]:
    """Text items from CSV text: a ``text`` column, optional ``id`` and ``label`` columns, and
    any further columns as numeric features (every cell a number). Errors name file, row and column."""
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        header = [h.strip() for h in (reader.fieldnames or [])]
        reader.fieldnames = header
        if "text" not in header:
            raise StudyError(f"{filename} needs a header row with a 'text' column (and optionally 'id', 'label', "
                             f"and numeric feature columns); its header is: {', '.join(header) or '(empty)'}")
        blank = [i + 1 for i, h in enumerate(header) if not h]
        if blank:
            raise StudyError(f"{filename}: header column {blank[0]} has no name; name it or remove the column")
        repeated = sorted({h for h in header if header.count(h) > 1})
        if repeated:
            raise StudyError(f"{filename}: the header names column(s) {', '.join(repeated)} more than once")
        feature_columns = [h for h in header if h not in CSV_ITEM_COLUMNS]
        items = []
        for line, row in _csv_rows(reader, text, filename):
            if line - 1 > MAX_CSV_ROWS:
                raise StudyError(f"{filename} has more than {MAX_CSV_ROWS} rows")
            if None in row:
                raise StudyError(f"{filename}, row {line}: more cells than the header has columns")
            value = (row.get("text") or "").strip()
            if not value:
                raise StudyError(f"{filename}, row {line}: the 'text' cell is empty")
            if len(value) > MAX_TEXT_CHARS:
                raise StudyError(f"{filename}, row {line}: the text has {len(value)} characters; "
                                 f"at most {MAX_TEXT_CHARS} are allowed")
            features = {c: _feature_value(row.get(c), filename, line, c) for c in feature_columns} or None
            try:
                items.append(Item(id=(row.get("id") or "").strip() or f"t{line - 1}", kind="text", text=value,
                                  label=(row.get("label") or "").strip() or None, features=features))
            except StudyError as exc:
                raise StudyError(f"{filename}, row {line}: {exc}") from None
    except csv.Error as exc:
        raise StudyError(f"{filename} is not a valid CSV file: {exc}") from None
    if not items:
        raise StudyError(f"{filename} has a header but no items")
    ids = [item.id for item in items]
    first_row: dict[str, int] = {}
    for index, item_id in enumerate(ids):
        if item_id in first_row:
            raise StudyError(f"{filename}, row {index + 2}: id '{item_id}' is already used by row "
                             f"{first_row[item_id]}; ids must be unique")
        first_row[item_id] = index + 2
    return items


def feature_matrix(items: list[Item]) -> tuple[list[str], list[list[float]]]:
    """``(names, X)``: the items' features as an (n_items, n_features) list of rows, or raises
    StudyError naming the first item without them (or with different feature names)."""
    if not items or items[0].features is None:
        raise StudyError("the study's items have no features; give the items CSV numeric feature columns "
                         "(or set them with 'proxima features STUDY FILE.csv')")
    names = list(items[0].features)
    rows = []
    for item in items:
        if item.features is None or list(item.features) != names:
            raise StudyError(f"item {item.id!r} does not have the features {', '.join(names)} the first item has")
        rows.append([item.features[n] for n in names])
    return names, rows


def features_from_csv_text(text: str, filename: str = "features.csv") -> dict[str, dict[str, float]]:
    """Item id -> {feature name: value} from CSV text with an ``id`` column and numeric columns."""
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        header = [h.strip() for h in (reader.fieldnames or [])]
        reader.fieldnames = header
        if "id" not in header or len(header) < 2:
            raise StudyError(f"{filename} needs a header row with an 'id' column and at least one numeric feature "
                             f"column; its header is: {', '.join(header) or '(empty)'}")
        columns = [h for h in header if h != "id"]
        if not all(columns) or len(set(columns)) != len(columns):
            raise StudyError(f"{filename}: every feature column needs a distinct, non-empty name")
        out: dict[str, dict[str, float]] = {}
        for line, row in _csv_rows(reader, text, filename):
            if None in row:
                raise StudyError(f"{filename}, row {line}: more cells than the header has columns")
            item_id = (row.get("id") or "").strip()
            if not item_id:
                raise StudyError(f"{filename}, row {line}: the 'id' cell is empty")
            if item_id in out:
                raise StudyError(f"{filename}, row {line}: item '{item_id}' is listed twice")
            out[item_id] = {c: _feature_value(row.get(c), filename, line, c) for c in columns}
    except csv.Error as exc:
        raise StudyError(f"{filename} is not a valid CSV file: {exc}") from None
    return out


#: Where a study's features came from (``keys.FEATURES_SOURCE_FIELD`` of its hash): a file the researcher gave,
#: or Proxima's built-in image statistics (``engine.image_features``; weak), with the version they were computed by.
FEATURES_FROM_FILE = "file"
FEATURES_BUILTIN = "builtin"


def set_features(conn: Redis, study_id: str, features: dict[str, dict[str, float]],
                 source: str = FEATURES_FROM_FILE) -> int:
    """Give every item of a study its features (item id -> name -> value); all or nothing. The study's hash
    records where they came from (``source``: :data:`FEATURES_FROM_FILE`, or :data:`FEATURES_BUILTIN` with a
    version, ``"builtin-v1"``) and a digest of them (``features_version``), in the same transaction.
    Returns the number of items updated."""
    get_study(conn, study_id)
    items = get_items(conn, study_id)
    missing = [item.id for item in items if item.id not in features]
    if missing:
        raise StudyError(f"features are missing for {len(missing)} item(s) of the study: {', '.join(missing[:10])}")
    unknown = sorted(set(features) - {item.id for item in items})
    if unknown:
        raise StudyError(f"the study has no item(s) {', '.join(unknown[:10])}; check the 'id' column")
    updated = [Item.from_dict({**item.to_dict(), "features": features[item.id]}) for item in items]
    key = keys.items(study_id)
    with conn.pipeline(transaction=True) as pipe:
        pipe.watch(key)
        if pipe.llen(key) != len(items):
            raise StudyError("items were added to the study while its features were being set; try again")
        pipe.multi()
        digest = hashlib.sha256()
        for index, item in enumerate(updated):
            line = json.dumps(item.to_dict(), sort_keys=True)
            digest.update(line.encode())
            pipe.lset(key, index, line)
        pipe.hset(keys.study(study_id), mapping={keys.FEATURES_SOURCE_FIELD: source,
                                                 keys.FEATURES_VERSION_FIELD: digest.hexdigest()[:16]})
        pipe.execute()
    return len(updated)


def features_version(conn: Redis, study_id: str) -> tuple[str | None, str | None]:
    """(where the study's features came from, the digest of the features set last) as ``set_features`` recorded
    them; (None, None) for a study whose features were never set apart from its items (a CSV's columns)."""
    source, version = conn.hmget(keys.study(study_id), [keys.FEATURES_SOURCE_FIELD, keys.FEATURES_VERSION_FIELD])
    return (None if source is None else source.decode()), (None if version is None else version.decode())


#: Config fields a researcher may change while a study runs (the algorithms and items may not:
#: the engine state was built for them).
EDITABLE_FIELDS = ("name", "instructions", "question", "pool_size", "token_ttl_seconds", "budgets", "limits")


def update_config(conn: Redis, study_id: str, **changes: object) -> StudyConfig:
    """Change editable fields of a study's config, re-validated as a whole; returns the new config.

    ``budgets`` maps algorithm labels to a question budget (None for no limit); ``limits`` changes
    some of ``max_questions_per_rater``, ``min_response_ms``, ``answer_budget``. Raises
    StudyError for a field that cannot change and ConfigError naming an invalid value.
    """
    unknown = sorted(set(changes) - set(EDITABLE_FIELDS))
    if unknown:
        raise StudyError(f"cannot change {', '.join(unknown)} of a study once created; "
                         f"editable: {', '.join(EDITABLE_FIELDS)}")
    study = get_study(conn, study_id)
    data = study.config.to_dict()
    budgets = changes.pop("budgets", None) or {}
    labels = [a["label"] for a in data["algorithms"]]
    for label, budget in budgets.items():
        if label not in labels:
            raise StudyError(f"budgets: the study has no algorithm '{label}'; its algorithms: {', '.join(labels)}")
        data["algorithms"][labels.index(label)]["budget"] = budget
    limits = changes.pop("limits", None) or {}
    data["limits"] = {**data["limits"], **limits}
    data.update(changes)
    config = StudyConfig.from_dict(data)
    check_item_references(config, get_items(conn, study_id))
    conn.hset(keys.study(study_id), mapping={"name": config.name, "config": config.to_json()})
    return config
