"""Every Redis key Proxima uses, built in one place.

The study id sits in a ``{hash tag}`` so all keys of one study land on one Redis
Cluster slot (a Lua script or MULTI may touch several of them). Nothing else in the
project formats key names. Must never import Flask or the engine.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable

PREFIX = "proxima"


def _study_key(study_id: str, name: str) -> str:
    return f"{PREFIX}:{{{study_id}}}:{name}"


def studies() -> str:
    """Set of every study id on this Redis."""
    return f"{PREFIX}:studies"


def _per_study(name: str) -> Callable[[str], str]:
    """The builder of one study's key ``proxima:{<study id>}:<name>``."""
    def key(study_id: str) -> str:
        return _study_key(study_id, name)
    key.__doc__ = f"The key {PREFIX}:{{<study id>}}:{name}."
    return key


def _per_study_part(template: str) -> Callable[[str, str], str]:
    """The builder of one study's keys ``proxima:{<study id>}:<name>:<part>``, one per algorithm, rater, question,
    client address or model; ``template`` is ``<name>:<part>`` with the part named in angle brackets, and the
    builder's second argument is the part's value."""
    name, _, part = template.partition(":<")
    if not (name and part.endswith(">")):
        raise ValueError(f"a key template is 'name:<part>', not {template!r}")

    def key(study_id: str, value: str) -> str:
        return _study_key(study_id, f"{name}:{value}")
    key.__doc__ = f"The key {PREFIX}:{{<study id>}}:{template}."
    return key


# The keys of one study, each with what it holds.

#: Hash: name, status, created_at, config (JSON).
study = _per_study("study")

#: List of item JSON documents, position = item index.
items = _per_study("items")

#: Hash: item index -> file bytes of image/audio/video items.
media = _per_study("media")

#: Stream: the answer log, the source of truth of a study.
answers = _per_study("answers")

#: Stream: a copy of the answer log being made without the entries deleted from it (``deletion.compact_log``),
#: renamed onto ``answers`` once whole.
answers_compacting = _per_study("answers-compacting")

#: Hash: algorithm label -> the pool depth the workers aim for (web schedules a refill below half).
pool_targets = _per_study("pool-targets")

#: Set of algorithm labels that need no more questions (all rounds closed, or budget reached).
finished = _per_study("finished")

#: Sorted set: rater id -> unix time of the last question issued to them.
active_raters = _per_study("active-raters")

#: Sorted set: question id -> expiry (unix seconds) of questions handed to raters.
issued = _per_study("issued")

#: Hash: question id -> question JSON of issued questions (to release them on expiry).
issued_questions = _per_study("issued:questions")

#: Set of rater ids that have answered.
raters = _per_study("raters")

#: Set of rater ids whose answers stay in the log but are not applied to the engine.
excluded_raters = _per_study("excluded-raters")

#: Hash: unix minute -> answers accepted in that minute.
answers_per_minute = _per_study("per-minute")

#: Hash of counters: questions_served, fallback_served, ...
counters = _per_study("counters")

#: String: id of the last answer applied to the engines; written with their states in one MULTI.
cursor = _per_study("cursor")

#: List: the answers to held-out questions the update passes have read (never learned from), oldest first, each a
#: JSON document (``workers.store.heldout``); written with the cursor, rewritten by a rebuild.
heldout = _per_study("heldout")

#: List: the latest update passes' latencies in ms (newest first, capped).
refresh_latencies = _per_study("refresh-ms")

#: Hash: answer id -> why the engine could not use it (kept in the log, skipped by the engine).
poisoned = _per_study("poisoned")

#: Hash: last refresh latency, batch size, ... written by the update job.
engine_stats = _per_study("engine:stats")

#: Hash: whether the study is learning (``workers.store.health``): when its last update pass succeeded, since
#: when its passes fail, how many failed in a row, the last error and when it came.
learning = _per_study("learning")

#: String: the study's catch-trial comparisons (``webapp.catches``) as JSON, with the item version they were
#: chosen for: chosen once, by the first web process that needs them.
catch_comparisons = _per_study("catch-comparisons")

#: Set: the catch trials' label comparisons (claim keys, ``webapp.catches.claim_key``) the crowd retired: no
#: longer shown (workers/jobs/rater_checks.py writes it at each look of the crowd).
catch_retired = _per_study("catch-retired")

