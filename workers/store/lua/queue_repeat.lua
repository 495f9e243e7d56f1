-- Queue a validation repeat for a rater unless they already have their share (questions.queue_repeat).
-- KEYS: repeats rater_stats
-- ARGV: rater most entry ttl
--   repeats: the rater's validation-repeats list; most: the most repeats a rater gets; entry:
--   "<answers> <question JSON>"; ttl: the list's TTL (s). Counts '<rater>:repeat_sources' in rater_stats.
-- Returns 1 if queued, else 0.
local repeats, rater_stats = KEYS[1], KEYS[2]
local rater, most, entry, ttl = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local queued = tonumber(redis.call('HGET', rater_stats, rater .. ':repeat_sources') or '0')
if queued >= tonumber(most) then return 0 end
redis.call('HINCRBY', rater_stats, rater .. ':repeat_sources', 1)
redis.call('RPUSH', repeats, entry)
redis.call('EXPIRE', repeats, ttl)
return 1
