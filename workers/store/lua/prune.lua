-- Take planned questions back out of a pool (questions.prune_questions).
-- KEYS: pool
-- ARGV: ...
--   The arguments are the question JSON documents to take out.
-- Returns, per document, 1 if it was still pooled and is now removed, else 0 (already issued).
local removed = {}
for i = 1, #ARGV do removed[i] = redis.call('LREM', KEYS[1], 1, ARGV[i]) end
return removed
