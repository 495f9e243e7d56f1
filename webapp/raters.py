"""Rater pages: entry (recruitment ids kept in the signed session), consent, the study page where
people answer questions, the finish page with a completion code, and item media."""
from __future__ import annotations

import json
import secrets
import time
from typing import TYPE_CHECKING

from flask import Blueprint, Response, abort, current_app, redirect, render_template, request, session, url_for
from markdown_it import MarkdownIt
from markupsafe import Markup

from engine.kinds import KINDS
from workers.store import keys
from workers.store.answers import RATER_ID_PATTERN
from workers.store.deletion import rater_digest, rater_forgotten
from workers.store.questions import StudyGuard
from workers.store.raters import CHECK_DONE, CHECK_LATE, CHECK_PENDING, CODE_BEFORE_CHECK_FIELD, answer_check_state
from workers.store.studies import (
    STUDY_ID_PATTERN,
    Item,
    StudyNotFound,
    get_items,
    get_media,
    get_study,
    get_stylesheet,
)

from .auth import current_researcher
from .catches import asks_copies
from .handles import VARIED_TYPES, InvalidHandle, fresh_handle, padded, shown_index, variant_seed, varied
from .i18n import rater_instructions, rater_texts
from .limits import limit_code
from .questions_answers import (
    FULL_CODE,
    PARTIAL_CODE,
    completion_code,
    completion_code_kind,
    rater_stats,
    session_replaced_error,
)
from .rater_session import anonymous_session_allowed, current_rater
from .storage import get_redis

if TYPE_CHECKING:
    from flask.typing import ResponseReturnValue
    from redis import Redis

    from workers.store.studies import Study


bp = Blueprint("raters", __name__)

RATER_ID_PARAMS = ("PROLIFIC_PID", "workerId", "rater")
#: Recruitment parameters kept in the session (Prolific and MTurk), shown to nobody but the log.
RECRUITMENT_PARAMS = ("PROLIFIC_PID", "STUDY_ID", "SESSION_ID", "workerId", "assignmentId", "hitId")
DEBRIEF_MAX_CHARS = 2000

# CommonMark with raw HTML off: researcher text is escaped, and markdown-it refuses javascript:,
# vbscript:, file: and data: links, so consent and instructions cannot carry a script.
_markdown = MarkdownIt("commonmark", {"html": False})


#: Seconds between reloads of the page waiting for the answer check of a rater's last answers.
CHECK_REFRESH_SECONDS = 2
#: What a rater who gets no completion code should do next, by where they came from (the recruitment
#: parameters kept in the session): the finish page's last line, by its key in the rater texts.
NEXT_STEPS = {"prolific": "next_step_prolific", "mturk": "next_step_mturk", "other": "next_step_other"}
#: What a flagged rater stopped by ``attention.stop_flagged`` reads unless the study says it in its own
#: words (``completion.stopped_message``): its key in the rater texts.
STOPPED_MESSAGE = "stopped_message"


def next_step() -> str:
    """NEXT_STEPS for this browser session's recruitment site (a key of the rater texts)."""
    recruitment = session.get("recruitment") or {}
    if "PROLIFIC_PID" in recruitment:
        return NEXT_STEPS["prolific"]
    if "workerId" in recruitment or "assignmentId" in recruitment:
        return NEXT_STEPS["mturk"]
    return NEXT_STEPS["other"]


#: Seconds the finish page shows the completion code before it returns the rater to Prolific.
REDIRECT_SECONDS = 5

#: An image in instructions or consent may show one of the study's items: ``![alt text](item:ITEM_ID)``.
ITEM_LINK = "item:"