#: Hash: the crowd's count of the label comparisons answered (``confirmed``, ``pending``, ``retired``,
#: ``contradicted``: retired as clearly below the agreement asked) and ``judged_at``, for the dashboard.
catch_claims = _per_study("catch-claims")

#: Hash: what ``/api/health`` reads of the crowd without reading every rater's counters: ``awaiting`` (raters
#: whose missed catch trials wait for a verdict) and ``awaiting_since`` (when the earliest of them was missed),
#: written by every answer check; ``catches_seen`` (the catch answers counted when its last look read the log)
#: and ``log_seen`` (the newest log entry that look read), written by every look of the crowd.
crowd_state = _per_study("crowd-state")

#: String with a TTL: an update job for the study is queued and not yet started.
update_scheduled = _per_study("update-scheduled")

#: Lock held by the one worker applying answers of the study.
update_lock = _per_study("update-lock")

#: Hash of per-rater counters: ``<rater>:answers``, ``<rater>:catch``, ``<rater>:catch_failed``, ``<rater>:too_fast``,
#: ``<rater>:flagged`` (1), ``<rater>:completed`` (1), ``<rater>:debrief`` (text).
rater_stats = _per_study("rater-stats")

#: String: the JSON of the last budget plan (``proxima plan --study``) the dashboard shows.
plan = _per_study("plan")

#: Hash: recruited rater id -> the nonce of the one browser session allowed to ask for questions (the latest one to
#: open the study page).
rater_sessions = _per_study("rater-sessions")

#: String: the study's own CSS for its rater pages (checked by studies.check_stylesheet); kept out of the study hash,
#: which every rater request reads.
stylesheet = _per_study("stylesheet")

#: Stream: the study's audit lines, one per removal from its data (a forgotten rater: when, by whom, the
#: SHA-256 of the rater id, how many answers left the log); kept in backups (workers.store.deletion).
audit = _per_study("audit")

#: Set: the SHA-256 (hex) of every rater id forgotten from the study (``deletion.rater_digest``, as its audit lines
#: hold it): a browser session of such an id is refused (lua/study_guard.lua) and gets no fresh allowance.
forgotten_raters = _per_study("forgotten-raters")

#: Hash: request id -> JSON {rater, by} of a forget asked from the dashboard, until its job has run (the job's
#: own arguments, which RQ keeps in Redis after it ran, hold no rater id; ``deletion.request_forget``).
forget_requests = _per_study("forget-requests")


# The keys of one study and one algorithm, question, rater, address or model (the second argument), each with
# what it holds.

#: List of ready question JSON documents of one algorithm, which the web process pops from.
pool = _per_study_part("pool:<algorithm>")

#: String: the answer id stored for a question token; its presence means "answered".
used_token = _per_study_part("used:<question_id>")

#: Hash: one algorithm's engine state (JSON skeleton + numpy arrays).
engine = _per_study_part("engine:<algorithm>")

#: List: the changes of one algorithm's engine state since its checkpoint (``keys.engine``), one entry per update pass,
#: oldest first (see ``workers.store.engine_state``).
engine_journal = _per_study_part("engine-journal:<algorithm>")

#: Hash: a checkpoint of one algorithm's engine state being written; renamed onto ``keys.engine`` once complete.
engine_checkpoint = _per_study_part("engine-checkpoint:<algorithm>")

#: Hash: a learner trained on the study's data (SMERF, TreeRank, SimForest): ``meta`` (JSON), ``export`` (the
#: researcher's JSON document) and the estimator state (JSON skeleton + arrays).
model = _per_study_part("model:<name>")

#: Sorted set: the questions a rater holds unanswered, scored by expiry (unix s); an attention check's member is
#: ``c:<question id>``. Expires with the last of them.
outstanding = _per_study_part("outstanding:<rater>")

#: Counter with a one-hour TTL: anonymous rater sessions an address opened in the study.
anonymous_sessions = _per_study_part("anonymous-sessions:<address>")

#: List: the rater's validation repeats waiting to be asked, each ``"<answers> <question JSON>"``: asked once the rater
#: has given that many answers (attention.validation_repeats).
repeats = _per_study_part("repeats:<rater>")

#: Hash: the data package built by a background job, one per variant ("pseudonymous" or "rater-ids")
#: (``workers.store.packages``): state, job id, answers written and total, the fingerprint of the data it was built
#: from, its size, the error in words.
package_status = _per_study_part("package-status:<variant>")

