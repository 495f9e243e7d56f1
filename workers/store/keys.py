"""Every Redis key Proxima uses, built in one place.

The study id sits in a ``{hash tag}`` so all keys of one study land on one Redis
Cluster slot (a Lua script or MULTI may touch several of them). Nothing else in the
project formats key names. Must never import Flask or the engine.
"""
from __future__ import annotations

import hashlib

PREFIX = "proxima"


def _study_key(study_id: str, name: str) -> str:
    return f"{PREFIX}:{{{study_id}}}:{name}"


def studies() -> str:
    """Set of every study id on this Redis."""
    return f"{PREFIX}:studies"


def study(study_id: str) -> str:
    """Hash: name, status, created_at, config (JSON)."""
    return _study_key(study_id, "study")


def items(study_id: str) -> str:
    """List of item JSON documents, position = item index."""
    return _study_key(study_id, "items")


def media(study_id: str) -> str:
    """Hash: item index -> file bytes of image/audio/video items."""
    return _study_key(study_id, "media")


def answers(study_id: str) -> str:
    """Stream: the answer log, the source of truth of a study."""
    return _study_key(study_id, "answers")


def pool(study_id: str, algorithm: str) -> str:
    """List of ready question JSON documents of one algorithm, which the web process pops from."""
    return _study_key(study_id, f"pool:{algorithm}")


def pool_targets(study_id: str) -> str:
    """Hash: algorithm label -> the pool depth the workers aim for (web schedules a refill below half)."""
    return _study_key(study_id, "pool-targets")


def finished(study_id: str) -> str:
    """Set of algorithm labels that need no more questions (all rounds closed, or budget reached)."""
    return _study_key(study_id, "finished")


def active_raters(study_id: str) -> str:
    """Sorted set: rater id -> unix time of the last question issued to them."""
    return _study_key(study_id, "active-raters")


def issued(study_id: str) -> str:
    """Sorted set: question id -> expiry (unix seconds) of questions handed to raters."""
    return _study_key(study_id, "issued")


def issued_questions(study_id: str) -> str:
    """Hash: question id -> question JSON of issued questions (to release them on expiry)."""
    return _study_key(study_id, "issued:questions")


def used_token(study_id: str, question_id: str) -> str:
    """String: the answer id stored for a question token; its presence means "answered"."""
    return _study_key(study_id, f"used:{question_id}")


def raters(study_id: str) -> str:
    """Set of rater ids that have answered."""
    return _study_key(study_id, "raters")


def excluded_raters(study_id: str) -> str:
    """Set of rater ids whose answers stay in the log but are not applied to the engine."""
    return _study_key(study_id, "excluded-raters")


def answers_per_minute(study_id: str) -> str:
    """Hash: unix minute -> answers accepted in that minute."""
    return _study_key(study_id, "per-minute")


def counters(study_id: str) -> str:
    """Hash of counters: questions_served, fallback_served, ..."""
    return _study_key(study_id, "counters")


def engine(study_id: str, algorithm: str) -> str:
    """Hash: one algorithm's engine state (JSON skeleton + numpy arrays)."""
    return _study_key(study_id, f"engine:{algorithm}")


def engine_journal(study_id: str, algorithm: str) -> str:
    """List: the changes of one algorithm's engine state since its checkpoint (``keys.engine``), one
    entry per update pass, oldest first (see ``workers.store.engine_state``)."""
    return _study_key(study_id, f"engine-journal:{algorithm}")


def engine_checkpoint(study_id: str, algorithm: str) -> str:
    """Hash: a checkpoint of one algorithm's engine state being written; renamed onto ``keys.engine``
    once complete."""
    return _study_key(study_id, f"engine-checkpoint:{algorithm}")


def cursor(study_id: str) -> str:
    """String: id of the last answer applied to the engines; written with their states in one MULTI."""
    return _study_key(study_id, "cursor")


def refresh_latencies(study_id: str) -> str:
    """List: the latest update passes' latencies in ms (newest first, capped)."""
    return _study_key(study_id, "refresh-ms")


def poisoned(study_id: str) -> str:
    """Hash: answer id -> why the engine could not use it (kept in the log, skipped by the engine)."""
    return _study_key(study_id, "poisoned")


def engine_stats(study_id: str) -> str:
    """Hash: last refresh latency, batch size, ... written by the update job."""
    return _study_key(study_id, "engine:stats")


def update_scheduled(study_id: str) -> str:
    """String with a TTL: an update job for the study is queued and not yet started."""
    return _study_key(study_id, "update-scheduled")


def update_lock(study_id: str) -> str:
    """Lock held by the one worker applying answers of the study."""
    return _study_key(study_id, "update-lock")


def rater_stats(study_id: str) -> str:
    """Hash of per-rater counters: ``<rater>:answers``, ``<rater>:catch``, ``<rater>:catch_failed``,
    ``<rater>:too_fast``, ``<rater>:flagged`` (1), ``<rater>:completed`` (1), ``<rater>:debrief`` (text)."""
    return _study_key(study_id, "rater-stats")


