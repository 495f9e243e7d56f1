-- Issue a rater's next question (questions.issue_next_question): next_question.lua run alone.
-- KEYS: rater_stats answers items update_scheduled issued issued_questions counters finished active_raters pool_targets ...
-- ARGV: rater stop_flagged max_per_rater budget catch update_ttl expires_at now issue_rater draw algorithms ...
--   After the named keys: the pool of each of the study's algorithms, the rater's outstanding-questions
--   zset, optionally the rater's validation-repeats list. After the named arguments: label, share and
--   fallback question JSON per algorithm, the most questions a rater may hold, optionally '1' to ask a
--   due validation repeat. The meaning of each: next_question.lua and issue.lua.
--#include issue.lua
--#include next_question.lua
return next_question(KEYS, ARGV, 0, 0)
