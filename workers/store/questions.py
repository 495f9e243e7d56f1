"""The question pools: workers push planned questions, web processes pop and issue them.

Each algorithm of a study has its own pool, so raters are shared between algorithms by
their configured shares however deep each pool is. Choosing the algorithm, popping a
question (or drawing a fallback when the pool is empty) and marking it issued is one Lua
script, so a web process that dies in between cannot leave a question neither pooled nor
issued; the same script checks the rater may go on and reads the question's items, so a
rater's request costs one round trip. Must never import Flask or the engine (fallbacks use
the standard library only).
"""
from __future__ import annotations

import json
import random
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.kinds import KINDS, kind_of
from workers.store import keys
from workers.store.config import AlgorithmConfig, StudyConfig
from workers.store.lua import Script
from workers.store.queue import UPDATE_FLAG_TTL

if TYPE_CHECKING:
    from redis import Redis
    from redis.client import Pipeline


#: The Lua scripts of the pools (workers/store/lua/): the shared functions issue() and next_question()
#: are in issue.lua and next_question.lua.
ISSUE = Script("issue_one.lua")
NEXT = Script("next.lua")
#: next.lua behind study_guard.lua: a web request's copy of the study is checked in the same step.
NEXT_GUARDED = Script("next_guarded.lua")
PRUNE = Script("prune.lua")
QUEUE_REPEAT = Script("queue_repeat.lua")


class StudyComplete(Exception):
    """Every algorithm of the study has finished: there is nothing useful left to ask."""


def new_question_id() -> str:
    return secrets.token_hex(8)


def pooled(screen: dict, algorithm: str, fallback: bool = False) -> dict:
    """A screen (``engine.kinds``: the kind's ``screen``) as a pool holds it: with its question id, the
    label of the algorithm that asked it and whether it is a fallback."""
    return {"qid": new_question_id(), **screen, "algorithm": algorithm, "fallback": bool(fallback)}


def triplet_question(head: int, a: int, b: int, algorithm: str, fallback: bool = False,
                     probe: int | None = None) -> dict:
    """"Is ``head`` more similar to ``a`` or to ``b``?" (the default kind's screen). ``probe`` marks a
    triplet-derived distance question: the answer is a sample of d(head, probe), 1 if the other
    candidate wins."""
    question = pooled(KINDS["triplet"].screen((head, a, b), {}), algorithm, fallback)
    if probe is not None:
        question["probe"] = int(probe)
    return question


def derived_triplet_question(i: int, j: int, k: int, algorithm: str, fallback: bool = False) -> dict:
    """The triplet-derived question for the pair (i, j) with third item k, candidates in random order."""
    a, b = (j, k) if random.random() < 0.5 else (k, j)
    return triplet_question(i, a, b, algorithm, fallback=fallback, probe=j)


def question_items(question: dict) -> list[int]:
    """Every item a question shows, in display order."""
    return kind_of(question).shown(question)


def asks_derived(algorithm: AlgorithmConfig) -> bool:
    """Whether the algorithm's planner proposes pairs the platform asks as triplet-derived questions (a pair
    planner in a triplet study: the algorithm table's ``native_kind`` is another kind than the one asked)."""
    return algorithm.entry.native_kind(algorithm.question_kind) != algorithm.question_kind


def fallback_question(algorithm: AlgorithmConfig, n_items: int, config: StudyConfig | None = None) -> dict:
    """A uniformly random screen of the algorithm's kind (``engine.kinds``), served when its pool is empty.

    A pair planner asking a kind built around a pair of another shape (a triplet study's distance
    learners) gets a uniformly random pair asked as a triplet-derived question, a sample the engine
    still uses (as its Random baseline would); every other algorithm a uniformly random screen of its
    kind (rating forests keep a random pair's rating for later splits).
    """
    kind = algorithm.kind
    if asks_derived(algorithm):
        i, j, k = random.sample(range(n_items), 3)
        return derived_triplet_question(i, j, k, algorithm.label, fallback=True)
    settings = config.settings_of(kind) if config is not None else kind.check_settings(None)
    return pooled(kind.random_screen(n_items, settings), algorithm.label, fallback=True)


