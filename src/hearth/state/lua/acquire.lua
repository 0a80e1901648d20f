-- Atomically admit one call against every scope and budget, or refuse without taking anything.
-- Lease expiry uses the Redis server's clock, so processes with skewed clocks agree on it.
-- The contract (key and argument order) is written once, in hearth.state.redis.AcquireScript.
-- KEYS: 1 = epoch key; then per scope i (0-based): 2+3i = lease zset, 3+3i = rpm counter of the
--       minute, 4+3i = tpm counter of the minute; then m budget counters; then o one-time keys;
--       then d daily-token counters (of the quota day ending at day_end_ms); then the cooldown keys.
-- ARGV: lease_id, ttl_ms, tokens, n_scopes, m_budgets, o_once, deadline_ms (0 = none),
--       expected_epoch ('' = not checked), minute, d_days, day_end_ms; then per scope: maxc, rpm,
--       tpm; then per budget: limit, amount, ttl_ms; then per one-time key: ttl_ms; then per
--       daily-token counter: its limit. (The quota day's end is computed by the caller in its time
--       zone; this script only compares it with the server's clock.)
-- Returns {1, minute, budget counters after the charge...} when admitted,
-- else {0, index within its group (1-based), limit, retry_after_ms, current epoch}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local deadline = tonumber(ARGV[7])
if deadline > 0 and now > deadline then return {0, 0, 'late', 0, ''} end
if ARGV[8] ~= '' then
  local current = redis.call('GET', KEYS[1])
  if current ~= ARGV[8] then return {0, 0, 'epoch', 0, current or ''} end
end
local lease = ARGV[1]
local ttl = tonumber(ARGV[2])
local tokens = tonumber(ARGV[3])
local n = tonumber(ARGV[4])
local m = tonumber(ARGV[5])
local o = tonumber(ARGV[6])
local minute = tonumber(ARGV[9])
local window_end = (minute + 1) * 60000
local d = tonumber(ARGV[10])
local day_left = math.max(0, tonumber(ARGV[11]) - now)
local a0 = 11            -- ARGV offset before the first scope triple
local b0 = a0 + 3 * n    -- ARGV offset before the first budget triple
local o0 = b0 + 3 * m    -- ARGV offset before the first one-time TTL
local d0 = o0 + o        -- ARGV offset before the first daily limit
local kb = 1 + 3 * n     -- KEYS offset before the first budget key
local ko = kb + m        -- KEYS offset before the first one-time key
local kd = ko + o        -- KEYS offset before the first daily-token counter
local kc = kd + d        -- KEYS offset before the first cooldown key

for i = 1, o do
  if redis.call('EXISTS', KEYS[ko + i]) == 1 then return {0, i, 'once', 0, ''} end
end

for j = kc + 1, #KEYS do
  local left = redis.call('PTTL', KEYS[j])
  if left > 0 then return {0, j - kc, 'cooldown', left, ''} end
  if left == -1 then return {0, j - kc, 'cooldown', 60000, ''} end
end

for i = 0, n - 1 do
  local maxc = tonumber(ARGV[a0 + 1 + 3 * i])
  local rpm = tonumber(ARGV[a0 + 2 + 3 * i])
  local tpm = tonumber(ARGV[a0 + 3 + 3 * i])
  if maxc > 0 then
    local zk = KEYS[2 + 3 * i]
    redis.call('ZREMRANGEBYSCORE', zk, '-inf', now)
    if redis.call('ZCARD', zk) >= maxc then return {0, i + 1, 'concurrency', 0, ''} end
  end
  if rpm > 0 then
    local used = tonumber(redis.call('GET', KEYS[3 + 3 * i]) or '0')
    if used + 1 > rpm then return {0, i + 1, 'rpm', window_end - now, ''} end
  end
  if tpm > 0 then
    local used = tonumber(redis.call('GET', KEYS[4 + 3 * i]) or '0')
    if used > 0 and used + tokens > tpm then return {0, i + 1, 'tpm', window_end - now, ''} end
  end
end

for i = 1, d do
  local used = tonumber(redis.call('GET', KEYS[kd + i]) or '0')
  if used + tokens > tonumber(ARGV[d0 + i]) then return {0, i, 'daily_tokens', day_left, ''} end
end

for i = 1, m do
  local limit = tonumber(ARGV[b0 + 3 * i - 2])
  local amount = tonumber(ARGV[b0 + 3 * i - 1])
  local used = tonumber(redis.call('GET', KEYS[kb + i]) or '0')
  if used + amount > limit then return {0, i, 'budget', 0, ''} end
end

for i = 0, n - 1 do
  local maxc = tonumber(ARGV[a0 + 1 + 3 * i])
  local rpm = tonumber(ARGV[a0 + 2 + 3 * i])
  local tpm = tonumber(ARGV[a0 + 3 + 3 * i])
  if maxc > 0 then
    local zk = KEYS[2 + 3 * i]
    redis.call('ZADD', zk, now + ttl, lease)
    if redis.call('PTTL', zk) < ttl then redis.call('PEXPIRE', zk, ttl) end
  end
  if rpm > 0 then
    redis.call('INCR', KEYS[3 + 3 * i])
    redis.call('PEXPIRE', KEYS[3 + 3 * i], 120000)
  end
  if tpm > 0 then
    redis.call('INCRBY', KEYS[4 + 3 * i], tokens)
    redis.call('PEXPIRE', KEYS[4 + 3 * i], 120000)
  end
end

for i = 1, o do
  redis.call('SET', KEYS[ko + i], '1', 'PX', tonumber(ARGV[o0 + i]))
end

for i = 1, d do  -- kept an hour past the day's end, for corrections of calls still running then
  redis.call('INCRBY', KEYS[kd + i], tokens)
  redis.call('PEXPIRE', KEYS[kd + i], day_left + 3600000)
end

local result = {1, minute}
for i = 1, m do
  local key = KEYS[kb + i]
  local kttl = tonumber(ARGV[b0 + 3 * i])
  result[#result + 1] = redis.call('INCRBY', key, tonumber(ARGV[b0 + 3 * i - 1]))
  if kttl > 0 and redis.call('PTTL', key) == -1 then redis.call('PEXPIRE', key, kttl) end
end
return result
