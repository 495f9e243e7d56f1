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

from workers.store import keys
from workers.store.config import AlgorithmConfig, StudyConfig
from workers.store.queue import UPDATE_FLAG_TTL

# issue(K, A, k, a): choose an algorithm by share, pop its next question (or take its fallback) and
# record it as issued. Keys from K[k + 1]: issued zset, issued-questions hash, counters hash, finished
# set, active-raters zset, pool-targets hash, then the pool of algorithm i at K[k + 6 + i] (i = 1..m).
# Arguments from A[a + 1]: expiry (unix s), now (unix s), rater id, uniform number in [0, 1), m, then
# per algorithm i three values: label, share, fallback question JSON.
# Returns {'ok', question JSON, questions left in its pool, that pool's target} | {'complete'}.
ISSUE_FUNCTION = """
local function issue(K, A, k, a)
  local m = tonumber(A[a + 5])
  local open, total = {}, 0
  for i = 1, m do
    local label = A[a + 6 + 3 * (i - 1)]
    if redis.call('SISMEMBER', K[k + 4], label) == 0 then
      total = total + tonumber(A[a + 7 + 3 * (i - 1)])
      open[#open + 1] = i
    end
  end
  if #open == 0 or total <= 0 then return {'complete'} end
  local x = tonumber(A[a + 4]) * total
  local pick = open[#open]
  for _, i in ipairs(open) do
    x = x - tonumber(A[a + 7 + 3 * (i - 1)])
    if x < 0 then pick = i break end
  end
  local label = A[a + 6 + 3 * (pick - 1)]
  local question = redis.call('LPOP', K[k + 6 + pick])
  if not question then
    question = A[a + 8 + 3 * (pick - 1)]
    redis.call('HINCRBY', K[k + 3], 'fallback_served', 1)
    redis.call('HINCRBY', K[k + 3], 'fallback_served:' .. label, 1)
  end
  local qid = cjson.decode(question)['qid']
  redis.call('ZADD', K[k + 1], A[a + 1], qid)
  redis.call('HSET', K[k + 2], qid, question)
  redis.call('HINCRBY', K[k + 3], 'questions_served', 1)
  redis.call('HINCRBY', K[k + 3], 'questions_served:' .. label, 1)
  redis.call('ZADD', K[k + 5], A[a + 2], A[a + 3])
  local target = redis.call('HGET', K[k + 6], label) or '0'
  return {'ok', question, redis.call('LLEN', K[k + 6 + pick]), target}
end
"""

# KEYS and ARGV as issue(KEYS, ARGV, 0, 0) above.
ISSUE_SCRIPT = ISSUE_FUNCTION + "return issue(KEYS, ARGV, 0, 0)\n"