def render_markdown(text: str | None, study: Study | None = None) -> Markup:
    """Researcher Markdown as safe HTML; with ``study``, ``item:ID`` image sources become the item's media."""
    if study is None or ITEM_LINK not in (text or ""):
        return Markup(_markdown.render(text or ""))
    env: dict = {}
    tokens = _markdown.parse(text or "", env)
    media_index = None
    for token in tokens:
        for child in token.children or ():
            src = child.attrGet("src") if child.type == "image" else None
            if isinstance(src, str) and src.startswith(ITEM_LINK):
                if media_index is None:
                    media_index = {item.id: i for i, item in enumerate(get_items(get_redis(), study.id))
                                   if item.kind not in ("text", "color")}
                index = media_index.get(src[len(ITEM_LINK):])
                if index is not None:  # by a handle of its own, as a question's items (raters see no index)
                    handle = fresh_handle(current_app.config["SECRET_KEY"], study.id, index)
                    child.attrSet("src", url_for("raters.shown_media", study_id=study.id, handle=handle))
    return Markup(_markdown.renderer.render(tokens, _markdown.options, env))


def claim_rater_session(conn: Redis, study_id: str, rater: str) -> None:
    """Make this browser session the one session of a recruited rater id in the study: a study page
    opened with the same id elsewhere (another tab, browser or device) stops getting questions."""
    if rater.startswith("anon-"):
        return  # an anonymous id belongs to one session by construction
    nonce = secrets.token_hex(8)
    session["rater_sessions"] = {**session.get("rater_sessions", {}), study_id: nonce}
    conn.hset(keys.rater_sessions(study_id), rater, nonce)


def session_replaced(study_id: str, rater: str, holder: str | None) -> bool:
    """Whether the recruited ``rater`` id was since opened in another browser session: ``holder`` is the
    nonce stored for it (``questions_answers.load_study_for_rater`` reads it with the study)."""
    if rater.startswith("anon-") or holder is None:
        return False
    return holder != session.get("rater_sessions", {}).get(study_id)


def check_rater_session(study_id: str, rater: str, holder: str | None) -> None:
    """Refuse new questions to a session whose rater id was since opened in another session.
    Answers to questions already handed out are still taken (they are the rater's own)."""
    if session_replaced(study_id, rater, holder):
        raise session_replaced_error()


def session_guard(study_id: str, rater: str) -> StudyGuard:
    """The rater id and this browser session's nonce for it, for the study guard of a rater's request
    (lua/study_guard.lua does what ``session_replaced`` does, in the request's own script); an
    anonymous id belongs to one session by construction and is not checked."""
    digest = rater_digest(rater)  # a forgotten rater's session is refused, anonymous or not
    if rater.startswith("anon-"):
        return StudyGuard(rater_digest=digest)
    return StudyGuard(rater=rater, nonce=session.get("rater_sessions", {}).get(study_id) or "", rater_digest=digest)


#: Every kind's rater widget (engine/kinds.py), each drawn by templates/raters/widgets/<name>.html and
#: static/js/widgets/<name>.js; a page carries them all (a study's catch trials and practice questions
#: may be of another kind than its own questions).
WIDGETS = tuple(dict.fromkeys(k.widget for k in KINDS.values()))


def study_widgets(study: Study) -> tuple[str, ...]:
    """The widgets a study's page needs: those of the kinds its learners ask and its practice questions show
    (its catch trials, repeats and held-out questions are of its learners' kinds). Rendering and loading
    every kind's widget cost every joining rater's page for nothing."""
    from engine.kinds import DEFAULT_KIND

    names = {alg.question_kind for alg in study.config.algorithms}
    names |= {p.get("kind", DEFAULT_KIND) for p in study.config.practice}
    needed = {KINDS[name].widget for name in names if name in KINDS}
    return tuple(w for w in WIDGETS if w in needed)


def load_study_or_404(study_id: str) -> Study:
    try:
        return get_study(get_redis(), study_id)
    except StudyNotFound:
        abort(404, description=f"There is no study '{study_id}'. Check the link you were given.")


