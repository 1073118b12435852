-- KEYS: pages, offsets, inflight, est
-- ARGV: offset field, offset, url, deleted 0/1, importance, prior ('' = keep)
if applied(KEYS[2], ARGV[1], ARGV[2]) then
  return {'dup-offset', redis.call('HGET', KEYS[1], ARGV[3]) or ''}
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
local url = ARGV[3]
if ARGV[4] == '1' then
  redis.call('HDEL', KEYS[1], url)
  redis.call('HDEL', KEYS[3], url)
  redis.call('HDEL', KEYS[4], url)
  return {'deleted', ''}
end
local cur = redis.call('HGET', KEYS[1], url)
local v
if cur then
  local imp, prior, last, counts = parts(cur)
  if ARGV[6] ~= '' then prior = ARGV[6] end
  v = ARGV[5] .. '|' .. prior .. '|' .. last .. '|' .. counts
else
  v = ARGV[5] .. '|' .. ARGV[6] .. '|0|' .. string.rep('0,', __N - 1) .. '0'
end
redis.call('HSET', KEYS[1], url, v)
return {cur and 'updated' or 'added', v}
