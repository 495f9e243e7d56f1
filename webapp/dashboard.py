"""Researcher pages: the list of studies, creating a study from uploads, one study's live
dashboard with its controls (start/pause/close, settings, excluding raters), every export and the
data package, and the researcher's own account page (changing the password, API tokens)."""
from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING

import flask
from flask import Blueprint, Response, abort, current_app, flash, jsonify, redirect, render_template, request, url_for

from engine.kinds import DEFAULT_KIND, KINDS
from engine.registry import FOREST_ALGORITHMS
from workers.store import deletion, keys
from workers.store.backup import set_aside_answers
from workers.store.config import (
    ALGORITHM_TABLE,
    ALGORITHMS,
    DEFAULT_NN_ALGORITHM,
    ConfigError,
    StudyConfig,
)
from workers.store.feature_files import check_features_cover, features_from_bytes
from workers.store.queue import enqueue_builtin_features, enqueue_rebuild, schedule_update
from workers.store.raters import CATCH_PENDING, CROWD_JUDGED, rater_order, read_rater_stats
from workers.store.studies import (
    NEVER_ENDS,
    STATUS_ACTIONS,
    StudyError,
    StudyNotFound,
    check_stylesheet,
    config_warnings,
    create_study,
    get_items,
    get_study,
    list_studies,
    set_features,
    set_status,
    update_config,
)
from workers.store.uploads import config_from_yaml_bytes, items_from_upload

from . import accounts, api_tokens, catches
from .accounts import AccountError
from .auth import client_address, current_researcher
from .researcher_api import package_response, package_status_doc, request_package
from .stats import study_stats
from .storage import get_redis

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from flask.typing import ResponseReturnValue
    from redis import Redis
    from werkzeug.datastructures import FileStorage
    from werkzeug.exceptions import HTTPException

    from workers.store.studies import Study


bp = Blueprint("dashboard", __name__)

#: Largest upload accepted by the create-study form (the app-wide limit stays small).
DEFAULT_UPLOAD_MAX_BYTES = 64 * 1024 * 1024
#: At most this many set-aside answers are listed on the study page (the backup and the answers export have all).
SET_ASIDE_SHOWN = 200
#: Items listed per page of the Learning tab (a study may have 50,000: the list is paged and searchable)
ITEMS_PER_PAGE = 200
PROLIFIC_PARAMS = "PROLIFIC_PID={{%PROLIFIC_PID%}}&STUDY_ID={{%STUDY_ID%}}&SESSION_ID={{%SESSION_ID%}}"


def upload_limit() -> int:
    return int(current_app.config.get("UPLOAD_MAX_BYTES") or DEFAULT_UPLOAD_MAX_BYTES)


def size_text(n_bytes: int) -> str:
    """A byte count as people read it: "64 MiB", "200 KiB"."""
    if n_bytes >= 1024 * 1024:
        return f"{n_bytes / (1024 * 1024):.0f} MiB"
    return f"{max(1, round(n_bytes / 1024))} KiB"


bp.add_app_template_filter(size_text, "size_text")  # (the study's memory card: "4 KiB / 12 MiB")


@bp.url_value_preprocessor
def allow_uploads(endpoint: str | None, values: dict[str, Any] | None) -> None:
    # Runs before the app's before_request hooks, so before the CSRF check parses the form body.
    if endpoint == "dashboard.new_study" and request.method == "POST":
        request.max_content_length = upload_limit()
        if (request.content_length or 0) > upload_limit():
            abort(413)  # said plainly here: a truncated body would otherwise look like an empty form


@bp.errorhandler(413)
def upload_too_large(err: HTTPException) -> ResponseReturnValue:
    message = (f"The upload is too large: at most {size_text(upload_limit())} are accepted. Split the items "
               "into a smaller ZIP, or shrink the images.")
    if request.endpoint == "dashboard.new_study":
        return _new_study_page(error=message, status=413, form={})  # the body was not read
    return render_template("auth/refused.html", message=message), 413


