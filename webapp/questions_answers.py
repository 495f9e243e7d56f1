"""The rater question/answer service: what happens when a rater asks for a question or sends an answer.

The JSON API's views (``api.py``) and the rater pages (``raters.py``) call it; the raters table and
its export are ``workers.store.raters``. Views parse the request and call these; nothing here waits
on the engine: a question is popped from the study's pool (or a fallback is drawn), an answer is
validated against its signed token and appended to the log by one Lua script. Each request costs
one Redis round trip: one script (an answer is stored and the rater's next question issued by the
same script). The study comes from this process's copy (``studies.current_study``), which the
script checks first (lua/study_guard.lua) together with the rater's browser session: a stale copy is
read again and the request redone, so an edit made by any process is seen at once.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import random
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from flask import current_app, session, url_for

from engine.kinds import KINDS, AnswerError, kind_of
from workers.store import keys
from workers.store.answers import (
    CATCH_ALGORITHM,
    CLAIM,
    LATE_FLAG,
    REPEAT_AGREE_FLAG,
    REPEAT_DISAGREE_FLAG,
    SKIPPED_FLAG,
    AcceptRequest,
    AnswerRefused,
    accept_and_issue,
    judge_self_agreement,
)
from workers.store.questions import (
    NextQuestion,
    NextRequest,
    StudyGuard,
    issue_next_question,
    next_request,
    pooled,
    question_items,
    queue_repeat,
    repeat_question,
)
from workers.store.queue import enqueue_update
from workers.store.raters import CATCH_PENDING
from workers.store.studies import (
    Study,
    StudyNotFound,
    current_study,
    get_study,
    get_study_and_rater_session,
    sanitize_html,
)

from . import catches
from .catches import Comparison
from .errors import ApiError
from .handles import new_seed, picked_indices, question_handles
from .i18n import rater_prompt, rater_scale
from .tokens import sign_question, verify_question

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from redis import Redis


MAX_RESPONSE_MS = 24 * 3600 * 1000
#: How long a used-token marker lives: past the longest token TTL a study can be set to (7 days, the
#: config's maximum), so raising a running study's TTL cannot revive an answered token.
USED_MARKER_TTL = 7 * 24 * 3600 + 3600
#: Validation repeats: a due repeat is asked at a question request with this chance (so when it comes
#: cannot be told from the answers given), at least REPEAT_GAP_MIN answers after the answer it repeats
#: and up to REPEAT_GAP_SPREAD more; repeated answers are drawn from the first REPEAT_SOURCE_SHARE of
#: the rater's questions (of max_questions_per_rater, else REPEAT_DEFAULT_QUESTIONS), so they are asked
#: before the rater finishes.
REPEAT_ASK_CHANCE = 0.5
REPEAT_GAP_MIN = 3
REPEAT_GAP_SPREAD = 6
REPEAT_SOURCE_SHARE = 0.6
REPEAT_DEFAULT_QUESTIONS = 100
#: Error codes meaning "no more questions for this rater": the page moves on to the finish page.
DONE_CODES = ("study_complete", "rater_done", "budget_reached", "rater_stopped")
#: Tries of a rater's request against a copy of the study that turns out stale (the last one reads the
#: study and runs its script without the check, as a request did before copies were kept).
STUDY_ATTEMPTS = 3
SESSION_REPLACED_MESSAGE = ("This study was opened with your participant id in another tab, browser or device; "
                            "please continue there, or reload this page to continue here.")


class StaleStudy(Exception):
    """The request's script found this process's copy of the study out of date: nothing was done."""


def session_replaced_error() -> ApiError:
    """The 409 telling a page that its rater id was since opened in another browser session."""
    return ApiError(409, "session_replaced", SESSION_REPLACED_MESSAGE)


#: What the page of a rater who was forgotten (``deletion.forget_rater``) reads instead of a question.
RATER_FORGOTTEN_MESSAGE = ("your answers to this study were deleted (you withdrew from it), so it asks you "
                           "nothing more and stores nothing more from you; there is nothing else you need to do")


def rater_forgotten_error() -> ApiError:
    """The 403 telling the page of a forgotten rater that the study takes nothing more from them."""
    return ApiError(403, "rater_forgotten", RATER_FORGOTTEN_MESSAGE)


def load_study(conn: Redis, study_id: str) -> Study:
    """The study as stored now (one round trip); ApiError 404 for an unknown one."""
    try:
        return get_study(conn, study_id)
    except StudyNotFound as exc:
        raise ApiError(404, "unknown_study", str(exc)) from None


def load_study_for_rater(conn: Redis, study_id: str, rater: str) -> tuple[Study, str | None]:
    """``load_study`` and the nonce of the browser session holding the recruited ``rater`` id in the
    study (``raters.claim_rater_session``), read in the same round trip; None for an anonymous id."""
    try:
        if rater.startswith("anon-"):
            return get_study(conn, study_id), None  # an anonymous id belongs to one session by construction
        return get_study_and_rater_session(conn, study_id, rater)
    except StudyNotFound as exc:
        raise ApiError(404, "unknown_study", str(exc)) from None


def token_ttl(study: Study) -> int:
    return int(current_app.config.get("TOKEN_TTL_SECONDS") or study.config.token_ttl_seconds)


def item_payload(study_id: str, handle: str, raw: bytes, with_id: bool = False) -> dict:
    """What a page is shown of one item: its ``handle`` (``webapp.handles``: new for every question and
    position) and its content or a media URL by that handle, never its index or id (``with_id``: the
    researcher's preview names them). Text, HTML and colour items carry their content, so two shown
    copies of one of them are readable as such: no catch trial shows them twice (``webapp.catches``)."""
    item = json.loads(raw)
    payload = {"handle": handle, "kind": item["kind"]}
    if with_id:
        payload["id"] = item["id"]
    if item["kind"] == "text":
        payload["text"] = item["text"]
    elif item["kind"] == "html":
        # sanitised when the item was made (studies.Item) and again here, for an item stored another way
        payload["html"] = sanitize_html(item["html"])
    elif item["kind"] == "color":
        payload["color"] = item["color"]
    else:
        payload["url"] = url_for("raters.shown_media", study_id=study_id, handle=handle)
    return payload


def shown_payloads(study_id: str, question: dict, raws: Sequence[bytes], seed: str,
                   with_id: bool = False) -> list[dict]:
    """The item payloads of a question's shown items (``raws``: their stored JSON, in display order), named by
    the handles of the question's ``seed``."""
    handles = question_handles(current_app.config["SECRET_KEY"], study_id, seed, question_items(question))
    return [item_payload(study_id, h, raw, with_id) for h, raw in zip(handles, raws, strict=True)]


def answer_picks(study: Study, question: dict, seed: object, picks: Sequence[str] | None) -> list[int] | None:
    """The item indices an answer's ``picks`` (handles of the question's seed) name, each checked to be one
    the question offered to pick (a head is not, even when a candidate is its copy); ApiError 400
    ``item_not_shown`` for a handle it did not show there (forged, of another question, of another study)."""
    if picks is None:
        return None
    shown, offered = question_items(question), set()
    if isinstance(seed, str):
        for key in (current_app.config["SECRET_KEY"], *(current_app.config.get("PREVIOUS_SECRET_KEYS") or ())):
            handles = question_handles(key, study.id, seed, shown)
            # screen_payload shows a headed kind's first item as the head, which no answer picks
            pickable = handles[1:] if kind_of(question).headed else handles
            found = picked_indices(handles, shown, pickable, picks)
            if found is not None:
                return found
            offered.update(pickable)
    stray = next((p for p in picks if p not in offered), picks[0] if picks else "")
    raise ApiError(400, "item_not_shown", "'choice' and 'picks' name items by the 'handle' this question gave "
                   f"them (one of its candidates, or of its items); {stray!r} is not one this question offered")


#: The kinds of completion code: the work was done, or the study ran out (``completion.partial_code``).
FULL_CODE, PARTIAL_CODE = "full", "partial"


def completion_code(secret_key: str, study_id: str, rater: str, kind: str = FULL_CODE) -> str:
    """The rater's completion code: an HMAC of study and rater, 12 characters of base32. A partial-
    completion code is the HMAC of another message, so it is never the full code."""
    message = f"{study_id}\n{rater}" + ("\npartial" if kind == PARTIAL_CODE else "")
    digest = hmac.new(secret_key.encode(), message.encode(), hashlib.sha256).digest()
    return base64.b32encode(digest).decode()[:12]


def check_completion_code(secret_key: str, study_id: str, rater: str, code: str) -> bool:
    """Whether ``code`` is the rater's full completion code (a partial one is not)."""
    return hmac.compare_digest(completion_code(secret_key, study_id, rater), code.strip().upper())


def completion_code_kind(secret_key: str, study_id: str, rater: str, code: str,
                         previous_keys: Sequence[str] = ()) -> str | None:
    """FULL_CODE or PARTIAL_CODE when ``code`` is one of the rater's codes under the secret key or one of
    the ``previous_keys`` (a code shown before the key was changed stays valid), else None."""
    given = code.strip().upper()
    for key in (secret_key, *previous_keys):
        for kind in (FULL_CODE, PARTIAL_CODE):
            if hmac.compare_digest(completion_code(key, study_id, rater, kind), given):
                return kind
    return None


def rater_stats(conn: Redis, study_id: str, rater: str) -> dict[str, int]:
    """This rater's counters from the rater-stats hash (missing ones are 0)."""
    names = ("answers", "catch", "catch_failed", "too_fast", "skipped", "flagged", "completed", "repeats",
             "repeat_agreed", CATCH_PENDING)
    values = conn.hmget(keys.rater_stats(study_id), [keys.rater_field(rater, n) for n in names])
    return {n: int(v or 0) for n, v in zip(names, values, strict=True)}


def consent_given(study: Study) -> bool:
    return not study.config.consent or study.id in session.get("consented", [])


def finish_url(study: Study) -> str:
    return url_for("raters.finish", study_id=study.id)


def done(study: Study, code: str, message: str) -> ApiError:
    """The 409 telling the page this rater has no more questions (and where the finish page is)."""
    return ApiError(409, code, message, finish_url=finish_url(study))


#: Why a rater gets no further question (see workers/store/lua/next_question.lua) and what the page says.
DONE_MESSAGES = {
    "rater_stopped": "thank you for your time; this study has no more questions for you",
    "rater_done": "you have answered all the questions; thank you!",
    "budget_reached": "this study has all the answers it needs; thank you!",
    "study_complete": "this study has all the answers it needs; thank you!",
}


def catch_question(study: Study, found: list[Comparison]) -> dict | None:
    """An attention check that needs a look at the items (``catches``: a head, a very similar and a
    very different item, and more items very unlike the head): a screen of the study's catch kind built
    from them by the kind's entry (``engine.kinds``: a triplet of the three expecting the similar one, an
    odd-one-out of the three expecting the different one, a grid of the similar one among very unlike
    ones expecting it first), items in random order; or (a kind answered with a value: ``catch_question``) a
    pair expecting the alike or, far apart, the unlike end (a rating in the top or bottom quarter of the
    scale; same-or-different an item against its copy, "same", or a far item, "different"). None when the
    study has no such comparison (no catch trial then)."""
    if not found:
        return None
    kind = KINDS[study.config.catch_kind]
    common = {"algorithm": CATCH_ALGORITHM, "fallback": False, "catch": True}
    # the process's generator, as every draw of a request (a seeded test replays them)
    built = kind.catch_question(found, study.config.settings_of(kind), random)
    if built is None:
        return None
    screen, expect = built
    return {**pooled(screen, CATCH_ALGORITHM), **common, "expect": expect}


#: Comparisons a crowd-judged catch trial draws at most, looking for one whose claim the crowd has not retired.
CROWD_DRAWS = 50


def crowd_catch_question(study: Study, found: list[Comparison], retired: frozenset[str]) -> dict | None:
    """A catch trial judged by the crowd (labels alone, ``catches.judged_by_crowd``): :func:`catch_question` of
    one comparison drawn at random whose claim (``catches.claim_key``: a rating's alike and unlike pairs are
    two) the crowd has not ``retired``, marked with its claim (kept in the log; a miss waits for the crowd's
    verdict). None when every draw came up retired (no catch trial this time)."""
    for _ in range(min(CROWD_DRAWS, 4 * len(found))):
        comparison = random.choice(found)
        question = catch_question(study, [comparison])
        if question is None:
            continue
        claim = catches.claim_key(comparison, question["expect"])
        if claim not in retired:
            return {**question, CLAIM: claim}
    return None


def catch_passed(study: Study, question: dict, picks: list[int] | None, value: float | None) -> bool:
    """Whether an attention check was answered as anyone paying attention would (a skip fails it): the
    expected item picked as the kind says (``catch_answered``: first, or a grid's among the picks; a copy
    of an item as any other like item; a value at the expected end).
    A check issued before checks had an ``expect`` showed the head among
    its candidates (triplets) or one item twice (ratings)."""
    kind = kind_of(question)
    return kind.catch_answered(picks, value, question.get("expect", question.get("head")),
                               study.config.settings_of(kind))


def check_consent(study: Study) -> None:
    if not consent_given(study):
        raise ApiError(403, "consent_required", "please read and accept the consent form first",
                       consent_url=url_for("raters.study_page", study_id=study.id))


def question_request(study: Study, rater: str, now: float, guard: StudyGuard | None = None,
                     conn: Redis | None = None) -> NextRequest:
    """What the Lua step issuing ``rater``'s next question needs: limits, an attention check for when it
    is the rater's turn (``StudyConfig.catch_every``; from ``catches.comparisons``, read through ``conn``;
    none without it), the
    algorithms' shares and fallbacks (``guard``: behind the study guard)."""
    limits, attention = study.config.limits, study.config.attention
    catch, every = None, study.config.catch_every
    if every and conn is not None:
        # a check is offered with every request (the Lua step decides whether it is the rater's turn), so
        # the request costs the same time whether or not a check is given
        found = catches.comparisons(conn, study)
        if catches.judged_by_crowd(conn, study):
            every = study.config.crowd_catch_every
            catch = crowd_catch_question(study, found, catches.retired(conn, study))
        else:
            catch = catch_question(study, found)
    ask_repeat = random.random() < REPEAT_ASK_CHANCE if attention.validation_repeats else None
    return next_request(study.id, study.config, study.n_items, rater, now=now, expires_at=now + token_ttl(study),
                        stop_flagged=attention.stops_flagged, max_per_rater=limits.max_questions_per_rater,
                        budget=limits.answer_budget, catch=catch, ask_repeat=ask_repeat, guard=guard,
                        catch_every=every or 1, catch_draw=random.random())


def maybe_queue_repeat(conn: Redis, study: Study, rater: str, question: dict, picks: list[int] | None,
                       issued: NextQuestion | None, value: float | None = None) -> None:
    """After an ordinary answer of a kind that repeats (``engine.kinds``): perhaps queue it to be asked
    again later (items in another order) as one of the rater's ``attention.validation_repeats``. Costs a
    round trip only when drawn, about validation_repeats times per rater."""
    repeats = study.config.attention.validation_repeats
    answered = kind_of(question).repeat_answer(picks, value)
    if (not repeats or not kind_of(question).repeatable or question.get("catch") or answered is None
            or issued is None or issued.status != "ok"):
        return
    window = max(1, int(REPEAT_SOURCE_SHARE * (study.config.limits.max_questions_per_rater
                                               or REPEAT_DEFAULT_QUESTIONS)))
    if issued.answers > window or random.random() >= min(1.0, 1.5 * repeats / window):
        return
    due = issued.answers + REPEAT_GAP_MIN + random.randint(0, REPEAT_GAP_SPREAD)
    queue_repeat(conn, study.id, rater, repeat_question(question, answered), most=repeats, due_after=due,
                 ttl=USED_MARKER_TTL)


def self_agreement(stats: dict[str, int]) -> float | None:
    """The share of validation repeats the rater answered as the first time (None before any)."""
    return stats["repeat_agreed"] / stats["repeats"] if stats["repeats"] else None


def flag_low_self_agreement(conn: Redis, study: Study, rater: str) -> bool:
    """Judge self-agreement once, when the rater has answered ``repeats_to_judge`` repeats: below the
    study's ``min_self_agreement`` flags the rater (``answers.judge_self_agreement``: the judgement the answer
    script makes after every validation repeat, run alone). True if this call flagged the rater."""
    attention = study.config.attention
    return judge_self_agreement(conn, study.id, rater, attention.repeats_to_judge, attention.min_self_agreement)


def question_payload(conn: Redis, study: Study, rater: str, issued: NextQuestion, now: float) -> dict:
    """The page's question with its signed token; the "done" ApiError when the rater gets none."""
    if issued.status != "ok":
        raise ApiError(409, issued.status, DONE_MESSAGES[issued.status], finish_url=finish_url(study))
    if issued.scheduled:
        enqueue_update(conn, study.id)
    question, seed = issued.question, new_seed()
    items = shown_payloads(study.id, question, issued.items, seed)
    token = sign_question(current_app.config["SECRET_KEY"],
                          {"s": study.id, "q": question, "r": rater, "t": now, "h": seed})
    payload = {"token": token, "kind": question["kind"], "expires_in": token_ttl(study),
               "progress": {"answered": issued.answers, "total": study.config.limits.max_questions_per_rater}}
    return {**payload, **screen_payload(study, question, items)}


def screen_payload(study: Study, question: dict, items: list[dict]) -> dict:
    """What the page draws of a screen (a question or a practice question; the live payload's and the
    researcher's preview's, webapp.preview, alike): its widget (``engine.kinds``),
    prompt and items (a head and candidates, or items), how many to pick, a rating's scale."""
    kind = kind_of(question)
    out = {"kind": kind.name, "widget": kind.widget, "prompt": rater_prompt(study.config, kind)}
    if kind.headed:
        out.update(head=items[0], candidates=items[1:])
    else:
        out.update(items=items)
    if "select" in question:
        out["select"] = int(question["select"])
    if kind.on_scale:
        out["scale"] = rater_scale(study.config, kind)
    return out


def next_question(conn: Redis, study: Study, rater: str, guard: StudyGuard | None = None) -> dict | None:
    """Issue the next question to ``rater``: a payload with its signed token, or None if closed.

    Raises ApiError 403 ``consent_required`` before consent, and a 409 with a ``finish_url``
    (one of DONE_CODES) when the rater or the study is done. Behind a ``guard``: StaleStudy (nothing
    was done) and the 409 ``session_replaced``.
    """
    if study.status != "running":
        return None
    check_consent(study)
    now = time.time()
    issued = issue_next_question(conn, question_request(study, rater, now, guard=guard, conn=conn))
    if issued.status == "stale":
        raise StaleStudy(study.id)
    if issued.status == "forgotten":
        raise rater_forgotten_error()
    if issued.status == "replaced":
        raise session_replaced_error()
    return question_payload(conn, study, rater, issued, now)


def _current(conn: Redis, study_id: str, attempt: int) -> tuple[Study, str, bool]:
    """``studies.current_study`` for try ``attempt`` (a copy first, then read), ApiError 404 if unknown;
    the last try's fingerprint is '' (no check: the study was read just now)."""
    try:
        study, fingerprint, fresh = current_study(conn, study_id, fresh=attempt > 0)
    except StudyNotFound as exc:
        raise ApiError(404, "unknown_study", str(exc)) from None
    return study, "" if attempt == STUDY_ATTEMPTS - 1 else fingerprint, fresh


def _session_replaced(conn: Redis, study_id: str, session: StudyGuard) -> bool:
    holder = conn.hget(keys.rater_sessions(study_id), session.rater) if session.rater else None
    return holder is not None and holder.decode() != session.nonce


def rater_next_question(conn: Redis, study_id: str, rater: str, session: StudyGuard) -> dict:
    """A rater's question request (GET .../questions/next) in one round trip: ``next_question`` on
    this process's copy of the study, behind the study guard with the rater's browser ``session``
    (``StudyGuard``'s rater and nonce). A stale copy is read again and the request redone; a refusal
    made on a copy (not running, no consent) is confirmed on the study read again, and a session that
    lost its rater id hears that first, as when the study was always read before."""
    for attempt in range(STUDY_ATTEMPTS):
        study, fingerprint, fresh = _current(conn, study_id, attempt)
        try:
            question = next_question(conn, study, rater, replace(session, fingerprint=fingerprint))
            if question is None:
                raise ApiError(409, "study_not_running",
                               f"study '{study_id}' is {study.status} and is not asking questions")
            return question
        except StaleStudy:
            continue
        except ApiError as exc:
            if exc.code in ("study_not_running", "consent_required"):
                if not fresh:
                    continue  # decided on the copy: decide again on the stored study
                if _session_replaced(conn, study_id, session):
                    raise session_replaced_error() from None
            raise
    raise AssertionError("the last try runs without the study check")


def _is_handle(value: object) -> bool:
    # an integer passes here (the token is checked first); answer_picks refuses anything but a shown handle
    return (isinstance(value, str) and 0 < len(value) <= 64) or (isinstance(value, int) and not isinstance(value, bool))


def parse_answer_body(body: object) -> tuple[str, list[str] | None, float | None, int | None, bool]:
    """(token, picks, value, response_ms, skip) of an answer body; which of choice (or picks, the items
    picked in order, by their handles: ``answer_picks`` reads them) and value is needed depends on the
    question kind, checked once the token is verified."""
    if not isinstance(body, dict):
        raise ApiError(400, "malformed_answer",
                       "send the answer as a JSON object: {\"token\": ..., \"choice\": ...}, "
                       "{\"token\": ..., \"picks\": [...]} or {\"token\": ..., \"value\": ...} "
                       "(or {\"token\": ..., \"skip\": true})")
    skip = body.get("skip", False)
    if not isinstance(skip, bool):
        raise ApiError(400, "malformed_answer", "'skip' must be true (the rater can't decide) or false")
    if skip and any(body.get(f) is not None for f in ("choice", "picks", "value")):
        raise ApiError(400, "malformed_answer", "a skipped question has no 'choice', 'picks' or 'value': send one "
                       "or the other")
    choice = body.get("choice")
    if choice is not None and not _is_handle(choice):
        raise ApiError(400, "malformed_answer", "'choice' must be the chosen item's 'handle' (a string)")
    picks = body.get("picks")
    if picks is not None:
        if choice is not None:
            raise ApiError(400, "malformed_answer", "send either 'choice' or 'picks', not both")
        if not isinstance(picks, list) or len(picks) > 64 or not all(_is_handle(p) for p in picks):
            raise ApiError(400, "malformed_answer", "'picks' must be a list of the picked items' handles, "
                           "the most similar first")
    elif choice is not None:
        picks = [choice]
    value = body.get("value")
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise ApiError(400, "malformed_answer", "'value' must be a number on the rating scale")
    response_ms = body.get("response_ms")
    if response_ms is not None and (isinstance(response_ms, bool) or not isinstance(response_ms, (int, float))
                                    or not 0 <= response_ms <= MAX_RESPONSE_MS):
        raise ApiError(400, "malformed_answer", "'response_ms' must be a number of milliseconds between 0 and 86400000")
    return body.get("token"), picks, value, None if response_ms is None else int(response_ms), skip


def check_response(study: Study, question: dict, picks: list[int] | None, value: float | None,
                   skip: bool = False) -> tuple[list[int] | None, float | None]:
    """The answer's picks (``engine.kinds``: the kind's answer check) or value (``check_value``: kinds answered
    with a number, a rating's on the study's scale), or ApiError saying what the question needs."""
    if skip:
        if not study.config.allow_skip:
            raise ApiError(400, "skip_not_allowed", "this study does not allow skipping a question: "
                           "please choose an answer")
        return None, None
    kind = kind_of(question)
    try:
        checked = kind.check_value(value, study.config.settings_of(kind))
    except AnswerError as exc:
        raise ApiError(400, "malformed_answer" if value is None else "value_out_of_range", str(exc)) from None
    if checked is not None:
        return None, checked
    if not picks:
        try:
            kind.check_answer(question, picks, value)
        except AnswerError as exc:
            raise ApiError(400, "malformed_answer", str(exc)) from None
    try:
        return list(kind.check_answer(question, picks, value)), None
    except AnswerError as exc:
        raise ApiError(400, "choice_not_offered", str(exc)) from None


def submit_answer(conn: Redis, study: Study, rater: str, body: object, issue_next: bool = True,
                  guard: StudyGuard | None = None, copy: bool = False) -> dict:
    """Validate and store one answer; returns {"answer": {"id"}, "next": question | None}.

    Storing the answer and issuing the rater's next question are one Lua script (one round trip), run under
    the study's rules (``AcceptRequest.live``), which also does what the answer calls for besides (the catch
    rule's exclusion, the self-agreement judgement, marking the rater completed). Two follow-ups stay after
    it: enqueueing the update the script scheduled (an RQ job, which RQ writes) and queueing a validation
    repeat (``maybe_queue_repeat``: drawn from this process's generator once the script has said how many
    answers the rater has given, and rare). ``issue_next=False`` stores the answer only (a session that
    lost its rater id to another one).
    Behind a ``guard`` (lua/study_guard.lua): StaleStudy when the study changed (nothing stored), and a
    rater id another browser session holds stores the answer, then raises the 409 ``session_replaced``.
    ``copy``: ``study`` is this process's copy, so a refusal before storing raises StaleStudy (the
    caller decides again on the stored study) instead of its ApiError.
    """
    try:
        payload, question, choice, value, response_ms, flags, stats = _checked_answer(study, rater, body)
    except ApiError:
        if copy:
            raise StaleStudy(study.id) from None
        raise
    running = study.status == "running"
    now = time.time()
    then = question_request(study, rater, now, conn=conn) if running and issue_next and consent_given(study) else None
    request = AcceptRequest.live(study.config, kind_of(question), USED_MARKER_TTL, then=then, guard=guard,
                                 late=not running)
    try:
        accepted = accept_and_issue(conn, study.id, question, rater, choice, payload["t"], response_ms, request,
                                    value=value, flags=",".join(flags), stats=stats)
    except AnswerRefused as refused:
        if refused.code == "stale":
            raise StaleStudy(study.id) from None
        if refused.code == "forgotten":
            raise rater_forgotten_error() from None
        if refused.code == "used":
            raise ApiError(409, "already_answered", "this question was already answered; the first answer is kept",
                           answer_id=refused.answer_id) from None
        if refused.code == "rater_stopped":
            raise ApiError(409, "rater_stopped", DONE_MESSAGES["rater_stopped"], finish_url=finish_url(study)) from None
        # the script marked the rater completed (AcceptRequest.complete_refused)
        if refused.code == "rater_limit":
            raise done(study, "rater_done", DONE_MESSAGES["rater_done"]) from None
        if refused.code == "budget":
            raise done(study, "budget_reached", DONE_MESSAGES["budget_reached"]) from None
        raise ApiError(410, "expired_token",
                       "this question expired before it was answered; fetch a new question") from None
    issued = accepted.next
    replaced = issued is not None and issued.status == "replaced"
    if accepted.schedule:
        enqueue_update(conn, study.id)
    maybe_queue_repeat(conn, study, rater, question, choice, issued, value)
    if replaced:
        raise session_replaced_error()  # the answer is kept; the page is told instead of getting a question
    result = {"answer": {"id": accepted.answer_id}, "next": None}
    if not running:
        result["done"] = late_answer_done(study, accepted.completed)
    if running and issue_next:
        check_consent(study)  # stored, but no next question before consent (as a question request)
        try:
            result["next"] = question_payload(conn, study, rater, issued, now)
        except ApiError as exc:
            if exc.code not in DONE_CODES:
                raise
            result["done"] = {"code": exc.code, "message": exc.message, "finish_url": finish_url(study)}
    return result


def late_answer_done(study: Study, completed: bool) -> dict:
    """What a page is told after a late answer (kept under ``accept_late_answers``): the study asks no
    more, and the rater who has now given the answers a code needs was ``completed`` by the answer script
    (``AcceptRequest.live``: their code waits on the finish page)."""
    if completed:
        return {"code": "rater_done", "message": DONE_MESSAGES["rater_done"], "finish_url": finish_url(study)}
    return {"code": "study_closed", "finish_url": finish_url(study),
            "message": "this study is not taking answers at the moment; thank you for your time"}


def _checked_answer(study: Study, rater: str, body: object) -> tuple:
    """What ``submit_answer`` stores, checked before anything is: (token payload, question, choice,
    value, response_ms, flags, rater-stats counters); ApiError for anything wrong."""
    token, choice, value, response_ms, skip = parse_answer_body(body)
    payload = verify_question(current_app.config["SECRET_KEY"], token, max_age=token_ttl(study),
                              previous_keys=current_app.config.get("PREVIOUS_SECRET_KEYS") or ())
    late = study.status != "running"
    if late and not study.config.accept_late_answers:
        # a paused or closed study takes no answers, not even to questions handed out before
        raise ApiError(409, "study_closed", "this study is not taking answers at the moment; thank you for your time",
                       finish_url=finish_url(study))
    if payload.get("s") != study.id:
        raise ApiError(400, "wrong_study", "this question token belongs to another study")
    if payload.get("r") != rater:
        raise ApiError(403, "wrong_rater", "this question was issued to another rater session")
    question = payload["q"]
    choice = answer_picks(study, question, payload.get("h"), None if skip else choice)
    choice, value = check_response(study, question, choice, value, skip)
    flags, stats = answer_flags(study, question, choice, payload["t"], response_ms, value=value, skip=skip)
    if late:
        flags.append(LATE_FLAG)  # the researcher chose to keep it (accept_late_answers)
    return payload, question, choice, value, response_ms, flags, stats


def rater_answer(conn: Redis, study_id: str, rater: str, read_body: Callable[[], object],
                 session: StudyGuard) -> dict:
    """A rater's answer (POST .../answers) in one round trip: ``submit_answer`` on this process's copy
    of the study, behind the study guard with the rater's browser ``session``; a stale copy is read
    again and the answer redone (the guard refused it before anything was stored). ``read_body`` gives
    the request's JSON document, read once the study is known (an unknown study is a 404 first)."""
    body = None
    for attempt in range(STUDY_ATTEMPTS):
        study, fingerprint, fresh = _current(conn, study_id, attempt)
        if attempt == 0:
            body = read_body()
        try:
            return submit_answer(conn, study, rater, body, guard=replace(session, fingerprint=fingerprint),
                                 copy=not fresh)
        except StaleStudy:
            continue
    raise AssertionError("the last try reads the study and refuses nothing as stale")


def answer_flags(study: Study, question: dict, picks: list[int] | None, issued_at: float, response_ms: int | None,
                 value: float | None = None, skip: bool = False) -> tuple[list[str], tuple[str, ...]]:
    """(flags for the log, rater-stats counters to increment) of one answer.

    A skip is flagged ``skipped`` (engines ignore it). Too fast when the page's own timing or the
    server's time since issue (which includes the network, so a page cannot hide a fast answer by
    reporting a slow one) is below the minimum.
    """
    flags, stats = [], []
    if skip:
        flags.append(SKIPPED_FLAG)
        stats.append("skipped")
    minimum = study.config.too_fast_ms(kind_of(question))
    elapsed_ms = (time.time() - float(issued_at)) * 1000
    # the answer script also measures from the rater's previous answer (a burst of held questions)
    if minimum and ((response_ms is not None and response_ms < minimum) or elapsed_ms < minimum):
        flags.append("too_fast")
        stats.append("too_fast")
    if question.get("repeat_of") is not None:
        # a validation repeat: items in another order, so agreeing means answering as the first time (the
        # kind's repeat_answer: the same item picked first again, the same value)
        again = kind_of(question).repeat_answer(picks, value)
        if again is not None:
            stats.append("repeats")
            if again == question["repeat_of"]:
                flags.append(REPEAT_AGREE_FLAG)
                stats.append("repeat_agreed")
            else:
                flags.append(REPEAT_DISAGREE_FLAG)
    elif question.get("catch"):
        stats.append("catch")
        if catch_passed(study, question, picks, value):
            flags.append("catch_pass")
        else:
            flags.append("catch_fail")
            # a label comparison's miss waits for the crowd's verdict (workers/jobs/rater_checks.py); the catch
            # rule counts the others
            stats.append(CATCH_PENDING if question.get(CLAIM) else "catch_failed")
    return flags, tuple(stats)
