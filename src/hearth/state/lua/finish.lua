-- Finish a call in one step: release several leases (concurrency slots, TPM correction) and settle
-- the call's budget reservations exactly once.
-- KEYS: 1 = the call's reservation key (set by acquire.lua for the lease TTL); 2 = the epoch key;
--       then, for each lease and each of its scopes: lease zset, tpm counter of the lease's window,
--       and (only if has_day) the daily-token counter of the lease's quota day; then the budget counters.
-- ARGV: settle (1 or 0 = release only), n_leases, then per lease: lease_id, delta_tokens, n_scopes,
--       then per scope: has_conc, has_tpm, has_day; then one refund per budget counter (negative: an
--       overrun, charged in full).
-- Returns {1, epoch, counters after the settlement...} if this invocation settled the budgets (it
-- deleted the reservation key; epoch = the data generation it was applied to), {0} if the call was
-- settled before or its reservation expired (then it stays spent); {1} when only releasing.
local function correct(key, delta)  -- a token counter moved by delta, never below zero
  if delta == 0 then return end
  local v = redis.call('INCRBY', key, delta)
  -- Counters always have a TTL, so none means it had expired and INCRBY just created it: drop it.
  if v == delta and redis.call('PTTL', key) == -1 then redis.call('DEL', key)
  elseif v < 0 then redis.call('SET', key, 0, 'KEEPTTL') end
end
local k = 3
local a = 3
for _ = 1, tonumber(ARGV[2]) do
  local lease = ARGV[a]
  local delta = tonumber(ARGV[a + 1])
  local n = tonumber(ARGV[a + 2])
  a = a + 3
  for _ = 1, n do
    if ARGV[a] == '1' then redis.call('ZREM', KEYS[k], lease) end
    if ARGV[a + 1] == '1' then correct(KEYS[k + 1], delta) end
    k = k + 2
    if ARGV[a + 2] == '1' then
      correct(KEYS[k], delta)
      k = k + 1
    end
    a = a + 3
  end
end
if ARGV[1] == '0' then return {1} end
if redis.call('DEL', KEYS[1]) == 0 then return {0} end
local out = {1, redis.call('GET', KEYS[2]) or ''}
for i = k, #KEYS do
  local refund = tonumber(ARGV[a + i - k])
  local v
  if refund == 0 then
    v = tonumber(redis.call('GET', KEYS[i]) or '0')
  elseif redis.call('EXISTS', KEYS[i]) == 0 then  -- expired with its period: nothing to give back
    v = 0
  else
    v = redis.call('DECRBY', KEYS[i], refund)
    if v < 0 then
      redis.call('SET', KEYS[i], 0, 'KEEPTTL')
      v = 0
    end
  end
  out[#out + 1] = v
end
return out
