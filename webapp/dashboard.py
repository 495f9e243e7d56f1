"""Researcher pages: the list of studies, one study's live dashboard, every export."""
from __future__ import annotations

from flask import Blueprint, Response, abort, render_template, request, stream_with_context, url_for

from workers.exports import FORMATS, ExportError, export
from workers.studies import StudyNotFound, get_items, get_study, list_studies

from .stats import study_stats
from .storage import get_redis

bp = Blueprint("dashboard", __name__)


def _study_or_404(conn, study_id: str):
    try:
        return get_study(conn, study_id)
    except StudyNotFound:
        abort(404, description=f"There is no study '{study_id}'.")


@bp.get("/")
def index():
    conn = get_redis()
    return render_template("dashboard/index.html", studies=list_studies(conn))


@bp.get("/studies/<study_id>")
def study(study_id: str):
    conn = get_redis()
    study = _study_or_404(conn, study_id)
    items = get_items(conn, study_id)
    rater_link = url_for("raters.study_page", study_id=study_id, _external=True)
    return render_template("dashboard/study.html", study=study, items=items, stats=study_stats(conn, study),
                           rater_link=rater_link, formats=FORMATS)


def _download(study_id: str, what: str, fmt: str):
    conn = get_redis()
    _study_or_404(conn, study_id)
    try:
        result = export(conn, study_id, what, fmt, request.args.get("algorithm") or None)
        chunks = iter(result.chunks)
        first = next(chunks, "")  # surfaces export errors as a 404 page rather than a broken download
    except ExportError as exc:
        abort(404, description=str(exc))

    def body():
        yield first
        yield from chunks

    response = Response(stream_with_context(body()), mimetype=result.media_type)
    response.headers["Content-Disposition"] = f'attachment; filename="{result.filename}"'
    return response


@bp.get("/studies/<study_id>/export/<what>.<fmt>")
def download(study_id: str, what: str, fmt: str):
    """Every export of the platform: answers.csv/.jsonl, triplets.csv, graph.json/.csv/.graphml, forest.json."""
    return _download(study_id, what, fmt)


@bp.get("/studies/<study_id>/answers.csv")
def answers_csv(study_id: str):
    return _download(study_id, "answers", "csv")


@bp.get("/studies/<study_id>/answers.jsonl")
def answers_jsonl(study_id: str):
    return _download(study_id, "answers", "jsonl")
