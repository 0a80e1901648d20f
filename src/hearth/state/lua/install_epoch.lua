-- Install a new epoch after the backend lost its data: budget counters rebuilt from the ledger,
-- the reservation keys of calls still in flight, then the epoch itself — only if no other
-- process installed one first. The contract is written once, in hearth.state.redis.
-- KEYS: 1 = epoch key; then n budget counters; then r reservation keys.
-- ARGV: epoch value, n, r, reservation_ttl_ms; then per counter: value, ttl_ms (0 = none).
-- Returns the epoch in force afterwards.
local current = redis.call('GET', KEYS[1])
if current then return current end
local n = tonumber(ARGV[2])
local r = tonumber(ARGV[3])
local res_ttl = tonumber(ARGV[4])
for i = 1, n do
  local value = ARGV[3 + 2 * i]
  local ttl = tonumber(ARGV[4 + 2 * i])
  if ttl > 0 then redis.call('SET', KEYS[1 + i], value, 'PX', ttl) else redis.call('SET', KEYS[1 + i], value) end
end
for i = 1, r do
  redis.call('SET', KEYS[1 + n + i], '1', 'PX', res_ttl)
end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]
