"""Researcher pages: the list of studies, one study's live dashboard, answer downloads."""
from __future__ import annotations

from flask import Blueprint, Response, abort, render_template, stream_with_context, url_for

from workers.answers import export_csv, export_jsonl, iter_answers
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
                           rater_link=rater_link)


def _download(study_id: str, fmt: str):
    conn = get_redis()
    _study_or_404(conn, study_id)
    item_ids = [item.id for item in get_items(conn, study_id)]
    export = export_csv if fmt == "csv" else export_jsonl
    mimetype = "text/csv" if fmt == "csv" else "application/x-ndjson"
    response = Response(stream_with_context(export(iter_answers(conn, study_id), item_ids)), mimetype=mimetype)
    response.headers["Content-Disposition"] = f'attachment; filename="{study_id}-answers.{fmt}"'
    return response


@bp.get("/studies/<study_id>/answers.csv")
def answers_csv(study_id: str):
    return _download(study_id, "csv")


@bp.get("/studies/<study_id>/answers.jsonl")
def answers_jsonl(study_id: str):
    return _download(study_id, "jsonl")
