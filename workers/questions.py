"""The question pool: workers push planned questions, web processes pop and issue them.

Popping and marking a question as issued (with its expiry) is one Lua script, so a web
process that dies in between cannot leave a question neither pooled nor issued. Must
never import Flask or the engine (fallback questions use the standard library only).
"""
from __future__ import annotations

import json
import random
import secrets

from . import keys

# KEYS[1] pool list, KEYS[2] issued zset, KEYS[3] issued-questions hash, KEYS[4] counters hash
# ARGV[1] expiry (unix seconds), ARGV[2] fallback question JSON used when the pool is empty
# Returns {question JSON, questions left in the pool}.
ISSUE_SCRIPT = """
local question = redis.call('LPOP', KEYS[1])
if not question then
  question = ARGV[2]
  redis.call('HINCRBY', KEYS[4], 'fallback_served', 1)
end
local qid = cjson.decode(question)['qid']
redis.call('ZADD', KEYS[2], ARGV[1], qid)
redis.call('HSET', KEYS[3], qid, question)
redis.call('HINCRBY', KEYS[4], 'questions_served', 1)
return {question, redis.call('LLEN', KEYS[1])}
"""


def new_question_id() -> str:
    return secrets.token_hex(8)


def triplet_question(head: int, a: int, b: int, algorithm: str, fallback: bool = False) -> dict:
    return {"qid": new_question_id(), "kind": "triplet", "head": int(head), "candidates": [int(a), int(b)],
            "algorithm": algorithm, "fallback": bool(fallback)}


def fallback_triplet(n_items: int) -> dict:
    """A uniformly random triplet, served when workers have not kept the pool full."""
    head, a, b = random.sample(range(n_items), 3)
    return triplet_question(head, a, b, algorithm="fallback", fallback=True)


def push_questions(conn, study_id: str, questions: list[dict], pipeline=None) -> None:
    if not questions:
        return
    target = pipeline if pipeline is not None else conn
    target.rpush(keys.pool(study_id), *[json.dumps(q, sort_keys=True) for q in questions])


def issue_question(conn, study_id: str, n_items: int, expires_at: float) -> tuple[dict, int]:
    """Pop the next pooled question (or a fallback) and record it as issued until ``expires_at``.

    Returns the question and how many questions are left in the pool.
    """
    script = conn.register_script(ISSUE_SCRIPT)
    fallback = json.dumps(fallback_triplet(n_items), sort_keys=True)
    raw, left = script(keys=[keys.pool(study_id), keys.issued(study_id), keys.issued_questions(study_id),
                             keys.counters(study_id)], args=[repr(float(expires_at)), fallback])
    return json.loads(raw), int(left)


def pool_depth(conn, study_id: str) -> int:
    return int(conn.llen(keys.pool(study_id)))


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
