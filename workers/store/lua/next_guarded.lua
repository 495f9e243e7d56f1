-- Issue a rater's next question from a web request (questions.issue_next_question with a guard):
-- study_guard.lua, then next_question.lua, in one step.
-- KEYS: study rater_sessions forgotten_raters rater_stats answers items update_scheduled issued issued_questions counters finished active_raters pool_targets ...
-- ARGV: fingerprint holder_rater holder_nonce rater_digest rater stop_flagged max_per_rater budget catch update_ttl expires_at now issue_rater draw algorithms ...
--   The guard's keys and arguments first (study_guard.lua), then those of next.lua. Returns {'stale'}
--   , {'forgotten'} or {'replaced'} (nothing was done) or what next_question returns.
--#include study_guard.lua
--#include issue.lua
--#include next_question.lua
local guard = study_guard(KEYS, ARGV, 0, 0)
if guard then return {guard} end
return next_question(KEYS, ARGV, 3, 4)
