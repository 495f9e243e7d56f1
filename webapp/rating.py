"""What happens when a rater asks for a question or sends an answer.

Views parse the request and call these; nothing here waits on the engine: a question is
popped from the study's pool (or a fallback is drawn), an answer is validated against its
signed token and appended to the log by one Lua script.
"""
from __future__ import annotations

import json
import time

from flask import current_app, url_for

from workers import keys
from workers.answers import AnswerRefused, accept_answer
from workers.questions import StudyComplete, issue_question, question_items
from workers.queue import enqueue_update, schedule_update
from workers.studies import Study, StudyNotFound, get_study

from .errors import ApiError
from .tokens import sign_question, verify_question

MAX_RESPONSE_MS = 24 * 3600 * 1000


def load_study(conn, study_id: str) -> Study:
    try:
        return get_study(conn, study_id)
    except StudyNotFound as exc:
        raise ApiError(404, "unknown_study", str(exc)) from None


def token_ttl(study: Study) -> int:
    return int(current_app.config.get("TOKEN_TTL_SECONDS") or study.config.token_ttl_seconds)


def item_payload(study_id: str, index: int, raw: bytes) -> dict:
    item = json.loads(raw)
    payload = {"index": index, "id": item["id"], "kind": item["kind"]}
    if item["kind"] == "text":
        payload["text"] = item["text"]
    elif item["kind"] == "color":
        payload["color"] = item["color"]
    else:
        payload["url"] = url_for("raters.media", study_id=study_id, index=index)
    return payload


def next_question(conn, study: Study, rater: str) -> dict | None:
    """Issue the next question to ``rater``: a payload with its signed token, or None if closed.

    Raises ApiError 409 ``study_complete`` once every algorithm of the study has finished.
    """
    if study.status != "running":
        return None
    now = time.time()
    ttl = token_ttl(study)
    try:
        question, left, target = issue_question(conn, study.id, study.config, study.n_items, rater, now=now,
                                                 expires_at=now + ttl)
    except StudyComplete:
        raise ApiError(409, "study_complete", "this study has all the answers it needs; thank you!") from None
    if 2 * left < max(1, target):
        schedule_update(conn, study.id)
    indices = question_items(question)
    with conn.pipeline(transaction=False) as pipe:
        for index in indices:
            pipe.lindex(keys.items(study.id), index)
        raws = pipe.execute()
    items = [item_payload(study.id, i, raw) for i, raw in zip(indices, raws, strict=True)]
    token = sign_question(current_app.config["SECRET_KEY"], {
        "s": study.id, "q": question, "r": rater, "t": now,
    })
    payload = {"token": token, "kind": question["kind"], "expires_in": ttl}
    if question["kind"] == "rating":
        scale = study.config.rating
        payload.update(prompt=scale.prompt, items=items, scale=scale.to_dict())
    else:
        payload.update(prompt=study.config.question, head=items[0], candidates=items[1:])
    return payload


def parse_answer_body(body) -> tuple[str, int | None, float | None, int | None]:
    """(token, choice, value, response_ms) of an answer body; which of choice/value is needed
    depends on the question kind, checked once the token is verified."""
    if not isinstance(body, dict):
        raise ApiError(400, "malformed_answer",
                       "send the answer as a JSON object: {\"token\": ..., \"choice\": ...} or "
                       "{\"token\": ..., \"value\": ...}")
    choice = body.get("choice")
    if choice is not None and (isinstance(choice, bool) or not isinstance(choice, int)):
        raise ApiError(400, "malformed_answer", "'choice' must be the index of the chosen item (an integer)")
    value = body.get("value")
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise ApiError(400, "malformed_answer", "'value' must be a number on the rating scale")
    response_ms = body.get("response_ms")
    if response_ms is not None and (isinstance(response_ms, bool) or not isinstance(response_ms, (int, float))
                                    or not 0 <= response_ms <= MAX_RESPONSE_MS):
        raise ApiError(400, "malformed_answer", "'response_ms' must be a number of milliseconds between 0 and 86400000")
    return body.get("token"), choice, value, None if response_ms is None else int(response_ms)


def check_response(study: Study, question: dict, choice, value) -> tuple[int | None, float | None]:
    """The answer's choice (triplets) or value (ratings), or ApiError saying what the question needs."""
    if question["kind"] == "rating":
        if value is None:
            scale = study.config.rating
            raise ApiError(400, "malformed_answer",
                           f"a rating question needs 'value', a number from {scale.min:g} to {scale.max:g}")
        try:
            return None, study.config.rating.check_value(value)
        except ValueError as exc:
            raise ApiError(400, "value_out_of_range", str(exc)) from None
    if choice is None:
        raise ApiError(400, "malformed_answer", "a triplet question needs 'choice', the index of the chosen item")
    if choice not in question["candidates"]:
        raise ApiError(400, "choice_not_offered",
                       f"choice {choice} was not one of the offered items {question['candidates']}")
    return choice, None


def submit_answer(conn, study: Study, rater: str, body) -> dict:
    """Validate and store one answer; returns {"answer": {"id"}, "next": question | None}."""
    token, choice, value, response_ms = parse_answer_body(body)
    payload = verify_question(current_app.config["SECRET_KEY"], token, max_age=token_ttl(study))
    if payload.get("s") != study.id:
        raise ApiError(400, "wrong_study", "this question token belongs to another study")
    if payload.get("r") != rater:
        raise ApiError(403, "wrong_rater", "this question was issued to another rater session")
    question = payload["q"]
    choice, value = check_response(study, question, choice, value)
    try:
        answer_id, schedule = accept_answer(conn, study.id, question, rater, choice, issued_at=payload["t"],
                                            response_ms=response_ms, used_ttl=token_ttl(study) + 3600, value=value)
    except AnswerRefused as refused:
        if refused.code == "used":
            raise ApiError(409, "already_answered", "this question was already answered; the first answer is kept",
                           answer_id=refused.answer_id) from None
        raise ApiError(410, "expired_token",
                       "this question expired before it was answered; fetch a new question") from None
    if schedule:
        enqueue_update(conn, study.id)
    try:
        following = next_question(conn, study, rater)
    except ApiError as exc:
        if exc.code != "study_complete":
            raise
        following = None
    return {"answer": {"id": answer_id}, "next": following}
