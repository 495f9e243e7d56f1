"""The JSON API a researcher's program uses (``proxima.connect``, curl, R): the studies, one study's
config and items, its exports (the same files the dashboard offers), its data package, item media,
and starting/pausing/closing it. Every route takes a logged-in session or an API token
(``Authorization: Bearer``, webapp/auth.py); a token for one study sees only that study.
"""
from __future__ import annotations

import io
from typing import TYPE_CHECKING

from flask import Blueprint, Response, current_app, jsonify, request, send_file, stream_with_context, url_for

from workers.store.answers import count_answers
from workers.store.queue import schedule_update
from workers.store.studies import STATUS_ACTIONS, get_items, get_media, list_studies, set_status

from .api import json_body
from .auth import token_study
from .errors import ApiError
from .questions_answers import load_study
from .stats import study_stats
from .storage import get_redis

if TYPE_CHECKING:
    from flask.typing import ResponseReturnValue
    from redis import Redis

    from workers.store.studies import Study


bp = Blueprint("researcher_api", __name__, url_prefix="/api")


def platform() -> dict:
    """The server's version and source commit, so a result can name the code that made it."""
    from workers.results.package import platform_version

    return platform_version()


def study_summary(conn: Redis, study: Study) -> dict:
    return {"id": study.id, "name": study.config.name, "status": study.status, "n_items": study.n_items,
            "created_at": study.created_at, "answers": count_answers(conn, study.id),
            "question_kind": study.config.question_kind,
            "algorithms": [a.label for a in study.config.algorithms]}


@bp.get("/studies")
def get_studies() -> ResponseReturnValue:
    conn = get_redis()
    only = token_study()
    studies = [s for s in list_studies(conn) if only is None or s.id == only]
    return jsonify({"studies": [study_summary(conn, s) for s in studies]})


@bp.get("/studies/<study_id>")
def get_study_details(study_id: str) -> ResponseReturnValue:
    conn = get_redis()
    study = load_study(conn, study_id)
    items = [{"index": i, **item.to_dict()} for i, item in enumerate(get_items(conn, study_id))]
    return jsonify({**study_summary(conn, study), "config": study.config.to_dict(), "items": items,
                    "platform": platform()})


@bp.get("/studies/<study_id>/items/<index>/media")
def get_item_media(study_id: str, index: str) -> ResponseReturnValue:
    """The file of an image, audio or video item (what raters see), for thumbnails in an analysis."""
    conn = get_redis()
    study = load_study(conn, study_id)
    if not index.isdigit() or int(index) >= study.n_items:
        raise ApiError(404, "unknown_item", f"study '{study_id}' has items 0 to {study.n_items - 1}, not {index!r}")
    index = int(index)
    data = get_media(conn, study_id, index)
    if data is None:
        raise ApiError(404, "no_media", f"item {index} of study '{study_id}' has no media file "
                       "(text, colour and HTML items have none)")
    items = get_items(conn, study_id)
    response = Response(data, mimetype=items[index].media_type or "application/octet-stream")
    response.headers["Content-Security-Policy"] = "default-src 'none'; sandbox"
    return response