def practice_payload(study: Study) -> list[dict]:
    """The practice questions with their items, named by handles as a question's are (the expected answer
    too, so the page compares handles); ones naming unknown items are left out."""
    from engine.kinds import DEFAULT_KIND, get_kind

    from .handles import new_seed, question_handles
    from .questions_answers import item_payload, screen_payload

    if not study.config.practice:
        return []  # most studies: no need to read (and parse) every item on each page view
    raws = get_redis().lrange(keys.items(study.id), 0, -1)
    index = {json.loads(raw)["id"]: (i, raw) for i, raw in enumerate(raws)}
    index_by_position = dict(enumerate(raws))

    out = []
    for p in study.config.practice:
        kind = get_kind(p.get("kind", DEFAULT_KIND))
        try:
            # the kind's entry turns the question written with item ids into a screen and its answer
            screen, answer = kind.practice_screen(p, lambda item_id: index[item_id][0], study.config.settings_of(kind))
        except KeyError:
            current_app.logger.warning("practice question of study %s names unknown items: %s", study.id, p)
            continue
        shown = kind.shown(screen)
        handles = question_handles(current_app.config["SECRET_KEY"], study.id, new_seed(), shown)
        items = [item_payload(study.id, h, index_by_position[i]) for h, i in zip(handles, shown, strict=True)]
        # an answer of items names them by the candidates' handles (a practice screen shows distinct items,
        # so each index has one); a value (a rating's range, same or different) is the kind's as it is
        named = dict(zip(shown[1:] if kind.headed else shown, handles[1:] if kind.headed else handles, strict=True))
        answer = kind.practice_answer(answer, named.__getitem__)
        out.append({**screen_payload(study, screen, items), "answer": answer, "explanation": p.get("explanation", "")})
    return out


@bp.get("/s/<study_id>")
def study_page(study_id: str) -> ResponseReturnValue:
    study = load_study_or_404(study_id)
    for param in RATER_ID_PARAMS:
        value = request.args.get(param, "").strip()
        if value and RATER_ID_PATTERN.match(value) and not value.startswith("anon-"):
            if session.get("rater_id") != value:
                session["rater_id"] = value
            break
    recruitment = {p: request.args[p].strip() for p in RECRUITMENT_PARAMS
                   if RATER_ID_PATTERN.match(request.args.get(p, "").strip())}
    if recruitment:
        session["recruitment"] = recruitment
    conn = get_redis()
    if not session.get("rater_id") and not anonymous_session_allowed(conn, study):
        return render_template("raters/closed.html", study=study, busy=True), 429, {"Retry-After": "3600"}
    rater = current_rater()
    if rater_forgotten(conn, study.id, rater):  # before anything is stored for them
        return render_template("raters/closed.html", study=study, forgotten=True), 403
    if study.status != "running":
        return render_template("raters/closed.html", study=study)
    stats = rater_stats(conn, study.id, rater)
    if stats["completed"] and stats["answers"]:
        return redirect(url_for("raters.finish", study_id=study.id))
    if study_full(conn, study):
        # said before any work: a full study has nothing to ask and no code to give
        return render_template("raters/closed.html", study=study, full=True)
    if study.config.consent and study.id not in session.get("consented", []):
        return render_template("raters/consent.html", study=study, consent=render_markdown(study.config.consent, study))
    if stats["completed"]:
        return redirect(url_for("raters.finish", study_id=study.id))
    claim_rater_session(conn, study.id, rater)
    # a joining rater's page (no answer yet, no practice questions, whose handles are new on every page, no
    # researcher logged in) is the same for every rater of the study: rendered once per process and reused
    shared = not stats["answers"] and not study.config.practice and current_researcher() is None
    now = time.monotonic()
    if shared:
        kept = _joining_pages.get(study.id)
        if kept is not None and kept[0] > now and kept[1] is study.config:
            return kept[2]
    instructions = render_markdown(rater_instructions(study.config), study)
    page = render_template("raters/study.html", study=study, instructions=instructions,
                           practice=practice_payload(study), answered=stats["answers"], widgets=study_widgets(study),
                           total=study.config.limits.max_questions_per_rater)
    if shared:
        _joining_pages[study.id] = (now + JOINING_PAGE_SECONDS, study.config, page)
    return page