#: List: the built data package zip of one variant, in chunks of at most a MiB, oldest first; expires
#: (``workers.store.packages.PACKAGE_TTL_SECONDS``).
package_zip = _per_study_part("package-zip:<variant>")


def study_pattern(study_id: str) -> str:
    """The SCAN pattern matching every key of one study (ids hold no glob characters: STUDY_ID_PATTERN)."""
    return _study_key(study_id, "*")


def deleted_studies() -> str:
    """Stream: one audit line per deleted study (when, by whom, its id, name and what it held); the study's
    own keys are gone, so the line is kept outside its hash tag."""
    return f"{PREFIX}:deleted-studies"


def incidents() -> str:
    """List: the processes that died or failed on this Redis and what healed them, newest first, each a JSON
    document (``workers.store.health``); capped, kept outside any study (a process serves every study)."""
    return f"{PREFIX}:incidents"


def forgotten_anywhere() -> str:
    """Set: for every rater forgotten on this Redis, the SHA-256 of ``<study id>:<rater id>``
    (``deletion.study_rater_digest``); kept outside the study's hash tag, so it outlives a deleted study and
    a restore of an older backup can tell it brings a forgotten rater back."""
    return f"{PREFIX}:forgotten-raters"


def packages_kept() -> str:
    """Sorted set: every built data package zip kept on this Redis, ``<study id>|<variant>`` scored by when it
    was built (``workers.store.packages``): the oldest are dropped first to keep all of them within
    ``PACKAGES_TOTAL_BYTES``; kept outside any study's hash tag."""
    return f"{PREFIX}:packages-kept"


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


def rate_media(study_id: str, by: str, who: str) -> str:
    """String: the rate-limit bucket of the media one rater session (``by`` "rater") or one client address
    (``by`` "addr") fetches by handle in the study."""
    return _study_key(study_id, f"rate:media:{by}:{_digest(who, 24)}")


def rate_codes(study_id: str, address: str) -> str:
    """String: the rate-limit bucket of completion codes first shown to one client address in the study."""
    return f"{rate_address(study_id, address)}:codes"


def rate_login(address: str) -> str:
    """String: the rate-limit bucket of login attempts (POST /login) of one client address."""
    return f"{PREFIX}:login-rate:{_digest(address, 24)}"


def rate_token_failures(address: str) -> str:
    """String: the rate-limit bucket of invalid API tokens sent from one client address."""
    return f"{PREFIX}:token-failures:{_digest(address, 24)}"


def token_blocked(address: str) -> str:
    """String with a TTL: the client address sent too many invalid API tokens; none of its tokens is checked
    until it expires."""
    return f"{PREFIX}:token-blocked:{_digest(address, 24)}"


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


def api_token(token_id: str) -> str:
    """Hash of one researcher API token: ``secret_hash`` (SHA-256 of its secret), ``owner`` (account name),
    ``name``, ``study`` (one study id, or empty for every study), ``access`` (``read`` or ``write``),
    ``created_at``, ``last_used_at``."""
    return f"{PREFIX}:api-token:{token_id}"


def api_tokens() -> str:
    """Set of every API token id."""
    return f"{PREFIX}:api-tokens"


# Hash fields. A study's hashes hold one field per (rater or algorithm, counter); the Lua scripts
# (workers/store/lua/) build the same names with '..'.

def rater_field(rater: str, name: str) -> str:
    """Field of ``rater_stats``: ``<rater>:<name>`` (answers, catch, catch_failed, too_fast, skipped, flagged,
    completed, repeats, repeat_agreed, repeat_sources, last_answer_at, debrief, code_shown, code_kind)."""
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


#: Field of ``engine_stats``: what the dashboard shows of the study's item features (items added later with
#: predicted neighbours, how well the features agree with the crowd), JSON written with the summary
#: (``workers.jobs.predicted``).
FEATURES_FIELD = "features"

#: Fields of a study's hash (``study``) that ``workers.store.studies.set_features`` writes with the features: where
#: they came from (a file, or the built-in image statistics and their version) and a digest of them, which a
#: process's copy of the features is keyed by (``workers.jobs.predicted.study_features``).
FEATURES_SOURCE_FIELD = "features_source"
FEATURES_VERSION_FIELD = "features_version"
#: Field of ``engine_stats``: the state of the job computing a study's built-in image features (JSON: state, images
#: done, error in words; ``workers.jobs.builtin_features``).
FEATURES_JOB_FIELD = "features_job"
