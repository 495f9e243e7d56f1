"""The question pools: workers push planned questions, web processes pop and issue them.

Each algorithm of a study has its own pool, so raters are shared between algorithms by
their configured shares however deep each pool is. Choosing the algorithm, popping a
question (or drawing a fallback when the pool is empty) and marking it issued is one Lua
script, so a web process that dies in between cannot leave a question neither pooled nor
issued. Must never import Flask or the engine (fallbacks use the standard library only).
"""
from __future__ import annotations

import json
import random
import secrets

from . import keys
from .config import AlgorithmConfig, StudyConfig

# KEYS[1] issued zset, KEYS[2] issued-questions hash, KEYS[3] counters hash, KEYS[4] finished set,
# KEYS[5] active-raters zset, KEYS[6] pool-targets hash, KEYS[6 + i] pool of algorithm i (i = 1..m)
# ARGV[1] expiry (unix s), ARGV[2] now (unix s), ARGV[3] rater id, ARGV[4] uniform number in [0, 1),
# ARGV[5] m, then per algorithm i three values: label, share, fallback question JSON.
# Returns {'ok', question JSON, questions left in its pool, that pool's target} | {'complete'}.
ISSUE_SCRIPT = """
local m = tonumber(ARGV[5])
local open, total = {}, 0
for i = 1, m do
  local label = ARGV[6 + 3 * (i - 1)]
  if redis.call('SISMEMBER', KEYS[4], label) == 0 then
    total = total + tonumber(ARGV[7 + 3 * (i - 1)])
    open[#open + 1] = i
  end
end
if #open == 0 or total <= 0 then return {'complete'} end
local x = tonumber(ARGV[4]) * total
local pick = open[#open]
for _, i in ipairs(open) do
  x = x - tonumber(ARGV[7 + 3 * (i - 1)])
  if x < 0 then pick = i break end
end
local label = ARGV[6 + 3 * (pick - 1)]
local question = redis.call('LPOP', KEYS[6 + pick])
if not question then
  question = ARGV[8 + 3 * (pick - 1)]
  redis.call('HINCRBY', KEYS[3], 'fallback_served', 1)
  redis.call('HINCRBY', KEYS[3], 'fallback_served:' .. label, 1)
end
local qid = cjson.decode(question)['qid']
redis.call('ZADD', KEYS[1], ARGV[1], qid)
redis.call('HSET', KEYS[2], qid, question)
redis.call('HINCRBY', KEYS[3], 'questions_served', 1)
redis.call('HINCRBY', KEYS[3], 'questions_served:' .. label, 1)
redis.call('ZADD', KEYS[5], ARGV[2], ARGV[3])
local target = redis.call('HGET', KEYS[6], label) or '0'
return {'ok', question, redis.call('LLEN', KEYS[6 + pick]), target}
"""

# KEYS[1] a pool; ARGV question JSON documents to take out of it.
# Returns, per document, 1 if it was still pooled and is now removed, else 0 (already issued).
PRUNE_SCRIPT = """
local removed = {}
for i = 1, #ARGV do removed[i] = redis.call('LREM', KEYS[1], 1, ARGV[i]) end
return removed
"""


class StudyComplete(Exception):
    """Every algorithm of the study has finished: there is nothing useful left to ask."""


def new_question_id() -> str:
    return secrets.token_hex(8)


def triplet_question(head: int, a: int, b: int, algorithm: str, fallback: bool = False,
                     probe: int | None = None) -> dict:
    """"Is ``head`` more similar to ``a`` or to ``b``?". ``probe`` marks a triplet-derived distance
    question: the answer is a sample of d(head, probe), 1 if the other candidate wins."""
    question = {"qid": new_question_id(), "kind": "triplet", "head": int(head), "candidates": [int(a), int(b)],
                "algorithm": algorithm, "fallback": bool(fallback)}
    if probe is not None:
        question["probe"] = int(probe)
    return question


def derived_triplet_question(i: int, j: int, k: int, algorithm: str, fallback: bool = False) -> dict:
    """The triplet-derived question for the pair (i, j) with third item k, candidates in random order."""
    a, b = (j, k) if random.random() < 0.5 else (k, j)
    return triplet_question(i, a, b, algorithm, fallback=fallback, probe=j)


