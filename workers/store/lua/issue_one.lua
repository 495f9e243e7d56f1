-- Issue one question from a study's pools with no rater checks (questions.issue_question): issue.lua
-- run alone.
-- KEYS: issued issued_questions counters finished active_raters pool_targets ...
-- ARGV: expires_at now rater draw algorithms ...
--   After the named keys: the pool of each of the study's algorithms; after the named arguments: label,
--   share and fallback question JSON per algorithm.
--#include issue.lua
return issue(KEYS, ARGV, 0, 0)
