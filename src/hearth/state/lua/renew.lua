-- Extend a live call's leases and its open budget reservation by ttl_ms from now (long streams).
-- A lease that already expired (and was swept) is not brought back; neither is a settled reservation.
-- KEYS: the lease zsets (one per concurrency scope), then optionally the reservation key.
-- ARGV: ttl_ms, n_zsets, then one lease id per zset.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
local n = tonumber(ARGV[2])
for i = 1, n do
  local score = redis.call('ZSCORE', KEYS[i], ARGV[2 + i])
  if score and tonumber(score) > now then
    redis.call('ZADD', KEYS[i], 'XX', now + ttl, ARGV[2 + i])
    if redis.call('PTTL', KEYS[i]) < ttl then redis.call('PEXPIRE', KEYS[i], ttl) end
  end
end
if #KEYS > n and redis.call('EXISTS', KEYS[n + 1]) == 1 then
  redis.call('PEXPIRE', KEYS[n + 1], ttl)
end
return 1