def public_url(path: str) -> str:
    """The address raters reach ``path`` at: under ``PUBLIC_URL`` (``PROXIMA_PUBLIC_URL``, e.g.
    ``https://study.example.org``) when set, so links copied to Prolific/MTurk are right behind any
    proxy; else from this request's host (which behind a proxy may be the proxy's own view)."""
    base = (current_app.config.get("PUBLIC_URL") or "").strip().rstrip("/")
    return f"{base}{path}" if base else request.host_url.rstrip("/") + path


def _study_or_404(conn: Redis, study_id: str):
    try:
        return get_study(conn, study_id)
    except StudyNotFound:
        abort(404, description=f"There is no study '{study_id}'.")


@bp.get("/")
def index() -> ResponseReturnValue:
    conn = get_redis()
    return render_template("dashboard/index.html", studies=list_studies(conn))


def _new_study_page(error: str | None = None, status: int = 200, form=None):
    if form is None:
        form = request.form if request.method == "POST" else {}
    return render_template("dashboard/new.html", error=error, form=form, algorithms=ALGORITHMS,
                           algorithm_table=ALGORITHM_TABLE, default_algorithm=DEFAULT_NN_ALGORITHM,
                           kinds=list(KINDS.values()), default_kind=DEFAULT_KIND, upload_limit=upload_limit(),
                           never_ends=NEVER_ENDS,
                           upload_size=size_text(upload_limit())), status


def config_from_form(form: Mapping[str, str], files: Mapping[str, FileStorage]) -> StudyConfig:
    """The study config from an uploaded YAML/JSON file if one was sent, else from the form fields."""
    upload = files.get("config_file")
    if upload and upload.filename:
        return config_from_yaml_bytes(upload.read(), upload.filename)
    kind = form.get("question_kind") or DEFAULT_KIND
    data = {"name": form.get("name", "").strip(), "algorithm": form.get("algorithm") or DEFAULT_NN_ALGORITHM,
            "question_kind": kind}
    if kind in KINDS and KINDS[kind].settings:
        # the kind's own whole-number settings (a grid's n and k, as the form offers them), fields named
        # "<kind>:<setting>"; empty: its default (a rating's scale comes in a config file)
        settings = {}
        for name in (n for n, schema in KINDS[kind].settings.items() if schema.get("type") == "integer"):
            value = _optional_int(form, f"{kind}:{name}", f"{kind}.{name}")
            if value is not None:
                settings[name] = value
        if settings:
            data[kind] = settings
    for name in ("instructions", "consent"):
        if form.get(name, "").strip():
            data[name] = form[name].strip()
    limits = {}
    for name in ("max_questions_per_rater", "answer_budget"):
        value = _optional_int(form, name, f"limits.{name}")
        if value is not None:
            limits[name] = value
    if limits:
        data["limits"] = limits
    if form.get("prolific_redirect_url", "").strip():
        data["completion"] = {"prolific_redirect_url": form["prolific_redirect_url"].strip()}
    return StudyConfig.from_dict(data)


def features_from_form(files: Mapping[str, FileStorage], items: list) -> dict[str, dict[str, float]] | None:
    """The items' features from the form's optional features file, read and checked as ``proxima create
    --features`` reads one (``workers.store.feature_files``); None without one."""
    upload = files.get("features")
    if not upload or not upload.filename:
        return None
    ids = [item.id for item in items]
    features = features_from_bytes(upload.read(), upload.filename, ids)
    check_features_cover(features, ids, upload.filename)
    return features


def check_builtin_request(features: dict | None, items: list) -> None:
    """Built-in features are asked for a study of images without a features file: StudyError in words
    otherwise, before the study is created."""
    if features is not None:
        raise StudyError("give a features file or ask for built-in image features, not both")
    not_images = [item.id for item in items if item.kind != "image"]
    if not_images:
        raise StudyError(f"built-in features are computed from images, and {len(not_images)} item(s) are not "
                         f"images: {', '.join(not_images[:10])}; give the study's features in a file instead")


