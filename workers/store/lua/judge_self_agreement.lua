-- Judge a rater's self-agreement (questions_answers.flag_low_self_agreement): self_agreement.lua run alone.
-- KEYS: rater_stats
-- ARGV: rater repeats_to_judge min_self_agreement
--   The meaning of each: self_agreement.lua. Returns 1 if this call flagged the rater, else 0.
--#include self_agreement.lua
return self_agreement(KEYS[1], ARGV[1], ARGV[2], ARGV[3])
