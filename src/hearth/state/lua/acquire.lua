-- Atomically admit one call against every scope and budget, or refuse without taking anything.
-- Time comes from the Redis server, so processes on machines with skewed clocks agree on lease
-- expiry and on the minute window.
-- KEYS: for each scope i (0-based): 3i+1 = lease zset, 3i+2 = rpm counter base, 3i+3 = tpm counter
--       base (":<minute>" is appended here); then m budget counters; then o one-time keys (nonces);
--       then the cooldown keys.
-- ARGV: lease_id, ttl_ms, tokens, n_scopes, m_budgets, o_once, then per scope: maxc, rpm, tpm,
--       then per budget: limit, amount, ttl_ms, then per one-time key: ttl_ms.
-- Returns {1, minute, budget counters after the charge...} when admitted,
-- else {0, key_index, limit, retry_after_ms}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local minute = math.floor(now / 60000)
local window_end = (minute + 1) * 60000
local suffix = ':' .. minute
local lease = ARGV[1]
local ttl = tonumber(ARGV[2])
local tokens = tonumber(ARGV[3])
local n = tonumber(ARGV[4])
local m = tonumber(ARGV[5])
local o = tonumber(ARGV[6])
local b0 = 6 + 3 * n      -- ARGV offset of the first budget triple
local k0 = 3 * n          -- KEYS offset of the first budget key
local o0 = b0 + 3 * m     -- ARGV offset of the first one-time TTL
local ko = k0 + m         -- KEYS offset of the first one-time key

for i = 1, o do
  if redis.call('EXISTS', KEYS[ko + i]) == 1 then return {0, ko + i, 'once', 0} end
end

for j = ko + o + 1, #KEYS do
  local left = redis.call('PTTL', KEYS[j])
  if left > 0 then return {0, j, 'cooldown', left} end
  if left == -1 then return {0, j, 'cooldown', 60000} end
end

for i = 0, n - 1 do
  local maxc = tonumber(ARGV[7 + 3 * i])
  local rpm = tonumber(ARGV[8 + 3 * i])
  local tpm = tonumber(ARGV[9 + 3 * i])
  if maxc > 0 then
    local zk = KEYS[3 * i + 1]
    redis.call('ZREMRANGEBYSCORE', zk, '-inf', now)
    if redis.call('ZCARD', zk) >= maxc then return {0, i + 1, 'concurrency', 0} end
  end
  if rpm > 0 then
    local used = tonumber(redis.call('GET', KEYS[3 * i + 2] .. suffix) or '0')
    if used + 1 > rpm then return {0, i + 1, 'rpm', window_end - now} end
  end
  if tpm > 0 then
    local used = tonumber(redis.call('GET', KEYS[3 * i + 3] .. suffix) or '0')
    if used > 0 and used + tokens > tpm then return {0, i + 1, 'tpm', window_end - now} end
  end
end

for i = 0, m - 1 do
  local limit = tonumber(ARGV[b0 + 1 + 3 * i])
  local amount = tonumber(ARGV[b0 + 2 + 3 * i])
  local used = tonumber(redis.call('GET', KEYS[k0 + i + 1]) or '0')
  if used + amount > limit then return {0, k0 + i + 1, 'budget', 0} end
end

for i = 0, n - 1 do
  local maxc = tonumber(ARGV[7 + 3 * i])
  local rpm = tonumber(ARGV[8 + 3 * i])
  local tpm = tonumber(ARGV[9 + 3 * i])
  if maxc > 0 then
    local zk = KEYS[3 * i + 1]
    redis.call('ZADD', zk, now + ttl, lease)
    if redis.call('PTTL', zk) < ttl then redis.call('PEXPIRE', zk, ttl) end
  end
  if rpm > 0 then
    local rk = KEYS[3 * i + 2] .. suffix
    redis.call('INCR', rk)
    redis.call('PEXPIRE', rk, 120000)
  end
  if tpm > 0 then
    local tk = KEYS[3 * i + 3] .. suffix
    redis.call('INCRBY', tk, tokens)
    redis.call('PEXPIRE', tk, 120000)
  end
end

for i = 1, o do
  redis.call('SET', KEYS[ko + i], '1', 'PX', tonumber(ARGV[o0 + i]))
end

local result = {1, minute}
for i = 0, m - 1 do
  local key = KEYS[k0 + i + 1]
  local amount = tonumber(ARGV[b0 + 2 + 3 * i])
  local kttl = tonumber(ARGV[b0 + 3 + 3 * i])
  result[#result + 1] = redis.call('INCRBY', key, amount)
  if kttl > 0 and redis.call('PTTL', key) == -1 then redis.call('PEXPIRE', key, kttl) end
end
return result
