-- Reserve one password check for an (account name, address) (webapp.accounts.claim_login_attempt).
-- KEYS: failures
-- ARGV: limit window
--   failures: the failure counter; limit: the most failures; window: its length (s).
-- Returns 0 and counts this attempt as a failure in advance when fewer than limit were counted, else
-- the seconds left in the window: checking and counting in one step, so parallel guesses get exactly
-- limit password checks between them.
local failures = tonumber(redis.call('GET', KEYS[1]) or '0')
if failures >= tonumber(ARGV[1]) then return math.max(redis.call('TTL', KEYS[1]), 1) end
if failures == 0 then redis.call('SET', KEYS[1], 1, 'EX', ARGV[2]) else redis.call('INCR', KEYS[1]) end
return 0
