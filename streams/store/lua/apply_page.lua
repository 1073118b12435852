-- KEYS: pages, offsets, inflight, buckets, prior
-- ARGV: offset field, offset, url, deleted 0/1, importance, prior ('' = keep)
-- A page added past a bucket's share splits buckets (linear hashing, at most __SPLITS per
-- call: a host stored in one hash before the buckets catches up over its next additions).
local url = ARGV[3]
local pkey, f, cur, okey = find(KEYS[1], KEYS[4], url)
if applied(KEYS[2], ARGV[1], ARGV[2]) then return {'dup-offset', cur or ''} end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
if ARGV[4] == '1' then
  if cur then
    if okey then redis.call('HDEL', okey, url) else redis.call('HDEL', pkey, f) end
    -- its estimator record's contribution leaves the host's prior sums
    if string.byte(cur, 1) == __PVER then
      swap_prior(KEYS[5], string.sub(cur, page_size(cur) + 1), nil)
    end
    -- the layout is (0, 0) exactly when the buckets hash is absent (one bucket, no count)
    local l, p = layout(KEYS[4])
    if l ~= 0 or p ~= 0 then redis.call('HINCRBY', KEYS[4], 'n', -1) end
  end
  redis.call('HDEL', KEYS[3], url)
  return {'deleted', ''}
end
local t
if cur then
  t = load(cur)
else
  t = {last = 0, c = {}, fp = {}, rest = ''}
  for i = 1, __N do t.c[i] = 0 end
end
t.imp = tonumber(ARGV[5])
if ARGV[6] ~= '' then t.prior = tonumber(ARGV[6]) end
local v = dump(t)
put(pkey, f, v, okey, url)
if not cur then
  -- one more page: split while the host holds more than its buckets' share
  local l, p = layout(KEYS[4])
  local n
  if l == 0 and p == 0 then
    n = redis.call('HLEN', KEYS[1])
  else
    n = redis.call('HINCRBY', KEYS[4], 'n', 1)
  end
  for _ = 1, __SPLITS do
    local limit = __FILL * (2 ^ l + p)
    if l == 0 and p == 0 then limit = __FIRST end
    if n <= limit then break end
    -- split bucket p into p and p + 2^l (the pages whose h mod 2^(l+1) is not p move)
    local src, dst = bucket_name(KEYS[1], p), bucket_name(KEYS[1], p + 2 ^ l)
    local all = redis.call('HGETALL', src)
    local mod, moved, gone = 2 ^ (l + 1), {}, {}
    for i = 1, #all, 2 do
      if page_hash(all[i]) % mod ~= p then
        moved[#moved + 1] = all[i]; moved[#moved + 1] = all[i + 1]
        gone[#gone + 1] = all[i]
        if #gone == 1000 then
          redis.call('HSET', dst, unpack(moved)); redis.call('HDEL', src, unpack(gone))
          moved, gone = {}, {}
        end
      end
    end
    if #gone > 0 then
      redis.call('HSET', dst, unpack(moved)); redis.call('HDEL', src, unpack(gone))
    end
    p = p + 1
    if p >= 2 ^ l then l, p = l + 1, 0 end
    redis.call('HSET', KEYS[4], 'l', l, 'p', p, 'n', n)
    layout_cache = {l, p}
  end
end
return {cur and 'updated' or 'added', v}
