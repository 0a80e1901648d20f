-- Release a lease from every scope and correct reserved TPM by (actual - estimate), never below 0.
-- KEYS: for each scope: lease zset, tpm counter of the window the lease was counted in.
-- ARGV: lease_id, delta_tokens (0 = no correction), n_scopes, then per scope: has_conc, has_tpm
local lease = ARGV[1]
local delta = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
for i = 0, n - 1 do
  if ARGV[4 + 2 * i] == '1' then redis.call('ZREM', KEYS[2 * i + 1], lease) end
  if ARGV[5 + 2 * i] == '1' and delta ~= 0 then
    local tk = KEYS[2 * i + 2]
    if redis.call('EXISTS', tk) == 1 then
      local v = redis.call('INCRBY', tk, delta)
      if v < 0 then redis.call('SET', tk, 0, 'KEEPTTL') end
    end
  end
end
return 1
