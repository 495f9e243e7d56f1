"""The researcher's preview of a study's rater pages: consent, instructions, practice and questions of
every kind the study asks, exactly as raters see them, with nothing recorded.

Every view here only reads (the study, its items): no rater id, session claim, question issue, answer,
counter or completion code is written, and the questions are not taken from the study's pools. A
preview question's token is its own plain JSON (never signed): the raters' answer route refuses it.
Researcher-only, like every endpoint outside the rater pages (``auth.require_login``).
"""
from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING

from flask import Blueprint, abort, jsonify, redirect, render_template, request, url_for

from workers.store import keys
from workers.store.questions import fallback_question, question_items
from workers.store.studies import StudyNotFound, get_study

from .errors import ApiError
from .handles import new_seed
from .i18n import rater_instructions
from .questions_answers import answer_picks, check_response, parse_answer_body, screen_payload, shown_payloads
from .raters import WIDGETS, practice_payload, render_markdown
from .storage import get_redis

if TYPE_CHECKING:
    from flask.typing import ResponseReturnValue

    from workers.store.studies import Study

bp = Blueprint("preview", __name__, url_prefix="/studies/<study_id>/preview")

#: Questions a preview asks when the study sets no per-rater limit (enough to see every kind a few times).
PREVIEW_QUESTIONS = 12
TOKEN_PREFIX = "preview."


def _study(study_id: str) -> Study:
    try:
        return get_study(get_redis(), study_id)
    except StudyNotFound:
        abort(404, description=f"There is no study '{study_id}'.")


def preview_total(study: Study) -> int:
    return study.config.limits.max_questions_per_rater or PREVIEW_QUESTIONS


def preview_question(study: Study, n: int) -> dict:
    """The ``n``-th preview question (0-based): a random question of the study's algorithms in turn, so
    every kind the study asks comes up; its items as the rater's page gets them."""
    algorithm = study.config.algorithms[n % len(study.config.algorithms)]
    question = fallback_question(algorithm, study.n_items)
    with get_redis().pipeline(transaction=False) as pipe:
        for index in question_items(question):
            pipe.lindex(keys.items(study.id), index)
        raws = pipe.execute()
    seed = new_seed()  # items named by handles as on a rater's page; the researcher is also shown their ids
    items = shown_payloads(study.id, question, raws, seed, with_id=True)
    token = TOKEN_PREFIX + base64.urlsafe_b64encode(json.dumps({"q": question, "n": n, "h": seed}).encode()).decode()
    return {"token": token, "kind": question["kind"], "expires_in": study.config.token_ttl_seconds,
            "progress": {"answered": n, "total": preview_total(study)}, "preview": True,
            **screen_payload(study, question, items)}


def _open_token(token: object) -> tuple[dict, int, object]:
    if not isinstance(token, str) or not token.startswith(TOKEN_PREFIX):
        raise ApiError(400, "invalid_token", "this is not a preview question's token")
    try:
        doc = json.loads(base64.urlsafe_b64decode(token[len(TOKEN_PREFIX):].encode()))
        return doc["q"], int(doc["n"]), doc.get("h")
    except (ValueError, KeyError, TypeError):
        raise ApiError(400, "invalid_token", "this is not a preview question's token") from None


@bp.route("", methods=["GET", "POST"])
def page(study_id: str) -> ResponseReturnValue:
    """The study's rater page as a rater first sees it: consent (its buttons lead on in the preview),
    then instructions, practice and questions. Whatever the study's status."""
    study = _study(study_id)
    if request.method == "POST":
        if request.form.get("decision") != "agree":
            return render_template("raters/declined.html", study=study, preview=True)
        return redirect(url_for("preview.page", study_id=study.id, consented=1))
    if study.config.consent and not request.args.get("consented"):
        return render_template("raters/consent.html", study=study, preview=True,
                               consent_url=url_for("preview.page", study_id=study.id),
                               consent=render_markdown(study.config.consent, study))
    return render_template("raters/study.html", study=study, preview={
        "next_url": url_for("preview.next_question", study_id=study.id),
        "answer_url": url_for("preview.answer", study_id=study.id),
        "finish_url": url_for("preview.done", study_id=study.id)},
        instructions=render_markdown(rater_instructions(study.config), study), practice=practice_payload(study),
        answered=0, total=preview_total(study), widgets=WIDGETS)


@bp.get("/next")
def next_question(study_id: str) -> ResponseReturnValue:
    study = _study(study_id)
    n = request.args.get("n", "0")
    return jsonify({"question": preview_question(study, int(n) if n.isdigit() else 0)})


@bp.post("/answers")
def answer(study_id: str) -> ResponseReturnValue:
    """Check a preview answer as the live route would (the choice offered, the value on the scale), keep
    nothing, and give the next preview question, or the finish page after the study's question count."""
    study = _study(study_id)
    token, choice, value, _, skip = parse_answer_body(request.get_json(silent=True))
    question, n, seed = _open_token(token)
    check_response(study, question, answer_picks(study, question, seed, None if skip else choice), value, skip)
    if n + 1 >= preview_total(study):
        return jsonify({"done": {"finish_url": url_for("preview.done", study_id=study.id)}}), 200
    return jsonify({"next": preview_question(study, n + 1)}), 200


@bp.get("/done")
def done(study_id: str) -> ResponseReturnValue:
    study = _study(study_id)
    completion = study.config.completion
    return render_template("dashboard/preview_done.html", study=study, preview=True,
                           message=render_markdown(completion.message), redirect_url=completion.prolific_redirect_url,
                           debrief=completion.debrief_question)
