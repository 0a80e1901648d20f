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
-- Every governed call runs this, so it issues as few commands as it can (each costs about a
-- microsecond of Redis time): expired leases are swept only when a scope looks full, counters get
-- their TTL when they are created, and reads of several keys are one MGET.
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

if o > 0 and redis.call('EXISTS', unpack(KEYS, ko + 1, ko + o)) > 0 then
  for i = 1, o do
    if redis.call('EXISTS', KEYS[ko + i]) == 1 then return {0, i, 'once', 0, ''} end
  end
end

for j = kc + 1, #KEYS do
  local left = redis.call('PTTL', KEYS[j])
  if left > 0 then return {0, j - kc, 'cooldown', left, ''} end
  if left == -1 then return {0, j - kc, 'cooldown', 60000, ''} end
end

local held = {}  -- per scope with a concurrency limit: its lease count before this call
for i = 0, n - 1 do
  local maxc = tonumber(ARGV[a0 + 1 + 3 * i])
  local rpm = tonumber(ARGV[a0 + 2 + 3 * i])
  local tpm = tonumber(ARGV[a0 + 3 + 3 * i])
  if maxc > 0 then
    local zk = KEYS[2 + 3 * i]
    local c = redis.call('ZCARD', zk)
    if c >= maxc then  -- full, unless some leases expired (their process died): sweep and recount
      redis.call('ZREMRANGEBYSCORE', zk, '-inf', now)
      c = redis.call('ZCARD', zk)
      if c >= maxc then return {0, i + 1, 'concurrency', 0, ''} end
    end
    held[i] = c
  end
  local r_used, t_used = 0, 0
  if rpm > 0 and tpm > 0 then
    local v = redis.call('MGET', KEYS[3 + 3 * i], KEYS[4 + 3 * i])
    r_used, t_used = tonumber(v[1] or '0'), tonumber(v[2] or '0')
  elseif rpm > 0 then
    r_used = tonumber(redis.call('GET', KEYS[3 + 3 * i]) or '0')
  elseif tpm > 0 then
    t_used = tonumber(redis.call('GET', KEYS[4 + 3 * i]) or '0')
  end
  if rpm > 0 and r_used + 1 > rpm then return {0, i + 1, 'rpm', window_end - now, ''} end
  if tpm > 0 and t_used > 0 and t_used + tokens > tpm then return {0, i + 1, 'tpm', window_end - now, ''} end
end

for i = 1, d do
  local used = tonumber(redis.call('GET', KEYS[kd + i]) or '0')
  if used + tokens > tonumber(ARGV[d0 + i]) then return {0, i, 'daily_tokens', day_left, ''} end
end

if m > 0 then
  local used = redis.call('MGET', unpack(KEYS, kb + 1, kb + m))
  for i = 1, m do
    if tonumber(used[i] or '0') + tonumber(ARGV[b0 + 3 * i - 1]) > tonumber(ARGV[b0 + 3 * i - 2]) then
      return {0, i, 'budget', 0, ''}
    end
  end
end

for i = 0, n - 1 do
  local maxc = tonumber(ARGV[a0 + 1 + 3 * i])
  local rpm = tonumber(ARGV[a0 + 2 + 3 * i])
  local tpm = tonumber(ARGV[a0 + 3 + 3 * i])
  if maxc > 0 then
    local zk = KEYS[2 + 3 * i]
    redis.call('ZADD', zk, now + ttl, lease)
    -- The set lives as long as its longest lease; a new set has no TTL yet.
    if held[i] == 0 or redis.call('PTTL', zk) < ttl then redis.call('PEXPIRE', zk, ttl) end
  end
  if rpm > 0 and redis.call('INCR', KEYS[3 + 3 * i]) == 1 then  -- created now: kept past its minute
    redis.call('PEXPIRE', KEYS[3 + 3 * i], 120000)
  end
  if tpm > 0 and redis.call('INCRBY', KEYS[4 + 3 * i], tokens) == tokens then
    redis.call('PEXPIRE', KEYS[4 + 3 * i], 120000)
  end
end

for i = 1, o do
  redis.call('SET', KEYS[ko + i], '1', 'PX', tonumber(ARGV[o0 + i]))
end

for i = 1, d do  -- kept an hour past the day's end, for corrections of calls still running then
  if redis.call('INCRBY', KEYS[kd + i], tokens) == tokens then
    redis.call('PEXPIRE', KEYS[kd + i], day_left + 3600000)
  end
end

local result = {1, minute}
for i = 1, m do
  local key = KEYS[kb + i]
  local kttl = tonumber(ARGV[b0 + 3 * i])
  result[#result + 1] = redis.call('INCRBY', key, tonumber(ARGV[b0 + 3 * i - 1]))
  if kttl > 0 and redis.call('PTTL', key) == -1 then redis.call('PEXPIRE', key, kttl) end
end
return result