#: How long a process reuses a study's page for joining raters (``study_page``): a launch's join burst
#: rendered the same page hundreds of times a second, and its p99 at 1,000 raters was over 50 ms on a
#: 2-core machine (benchmarks/load.py); an edit of the study (a new config object) shows at once, a new
#: stylesheet within this time.
JOINING_PAGE_SECONDS = 5.0
#: study id -> (reused until, the config it was rendered from, the page)
_joining_pages: dict[str, tuple[float, object, str]] = {}


@bp.post("/s/<study_id>/consent")
def consent(study_id: str) -> ResponseReturnValue:
    study = load_study_or_404(study_id)
    if request.form.get("decision") != "agree":
        return render_template("raters/declined.html", study=study)
    session["consented"] = [*session.get("consented", []), study.id][-20:]
    return redirect(url_for("raters.study_page", study_id=study.id))


@bp.route("/s/<study_id>/done", methods=["GET", "POST"])
def finish(study_id: str) -> ResponseReturnValue:
    study = load_study_or_404(study_id)
    conn = get_redis()
    rater = session.get("rater_id")
    if not rater:  # a session that never opened the study has nothing to finish (and mints no id here)
        return redirect(url_for("raters.study_page", study_id=study.id))
    stats = rater_stats(conn, study.id, rater)
    stopped = bool(stats["flagged"] and study.config.attention.stops_flagged)
    # a study closed on a rater who had begun ends their work too (what they get: code_decision)
    ended = study.status == "closed" and stats["answers"] > 0
    if not stats["completed"] and not stopped and not ended:
        return redirect(url_for("raters.study_page", study_id=study.id))
    attention = study.config.attention
    check = (answer_check_state(conn, study.id, rater, time.time(), attention.answer_check)
             if not stopped and attention.withholds_code else CHECK_DONE)
    if check == CHECK_PENDING:
        # the answer check has a look at this rater's last answers to do, or the crowd a verdict on their missed
        # label catch trials: it decides the code
        return render_template("raters/checking.html", study=study), 200, {"Refresh": str(CHECK_REFRESH_SECONDS)}
    completion = study.config.completion
    # one comment per rater: the first is kept, and a reopened link does not ask again
    debrief_field = keys.rater_field(rater, "debrief")
    thanked = bool(completion.debrief_question) and bool(conn.hexists(keys.rater_stats(study.id), debrief_field))
    if request.method == "POST" and completion.debrief_question and not stopped and not thanked:
        text = request.form.get("debrief", "").strip()[:DEBRIEF_MAX_CHARS]
        if text:
            conn.hsetnx(keys.rater_stats(study.id), debrief_field, text)
        thanked = True
    kind, shortfall = (None, None) if stopped else code_decision(conn, study, rater, stats)
    code = None
    if kind is not None:
        code = shown_code(conn, study, rater, kind) or completion_code(current_app.config["SECRET_KEY"], study.id,
                                                                        rater, kind)
        if not code_minting_allowed(conn, study, rater, code, kind):
            return render_template("raters/closed.html", study=study, busy=True), 429, {"Retry-After": "60"}
        if check == CHECK_LATE:  # the wait ran out: the code comes before the verdict, and the page says so
            conn.hset(keys.rater_stats(study.id), keys.rater_field(rater, CODE_BEFORE_CHECK_FIELD), 1)
    redirect_url = None
    if code and completion.prolific_redirect_url:
        redirect_url = completion.prolific_redirect_url.replace("{code}", code)
    # redirect to Prolific by itself once nothing is left to do here (the button stays as a fallback)
    auto_redirect = bool(redirect_url) and (not completion.debrief_question or thanked)
    return render_template("raters/finish.html", study=study, code=code, stopped=stopped or code is None,
                           shortfall=shortfall, partial=kind == PARTIAL_CODE, thanked=thanked,
                           unconfirmed=bool(code) and check == CHECK_LATE,
                           auto_redirect=auto_redirect, redirect_seconds=REDIRECT_SECONDS,
                           redirect_url=redirect_url, message=render_markdown(completion.message),
                           stopped_message=(render_markdown(completion.stopped_message
                                                            or rater_texts(study.config)[STOPPED_MESSAGE])
                                            if stopped else None), next_step=next_step(),
                           debrief=completion.debrief_question)