def model(study_id: str, name: str) -> str:
    """Hash: a learner trained on the study's data (SMERF, TreeRank, SimForest): ``meta`` (JSON),
    ``export`` (the researcher's JSON document) and the estimator state (JSON skeleton + arrays)."""
    return _study_key(study_id, f"model:{name}")


def plan(study_id: str) -> str:
    """String: the JSON of the last budget plan (``proxima plan --study``) the dashboard shows."""
    return _study_key(study_id, "plan")


def rater_sessions(study_id: str) -> str:
    """Hash: recruited rater id -> the nonce of the one browser session allowed to ask for questions
    (the latest one to open the study page)."""
    return _study_key(study_id, "rater-sessions")


def outstanding(study_id: str, rater: str) -> str:
    """Sorted set: the questions a rater holds unanswered, scored by expiry (unix s); an attention
    check's member is ``c:<question id>``. Expires with the last of them."""
    return _study_key(study_id, f"outstanding:{rater}")


def anonymous_sessions(study_id: str, address: str) -> str:
    """Counter with a one-hour TTL: anonymous rater sessions an address opened in the study."""
    return _study_key(study_id, f"anonymous-sessions:{address}")


def repeats(study_id: str, rater: str) -> str:
    """List: the rater's validation repeats waiting to be asked, each ``"<answers> <question JSON>"``:
    asked once the rater has given that many answers (attention.validation_repeats)."""
    return _study_key(study_id, f"repeats:{rater}")


def stylesheet(study_id: str) -> str:
    """String: the study's own CSS for its rater pages (checked by studies.check_stylesheet); kept
    out of the study hash, which every rater request reads."""
    return _study_key(study_id, "stylesheet")


def request_durations() -> str:
    """Hash: HTTP request durations of every web process (``<endpoint>|<bucket>`` counts and
    ``<endpoint>|sum`` seconds), for the Prometheus /metrics histogram."""
    return f"{PREFIX}:metrics:request_durations"


def _digest(value: str, length: int) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:length]


def rate_rater(study_id: str, rater: str) -> str:
    """String: the rate-limit bucket of one rater session's answers and question requests (GCRA: its
    theoretical arrival time in microseconds); the rater id hashed."""
    return _study_key(study_id, f"rate:rater:{_digest(rater, 24)}")


def rate_address(study_id: str, address: str) -> str:
    """String: the rate-limit bucket of one client address's answers and question requests in the study."""
    return _study_key(study_id, f"rate:addr:{_digest(address, 24)}")


def rate_codes(study_id: str, address: str) -> str:
    """String: the rate-limit bucket of completion codes first shown to one client address in the study."""
    return f"{rate_address(study_id, address)}:codes"


def rate_login(address: str) -> str:
    """String: the rate-limit bucket of login attempts (POST /login) of one client address."""
    return f"{PREFIX}:login-rate:{_digest(address, 24)}"


# Researcher accounts are not per study: their keys carry no {hash tag} (every script and transaction
# on them touches one key).

def user(name: str) -> str:
    """Hash of one researcher account: password_hash, epoch (bumped to log out its sessions), created_at,
    password_changed_at."""
    return f"{PREFIX}:user:{name}"


def users() -> str:
    """Set of every account name."""
    return f"{PREFIX}:users"


def login_failures(name: str, address: str) -> str:
    """Counter of failed logins of one (account name, client address), expiring after the window; hashed
    so that whatever a client types as a name, the key stays short and opaque."""
    digest = _digest(f"{name}\0{address}", 32)
    return f"{PREFIX}:login-failures:{digest}"


def researcher_session(session_id: str) -> str:
    """Hash of one researcher login: ``name``, ``login_at``; expires after the idle timeout."""
    return f"{PREFIX}:researcher-session:{_digest(session_id, 64)}"


# Hash fields. A study's hashes hold one field per (rater or algorithm, counter); the Lua scripts
# (workers/store/lua/) build the same names with '..'.

def rater_field(rater: str, name: str) -> str:
    """Field of ``rater_stats``: ``<rater>:<name>`` (answers, catch, catch_failed, too_fast, skipped, flagged,
    completed, repeats, repeat_agreed, repeat_sources, last_answer_at, debrief, code_shown)."""
    return f"{rater}:{name}"


def split_rater_field(field: str) -> tuple[str, str]:
    """(rater, counter name) of a ``rater_stats`` field; the rater is '' for a field of no rater."""
    rater, _, name = field.rpartition(":")
    return rater, name


def counter_field(name: str, label: str) -> str:
    """Field of ``counters`` per algorithm: ``<name>:<label>`` for questions_served, fallback_served and
    answers (the study-wide totals are the bare names)."""
    return f"{name}:{label}"


def served_field(label: str) -> str:
    """Field of ``engine_stats``: ``served:<label>``, the questions served when the last update pass ran."""
    return f"served:{label}"
