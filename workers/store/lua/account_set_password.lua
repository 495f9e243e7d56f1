-- Change a researcher account's password hash only if the account exists (webapp.accounts.set_password).
-- KEYS: user
-- ARGV: password_hash epoch now
-- Returns 1 if changed, 0 if there is no such account.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'password_hash', ARGV[1], 'epoch', ARGV[2], 'password_changed_at', ARGV[3])
return 1