# next_question(K, A, k, a): everything a rater's next question needs, in one step: check that the
# rater may go on, issue the question (or record a given attention check), flag a pool refill when
# the pool is below half its target, and read the question's items.
# Keys from K[k + 1]: rater-stats hash, answers stream, items list, update-scheduled flag, then the
# keys of issue() (K[k + 5] ...). Arguments from A[a + 1]: rater id, '1' if flagged raters are
# stopped, max answers of a rater (0 = none), study answer budget (0 = none), an attention-check
# question JSON to hand out instead of a pooled one ('' = none), update-flag TTL (s), then the
# arguments of issue() (A[a + 7] ...; its rater id is this rater). After issue()'s keys comes the
# rater's outstanding-questions zset, after issue()'s arguments the most questions a rater may hold
# unanswered: asking for one more drops the oldest (its answer will be refused); a dropped or
# expired attention check counts as a failed one. Optionally then the rater's validation-repeats list
# (key) and '1' to ask its first entry if it is due (argument): handed out like an attention check.
# Returns {'ok', question JSON, answers the rater has given, 1 if this call set the update flag,
# item JSON per item the question shows} | {'rater_stopped'} | {'rater_done'} | {'budget_reached'}
# | {'study_complete'}. The last three also mark the rater completed, as the finish page expects.
NEXT_FUNCTION = """
local function next_question(K, A, k, a)
  local rater = A[a + 1]
  local stats = redis.call('HMGET', K[k + 1], rater .. ':answers', rater .. ':flagged')
  local answers = tonumber(stats[1] or '0')
  if A[a + 2] == '1' and tonumber(stats[2] or '0') ~= 0 then return {'rater_stopped'} end
  local limit, budget = tonumber(A[a + 3]), tonumber(A[a + 4])
  local done = nil
  if limit > 0 and answers >= limit then
    done = 'rater_done'
  elseif budget > 0 and redis.call('XLEN', K[k + 2]) >= budget then
    done = 'budget_reached'
  end
  local question, scheduled = A[a + 5], 0
  local is_catch = question ~= ''
  if not done then
    local m = tonumber(A[a + 6 + 5])
    local held_key, most = K[k + 4 + 6 + m + 1], tonumber(A[a + 6 + 5 + 3 * m + 1])
    local now, expiry = tonumber(A[a + 6 + 2]), tonumber(A[a + 6 + 1])
    local held = redis.call('ZRANGE', held_key, 0, -1, 'WITHSCORES')
    local count, abandoned = #held / 2, 0
    for i = 1, #held, 2 do
      if tonumber(held[i + 1]) <= now or count >= most then
        redis.call('ZREM', held_key, held[i])
        count = count - 1
        -- a validation repeat ('c:v...') left unanswered is no failed attention check
        if string.sub(held[i], 1, 2) == 'c:' and string.sub(held[i], 3, 3) ~= 'v' then abandoned = abandoned + 1 end
      end
    end
    if abandoned > 0 then
      redis.call('HINCRBY', K[k + 1], rater .. ':catch', abandoned)
      redis.call('HINCRBY', K[k + 1], rater .. ':catch_failed', abandoned)
    end
    local repeats_key = K[k + 4 + 6 + m + 2]
    if not is_catch and repeats_key and A[a + 6 + 5 + 3 * m + 2] == '1' then
      local due = redis.call('LINDEX', repeats_key, 0)
      local gap = due and string.find(due, ' ', 1, true)
      if gap and tonumber(string.sub(due, 1, gap - 1)) <= answers then
        redis.call('LPOP', repeats_key)
        question, is_catch = string.sub(due, gap + 1), true
      end
    end
    if is_catch then
      redis.call('ZADD', K[k + 4 + 5], A[a + 6 + 2], rater)
    else
      local issued = issue(K, A, k + 4, a + 6)
      if issued[1] == 'complete' then
        done = 'study_complete'
      else
        question = issued[2]
        local target = tonumber(issued[4])
        if 2 * issued[3] < math.max(1, target) then
          if redis.call('SET', K[k + 4], '1', 'NX', 'EX', A[a + 6]) then scheduled = 1 end
        end
      end
    end
  end
  if done then
    redis.call('HSET', K[k + 1], rater .. ':completed', 1)
    return {done}
  end
  local doc = cjson.decode(question)
  local m = tonumber(A[a + 6 + 5])
  local held_key = K[k + 4 + 6 + m + 1]
  local member = doc['qid']
  if is_catch then member = 'c:' .. member end
  redis.call('ZADD', held_key, A[a + 6 + 1], member)
  redis.call('EXPIRE', held_key, math.ceil(tonumber(A[a + 6 + 1]) - tonumber(A[a + 6 + 2])) + 60)
  local shown = doc['items']
  if doc['kind'] ~= 'rating' then
    shown = {doc['head']}
    for _, c in ipairs(doc['candidates']) do shown[#shown + 1] = c end
  end
  local reply = {'ok', question, answers, scheduled}
  for _, index in ipairs(shown) do
    reply[#reply + 1] = redis.call('LINDEX', K[k + 3], index) or ''
  end
  return reply
end
"""