def shown_code(conn: Redis, study: Study, rater: str, kind: str) -> str | None:
    """The code of ``kind`` this rater was shown before, when it was made with a previous secret key
    (``PREVIOUS_SECRET_KEYS``): shown again, so the code the rater may have already handed in stays theirs."""
    previous = current_app.config.get("PREVIOUS_SECRET_KEYS") or ()
    if not previous:
        return None
    stored = conn.hget(keys.rater_stats(study.id), keys.rater_field(rater, "code_shown"))
    if stored is None:
        return None
    code = stored.decode()
    if completion_code_kind(previous[0], study.id, rater, code, previous[1:]) == kind:
        return code
    return None


def study_full(conn: Redis, study: Study) -> bool:
    """Whether the study takes no more answers: its answer budget is reached or every algorithm finished."""
    budget = study.config.limits.answer_budget
    with conn.pipeline(transaction=False) as pipe:
        pipe.xlen(keys.answers(study.id))
        pipe.scard(keys.finished(study.id))
        answers, finished = pipe.execute()
    return bool(budget and int(answers) >= budget) or int(finished) >= len(study.config.algorithms)


def code_decision(conn: Redis, study: Study, rater: str, stats: dict[str, int]) -> tuple[str | None, str | None]:
    """(the code this rater is shown: FULL_CODE, PARTIAL_CODE or None; why it is not the full one).

    The full code needs the attention checks passed (a check still held unanswered counts as failed)
    and ``limits.answers_for_code`` answers (by default the study's per-rater question count). A rater
    the study ran out of questions or budget for, or closed on, before that gets a partial-completion
    code when ``completion.partial_code`` is set, else none: never the full code.
    """
    held = conn.zrange(keys.outstanding(study.id, rater), 0, -1)
    abandoned = sum(1 for member in held if member.startswith(b"c:"))
    checks, failed = stats["catch"] + abandoned, stats["catch_failed"] + abandoned
    attention = study.config.attention
    texts = rater_texts(study.config)
    failing = study.config.catch_failing(checks, failed)
    # a catch-trial flag does what every flag does (attention.flag_action): ``mark`` still gives the code
    if (stats["flagged"] or failing) and attention.withholds_code:
        return None, texts["shortfall_flagged"]
    needed = study.config.limits.answers_for_code
    if stats["answers"] < needed:
        if study_full(conn, study) or study.status != "running":
            if study.config.completion.partial_code and stats["answers"] > 0:
                return PARTIAL_CODE, texts.get("shortfall_partial", answers=stats["answers"], needed=needed)
            return None, texts["shortfall_filled"]
        return None, texts.get("shortfall_needed", answers=stats["answers"], needed=needed)
    return FULL_CODE, None


def code_minting_allowed(conn: Redis, study: Study, rater: str, code: str = "1", kind: str = FULL_CODE) -> bool:
    """Charge the address's code bucket the first time a rater is shown their code (reloads are free).
    The code shown and its kind are kept (the raters export lists them beside the rater, to match
    Prolific's list); a rater shown a partial code who later earns the full one is charged again."""
    field = keys.rater_field(rater, "code_shown")
    if conn.hget(keys.rater_stats(study.id), field) == code.encode():
        return True
    if limit_code(study.id):
        conn.hset(keys.rater_stats(study.id), mapping={field: code, keys.rater_field(rater, "code_kind"): kind})
        return True
    return False


@bp.app_template_global()
def study_stylesheet(study_id: str) -> bool:
    """Whether the study ships its own stylesheet for its rater pages."""
    return bool(get_redis().exists(keys.stylesheet(study_id)))