@bp.route("/studies/new", methods=["GET", "POST"])
def new_study() -> ResponseReturnValue:
    if request.method == "GET":
        return _new_study_page()
    items_file = request.files.get("items")
    try:
        if not items_file or not items_file.filename:
            raise StudyError("choose an items file: a .zip of images, audio, video or HTML items, or a .csv with a "
                             "'text' column")
        config = config_from_form(request.form, request.files)
        items, media = items_from_upload(items_file.read(), items_file.filename)
        features = features_from_form(request.files, items)
        builtin = bool(request.form.get("builtin_features"))
        if builtin:
            check_builtin_request(features, items)
        css_file = request.files.get("stylesheet")
        stylesheet = check_stylesheet(css_file.filename, css_file.read()) if css_file and css_file.filename else None
        conn = get_redis()
        study_id = create_study(conn, config, items, media, stylesheet=stylesheet)
        if features is not None:
            set_features(conn, study_id, features)
        if not request.form.get("start"):
            set_status(conn, study_id, "paused")
    except (StudyError, ConfigError) as exc:
        return _new_study_page(error=str(exc), status=400)
    schedule_update(conn, study_id)  # plans the first questions
    flash(f"Study '{config.name}' created with {len(items)} items.")
    if builtin:  # a worker computes them (~5 s per 1,000 images: benchmarks/builtin_features.py), then rebuilds
        enqueue_builtin_features(conn, study_id)
        flash("Built-in image features (colour, texture, shape; weak) are being computed; the Learning tab says "
              "when they are in use.")
    for warning in config_warnings(config):
        flash(f"Note: {warning}.")
    no_catches = catches.prepare(conn, get_study(conn, study_id))  # chosen now, not in the first rater's request
    if no_catches:
        flash(f"Note: {no_catches}.")
    return redirect(url_for("dashboard.study", study_id=study_id))


#: The sections of a study's page, each loadable on its own (``/studies/ID?tab=NAME``), first = default:
#: is it healthy and what does it cost; how good is what it learned; who answers (and who cheats);
#: what it asks; what to take away.
TABS = (("overview", "Overview"), ("learning", "Learning"), ("raters", "Raters"), ("settings", "Settings"),
        ("downloads", "Downloads"))


def study_url(study_id: str, tab: str = "overview") -> str:
    return url_for("dashboard.study", study_id=study_id, **({} if tab == "overview" else {"tab": tab}))


def flagged_raters(conn: Redis, study_id: str) -> list[str]:
    """Raters flagged by the attention checks or their self-agreement (from the rater counters)."""
    return rater_quality(conn, study_id)["flagged"]


