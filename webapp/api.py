"""The JSON API: next question, answers (one round trip each), study statistics, the learned
graph's layout, the raters table, health."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING

from flask import Blueprint, jsonify, request

from workers.store.raters import rater_table

from .errors import ApiError
from .questions_answers import load_study, rater_answer, rater_next_question
from .rater_session import request_rater
from .raters import session_guard
from .stats import study_stats
from .storage import get_redis

if TYPE_CHECKING:
    from typing import Any

    from flask.typing import ResponseReturnValue


bp = Blueprint("api", __name__, url_prefix="/api")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def json_body() -> Any:
    """The request's JSON document, or ApiError 415/400. Stricter than ``request.get_json``:
    NaN/Infinity are refused, and so is nesting too deep for the parser (a RecursionError,
    which Flask would let through as a 500)."""
    if not request.is_json:
        raise ApiError(415, "unsupported_media_type", "send the answer with Content-Type: application/json")
    try:
        return json.loads(request.get_data(cache=True), parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        raise ApiError(400, "malformed_json", "the request body is not valid JSON") from None


@bp.get("/health")
def health() -> ResponseReturnValue:
    """200 while this web process and Redis answer (so a load balancer keeps it in rotation); ``status`` is
    ``"degraded"`` where a study is not learning (its update passes fail, or its answers wait with no worker
    applying them): ``learning`` names those studies, with the age of their last good pass, and counts the
    workers and the incidents of the last hour (``workers.store.health``). ``crowd`` has, per study whose catch
    trials the crowd judges, the comparisons confirmed, pending and retired, the raters awaiting a verdict and
    the age of the oldest pending one (``workers.jobs.rater_checks.crowd_status``); a crowd "behind" (catch
    answers its looks have not seen for minutes) makes the status ``"degraded"`` too."""
    import time

    from workers.jobs.rater_checks import crowd_status
    from workers.store import health as learning_health
    from workers.store.studies import list_studies

    conn = get_redis()
    conn.ping()
    now = time.time()
    body = learning_health.overall(conn, now)
    crowd = {}
    for study in list_studies(conn):
        status = crowd_status(conn, study, now)
        if status is not None:
            crowd[study.id] = status
    body["crowd"] = crowd
    if any(s["state"] == "behind" for s in crowd.values()):
        body["status"] = "degraded"
    return jsonify(body)


@bp.get("/studies/<study_id>/questions/next")
def get_next_question(study_id: str) -> ResponseReturnValue:
    rater = request_rater(get_redis(), study_id)
    # one round trip: the study guard checks this process's copy of the study and the rater's session
    question = rater_next_question(get_redis(), study_id, rater, session_guard(study_id, rater))
    return jsonify({"question": question})


@bp.post("/studies/<study_id>/answers")
def post_answer(study_id: str) -> ResponseReturnValue:
    rater = request_rater(get_redis(), study_id)
    # the answer is kept either way; a replaced session is told so (409) instead of getting a next question
    result = rater_answer(get_redis(), study_id, rater, json_body, session_guard(study_id, rater))
    return jsonify(result), 201


@bp.get("/studies/<study_id>/stats")
def get_stats(study_id: str) -> ResponseReturnValue:
    conn = get_redis()
    study = load_study(conn, study_id)
    return jsonify(study_stats(conn, study))


@bp.get("/studies/<study_id>/raters")
def get_raters(study_id: str) -> ResponseReturnValue:
    conn = get_redis()
    study = load_study(conn, study_id)
    return jsonify({"raters": rater_table(conn, study.id)})


@bp.get("/studies/<study_id>/graph-layout")
def get_graph_layout(study_id: str) -> ResponseReturnValue:
    """One algorithm's learned graph placed in 2-D (classical MDS of its estimated distances)."""
    from workers.results.layout import graph_layout  # numpy/scipy: only researchers' dashboards call this

    conn = get_redis()
    study = load_study(conn, study_id)
    label = _asked_algorithm(study)
    return jsonify(graph_layout(conn, study, label))


def _asked_algorithm(study) -> str:
    """The label of the algorithm the request names (``?algorithm=``; the study's first without one); 404 for
    one the study does not have."""
    label = request.args.get("algorithm") or study.config.algorithms[0].label
    if study.config.get_algorithm(label) is None:
        labels = ", ".join(a.label for a in study.config.algorithms)
        raise ApiError(404, "unknown_algorithm",
                       f"study '{study.id}' has no algorithm '{label}'; its algorithms: {labels}")
    return label


@bp.get("/studies/<study_id>/items/<index>/evidence")
def get_item_evidence(study_id: str, index: str) -> ResponseReturnValue:
    """What the answers say about one item: its nearest neighbours as the learner has them now, and for each
    the answers that support or contradict it (the map's panel when an item is clicked)."""
    from workers.results.evidence import item_evidence  # numpy: only researchers' dashboards call this

    conn = get_redis()
    study = load_study(conn, study_id)
    label = _asked_algorithm(study)
    if not index.isdigit() or int(index) >= study.n_items:
        raise ApiError(404, "unknown_item", f"study '{study_id}' has items 0 to {study.n_items - 1}, not {index!r}")
    return jsonify(item_evidence(conn, study, label, int(index)))