# KEYS and ARGV as next_question(KEYS, ARGV, 0, 0) above.
NEXT_SCRIPT = ISSUE_FUNCTION + NEXT_FUNCTION + "return next_question(KEYS, ARGV, 0, 0)\n"

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
    (as its Random baseline would); for triplet algorithms a uniformly random triplet; for
    rating algorithms (SimForest) a random pair, whose rating the forest keeps for later splits.
    """
    i, j, k = random.sample(range(n_items), 3)
    if algorithm.question_kind == "rating":
        return rating_question(i, j, algorithm.label, fallback=True)
    if algorithm.learns_graph:
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


def issue_keys(study_id: str, config: StudyConfig) -> list[str]:
    """The keys of the Lua function ``issue``, in its order."""
    return [keys.issued(study_id), keys.issued_questions(study_id), keys.counters(study_id), keys.finished(study_id),
            keys.active_raters(study_id), keys.pool_targets(study_id),
            *[keys.pool(study_id, a.label) for a in config.algorithms]]


def issue_args(config: StudyConfig, n_items: int, rater: str, now: float, expires_at: float) -> list:
    """The arguments of the Lua function ``issue``: times, rater, a uniform draw, then per algorithm
    its label, share and a fallback question."""
    args = [repr(float(expires_at)), repr(float(now)), rater, repr(random.random()), len(config.algorithms)]
    for alg in config.algorithms:
        args.extend([alg.label, repr(float(alg.share)), json.dumps(fallback_question(alg, n_items), sort_keys=True)])
    return args


def issue_question(conn, study_id: str, config: StudyConfig, n_items: int, rater: str, now: float,
                   expires_at: float) -> tuple[dict, int, int]:
    """Choose an algorithm by share, pop its next pooled question (or a fallback) and record it
    as issued until ``expires_at``. Returns (question, questions left in that pool, the pool's target).

    Raises StudyComplete when every algorithm has finished.
    """
    script = conn.register_script(ISSUE_SCRIPT)
    reply = script(keys=issue_keys(study_id, config), args=issue_args(config, n_items, rater, now, expires_at))
    if reply[0] == b"complete":
        raise StudyComplete(study_id)
    return json.loads(reply[1]), int(reply[2]), int(reply[3])


@dataclass(frozen=True)
class NextRequest:
    """The keys and arguments of the Lua function ``next_question`` for one rater (see NEXT_FUNCTION)."""

    keys: list[str]
    args: list


@dataclass(frozen=True)
class NextQuestion:
    """What ``next_question`` gave: ``status`` 'ok' or why the rater gets no question ('rater_stopped',
    'rater_done', 'budget_reached', 'study_complete'); when 'ok' the question, the answers the rater had
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
                 ask_repeat: bool | None = None) -> NextRequest:
    """Keys and arguments to issue ``rater``'s next question (``catch``: this attention check instead).
    ``max_outstanding``: questions the rater may hold unanswered (default: the study's setting);
    ``ask_repeat``: True to ask the rater's first queued validation repeat if it is due (None: the
    study asks none)."""
    most = int(max_outstanding or config.limits.max_outstanding)
    script_keys = [keys.rater_stats(study_id), keys.answers(study_id), keys.items(study_id),
                   keys.update_scheduled(study_id), *issue_keys(study_id, config), keys.outstanding(study_id, rater)]
    args = [rater, "1" if stop_flagged else "0", int(max_per_rater or 0), int(budget or 0),
            json.dumps(catch, sort_keys=True) if catch is not None else "", UPDATE_FLAG_TTL,
            *issue_args(config, n_items, rater, now, expires_at), most]
    if ask_repeat is not None:
        script_keys.append(keys.repeats(study_id, rater))
        args.append("1" if ask_repeat else "0")
    return NextRequest(script_keys, args)


# KEYS[1] the rater's validation-repeats list, KEYS[2] rater-stats hash; ARGV[1] rater id, ARGV[2] the
# most repeats a rater gets, ARGV[3] the entry ("<answers> <question JSON>"), ARGV[4] the list's TTL (s).
# Queues the entry unless the rater already has their share; returns 1 if queued, else 0.
QUEUE_REPEAT_SCRIPT = """
local queued = tonumber(redis.call('HGET', KEYS[2], ARGV[1] .. ':repeat_sources') or '0')
if queued >= tonumber(ARGV[2]) then return 0 end
redis.call('HINCRBY', KEYS[2], ARGV[1] .. ':repeat_sources', 1)
redis.call('RPUSH', KEYS[1], ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[4])
return 1
"""
#: The algorithm label of validation repeats: kept in the log, never given to an engine.
REPEAT_ALGORITHM = "repeat"


def repeat_question(head: int, a: int, b: int, answered: int) -> dict:
    """A triplet the rater answered (choosing ``answered``), asked again with its candidates swapped.

    Handed out like an attention check (never pooled, sealed in its token like every question, so
    the page cannot tell it apart); its question id starts with ``v`` so an unanswered repeat is not
    counted as a failed attention check."""
    return {"qid": "v" + new_question_id()[1:], "kind": "triplet", "head": int(head), "candidates": [int(b), int(a)],
            "algorithm": REPEAT_ALGORITHM, "fallback": False, "catch": True, "repeat_of": int(answered)}


def queue_repeat(conn, study_id: str, rater: str, question: dict, most: int, due_after: int, ttl: int) -> bool:
    """Queue ``question`` (from ``repeat_question``) to be asked once the rater has given ``due_after``
    answers, unless they already have ``most`` repeats. One round trip; True if queued."""
    entry = f"{int(due_after)} {json.dumps(question, sort_keys=True)}"
    script = conn.register_script(QUEUE_REPEAT_SCRIPT)
    return bool(int(script(keys=[keys.repeats(study_id, rater), keys.rater_stats(study_id)],
                           args=[rater, int(most), entry, int(ttl)])))


def parse_next_reply(reply: list) -> NextQuestion:
    status = reply[0].decode()
    if status != "ok":
        return NextQuestion(status)
    return NextQuestion(status, json.loads(reply[1]), int(reply[2]), bool(int(reply[3])), tuple(reply[4:]))


def issue_next_question(conn, request: NextRequest) -> NextQuestion:
    """Run ``next_question`` (one round trip): check the rater may go on, issue, read the items."""
    return parse_next_reply(conn.register_script(NEXT_SCRIPT)(keys=request.keys, args=request.args))


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
