-- next_question(K, A, k, a): everything a rater's next question needs, in one step: check that the
-- rater may go on, issue the question (or record a given attention check), flag a pool refill when
-- the pool is below half its target, and read the question's items. A shared function (next.lua
-- runs it alone, accept.lua after storing an answer); it needs issue.lua included before it.
-- Keys from K[k + 1]: rater-stats hash, answers stream, items list, update-scheduled flag, then the
-- keys of issue() (K[k + 5] ...). Arguments from A[a + 1]: rater id, '1' if flagged raters are
-- stopped, max answers of a rater (0 = none), study answer budget (0 = none), an attention check
-- ('' = none) as 'EVERY DRAW JSON': the rater gets one in each block of EVERY questions, at a uniformly
-- random place (DRAW, uniform in [0, 1), picks it: at the j-th place of a block without one yet,
-- with probability 1 / (EVERY - j); EVERY 1: every request), instead of a pooled question, update-flag TTL (s), then the
-- arguments of issue() (A[a + 7] ...; its rater id is this rater). After issue()'s keys comes the
-- rater's outstanding-questions zset, after issue()'s arguments the most questions a rater may hold
-- unanswered: asking for one more drops the oldest (its answer will be refused); a dropped or
-- expired attention check counts as a failed one. Optionally then the rater's validation-repeats list
-- (key) and '1' to ask its first entry if it is due (argument): handed out like an attention check.
-- Returns {'ok', question JSON, answers the rater has given, 1 if this call set the update flag,
-- item JSON per item the question shows} | {'rater_stopped'} | {'rater_done'} | {'budget_reached'}
-- | {'study_complete'}. The last three also mark the rater completed, as the finish page expects.
-- Rater-stats fields (keys.rater_field): '<rater>:answers', ':flagged', ':catch', ':catch_failed',
-- ':completed', ':catch_block' (the last block given its attention check).
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
  local is_catch = false
  if question ~= '' and not done then
    local s1 = string.find(question, ' ', 1, true)
    local s2 = string.find(question, ' ', s1 + 1, true)
    local every, draw = tonumber(string.sub(question, 1, s1 - 1)), tonumber(string.sub(question, s1 + 1, s2 - 1))
    local block = math.floor(answers / every)
    local given = tonumber(redis.call('HGET', K[k + 1], rater .. ':catch_block') or '-1')
    if every <= 1 or (given < block and draw * (every - answers % every) < 1) then
      question, is_catch = string.sub(question, s2 + 1), true
      redis.call('HSET', K[k + 1], rater .. ':catch_block', block)
    end
  end
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
  -- every item the screen shows, in display order (engine/kinds.py: a headed screen is its head, then
  -- its candidates; any other lists its items)
  local shown = doc['items']
  if doc['head'] ~= nil then
    shown = {doc['head']}
    for _, c in ipairs(doc['candidates']) do shown[#shown + 1] = c end
  end
  local reply = {'ok', question, answers, scheduled}
  for _, index in ipairs(shown) do
    reply[#reply + 1] = redis.call('LINDEX', K[k + 3], index) or ''
  end
  return reply
end
