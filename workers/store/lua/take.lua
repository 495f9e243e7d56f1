-- Charge one request to every rate-limit bucket, or to none (webapp.limits.take): GCRA token buckets.
-- KEYS: ...
-- ARGV: ...
--   KEYS[i]: one bucket each (a string holding its theoretical arrival time, microseconds).
--   ARGV[2i-1]: the bucket's emission interval in microseconds (1e6 / rate); ARGV[2i]: its burst.
-- Returns 0 when every bucket had room (each is charged one request), else {i, wait_us}: the
-- bucket that is fullest and the microseconds until it has room; nothing is charged then.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local new = {}
local worst, worst_wait = 0, 0
for i, key in ipairs(KEYS) do
  local interval = tonumber(ARGV[2 * i - 1])
  local burst = tonumber(ARGV[2 * i])
  local tat = tonumber(redis.call('GET', key) or now)
  if tat < now then tat = now end
  local wait = tat + interval - burst * interval - now
  if wait > worst_wait then worst, worst_wait = i, wait end
  new[i] = tat + interval
end
if worst > 0 then return {worst, math.ceil(worst_wait)} end
for i, key in ipairs(KEYS) do
  redis.call('SET', key, string.format('%.0f', new[i]), 'PX', math.ceil((new[i] - now) / 1000) + 1)
end
return 0