def push_questions(conn: Redis, study_id: str, algorithm: str, questions: list[dict],
                   pipeline: Pipeline | None = None) -> None:
    if not questions:
        return
    target = pipeline if pipeline is not None else conn
    target.rpush(keys.pool(study_id, algorithm), *[json.dumps(q, sort_keys=True) for q in questions])


def pooled_questions(conn: Redis, study_id: str, algorithm: str) -> list[dict]:
    return [json.loads(raw) for raw in conn.lrange(keys.pool(study_id, algorithm), 0, -1)]


def pool_length(conn: Redis, study_id: str, algorithm: str) -> int:
    """How many questions wait in the pool (without reading them)."""
    return int(conn.llen(keys.pool(study_id, algorithm)))


def prune_questions(conn: Redis, study_id: str, algorithm: str, questions: list[dict]) -> list[dict]:
    """Take ``questions`` out of the pool; returns those that were still there (not yet issued)."""
    if not questions:
        return []
    docs = [json.dumps(q, sort_keys=True) for q in questions]
    removed = PRUNE(conn, keys={"pool": keys.pool(study_id, algorithm)}, more_args=docs)
    return [q for q, hit in zip(questions, removed, strict=True) if int(hit)]


def issue_keys(study_id: str) -> dict[str, str]:
    """The named keys of issue.lua (the pools of the algorithms follow: ``pool_keys``)."""
    return {"issued": keys.issued(study_id), "issued_questions": keys.issued_questions(study_id),
            "counters": keys.counters(study_id), "finished": keys.finished(study_id),
            "active_raters": keys.active_raters(study_id), "pool_targets": keys.pool_targets(study_id)}


def pool_keys(study_id: str, config: StudyConfig) -> list[str]:
    return [keys.pool(study_id, a.label) for a in config.algorithms]


def issue_args(config: StudyConfig, rater: str, now: float, expires_at: float) -> dict:
    """The named arguments of issue.lua: times, rater, a uniform draw and the number of algorithms
    (their label, share and fallback question follow: ``algorithm_args``)."""
    return {"expires_at": repr(float(expires_at)), "now": repr(float(now)), "rater": rater,
            "draw": repr(random.random()), "algorithms": len(config.algorithms)}


#: The field of the pool-targets hash (``keys.pool_targets``) holding what the study's learner set the split to
#: (``workers.jobs.learned_split``: the time shares, each kind's seconds, since when), as JSON; beside it a field
#: ``share_field(label)`` per algorithm holds its share of the questions, which issue.lua uses in place of the
#: configured one. Labels hold no ':', so neither field is ever a label's pool target.
SPLIT_FIELD = "split:in_force"


def share_field(label: str) -> str:
    """The pool-targets hash's field of an algorithm's share of the questions set by the study's learner."""
    return f"share:{label}"


def store_shares(target: Redis | Pipeline, study_id: str, shares: dict[str, float], record: dict) -> None:
    """Store the question shares the learner set (label -> share) and what they rest on (``record``), where
    issue.lua reads them."""
    target.hset(keys.pool_targets(study_id), mapping={
        **{share_field(label): repr(float(share)) for label, share in shares.items()},
        SPLIT_FIELD: json.dumps(record, sort_keys=True)})


def split_in_force(conn: Redis, study_id: str, config: StudyConfig) -> dict | None:
    """The split a study's learner set (the record ``store_shares`` stored, with ``shares``: each algorithm's
    share of the questions in force); None for a study of fixed shares or before the learner set one."""
    if config.split != "learner":
        return None
    raw = conn.hmget(keys.pool_targets(study_id), [SPLIT_FIELD, *(share_field(a.label) for a in config.algorithms)])
    if raw[0] is None:
        return None
    configured = config.shares()
    shares = {a.label: float(v) if v is not None else configured[a.label]
              for a, v in zip(config.algorithms, raw[1:], strict=True)}
    return {**json.loads(raw[0]), "shares": shares}


def algorithm_args(config: StudyConfig, n_items: int) -> list:
    """Per algorithm its label, share and a fallback question, as issue.lua takes them."""
    args = []
    for alg in config.algorithms:
        args.extend([alg.label, repr(float(alg.share)),
                     json.dumps(fallback_question(alg, n_items, config), sort_keys=True)])
    return args


