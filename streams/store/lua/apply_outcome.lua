-- KEYS: pages, offsets, inflight, blocked, host, buckets, prior
-- ARGV: offset field, offset, url, order_id ('' = any), fetched_at, new estimator record
-- ('' = keep), compare-and-set '1'/'0', expected page value, disallowed '1'/'0', robots
-- digest
-- The page's last crawl becomes the fetch time and its signal counts restart (an outcome
-- not newer than the last crawl changes neither: 'stale'; one at the same millisecond is
-- that crawl's record written twice, e.g. by a producer retry); the matching order leaves
-- flight.
-- The estimator record lives after the page's bytes in the same value.
-- A new estimator record was computed in Python from the page value read before; with
-- compare-and-set, if it changed since (a ping, another worker) nothing is written,
-- not even the offset ('conflict': the agent re-reads and recomputes).  The offset check
-- comes first, so a redelivered outcome never adds its interval twice.
-- A new estimator record's contribution to the host's prior sums replaces the old one's
-- (swap_prior), in the same step.
local url = ARGV[3]
local pkey, f, cur, okey = find(KEYS[1], KEYS[6], url)
if applied(KEYS[2], ARGV[1], ARGV[2]) then return {'dup-offset', cur or '', 0} end
if ARGV[7] == '1' and (cur or '') ~= ARGV[8] then return {'conflict', cur or '', 0} end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
if not cur then return {'unknown', '', 0} end
-- the record read and written at its fields' offsets (as apply_pings.lua)
local v0, size, shape = padded(cur)
local last = struct.unpack('<d', v0, __LPOS)
local code, v = 'stale', cur
if ARGV[9] == '1' then
  -- not fetched (robots.txt): no crawl; blocked unless a newer robots.txt was announced
  local robots = redis.call('HGET', KEYS[5], 'robots')
  if not robots or robots == ARGV[10] then
    redis.call('SADD', KEYS[4], url)
    code = 'blocked'
  else
    code = 'stale-robots'
  end
elseif tonumber(ARGV[5]) > last then
  code = 'applied'
  local rest = nil
  if ARGV[6] ~= '' then rest = ARGV[6] end
  local rest_new = rest
  -- the last crawl written, the counts zeroed (so no longer stored), the rest kept unless a
  -- new record came
  local at, cb = counts_at(shape)
  if cb > 0 then shape = shape - __SCNT end
  v = string.sub(v0, 1, 1) .. string.char(shape) .. string.sub(v0, 3, __LPOS - 1)
    .. struct.pack('<d', tonumber(ARGV[5])) .. string.sub(v0, __HSIZE + 1, at - 1)
    .. string.sub(v0, at + cb, size)
  rest = rest or string.sub(v0, size + 1)
  if rest == '' then v = trim(v) else v = v .. rest end  -- as dump()
  put(pkey, f, v, okey, url)
  if rest_new then swap_prior(KEYS[7], string.sub(v0, size + 1), rest_new) end
end
local cleared = 0
local fl = redis.call('HGET', KEYS[3], url)
if fl then
  local oid = string.match(fl, '^([^|]*)|')
  if ARGV[4] == '' or oid == ARGV[4] then
    redis.call('HDEL', KEYS[3], url)
    cleared = 1
  end
end
return {code, v, cleared}
