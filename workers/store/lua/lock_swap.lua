-- Replace or release a study's update lock only while it still holds the value we read
-- (workers.jobs.lock.study_lock: taking the lock over from a dead holder).
-- KEYS: lock
-- ARGV: expected new_value ttl_ms
-- new_value '' deletes the lock; otherwise it is set with a TTL of ttl_ms milliseconds.
-- Returns 1 if the lock held ``expected`` (and was replaced or deleted), else 0.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] == '' then redis.call('DEL', KEYS[1]) else redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) end
return 1
