-- KEYS: host, offsets, blocked
-- ARGV: offset field, offset, rate ('' = lift this source's limit), max in flight ('' =
-- unset; operator only), source (operator|robots|pushback), reason, robots digest
-- ('' = none), default rate
-- Each source keeps its own rate; ``rate`` (what _ISSUE reads) is the operator's (else the
-- default) lowered by the robots.txt's and the push-back's: absent when that is the default
-- (a Crawl-delay never raises a host above it).  A hash written before sources existed has
-- ``rate`` only: it is the operator's.  A robots digest other than the stored one empties
-- the blocked set.  Returns code, the rate now ('' = default), 1 if the blocked set was emptied.
if applied(KEYS[2], ARGV[1], ARGV[2]) then
  return {'dup-offset', redis.call('HGET', KEYS[1], 'rate') or '', 0}
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
local sources = {'rate_operator', 'rate_robots', 'rate_pushback'}
local h = redis.call('HMGET', KEYS[1], 'rate', sources[1], sources[2], sources[3])
if h[1] and not h[2] and not h[3] and not h[4] then
  redis.call('HSET', KEYS[1], 'rate_operator', h[1])
end
local src = ARGV[5]
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[1], 'rate_' .. src, 'reason_' .. src)
else
  redis.call('HSET', KEYS[1], 'rate_' .. src, ARGV[3])
  if ARGV[6] == '' then redis.call('HDEL', KEYS[1], 'reason_' .. src)
  else redis.call('HSET', KEYS[1], 'reason_' .. src, ARGV[6]) end
end
if src == 'operator' then
  if ARGV[4] == '' then redis.call('HDEL', KEYS[1], 'mif')
  else redis.call('HSET', KEYS[1], 'mif', ARGV[4]) end
end
-- the operator's rate (else the default: best_s nil), lowered by the others: the rule of
-- models/decision/hosts.py binding_rate() (tests/integration/test_lua_rules.py compares them)
local op_s = redis.call('HGET', KEYS[1], 'rate_operator')
local best, best_s = tonumber(op_s) or tonumber(ARGV[8]), op_s
for i = 2, 3 do
  local r_s = redis.call('HGET', KEYS[1], sources[i])
  local r = r_s and tonumber(r_s)
  if r and r < best then best, best_s = r, r_s end
end
if best_s then redis.call('HSET', KEYS[1], 'rate', best_s)
else redis.call('HDEL', KEYS[1], 'rate') end
local cleared = 0
if ARGV[7] ~= '' and redis.call('HGET', KEYS[1], 'robots') ~= ARGV[7] then
  redis.call('HSET', KEYS[1], 'robots', ARGV[7])
  redis.call('DEL', KEYS[3])
  cleared = 1
end
return {'applied', best_s or '', cleared}
