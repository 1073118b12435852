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
local t
if cur then
  t = load(cur)
else
  t = {last = 0, c = {}, fp = {}, rest = ''}
  for i = 1, __N do t.c[i] = 0 end
  for i = 1, __SEEN do t.fp[i] = 0 end
end
t.imp = tonumber(ARGV[5])
if ARGV[6] ~= '' then t.prior = tonumber(ARGV[6]) end
local v = dump(t)
redis.call('HSET', KEYS[1], url, v)
return {cur and 'updated' or 'added', v}