def rater_quality(conn: Redis, study_id: str) -> dict:
    """What the Overview says about cheating, from the per-rater counters (read in chunks): the
    flagged raters, catch trials given and failed, and the self-agreement of the raters who answered
    validation repeats (median, and the lowest few)."""
    counters: dict[str, dict[str, int]] = {}
    for rater, fields in read_rater_stats(conn, study_id).items():
        for name, value in fields.items():
            if name in ("flagged", "catch", "catch_failed", "repeats", "repeat_agreed", CATCH_PENDING, CROWD_JUDGED):
                try:
                    counters.setdefault(rater, {})[name] = int(value)
                except ValueError:
                    counters.setdefault(rater, {})[name] = 1 if value not in ("", "0") else 0
    agreement = sorted((c.get("repeat_agreed", 0) / c["repeats"], rater)
                       for rater, c in counters.items() if c.get("repeats"))
    return {"flagged": sorted((r for r, c in counters.items() if c.get("flagged")), key=rater_order),
            "catch": sum(c.get("catch", 0) for c in counters.values()),
            "catch_failed": sum(c.get("catch_failed", 0) for c in counters.values()),
            # misses of label comparisons waiting for the crowd's verdict
            "catch_pending": sum(c.get(CATCH_PENDING, 0) for c in counters.values() if not c.get(CROWD_JUDGED)),
            "self_agreement_median": agreement[len(agreement) // 2][0] if agreement else None,
            "self_agreement_raters": len(agreement),
            "least_consistent": [(rater, share) for share, rater in agreement[:3]]}


def stored_plan(conn: Redis, study_id: str) -> dict | None:
    """The last ``proxima plan --study`` result for this study, with what the page shows of it."""
    import json

    raw = conn.get(keys.plan(study_id))
    if raw is None:
        return None
    try:
        plan = json.loads(raw)
        plan["budgets"] = [float(b) for b in plan["budgets"]]
    except (ValueError, KeyError, TypeError):
        return None
    return plan


def expected_now(plan: dict | None, per_item: float) -> dict:
    """Each planned learner's expected exact accuracy at ``per_item`` answers per item (interpolated
    on the plan's mean curve; None before the first budget)."""
    import bisect

    out = {}
    if not plan:
        return out
    budgets = plan["budgets"]
    for name, curves in plan.get("algorithms", {}).items():
        mean = curves["exact"]["mean"]
        k = bisect.bisect_right(budgets, per_item)
        if k == 0:
            out[name] = None
        elif k == len(budgets):
            out[name] = mean[-1]
        elif mean[k - 1] is None or mean[k] is None:  # a budget the plan did not reach in its time limit
            out[name] = None
        else:
            lo, hi = budgets[k - 1], budgets[k]
            out[name] = mean[k - 1] + (mean[k] - mean[k - 1]) * (per_item - lo) / (hi - lo)
    return out


def heldout_sentence(stats: dict) -> str:
    """What the Learning tab's held-out curves mean, with the study's share and how many answers are held out."""
    held = stats["heldout"]
    if not held["share"]:
        return ("No questions are held out (the config's heldout_share is 0), so the learners are not scored on "
                "answers they never saw; set it (e.g. 0.05) to see how well each model fits people.")
    return (f"{100 * held['share']:g}% of each learner's questions are drawn at random and held out: raters answer "
            f"them like any other, and no learner ever learns from them ({held['answers']} held-out answers so "
            "far). Each curve scores the learner's current model on them against the answers it has applied: for "
            "triplets, odd-one-out and rank screens the share of held-out answers whose pick the model makes too, "
            "for ratings the correlation of its distances with the rated ones. The dashed line is the ceiling "
            "the raters' own consistency sets: from how often they answered a repeated question alike, the most "
            "any model could agree with them (a curve near it has learned what people agree on).")


def overview_catch_warning(conn: Redis, study: Study, quality: dict) -> str | None:
    """What the Overview says of the study's catch trials (None when all is well): why it asks none (from
    this process's copy of its comparisons, ``catches.comparisons``), or that its raters (``quality``:
    rater_quality's counts) miss them far more often than careful raters do."""
    if not study.config.catch_every:
        return catches.catch_warning(study.config, [])
    return (catches.catch_warning(study.config, catches.comparisons(conn, study))
            or catches.crowd_warning(crowd_claims(conn, study.id))
            or catches.miss_warning(study.config, quality["catch"], quality["catch_failed"]))


def crowd_claims(conn: Redis, study_id: str) -> dict[str, int] | None:
    """The crowd's count of the study's label comparisons (``keys.catch_claims``: confirmed, pending, retired,
    contradicted, answered), None before it judged any."""
    raw = conn.hgetall(keys.catch_claims(study_id))
    if not raw:
        return None
    return {k.decode(): int(float(v)) for k, v in raw.items() if k not in (b"judged_at", b"seen")}


@bp.get("/studies/<study_id>")
def study(study_id: str) -> ResponseReturnValue:
    conn = get_redis()
    study = _study_or_404(conn, study_id)
    tab = request.args.get("tab", "overview")
    if tab not in dict(TABS):
        abort(404, description=f"A study's page has the sections {', '.join(dict(TABS))}, not {tab!r}.")
    stats = study_stats(conn, study)
    rater_link = public_url(url_for("raters.study_page", study_id=study_id))
    plan = stored_plan(conn, study_id)
    per_item = stats["answers_per_item"]  # the learners' answers: catch trials and repeats are not about items
    pay = plan.get("pay") if plan else None
    budget = study.config.limits.answer_budget
    money = None
    if pay:
        money = {"currency": plan.get("currency") or "$", "spent": stats["answers"] * pay,
                 "budget": None if budget is None else budget * pay}
    context = {"study": study, "stats": stats, "tab": tab, "tabs": TABS, "plan": plan, "per_item": per_item,
               "expected": expected_now(plan, per_item), "money": money, "budget": budget,
               "flagged": [],
               # the too-fast threshold a study without its own gets: its first algorithm's kind's
               "too_fast_default": study.config.too_fast_ms(study.config.algorithms[0].kind)}
    if tab in ("overview", "raters"):
        context["quality"] = rater_quality(conn, study_id)
        context["flagged"] = context["quality"]["flagged"]
        context["crowd_claims"] = crowd_claims(conn, study_id)
    if tab == "overview":
        context["catch_warning"] = overview_catch_warning(conn, study, context["quality"])
        context.update(rater_link=rater_link, prolific_link=f"{rater_link}?{PROLIFIC_PARAMS}", mturk_link=rater_link,
                       link_from_request=not current_app.config.get("PUBLIC_URL"))
    elif tab == "learning":
        context.update(_items_page(get_items(conn, study_id)), heldout_text=heldout_sentence(stats))
    elif tab == "raters":
        context.update(set_aside=set_aside_answers(conn, study_id)[:SET_ASIDE_SHOWN],
                       audit=deletion.audit_lines(conn, study_id))
    elif tab == "downloads":
        from workers.results.exports import FORMATS, embedding_labels  # numpy-heavy: loaded for this tab only
        from workers.results.models import trained_models

        context.update(formats=FORMATS, models=trained_models(conn, study_id), forest_algorithms=FOREST_ALGORITHMS,
                       embedding_labels=embedding_labels(conn, study_id),
                       packages=[package_status_doc(conn, study_id, ids) for ids in (False, True)])
    return render_template("dashboard/study.html", **context)


@bp.post("/studies/<study_id>/status")
def change_status(study_id: str) -> ResponseReturnValue:
    conn = get_redis()
    study = _study_or_404(conn, study_id)
    action = request.form.get("action", "")
    if action not in STATUS_ACTIONS:
        abort(400, description=f"Unknown action {action!r}; use one of {', '.join(STATUS_ACTIONS)}.")
    status, allowed_from = STATUS_ACTIONS[action]
    if study.status not in allowed_from:
        flash(f"The study is {study.status}; it cannot {action}.", "error")
    else:
        set_status(conn, study_id, status)
        schedule_update(conn, study_id)  # refills the pools of a resumed study, empties them when paused
        flash(f"The study is now {status}.")
    return redirect(url_for("dashboard.study", study_id=study_id))


def _optional_int(form, name: str, label: str) -> int | None:
    raw = form.get(name, "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"field '{label}' must be a whole number, not {raw!r}") from None


@bp.post("/studies/<study_id>/settings")
def settings(study_id: str) -> ResponseReturnValue:
    conn = get_redis()
    study = _study_or_404(conn, study_id)
    form = request.form
    try:
        changes = {}
        for name in ("name", "instructions", "question"):
            if name in form:
                changes[name] = form[name].strip()
        for name in ("pool_size", "token_ttl_seconds"):
            value = _optional_int(form, name, name)
            if value is not None:
                changes[name] = value
        budgets = {a.label: _optional_int(form, f"budget:{a.label}", f"algorithms.{a.label}.budget")
                   for a in study.config.algorithms if f"budget:{a.label}" in form}
        if budgets:
            changes["budgets"] = budgets
        limits = {name: _optional_int(form, f"limit:{name}", f"limits.{name}")
                  for name in ("max_questions_per_rater", "answer_budget") if f"limit:{name}" in form}
        if "limit:min_response_ms" in form:
            # empty: each question kind's own threshold (engine/kinds.py)
            limits["min_response_ms"] = _optional_int(form, "limit:min_response_ms", "limits.min_response_ms")
        if limits:
            changes["limits"] = limits
        update_config(conn, study_id, **changes)
    except (StudyError, ConfigError) as exc:
        flash(f"Settings not saved: {exc}", "error")
    else:
        schedule_update(conn, study_id)  # a new pool size or budget takes effect on the next update
        flash("Settings saved; raters see them from their next page load.")
    return redirect(study_url(study_id, "settings"))


@bp.post("/studies/<study_id>/raters/exclude")
def exclude_rater(study_id: str) -> ResponseReturnValue:
    """Exclude a rater: their later answers are skipped at once, and an RQ job rebuilds the engines
    from the log without their earlier ones (the page polls its status through the stats JSON)."""
    conn = get_redis()
    _study_or_404(conn, study_id)
    rater = request.form.get("rater", "").strip()
    if not rater:
        abort(400, description="Say which rater to exclude.")
    if not conn.sadd(keys.excluded_raters(study_id), rater):
        flash(f"Rater {rater} is already excluded.")
    else:
        enqueue_rebuild(conn, study_id, [rater])
        flash(f"Excluded rater {rater}: rebuild queued. The engines are rebuilt from the log without their "
              "answers; this page says when the rebuild has finished.")
    return redirect(study_url(study_id, "raters"))


@bp.post("/studies/<study_id>/raters/forget")
def forget_rater(study_id: str) -> ResponseReturnValue:
    """Forget a rater who withdrew: their session is refused at once; an RQ job takes their answers out of the
    log and every record of them (an audit line says when and by whom), then rebuilds the engines from what
    remains and rewrites Redis's files; the Raters tab shows how far it got."""
    conn = get_redis()
    _study_or_404(conn, study_id)
    rater = request.form.get("rater", "").strip()
    if not rater:
        flash("Say which rater to forget.", "error")
    elif request.form.get("confirm") != "yes":
        flash(f"Rater {rater} was not forgotten: tick the box that confirms their answers are removed for good.",
              "error")
    else:
        try:
            deletion.request_forget(conn, study_id, rater, by=current_researcher() or "unknown")
        except StudyError as exc:
            flash(f"Nothing was removed: {exc}.", "error")
        else:
            flash(f"Forgetting rater {rater}: their browser session is refused from now on; a worker takes their "
                  "answers out of the log, then the engines are rebuilt from the other raters' answers and Redis's "
                  "files are rewritten without them (this page says how far it got). Backup files made before "
                  "today still hold them until deleted.")
    return redirect(study_url(study_id, "raters"))


@bp.post("/studies/<study_id>/delete")
def delete_study(study_id: str) -> ResponseReturnValue:
    """Delete the study for good, once the researcher has typed its id to confirm."""
    conn = get_redis()
    study = _study_or_404(conn, study_id)
    if request.form.get("confirm_id", "").strip() != study_id:
        flash(f"The study was not deleted: type its id, {study_id}, to confirm.", "error")
        return redirect(study_url(study_id, "settings"))
    report = deletion.delete_study(conn, study_id, by=current_researcher() or "unknown")
    revoked = f"; {report.tokens_revoked} API token(s) made for it revoked" if report.tokens_revoked else ""
    flash(f"Deleted study {study_id} ({study.config.name}): {report.items} items and {report.answers} answers of "
          f"{report.raters} raters{revoked}.")
    return redirect(url_for("dashboard.index"))


@bp.route("/account", methods=["GET", "POST"])
def account() -> ResponseReturnValue:
    """The logged-in researcher changes their own password (current password, the new one twice).
    Wrong current passwords count as failed logins, so this form is no way around the login limit."""
    if request.method == "GET":
        return _account_page()
    conn, name, ip = get_redis(), current_researcher(), client_address()
    config = current_app.config
    wait = accounts.login_blocked_for(conn, name, ip, config["LOGIN_MAX_FAILURES"])
    if wait:
        minutes = -(-wait // 60)
        return _account_error(f"Too many wrong passwords. Wait {minutes} minute{'s' if minutes != 1 else ''} "
                              "and try again.", 429)
    current = request.form.get("current_password", "")
    new, repeat = request.form.get("new_password", ""), request.form.get("repeat_password", "")
    if accounts.verify_password(conn, name, current) is None:
        accounts.record_login_failure(conn, name, ip, config["LOGIN_FAILURE_WINDOW_SECONDS"])
        return _account_error("The current password is wrong; the password was not changed.", 400)
    if new != repeat:
        return _account_error("The two new passwords differ; type the same new password twice.", 400)
    if new == current:
        return _account_error("The new password is the current one; choose a different password.", 400)
    try:
        accounts.set_password(conn, name, new)
    except AccountError as exc:
        return _account_error(f"The password was not changed: {exc}.", 400)
    accounts.clear_login_failures(conn, name, ip)
    # set_password logged out every session of the account; this one stays logged in
    flask.session["researcher_epoch"] = accounts.session_epoch(conn, name)
    flash("Your password is changed. Other sessions of this account are logged out.")
    return redirect(url_for("dashboard.account"))


def _account_error(message: str, status: int):
    return _account_page(error=message), status


def _account_page(**context):
    """The account page: the password form and the researcher's API tokens (``api_tokens``)."""
    def when(ts: float | None) -> str:
        return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ts)) if ts else "never"

    conn = get_redis()
    tokens = [{**t, "created": when(t["created_at"]), "last_used": when(t["last_used_at"]),
               "expires": when(t["expires_at"]) if t["expires_at"] else "when revoked",
               "expired": bool(t["expires_at"] and t["expires_at"] <= time.time())}
              for t in api_tokens.list_tokens(conn, current_researcher())]
    return render_template("dashboard/account.html", min_length=accounts.MIN_PASSWORD_LENGTH, tokens=tokens,
                           studies=list_studies(conn), api_url=public_url(""), **context)


@bp.post("/account/tokens")
def create_api_token() -> ResponseReturnValue:
    """A new API token, shown on this one page and never again (not flashed: it would ride in the cookie)."""
    form = request.form
    try:
        expires = form.get("expires_days", "").strip()
        if expires and not expires.isdigit():
            raise api_tokens.TokenError(f"a token expires after a whole number of days, not {expires!r}")
        secret, record = api_tokens.create_token(get_redis(), current_researcher(), form.get("name", ""),
                                                 study=form.get("study") or None,
                                                 access="write" if form.get("access") == "write" else "read",
                                                 expires_days=int(expires) if expires else None)
    except api_tokens.TokenError as exc:
        return _account_page(token_error=f"No token was made: {exc}."), 400
    expires = record["expires_at"]
    until = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(expires)) if expires else None
    return _account_page(new_token=secret, new_token_record=record, new_token_expires=until)


