"""Rater pages: the study page where people answer questions, and item media."""
from __future__ import annotations

import re
import secrets

from flask import Blueprint, Response, abort, render_template, request, session

from workers.studies import StudyNotFound, get_items, get_media, get_study

from .storage import get_redis

bp = Blueprint("raters", __name__)

RATER_ID_PARAMS = ("PROLIFIC_PID", "workerId", "rater")
RATER_ID_PATTERN = re.compile(r"^[A-Za-z0-9_.:@-]{1,128}$")


def current_rater() -> str:
    """The rater id of this browser session, minting an anonymous one on first use."""
    rater = session.get("rater_id")
    if not rater:
        rater = f"anon-{secrets.token_hex(8)}"
        session["rater_id"] = rater
    return rater


@bp.get("/s/<study_id>")
def study_page(study_id: str):
    conn = get_redis()
    try:
        study = get_study(conn, study_id)
    except StudyNotFound:
        abort(404, description=f"There is no study '{study_id}'. Check the link you were given.")
    for param in RATER_ID_PARAMS:
        value = request.args.get(param, "").strip()
        if value and RATER_ID_PATTERN.match(value):
            session["rater_id"] = value
            break
    current_rater()
    return render_template("raters/study.html", study=study)


@bp.get("/media/<study_id>/<int:index>")
def media(study_id: str, index: int):
    conn = get_redis()
    data = get_media(conn, study_id, index)
    if data is None:
        abort(404)
    items = get_items(conn, study_id)
    media_type = items[index].media_type if index < len(items) else None
    response = Response(data, mimetype=media_type or "application/octet-stream")
    response.headers["Cache-Control"] = "public, max-age=86400"
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response
