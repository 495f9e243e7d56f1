-- study_guard(K, A, k, a): whether the web process's copy of the study is still the stored one, and
-- whether this browser session still holds the rater id; lets a rater's request skip reading the
-- study before its script (the copy is checked inside the script instead: one round trip).
-- Keys K[k + 1] the study's hash, K[k + 2] the study's rater-sessions hash (keys.rater_sessions), K[k + 3] the
-- study's forgotten raters (keys.forgotten_raters: SHA-256 of each id).
-- Arguments A[a + 1] the study's fingerprint as the caller read it ('' = no check; studies.py,
-- study_fingerprint: status|n_items|created_at|SHA-1 of the config), A[a + 2] the recruited rater id
-- whose session is checked ('' = none: an anonymous id), A[a + 3] this browser session's nonce for it
-- ('' = none), A[a + 4] the SHA-256 of the session's rater id, anonymous or not ('' = no check).
-- Returns 'stale' (the study changed or is gone: the caller has done nothing, reloads it and
-- retries), 'forgotten' (the rater was forgotten: nothing may be done for them), 'replaced' (another
-- browser session holds the rater id) or false.
local function study_guard(K, A, k, a)
  if A[a + 1] ~= '' then
    local f = redis.call('HMGET', K[k + 1], 'status', 'n_items', 'created_at', 'config')
    if not (f[1] and f[2] and f[3] and f[4]) then return 'stale' end
    if f[1] .. '|' .. f[2] .. '|' .. f[3] .. '|' .. redis.sha1hex(f[4]) ~= A[a + 1] then return 'stale' end
  end
  if A[a + 4] ~= '' and redis.call('SISMEMBER', K[k + 3], A[a + 4]) == 1 then return 'forgotten' end
  if A[a + 2] ~= '' then
    local holder = redis.call('HGET', K[k + 2], A[a + 2])
    if holder and holder ~= A[a + 3] then return 'replaced' end
  end
  return false
end
