-- Atomically admit one call against every scope, or refuse without taking anything.
-- Time comes from the Redis server, so processes on machines with skewed clocks agree on lease
-- expiry and on the minute window.
-- KEYS: for each scope i (0-based): 3i+1 = lease zset, 3i+2 = rpm counter base, 3i+3 = tpm counter
--       base (":<minute>" is appended here); then the cooldown keys.
-- ARGV: lease_id, ttl_ms, tokens, n_scopes, then per scope: maxc, rpm, tpm.
-- Returns {1, minute} when admitted, else {0, key_index, limit, retry_after_ms}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local minute = math.floor(now / 60000)
local window_end = (minute + 1) * 60000
local suffix = ':' .. minute
local lease = ARGV[1]
local ttl = tonumber(ARGV[2])
local tokens = tonumber(ARGV[3])
local n = tonumber(ARGV[4])

for j = 3 * n + 1, #KEYS do
  local left = redis.call('PTTL', KEYS[j])
  if left > 0 then return {0, j, 'cooldown', left} end
  if left == -1 then return {0, j, 'cooldown', 60000} end
end

for i = 0, n - 1 do
  local maxc = tonumber(ARGV[5 + 3 * i])
  local rpm = tonumber(ARGV[6 + 3 * i])
  local tpm = tonumber(ARGV[7 + 3 * i])
  if maxc > 0 then
    local zk = KEYS[3 * i + 1]
    redis.call('ZREMRANGEBYSCORE', zk, '-inf', now)
    if redis.call('ZCARD', zk) >= maxc then return {0, i + 1, 'concurrency', 0} end
  end
  if rpm > 0 then
    local used = tonumber(redis.call('GET', (KEYS[3 * i + 2] .. suffix)) or '0')
    if used + 1 > rpm then return {0, i + 1, 'rpm', window_end - now} end
  end
  if tpm > 0 then
    local used = tonumber(redis.call('GET', (KEYS[3 * i + 3] .. suffix)) or '0')
    if used > 0 and used + tokens > tpm then return {0, i + 1, 'tpm', window_end - now} end
  end
end

for i = 0, n - 1 do
  local maxc = tonumber(ARGV[5 + 3 * i])
  local rpm = tonumber(ARGV[6 + 3 * i])
  local tpm = tonumber(ARGV[7 + 3 * i])
  if maxc > 0 then
    local zk = KEYS[3 * i + 1]
    redis.call('ZADD', zk, now + ttl, lease)
    if redis.call('PTTL', zk) < ttl then redis.call('PEXPIRE', zk, ttl) end
  end
  if rpm > 0 then
    redis.call('INCR', (KEYS[3 * i + 2] .. suffix))
    redis.call('PEXPIRE', (KEYS[3 * i + 2] .. suffix), 120000)
  end
  if tpm > 0 then
    redis.call('INCRBY', (KEYS[3 * i + 3] .. suffix), tokens)
    redis.call('PEXPIRE', (KEYS[3 * i + 3] .. suffix), 120000)
  end
end
return {1, minute}
