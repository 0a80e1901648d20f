-- Settle a call's budget reservations exactly once: refund (reserved - charged) on each counter.
-- KEYS: 1 = the call's settle marker, then the budget counters.
-- ARGV: marker_ttl_ms, then one refund per counter.
-- Returns 1 if this invocation settled, 0 if the call was already settled.
if redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[1]) == false then return 0 end
for i = 2, #KEYS do
  local refund = tonumber(ARGV[i])
  if refund > 0 and redis.call('EXISTS', KEYS[i]) == 1 then
    local v = redis.call('DECRBY', KEYS[i], refund)
    if v < 0 then redis.call('SET', KEYS[i], 0, 'KEEPTTL') end
  end
end
return 1