@bp.post("/account/tokens/<token_id>/revoke")
def revoke_api_token(token_id: str) -> ResponseReturnValue:
    try:
        record = api_tokens.revoke_token(get_redis(), token_id, owner=current_researcher())
    except api_tokens.TokenError as exc:
        abort(404, description=f"{str(exc)[0].upper()}{str(exc)[1:]}.")
    flash(f"Token '{record['name']}' is revoked: programs using it are refused from now on.")
    return redirect(url_for("dashboard.account"))


def _download(study_id: str, what: str, fmt: str):
    from workers.results.exports import ExportError, export  # numpy-heavy: loaded on the first download

    conn = get_redis()
    _study_or_404(conn, study_id)
    try:
        result = export(conn, study_id, what, fmt, request.args.get("algorithm") or None,
                        model=request.args.get("model") or None)
        chunks = iter(result.chunks)
        first = next(chunks, "")  # surfaces export errors as a 404 page rather than a broken download
    except ExportError as exc:
        abort(404, description=str(exc))

    def body():
        yield first
        yield from chunks

    response = Response(flask.stream_with_context(body()), mimetype=result.media_type)
    # the file name carries the ?algorithm= parameter: only plain characters go into the header
    filename = re.sub(r"[^A-Za-z0-9._-]", "_", result.filename)
    response.headers["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def _items_page(items: list) -> dict:
    """One page of the items (``?page=``), those whose id, text or label holds ``?q=`` (any case)."""
    q = request.args.get("q", "").strip()
    try:
        page = int(request.args.get("page", "1"))
    except ValueError:
        abort(400, description="page must be a whole number (1 is the first page).")
    found = [(i, item) for i, item in enumerate(items)
             if not q or q.casefold() in " ".join(str(x) for x in (item.id, item.text, item.label)
                                                  if x is not None).casefold()]
    pages = max(1, -(-len(found) // ITEMS_PER_PAGE))
    if not 1 <= page <= pages:
        abort(404, description=f"There are {pages} page(s) of items{' matching ' + repr(q) if q else ''}, "
                               f"not a page {page}.")
    start = (page - 1) * ITEMS_PER_PAGE
    return {"items_page": found[start:start + ITEMS_PER_PAGE], "items_found": len(found), "items_query": q,
            "items_pagenum": page, "items_pages": pages}


@bp.get("/studies/<study_id>/items.json")
def item_ids(study_id: str) -> ResponseReturnValue:
    """Every item's id, in index order (the dashboard names neighbours not on the page shown)."""
    conn = get_redis()
    _study_or_404(conn, study_id)
    response = jsonify({"ids": [item.id for item in get_items(conn, study_id)]})
    response.headers["Cache-Control"] = "private, max-age=60"
    return response


@bp.get("/studies/<study_id>/export/<what>.<fmt>")
def download(study_id: str, what: str, fmt: str) -> ResponseReturnValue:
    """Every export of the platform: answers.csv/.jsonl, triplets.csv, graph.json/.csv/.graphml, forest.json."""
    return _download(study_id, what, fmt)


@bp.get("/studies/<study_id>/package.zip")
def package_zip(study_id: str) -> ResponseReturnValue:
    """The study's data package (docs/data-package.md) once built in the background; ``?rater_ids=1`` keeps
    recruitment ids. Not built (or built before the data changed): back to the Downloads tab, which says so."""
    conn = get_redis()
    rater_ids = request.args.get("rater_ids") in ("1", "true", "yes")
    response = package_response(conn, _study_or_404(conn, study_id), rater_ids)
    if response is None:
        flash(f"The data package is not ready: {package_status_doc(conn, study_id, rater_ids)['message']}", "error")
        return redirect(study_url(study_id, "downloads"))
    return response


@bp.post("/studies/<study_id>/package/build")
def build_package(study_id: str) -> ResponseReturnValue:
    """Start (or join) the background build of the data package; the Downloads tab shows its progress."""
    conn = get_redis()
    status = request_package(conn, _study_or_404(conn, study_id), request.form.get("rater_ids") == "1")
    flash(f"Data package: {status['message']}")
    return redirect(study_url(study_id, "downloads"))


@bp.get("/studies/<study_id>/answers.csv")
def answers_csv(study_id: str) -> ResponseReturnValue:
    return _download(study_id, "answers", "csv")


@bp.get("/studies/<study_id>/answers.jsonl")
def answers_jsonl(study_id: str) -> ResponseReturnValue:
    return _download(study_id, "answers", "jsonl")