def issue_question(conn: Redis, study_id: str, config: StudyConfig, n_items: int, rater: str, now: float,
                   expires_at: float) -> tuple[dict, int, int]:
    """Choose an algorithm by share (the one the study's learner set, ``store_shares``, where it set one), pop
    its next pooled question (or a fallback) and record it as issued until ``expires_at``. Returns (question,
    questions left in that pool, the pool's target).

    Raises StudyComplete when every algorithm has finished.
    """
    reply = ISSUE(conn, keys=issue_keys(study_id), args=issue_args(config, rater, now, expires_at),
                  more_keys=pool_keys(study_id, config), more_args=algorithm_args(config, n_items))
    if reply[0] == b"complete":
        raise StudyComplete(study_id)
    return json.loads(reply[1]), int(reply[2]), int(reply[3])


@dataclass(frozen=True)
class NextRequest:
    """The keys and arguments of next.lua for one rater, in order (accept.lua takes them after its own);
    ``guarded``: those of next_guarded.lua (the study guard's first)."""

    keys: list[str]
    args: list
    guarded: bool = False


@dataclass(frozen=True)
class StudyGuard:
    """What lua/study_guard.lua checks before a rater's request acts: the study's fingerprint as the web
    process read it ('' = no check), the recruited rater id ('' = none) with this browser session's
    nonce for it, and the SHA-256 of the session's rater id, anonymous or not (``deletion.rater_digest``;
    '' = no check): a forgotten rater is refused."""

    fingerprint: str = ""
    rater: str = ""
    nonce: str = ""
    rater_digest: str = ""

    def keys(self, study_id: str) -> dict[str, str]:
        return {"study": keys.study(study_id), "rater_sessions": keys.rater_sessions(study_id),
                "forgotten_raters": keys.forgotten_raters(study_id)}

    def args(self) -> dict[str, str]:
        return {"fingerprint": self.fingerprint, "holder_rater": self.rater, "holder_nonce": self.nonce,
                "rater_digest": self.rater_digest}


@dataclass(frozen=True)
class NextQuestion:
    """What ``next_question`` gave: ``status`` 'ok' or why the rater gets no question ('rater_stopped',
    'rater_done', 'budget_reached', 'study_complete'; behind a guard also 'stale', 'forgotten' and 'replaced', see
    lua/study_guard.lua); when 'ok' the question, the answers the rater had
    given, whether this call set the study's update flag (the caller enqueues the update) and the
    item JSON documents of the items it shows, in display order."""

    status: str
    question: dict | None = None
    answers: int = 0
    scheduled: bool = False
    items: tuple[bytes, ...] = ()


def next_request(study_id: str, config: StudyConfig, n_items: int, rater: str, now: float, expires_at: float,
                 stop_flagged: bool, max_per_rater: int | None, budget: int | None,
                 catch: dict | None = None, max_outstanding: int | None = None,
                 ask_repeat: bool | None = None, guard: StudyGuard | None = None,
                 catch_every: int = 1, catch_draw: float = 0.0) -> NextRequest:
    """Keys and arguments to issue ``rater``'s next question (``catch``: this attention check instead,
    if it is the rater's turn for one: one in every ``catch_every`` questions, the place in each block
    drawn by ``catch_draw``, uniform in [0, 1); see lua/next_question.lua; the defaults give it now).
    ``max_outstanding``: questions the rater may hold unanswered (default: the study's setting);
    ``ask_repeat``: True to ask the rater's first queued validation repeat if it is due (None: the
    study asks none); ``guard``: run behind the study guard (next_guarded.lua)."""
    most = int(max_outstanding or config.limits.max_outstanding)
    more_keys = [*pool_keys(study_id, config), keys.outstanding(study_id, rater)]
    more_args = [*algorithm_args(config, n_items), most]
    if ask_repeat is not None:
        more_keys.append(keys.repeats(study_id, rater))
        more_args.append("1" if ask_repeat else "0")
    issue_named = issue_args(config, rater, now, expires_at)
    issue_named["issue_rater"] = issue_named.pop("rater")
    script = NEXT if guard is None else NEXT_GUARDED
    catch_arg = ("" if catch is None
                 else f"{max(1, int(catch_every))} {float(catch_draw)!r} {json.dumps(catch, sort_keys=True)}")
    script_keys, args = script.ordered(
        keys={"rater_stats": keys.rater_stats(study_id), "answers": keys.answers(study_id),
              "items": keys.items(study_id), "update_scheduled": keys.update_scheduled(study_id),
              **issue_keys(study_id), **(guard.keys(study_id) if guard is not None else {})},
        args={"rater": rater, "stop_flagged": "1" if stop_flagged else "0", "max_per_rater": int(max_per_rater or 0),
              "budget": int(budget or 0), "catch": catch_arg,
              "update_ttl": UPDATE_FLAG_TTL, **issue_named, **(guard.args() if guard is not None else {})},
        more_keys=more_keys, more_args=more_args)
    return NextRequest(script_keys, args, guarded=guard is not None)


