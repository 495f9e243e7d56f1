-- Accept one answer exactly once (answers.accept_and_issue): refuse a used or reclaimed question,
-- append the answer to the log, mark the token used, count it and flag an update — all or nothing;
-- then, if asked, issue the rater's next question in the same step (next_question.lua); last, the
-- checks of the rater this answer calls for: exclusion by the catch rule, the self-agreement judgement.
-- KEYS: used_token issued issued_questions answers raters per_minute update_scheduled counters rater_stats outstanding excluded_raters study rater_sessions forgotten_raters ...
-- ARGV: question_id used_ttl rater minute update_ttl algorithm unpooled max_per_rater budget stats fields min_checks failure_limits stop_flagged min_response_ms issued_at now require_held issue_next exclude_flagged repeats_to_judge min_self_agreement complete_refused complete_at fingerprint holder_rater holder_nonce rater_digest ...
--   used_token: the used-token marker (string: the answer id); issued, issued_questions: the study's
--   issued zset and hash; answers: the log (stream); raters: set; per_minute, counters, rater_stats:
--   hashes; update_scheduled: the update flag; outstanding: the questions the rater holds (zset);
--   excluded_raters: the raters the update pass leaves out (set).
--   unpooled: '1' if the question was never pooled (a catch trial: no issued entry to claim);
--   max_per_rater, budget: the rater's and the study's most answers (0 = none); stats: rater-stats
--   counters to increment besides 'answers', comma-separated (may be empty); fields: the stream
--   entry's field/value strings as one JSON array (one argument: cheaper to send); min_checks: catch
--   trials before a rater can be flagged ('' = leave the flag alone) and failure_limits 'SHARE MISSES':
--   a rater is flagged who failed more than SHARE of them and more than MISSES (config.catch_failing);
--   stop_flagged: '1' if flagged raters are stopped (their answers are refused); min_response_ms:
--   0 = none; issued_at, now: unix s; require_held: '1' if the question must be one the rater holds
--   (the live path: one dropped for a newer one, or expired, is refused); issue_next: '1' to issue the
--   rater's next question: the keys and arguments of next_question.lua follow (KEYS[15..], ARGV[29..]).
--   exclude_flagged: '1' if a rater the catch rule flags is excluded (flag_action 'exclude'): after an
--   answer that failed a catch trial, a rater the rule flags (counted once the next question was issued:
--   a catch trial it dropped counts as failed) is added to excluded_raters. repeats_to_judge,
--   min_self_agreement: self_agreement.lua's, judged after an answer to a validation repeat ('repeats'
--   among stats). complete_refused: '1' to mark the rater completed when the answer is refused at their
--   or the study's limit (the one write of a refusal: the finish page shows their code); complete_at:
--   mark the rater completed once this answer makes their answers this many (0 = never; a late answer,
--   taken after the study was paused or closed, completes a rater so).
--   study, rater_sessions, forgotten_raters, fingerprint, holder_rater, holder_nonce, rater_digest:
--   study_guard.lua's: a web process's stale copy of the study refuses the answer before anything is
--   written ({'stale'}), and so does a forgotten rater ({'forgotten'}); a rater id another browser
--   session holds stores the answer but issues no next question and completes no one (the reply says
--   'replaced').
-- Too fast is measured here, from the later of the question's issue and the rater's previous answer,
-- so holding several questions and answering them in a burst is caught.
-- Returns {'ok', answer id, 1 if this call scheduled the update else 0, 'replaced' or '', 1 if complete_at
-- completed the rater else 0, then the next question's reply when one was asked for and issued}
-- | {'used', answer id} | {'expired'} | {'rater_limit'} | {'budget'} | {'rater_stopped'} | {'stale'}
-- | {'forgotten'}
--#include study_guard.lua
--#include self_agreement.lua
--#include issue.lua
--#include next_question.lua
local used_token, issued, issued_questions, answers, raters, per_minute, update_scheduled, counters, rater_stats,
      outstanding, excluded_raters = unpack(KEYS, 1, 11)
local question_id, used_ttl, rater, minute, update_ttl, algorithm, unpooled, max_per_rater, budget, stats, fields,
      min_checks, failure_limits, stop_flagged, min_response_ms, issued_at, now, require_held,
      issue_next, exclude_flagged, repeats_to_judge, min_self_agreement, complete_refused,
      complete_at = unpack(ARGV, 1, 24)

-- the catch rule (config.catch_failing): more than SHARE of at least min_checks catch trials failed, and
-- more than MISSES
local function catch_failing()
  local c = redis.call('HMGET', rater_stats, rater .. ':catch', rater .. ':catch_failed')
  local checks, failed = tonumber(c[1] or '0'), tonumber(c[2] or '0')
  local gap = string.find(failure_limits, ' ', 1, true)
  local share, misses = tonumber(string.sub(failure_limits, 1, gap - 1)), tonumber(string.sub(failure_limits, gap + 1))
  return checks >= tonumber(min_checks) and failed > share * checks and failed > misses
end

local function counted(stat)
  return string.find(',' .. stats .. ',', ',' .. stat .. ',', 1, true) ~= nil
end

-- a refusal at the rater's or the study's limit: the rater's work is done
local function at_limit(code)
  if complete_refused == '1' then redis.call('HSET', rater_stats, rater .. ':completed', 1) end
  return {code}
end

local guard = study_guard(KEYS, ARGV, 11, 24)
if guard == 'stale' or guard == 'forgotten' then return {guard} end
local prior = redis.call('GET', used_token)
if prior then return {'used', prior} end
local st = redis.call('HMGET', rater_stats, rater .. ':answers', rater .. ':flagged', rater .. ':last_answer_at')
local given = tonumber(st[1] or '0')
if stop_flagged == '1' and tonumber(st[2] or '0') ~= 0 then return {'rater_stopped'} end
if tonumber(max_per_rater) > 0 and given >= tonumber(max_per_rater) then return at_limit('rater_limit') end
if tonumber(budget) > 0 and redis.call('XLEN', answers) >= tonumber(budget) then return at_limit('budget') end
local member = question_id
if unpooled == '1' then member = 'c:' .. member end
if redis.call('ZREM', outstanding, member) == 0 and require_held == '1' then return {'expired'} end
if unpooled ~= '1' then
  if redis.call('ZREM', issued, question_id) == 0 then return {'expired'} end
  redis.call('HDEL', issued_questions, question_id)
end
local entry = cjson.decode(fields)
local since = math.max(tonumber(issued_at), tonumber(st[3] or '0'))
if tonumber(min_response_ms) > 0 and (tonumber(now) - since) * 1000 < tonumber(min_response_ms) then
  for i = 1, #entry, 2 do
    if entry[i] == 'flags' and not string.find(',' .. entry[i + 1] .. ',', ',too_fast,', 1, true) then
      if entry[i + 1] == '' then entry[i + 1] = 'too_fast' else entry[i + 1] = entry[i + 1] .. ',too_fast' end
      stats = stats .. ',too_fast'
    end
  end
end
local id = redis.call('XADD', answers, '*', unpack(entry))
redis.call('SET', used_token, id, 'EX', used_ttl)
redis.call('SADD', raters, rater)
redis.call('HINCRBY', per_minute, minute, 1)
redis.call('HINCRBY', counters, 'answers:' .. algorithm, 1)
redis.call('HINCRBY', rater_stats, rater .. ':answers', 1)
redis.call('HSET', rater_stats, rater .. ':last_answer_at', now)
for stat in string.gmatch(stats, '[^,]+') do redis.call('HINCRBY', rater_stats, rater .. ':' .. stat, 1) end
if min_checks ~= '' and catch_failing() then redis.call('HSET', rater_stats, rater .. ':flagged', 1) end
local reply = {'ok', id, 0, guard or '', 0}
if redis.call('SET', update_scheduled, '1', 'NX', 'EX', update_ttl) then reply[3] = 1 end
if not guard and tonumber(complete_at) > 0 and given + 1 >= tonumber(complete_at) then
  redis.call('HSET', rater_stats, rater .. ':completed', 1)
  reply[5] = 1
end
if issue_next == '1' and not guard then
  for _, v in ipairs(next_question(KEYS, ARGV, 14, 28)) do reply[#reply + 1] = v end
end
-- after the next question: these checks see the catch trials it counted as failed (dropped unanswered), and
-- never withhold the question just issued (only the catch rule's flag above does)
if exclude_flagged == '1' and min_checks ~= '' and counted('catch_failed') and catch_failing() then
  redis.call('SADD', excluded_raters, rater)
end
if counted('repeats') then self_agreement(rater_stats, rater, repeats_to_judge, min_self_agreement) end
return reply
