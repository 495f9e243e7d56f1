-- Create a researcher account's hash only if it is absent (webapp.accounts.create_user).
-- KEYS: user
-- ARGV: password_hash epoch now
-- Returns 1 if created, 0 if the account exists.
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'password_hash', ARGV[1], 'epoch', ARGV[2], 'created_at', ARGV[3],
           'password_changed_at', ARGV[3])
return 1
