-- Issue a tick's orders of one host: each page exists and has none in flight, the host
-- has a token and room.  The bucket is read once and written once (when anything left).
-- KEYS: pages, inflight, host, blocked, buckets
-- ARGV: now, default rate, default max in flight, burst, then (url, order_id) pairs
-- Returns code, payload per pair: 'ok' page value | 'gone' | 'in-flight' "oid|at" |
-- 'blocked' (robots.txt) | 'no-token' seconds until the next token | 'max-in-flight'.
local now = tonumber(ARGV[1])
local h = redis.call('HMGET', KEYS[3], 'rate', 'mif', 'tokens', 'ts')
local rate = tonumber(h[1]) or tonumber(ARGV[2])
local mif = tonumber(h[2]) or tonumber(ARGV[3])
local burst = tonumber(ARGV[4])
-- the refill and admit rules are models/decision/hosts.py's refill() and admit()
-- (tests/integration/test_lua_rules.py checks them against each other)
local tokens = tonumber(h[3]) or burst
local ts = tonumber(h[4]) or now
if rate == math.huge then tokens = burst
elseif now > ts then tokens = math.min(burst, tokens + (now - ts) * rate) end
local nfl = redis.call('HLEN', KEYS[2])
local out, took = {}, false
for i = 5, #ARGV, 2 do
  local url = ARGV[i]
  local _, _, page = find(KEYS[1], KEYS[5], url)
  local fl = page and redis.call('HGET', KEYS[2], url)
  if not page then
    out[#out + 1] = 'gone'; out[#out + 1] = ''
  elseif fl then
    out[#out + 1] = 'in-flight'; out[#out + 1] = fl
  elseif redis.call('SISMEMBER', KEYS[4], url) == 1 then
    out[#out + 1] = 'blocked'; out[#out + 1] = ''
  elseif tokens < 1 then
    out[#out + 1] = 'no-token'; out[#out + 1] = tostring((1 - tokens) / rate)
  elseif mif > 0 and nfl >= mif then
    out[#out + 1] = 'max-in-flight'; out[#out + 1] = ''
  else
    tokens, nfl, took = tokens - 1, nfl + 1, true
    redis.call('HSET', KEYS[2], url, ARGV[i + 1] .. '|' .. ARGV[1])
    out[#out + 1] = 'ok'; out[#out + 1] = page
  end
end
if took then redis.call('HSET', KEYS[3], 'tokens', tostring(tokens), 'ts', ARGV[1]) end
return out