def rating_question(i: int, j: int, algorithm: str, fallback: bool = False) -> dict:
    """"How similar are ``i`` and ``j``?" on the study's rating scale."""
    return {"qid": new_question_id(), "kind": "rating", "items": [int(i), int(j)], "algorithm": algorithm,
            "fallback": bool(fallback)}


def question_items(question: dict) -> list[int]:
    """Every item a question shows, in display order."""
    if question["kind"] == "rating":
        return list(question["items"])
    return [question["head"], *question["candidates"]]


def fallback_question(algorithm: AlgorithmConfig, n_items: int) -> dict:
    """A uniformly random question of the algorithm's kind, served when its pool is empty.

    For distance algorithms it is a uniformly random pair, a sample the engine still uses
    (as its Random baseline would); for triplet algorithms a uniformly random triplet.
    """
    i, j, k = random.sample(range(n_items), 3)
    if algorithm.learns_graph:
        if algorithm.question_kind == "rating":
            return rating_question(i, j, algorithm.label, fallback=True)
        return derived_triplet_question(i, j, k, algorithm.label, fallback=True)
    return triplet_question(i, j, k, algorithm.label, fallback=True)


def push_questions(conn, study_id: str, algorithm: str, questions: list[dict], pipeline=None) -> None:
    if not questions:
        return
    target = pipeline if pipeline is not None else conn
    target.rpush(keys.pool(study_id, algorithm), *[json.dumps(q, sort_keys=True) for q in questions])


def pooled_questions(conn, study_id: str, algorithm: str) -> list[dict]:
    return [json.loads(raw) for raw in conn.lrange(keys.pool(study_id, algorithm), 0, -1)]


def prune_questions(conn, study_id: str, algorithm: str, questions: list[dict]) -> list[dict]:
    """Take ``questions`` out of the pool; returns those that were still there (not yet issued)."""
    if not questions:
        return []
    docs = [json.dumps(q, sort_keys=True) for q in questions]
    removed = conn.register_script(PRUNE_SCRIPT)(keys=[keys.pool(study_id, algorithm)], args=docs)
    return [q for q, hit in zip(questions, removed, strict=True) if int(hit)]


def issue_question(conn, study_id: str, config: StudyConfig, n_items: int, rater: str, now: float,
                   expires_at: float) -> tuple[dict, int, int]:
    """Choose an algorithm by share, pop its next pooled question (or a fallback) and record it
    as issued until ``expires_at``. Returns (question, questions left in that pool, the pool's target).

    Raises StudyComplete when every algorithm has finished.
    """
    algorithms = config.algorithms
    pool_keys = [keys.pool(study_id, a.label) for a in algorithms]
    args = [repr(float(expires_at)), repr(float(now)), rater, repr(random.random()), len(algorithms)]
    for alg in algorithms:
        args.extend([alg.label, repr(float(alg.share)), json.dumps(fallback_question(alg, n_items), sort_keys=True)])
    script = conn.register_script(ISSUE_SCRIPT)
    reply = script(keys=[keys.issued(study_id), keys.issued_questions(study_id), keys.counters(study_id),
                         keys.finished(study_id), keys.active_raters(study_id), keys.pool_targets(study_id),
                         *pool_keys], args=args)
    if reply[0] == b"complete":
        raise StudyComplete(study_id)
    return json.loads(reply[1]), int(reply[2]), int(reply[3])


def pool_depths(conn, study_id: str, config: StudyConfig) -> dict[str, int]:
    with conn.pipeline(transaction=False) as pipe:
        for alg in config.algorithms:
            pipe.llen(keys.pool(study_id, alg.label))
        return {alg.label: int(n) for alg, n in zip(config.algorithms, pipe.execute(), strict=True)}


def expired_questions(conn, study_id: str, before: float) -> list[dict]:
    """Issued questions whose expiry is before ``before`` (not answered, or they would be gone)."""
    qids = conn.zrangebyscore(keys.issued(study_id), "-inf", repr(float(before)))
    if not qids:
        return []
    bodies = conn.hmget(keys.issued_questions(study_id), qids)
    found = []
    for qid, body in zip(qids, bodies, strict=True):
        found.append(json.loads(body) if body else {"qid": qid.decode()})
    return found


def release_questions(pipeline, study_id: str, qids: list[str]) -> None:
    if qids:
        pipeline.zrem(keys.issued(study_id), *qids)
        pipeline.hdel(keys.issued_questions(study_id), *qids)