def _stream(chunks, media_type: str, filename: str) -> Response:
    response = Response(stream_with_context(chunks), mimetype=media_type)
    response.headers["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@bp.get("/studies/<study_id>/export/<what>")
def get_export(study_id: str, what: str) -> ResponseReturnValue:
    """One export (``?format=``, ``?algorithm=``, ``?model=``), exactly as the dashboard's download."""
    from workers.results.exports import ExportError, export  # numpy-heavy: loaded on the first export

    conn = get_redis()
    load_study(conn, study_id)
    fmt = request.args.get("format") or {"graph": "json", "forest": "json", "model": "json"}.get(what, "csv")
    try:
        result = export(conn, study_id, what, fmt, request.args.get("algorithm") or None,
                        model=request.args.get("model") or None)
        chunks = iter(result.chunks)
        first = next(chunks, "")  # an export that cannot be made is an error, not a broken download
    except ExportError as exc:
        raise ApiError(404, "no_such_export", str(exc)) from None

    def body():
        yield first
        yield from chunks

    return _stream(body(), result.media_type, result.filename)


def _rater_ids() -> bool:
    return request.args.get("rater_ids") in ("1", "true", "yes")


def package_status_doc(conn: Redis, study_id: str, rater_ids: bool, status: dict | None = None) -> dict:
    """``workers.store.packages.package_status`` with the links to follow: ``download`` once built."""
    from workers.store.packages import package_status

    doc = status or package_status(conn, study_id, rater_ids)
    args = {"rater_ids": 1} if rater_ids else {}
    doc["status_url"] = url_for("researcher_api.get_package_status", study_id=study_id, **args)
    doc["download"] = (url_for("researcher_api.get_package", study_id=study_id, **args)
                       if doc["state"] in ("finished", "stale") else None)
    return doc


@bp.post("/studies/<study_id>/package/build")
def post_package_build(study_id: str) -> ResponseReturnValue:
    """Build the data package in a background job (``?rater_ids=1`` keeps recruitment ids): 202 and its
    progress while it is written (a build under way is joined, not repeated), 200 once built; a read-only
    token may ask (it changes no study)."""
    conn = get_redis()
    study = load_study(conn, study_id)
    status = request_package(conn, study, _rater_ids())
    return jsonify(status), 200 if status["state"] == "finished" else 202


def request_package(conn: Redis, study: Study, rater_ids: bool) -> dict:
    """Start (or join) the build of the study's package; its status with links (the dashboard's button)."""
    from workers.store.packages import DEFAULT_MAX_BYTES, DEFAULT_TOTAL_BYTES, request_build

    max_bytes = int(current_app.config.get("PACKAGE_MAX_BYTES") or DEFAULT_MAX_BYTES)
    total_bytes = int(current_app.config.get("PACKAGES_TOTAL_BYTES") or DEFAULT_TOTAL_BYTES)
    status = request_build(conn, study.id, rater_ids, status=study_stats(conn, study), max_bytes=max_bytes,
                           total_bytes=max(total_bytes, max_bytes))
    return package_status_doc(conn, study.id, rater_ids, status)


@bp.get("/studies/<study_id>/package/status")
def get_package_status(study_id: str) -> ResponseReturnValue:
    """Where the build of the data package is: state, answers written of the total, size, the error in words."""
    conn = get_redis()
    load_study(conn, study_id)
    return jsonify(package_status_doc(conn, study_id, _rater_ids()))


@bp.get("/studies/<study_id>/package")
def get_package(study_id: str) -> ResponseReturnValue:
    """The study's data package as a zip (docs/data-package.md), once built by ``POST .../package/build`` (the
    latest built, until a build after a change replaces it); ``?rater_ids=1`` for the one with recruitment ids."""
    conn = get_redis()
    study = load_study(conn, study_id)
    response = package_response(conn, study, _rater_ids())
    if response is None:
        status = package_status_doc(conn, study_id, _rater_ids())
        raise ApiError(409, "package_not_built",
                       f"the data package is not ready ({status['message']}); POST "
                       f"/api/studies/{study_id}/package/build builds it in the background, and "
                       f"{status['status_url']} says when it is ready")
    return response


def package_response(conn: Redis, study: Study, rater_ids: bool) -> Response | None:
    """The built data package as a zip download (the dashboard's link and this route), or None when none
    is built."""
    from workers.store.packages import built_package

    data = built_package(conn, study.id, rater_ids)
    if data is None:
        return None
    # a zip with recruitment ids says so in its name: it is not the one to deposit
    name = f"{study.id}-data-package{'-with-rater-ids' if rater_ids else ''}.zip"
    return send_file(io.BytesIO(data), mimetype="application/zip", as_attachment=True, download_name=name)


@bp.post("/studies/<study_id>/status")
def post_status(study_id: str) -> ResponseReturnValue:
    """Start, pause, resume or close a study: ``{"action": "pause"}`` (read-write tokens only)."""
    conn = get_redis()
    study = load_study(conn, study_id)
    body = json_body()
    action = body.get("action") if isinstance(body, dict) else None
    if action not in STATUS_ACTIONS:
        raise ApiError(400, "unknown_action", f"send {{\"action\": ...}} with one of {', '.join(STATUS_ACTIONS)}")
    status, allowed_from = STATUS_ACTIONS[action]
    if study.status not in allowed_from:
        raise ApiError(409, "wrong_status", f"the study is {study.status}; it cannot {action}")
    set_status(conn, study_id, status)
    schedule_update(conn, study_id)  # refills the pools of a resumed study, empties them when paused
    return jsonify({"status": status})