#: The algorithm label of validation repeats: kept in the log, never given to an engine.
REPEAT_ALGORITHM = "repeat"


def repeat_question(question: dict, answered: int) -> dict:
    """A question the rater answered (first picking ``answered``), asked again with its items in another
    order (its kind's ``repeat_screen``: a triplet's candidates swapped, a grid's shuffled).

    Handed out like an attention check (never pooled, sealed in its token like every question, so
    the page cannot tell it apart); its question id starts with ``v`` so an unanswered repeat is not
    counted as a failed attention check."""
    screen = kind_of(question).repeat_screen(question, random.Random())
    return {"qid": "v" + new_question_id()[1:], **screen, "algorithm": REPEAT_ALGORITHM, "fallback": False,
            "catch": True, "repeat_of": int(answered)}


def queue_repeat(conn: Redis, study_id: str, rater: str, question: dict, most: int, due_after: int, ttl: int) -> bool:
    """Queue ``question`` (from ``repeat_question``) to be asked once the rater has given ``due_after``
    answers, unless they already have ``most`` repeats. One round trip; True if queued."""
    entry = f"{int(due_after)} {json.dumps(question, sort_keys=True)}"
    return bool(int(QUEUE_REPEAT(conn, keys={"repeats": keys.repeats(study_id, rater),
                                             "rater_stats": keys.rater_stats(study_id)},
                                 args={"rater": rater, "most": int(most), "entry": entry, "ttl": int(ttl)})))


def parse_next_reply(reply: list) -> NextQuestion:
    status = reply[0].decode()
    if status != "ok":
        return NextQuestion(status)
    return NextQuestion(status, json.loads(reply[1]), int(reply[2]), bool(int(reply[3])), tuple(reply[4:]))


def issue_next_question(conn: Redis, request: NextRequest) -> NextQuestion:
    """Run next.lua (one round trip): check the rater may go on, issue, read the items."""
    return parse_next_reply((NEXT_GUARDED if request.guarded else NEXT).run(conn, request.keys, request.args))


def pool_depths(conn: Redis, study_id: str, config: StudyConfig) -> dict[str, int]:
    with conn.pipeline(transaction=False) as pipe:
        for alg in config.algorithms:
            pipe.llen(keys.pool(study_id, alg.label))
        return {alg.label: int(n) for alg, n in zip(config.algorithms, pipe.execute(), strict=True)}


def expired_questions(conn: Redis, study_id: str, before: float) -> list[dict]:
    """Issued questions whose expiry is before ``before`` (not answered, or they would be gone)."""
    qids = conn.zrangebyscore(keys.issued(study_id), "-inf", repr(float(before)))
    if not qids:
        return []
    bodies = conn.hmget(keys.issued_questions(study_id), qids)
    found = []
    for qid, body in zip(qids, bodies, strict=True):
        found.append(json.loads(body) if body else {"qid": qid.decode()})
    return found


def release_questions(pipeline: Pipeline, study_id: str, qids: list[str]) -> None:
    if qids:
        pipeline.zrem(keys.issued(study_id), *qids)
        pipeline.hdel(keys.issued_questions(study_id), *qids)
