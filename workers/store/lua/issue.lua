-- issue(K, A, k, a): choose an algorithm by share, pop its next question (or take its fallback) and
-- record it as issued. A shared function (included by next_question.lua), reading its keys and
-- arguments from offsets k and a so that a script can pass its own first.
-- Keys from K[k + 1]: issued zset, issued-questions hash, counters hash, finished set, active-raters
-- zset, pool-targets hash, then the pool of algorithm i at K[k + 6 + i] (i = 1..m).
-- Arguments from A[a + 1]: expiry (unix s), now (unix s), rater id, uniform number in [0, 1), m, then
-- per algorithm i three values: label, share, fallback question JSON.
-- A share the update pass stored in the pool-targets hash as field 'share:<label>' (a study whose learner
-- sets the split, workers/jobs/learned_split.py) is used in place of the configured one.
-- Returns {'ok', question JSON, questions left in its pool, that pool's target} | {'complete'}.
-- Counter fields (keys.counter_field): questions_served, fallback_served and both per label.
local function issue(K, A, k, a)
  local m = tonumber(A[a + 5])
  local fields = {}
  for i = 1, m do fields[i] = 'share:' .. A[a + 6 + 3 * (i - 1)] end
  local stored = redis.call('HMGET', K[k + 6], unpack(fields))
  local open, total, share = {}, 0, {}
  for i = 1, m do
    local label = A[a + 6 + 3 * (i - 1)]
    if redis.call('SISMEMBER', K[k + 4], label) == 0 then
      share[i] = tonumber(stored[i] or A[a + 7 + 3 * (i - 1)])
      total = total + share[i]
      open[#open + 1] = i
    end
  end
  if #open == 0 or total <= 0 then return {'complete'} end
  local x = tonumber(A[a + 4]) * total
  local pick = open[#open]
  for _, i in ipairs(open) do
    x = x - share[i]
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
