"""Built-in features for a study of images without features of its own: each image's colour, texture and shape
statistics (``engine.image_features``), stored as the study's features and recorded as built-in (weak). Computed
at ``proxima create --builtin-features`` and ``proxima features STUDY --builtin`` in the command's process, and
for the New study form in an RQ job (:func:`builtin_features_job`, enqueued by ``workers.store.queue``), so no web
request waits on a folder of images. Must never import Flask.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from engine.image_features import BUILTIN_VERSION, COLUMNS, ImageFeatureError, image_features
from workers.store import keys
from workers.store.studies import FEATURES_BUILTIN, StudyError, get_items, get_media, get_study, set_features

if TYPE_CHECKING:
    from redis import Redis

    from workers.store.studies import Item

#: what a study records as its features' source (``workers.store.studies.set_features``)
SOURCE = f"{FEATURES_BUILTIN}-v{BUILTIN_VERSION}"
#: what the dashboard and the commands say of them
WEAK = ("built-in image statistics (colour, texture, shape), computed from the pixels alone: weak features that "
        "see how an image looks, not what it shows; the learner tests them against the answers and drops them if "
        "they predict nothing")


def is_builtin(source: str | None) -> bool:
    """Whether a study's recorded features source (``features_version(...)[0]``) is the built-in statistics."""
    return bool(source) and source.startswith(FEATURES_BUILTIN)


def builtin_features(items: list[Item], image_of: Callable[[int], bytes | None],
                     progress: Callable[[int, int], None] | None = None) -> dict[str, dict[str, float]]:
    """Item id -> {column of ``engine.image_features.COLUMNS``: value} for ``items``, every one an image whose
    bytes ``image_of(index)`` gives. StudyError in words for items that are not images, or an image that cannot
    be read. ``progress(done, total)`` is called every 100 images."""
    not_images = [item.id for item in items if item.kind != "image"]
    if not_images:
        raise StudyError(f"built-in features are computed from images, and {len(not_images)} item(s) are not "
                         f"images: {', '.join(not_images[:10])}; give the study's features in a file instead")
    out = {}
    for index, item in enumerate(items):
        data = image_of(index)
        if data is None:
            raise StudyError(f"item {item.id!r} has no stored image to compute built-in features from")
        try:
            row = image_features(data)
        except ImageFeatureError as exc:
            raise StudyError(f"item {item.id!r}: {exc}") from None
        out[item.id] = dict(zip(COLUMNS, map(float, row), strict=True))
        if progress is not None and (index + 1) % 100 == 0:
            progress(index + 1, len(items))
    return out


def features_from_media(items: list[Item], media: Mapping[int, bytes] | None,
                        progress: Callable[[int, int], None] | None = None) -> dict[str, dict[str, float]]:
    """``builtin_features`` of items read from a folder or a zip (media bytes by item index)."""
    return builtin_features(items, (media or {}).get, progress)


def set_builtin_features(conn: Redis, study_id: str, progress: Callable[[int, int], None] | None = None) -> int:
    """Compute the built-in features of a stored study's images and set them as its features, recorded as
    built-in (``SOURCE``); returns the number of items."""
    items = get_items(conn, study_id)
    features = builtin_features(items, lambda index: get_media(conn, study_id, index), progress)
    return set_features(conn, study_id, features, source=SOURCE)


def builtin_features_job(study_id: str) -> dict:
    """RQ entry point (``workers.store.queue.enqueue_builtin_features``): compute and set the study's built-in
    features, then rebuild its learners from its log (``workers.jobs.rebuild.rebuild_study``) so they start
    from them (a study created with the form
    may have built its learners, and even taken answers, before the features were there). The outcome is kept
    in words where the dashboard reads it (``keys.FEATURES_JOB_FIELD`` of the study's engine stats)."""
    import json
    import time

    from rq import get_current_job

    from workers.jobs.rebuild import rebuild_study

    conn = get_current_job().connection
    status_key = keys.engine_stats(study_id)

    def say(fields: dict) -> None:
        conn.hset(status_key, keys.FEATURES_JOB_FIELD, json.dumps({**fields, "at": time.time()}))

    try:
        get_study(conn, study_id)
        say({"state": "running", "done": 0})
        n = set_builtin_features(conn, study_id, lambda done, total: say({"state": "running", "done": done,
                                                                            "total": total}))
    except StudyError as exc:
        say({"state": "failed", "error": str(exc)})
        return {"state": "failed", "error": str(exc)}
    say({"state": "rebuilding", "items": n})
    # replayed here, in this job (not a queued rebuild, whose status would speak of excluded raters)
    report = rebuild_study(conn, study_id)
    say({"state": "finished", "items": n, "answers_replayed": report.answers_replayed})
    return {"state": "finished", "items": n, "answers_replayed": report.answers_replayed}