@bp.get("/s/<study_id>/style.css")
def stylesheet(study_id: str) -> ResponseReturnValue:
    """The study's own CSS (checked at creation: nothing loaded from elsewhere, no script)."""
    css = get_stylesheet(get_redis(), study_id) if STUDY_ID_PATTERN.match(study_id) else None
    if css is None:
        abort(404)
    response = Response(css, mimetype="text/css")
    response.headers["Cache-Control"] = "public, max-age=300"
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response


#: Per process: whether a study's catch trials are copies (``catches.asks_copies``), by study and the version of
#: its items (their number and the features' version: items change only by being added or by new features). Read
#: from every item at each image request it cost ~30 ms of CPU at 5,000 items (all items parsed, then scanned).
_COPIES: dict[tuple, bool] = {}
_COPIES_KEPT = 256


def _asks_copies(conn: Redis, study_id: str, version: tuple) -> bool:
    key = (study_id, *version)
    if key not in _COPIES:
        if len(_COPIES) >= _COPIES_KEPT:
            _COPIES.clear()
        _COPIES[key] = asks_copies(get_items(conn, study_id))
    return _COPIES[key]


def _media_response(conn: Redis, study_id: str, index: int, handle: str | None = None) -> Response:
    """An item's media: as uploaded for the researcher (no ``handle``), else as a rater's page is sent it by
    ``handle``. In a study whose catch trials are copies (``catches.asks_copies``) an image is then a variant
    of its own per handle (``handles.varied``: the same picture to the eye, other bytes and pixels), so only a
    look tells the copy; every other file (and every file of a study whose catch trials are not copies) is
    the upload, with random trailing bytes where the format ignores them (``handles.padded``)."""
    data = get_media(conn, study_id, index)
    if data is None:
        abort(404)
    with conn.pipeline(transaction=False) as pipe:
        pipe.lindex(keys.items(study_id), index)
        pipe.llen(keys.items(study_id))
        pipe.hget(keys.study(study_id), keys.FEATURES_VERSION_FIELD)
        row, n_items, features_version = pipe.execute()
    media_type = Item.from_dict(json.loads(row)).media_type if row is not None else None
    if handle is not None:
        variant = None
        if media_type in VARIED_TYPES and _asks_copies(conn, study_id, (n_items, features_version)):
            variant = varied(data, media_type, variant_seed(current_app.config["SECRET_KEY"], handle))
        # padded by a random length, so two handles of one item differ in size and hash
        data = padded(variant or data, media_type)
    response = Response(data, mimetype=media_type or "application/octet-stream")
    # a handle is one question's: nothing for a shared cache to keep (and the researcher's copy is theirs)
    response.headers["Cache-Control"] = "private, max-age=86400"
    response.headers["X-Content-Type-Options"] = "nosniff"
    # uploaded bytes: opened on their own they may run nothing and load nothing
    response.headers["Content-Security-Policy"] = "default-src 'none'; media-src 'self'; sandbox"
    return response


@bp.get("/media/<study_id>/h/<handle>")
def shown_media(study_id: str, handle: str) -> ResponseReturnValue:
    """An item's media as a rater's page shows it: by a handle of one question (``webapp.handles``), never
    by its index; a handle that is not this server's for this study is a 404, as an unknown item."""
    if not STUDY_ID_PATTERN.match(study_id):
        abort(404)
    try:
        index = shown_index(current_app.config["SECRET_KEY"], study_id, handle,
                            current_app.config.get("PREVIOUS_SECRET_KEYS") or ())
    except InvalidHandle:
        abort(404)
    return _media_response(get_redis(), study_id, index, handle)


@bp.get("/media/<study_id>/<int:index>")
def media(study_id: str, index: int) -> ResponseReturnValue:
    """An item's media by its index: the researcher's dashboard only (a logged-in researcher). A rater's
    page names items by handles; by index a program could tell two shown copies of one item apart."""
    if current_researcher() is None:
        abort(404)
    return _media_response(get_redis(), study_id, index)
