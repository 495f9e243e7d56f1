-- self_agreement(rater_stats, rater, needed, least): judge a rater's self-agreement once, when they have
-- answered the validation repeats it takes to judge: below the study's share answered as the first time
-- flags the rater. Deciding once at a fixed count keeps the error rates those of one binomial test
-- (re-checking after every repeat would flag more honest raters); flags only ever go on. A shared function
-- (judge_self_agreement.lua runs it alone, accept.lua after a repeat's answer).
-- rater_stats: the rater-stats hash; rater: the rater id; needed: the repeats answered at which to judge
-- ('' = never: Attention.repeats_to_judge); least: the least self-agreement share (min_self_agreement).
-- Returns 1 if this call flagged the rater, else 0.
local function self_agreement(rater_stats, rater, needed, least)
  needed = tonumber(needed)
  if not needed then return 0 end
  local st = redis.call('HMGET', rater_stats, rater .. ':repeats', rater .. ':repeat_agreed')
  local repeats, agreed = tonumber(st[1] or '0'), tonumber(st[2] or '0')
  if repeats < needed then return 0 end
  if redis.call('HSETNX', rater_stats, rater .. ':repeats_judged', st[1]) == 0 then return 0 end  -- decided before
  if agreed / repeats < tonumber(least) then
    redis.call('HSET', rater_stats, rater .. ':flagged', 1)
    return 1
  end
  return 0
end
