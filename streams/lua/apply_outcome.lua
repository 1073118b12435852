-- KEYS: pages, offsets, inflight, est, blocked, host
-- ARGV: offset field, offset, url, order_id ('' = any), fetched_at, new estimator record
-- ('' = keep), compare-and-set '1'/'0', expected page value, expected estimator
-- record ('' = none), disallowed '1'/'0', robots digest
-- The page's last crawl becomes the fetch time and its signal counts restart (an outcome
-- not newer than the last crawl changes neither: 'stale'; one at the same millisecond is
-- that crawl's record written twice, e.g. by a producer retry); the matching order leaves
-- flight.
-- A new estimator record was computed in Python from the page value and record read before;
-- with compare-and-set, if either changed since (a ping, another worker) nothing is written,
-- not even the offset ('conflict': the agent re-reads and recomputes).  The offset check
-- comes first, so a redelivered outcome never adds its interval twice.
if applied(KEYS[2], ARGV[1], ARGV[2]) then
  return {'dup-offset', redis.call('HGET', KEYS[1], ARGV[3]) or '', 0}
end
local url = ARGV[3]
local cur = redis.call('HGET', KEYS[1], url)
if ARGV[7] == '1' then
  local est = redis.call('HGET', KEYS[4], url) or ''
  if (cur or '') ~= ARGV[8] or est ~= ARGV[9] then return {'conflict', cur or '', 0} end
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
if not cur then return {'unknown', '', 0} end
local imp, prior, last_s, counts = parts(cur)
local code, v = 'stale', cur
if ARGV[10] == '1' then
  -- not fetched (robots.txt): no crawl; blocked unless a newer robots.txt was announced
  local robots = redis.call('HGET', KEYS[6], 'robots')
  if not robots or robots == ARGV[11] then
    redis.call('SADD', KEYS[5], url)
    code = 'blocked'
  else
    code = 'stale-robots'
  end
elseif tonumber(ARGV[5]) > tonumber(last_s) then
  code = 'applied'
  v = imp .. '|' .. prior .. '|' .. ARGV[5] .. '|' .. string.rep('0,', __N - 1) .. '0'
  redis.call('HSET', KEYS[1], url, v)
  if ARGV[6] ~= '' then redis.call('HSET', KEYS[4], url, ARGV[6]) end
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
