-- The page record (streams/store/page_record.py's docstring): a head of __HSIZE bytes whose
-- last byte counts the fingerprints after it, __FPB bytes each.  load() gives a table
-- {imp, prior (nil = none), last, c = counts[__N], fp = fingerprints (0..__SEEN, newest
-- first), rest = the estimator record after the page's bytes ('' = none)}; dump() packs it
-- with its rest, or without its trailing zero bytes when it has none.  A value whose first
-- byte is not __PVER, or whose count byte is over __SEEN, is no page record: padded() and
-- load() raise an error naming it.
-- the page record's length in a value: the head and its fingerprints (a count byte trimmed
-- away is 0)
local function page_size(v)
  return __HSIZE + __FPB * (string.byte(v, __HSIZE) or 0)
end
-- the value padded to its page record's length (stored without its trailing zero bytes
-- when no estimator record follows) and that length
local function padded(v)
  if string.byte(v, 1) ~= __PVER then
    error('no page record (first byte not __PVER): ' .. string.format('%q', string.sub(v, 1, 40)))
  end
  local size = page_size(v)
  if size > __HSIZE + __FPB * __SEEN then
    error('no page record (count byte over __SEEN): ' .. string.format('%q', string.sub(v, 1, 40)))
  end
  if #v < size then v = v .. string.rep('\0', size - #v) end
  return v, size
end
local function load(v)
  local t = {c = {}, fp = {}, rest = ''}
  local size
  v, size = padded(v)
  local r = {struct.unpack('__HFMT', v)}
  t.imp, t.last = r[2], r[4]
  if r[3] == r[3] then t.prior = r[3] end  -- NaN: none
  for i = 1, __N do t.c[i] = r[4 + i] end
  for i = 1, r[5 + __N] do
    t.fp[i] = struct.unpack('<I__FPB', v, __HSIZE + 1 + __FPB * (i - 1))
  end
  t.rest = string.sub(v, size + 1)
  return t
end
local function dump(t)
  local a = {__PVER, t.imp, t.prior or 0, t.last}
  for i = 1, __N do a[4 + i] = math.min(t.c[i], 65535) end
  a[5 + __N] = #t.fp
  local parts = {struct.pack('__HFMT', unpack(a))}
  for i = 1, #t.fp do parts[i + 1] = struct.pack('<I__FPB', t.fp[i]) end
  local p = table.concat(parts)
  -- no prior: the quiet NaN 0x7fc00000 written as bytes (what Python's struct writes for
  -- math.nan; 0/0 in C has the sign bit set on x86 and not on ARM)
  if not t.prior then p = string.sub(p, 1, 5) .. '\0\0\192\127' .. string.sub(p, 10) end
  if t.rest == '' then return (string.gsub(p, '%z+$', '')) end
  return p .. t.rest
end
local function applied(okey, field, offset)
  local last = redis.call('HGET', okey, field)
  return last and tonumber(last) >= tonumber(offset)
end
-- Page buckets (streams/store/redis_store.py's docstring, "Page buckets"): a host's pages are
-- spread over the hashes base, base:1, base:2, ... by linear hashing of sha1(field); the
-- layout (l, p) is in the host's buckets hash (absent: one bucket, the base).  A url's
-- bucket is h mod 2^l, or h mod 2^(l+1) below the split pointer p.
local layout_cache
local function layout(bkeys)
  if not layout_cache then
    local v = redis.call('HMGET', bkeys, 'l', 'p')
    layout_cache = {tonumber(v[1]) or 0, tonumber(v[2]) or 0}
  end
  return layout_cache[1], layout_cache[2]
end
local function page_hash(url) return tonumber(string.sub(redis.sha1hex(url), 1, 8), 16) end
local function bucket_name(base, b)
  if b == 0 then return base end
  return base .. ':' .. string.format('%d', b)
end
-- the hash that holds url's page: base is the host's pages key, bkeys its buckets key
local function page_key(base, bkeys, url)
  local l, p = layout(bkeys)
  if l == 0 and p == 0 then return base end
  local h = page_hash(url)
  local b = h % (2 ^ l)
  if b < p then b = h % (2 ^ (l + 1)) end
  return bucket_name(base, b)
end
-- Short fields (redis_store.py's docstring): a page whose url is https://<host>/... is
-- stored under the url without its 'https://<host>' (the field starts with '/'); any other
-- url, and a page stored before short fields, under the url itself.  The host is the one
-- in the pages key's hash tag.
local origin_cache
local function field_of(base, url)
  if not origin_cache then
    origin_cache = 'https://' .. (string.match(base, '{([^{}]*)}:pages$') or '') .. '/'
  end
  local o = origin_cache
  if string.find(url, o, 1, true) == 1 then return string.sub(url, #o) end
  return url
end
-- url's page: its hash, its field, its value (nil: none) and, for a page still stored
-- under its full url (before short fields), that hash (put() moves the page from it)
local function find(base, bkeys, url)
  local f = field_of(base, url)
  local pkey = page_key(base, bkeys, f)
  local cur = redis.call('HGET', pkey, f)
  if cur or f == url then return pkey, f, cur, nil end
  local okey = page_key(base, bkeys, url)
  cur = redis.call('HGET', okey, url)
  if cur then return pkey, f, cur, okey end
  return pkey, f, nil, nil
end
-- write a page found by find() (under its short field from now on)
local function put(pkey, f, v, okey, url)
  if okey then redis.call('HDEL', okey, url) end
  redis.call('HSET', pkey, f, v)
end
-- A host's prior sums (streams/store/host_prior.py): an estimator record's contribution
-- (count, E[lambda], E[log lambda]) is the two float32 after its header (2 bytes, or 4
-- after the escape layout byte), the mean stored negated while it is not the page's alpha;
-- swap_prior replaces the old record's contribution by the new one's in the sums.
local function contribution(rec)
  if not rec or #rec < 2 or string.byte(rec, 1) ~= __EVER then return 0, 0, 0 end
  local off = 3
  if string.byte(rec, 2) == __EESC then off = 5 end
  if #rec < off + 7 then return 0, 0, 0 end
  local m, l = struct.unpack('<ff', rec, off)
  if m == 0 or m ~= m or l ~= l or m == math.huge or m == -math.huge or l == math.huge
     or l == -math.huge then
    return 0, 0, 0
  end
  return 1, math.abs(m), l
end
local function swap_prior(hkey, old, new)
  local c0, m0, l0 = contribution(old)
  local c1, m1, l1 = contribution(new)
  if c0 == 0 and c1 == 0 then return end
  local s = redis.call('HMGET', hkey, 'n', 'mean', 'log')
  local n = (tonumber(s[1]) or 0) + c1 - c0
  local sm = (tonumber(s[2]) or 0) + m1 - m0
  local sl = (tonumber(s[3]) or 0) + l1 - l0
  redis.call('HSET', hkey, 'n', string.format('%.17g', n), 'mean', string.format('%.17g', sm),
             'log', string.format('%.17g', sl))
end
