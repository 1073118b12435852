-- The page record (streams/store/page_record.py's docstring): a head of __HSIZE bytes
-- (version, shape, importance, last crawl), then a prior (float32) if the shape byte has
-- __SPRI, the __N signal counts (uint16) if it has __SCNT, and (shape mod 16) fingerprints,
-- __FPB bytes each.  load() gives a table {imp, prior (nil = none), last, c = counts[__N],
-- fp = fingerprints (0..__SEEN, newest first), rest = the estimator record after the page's
-- bytes ('' = none)}; dump() packs it with its rest, or without its trailing zero bytes when
-- it has none, storing the prior only if there is one and the counts only if one is not
-- zero.  A value whose first byte is not __PVER, or whose shape byte has another bit set or
-- counts over __SEEN fingerprints, is no page record: padded() and load() raise an error
-- naming it.
-- the shape byte's parts: fingerprints, prior stored, counts stored
local function shape_parts(s)
  return s % 16, math.floor(s / __SPRI) % 2 == 1, math.floor(s / __SCNT) % 2 == 1
end
-- where the counts would start (1-based) and their bytes (0: not stored)
local function counts_at(s)
  local _, p, c = shape_parts(s)
  local at = __HSIZE + 1
  if p then at = at + 4 end
  if c then return at, __CB end
  return at, 0
end
-- the page record's length in a value (a shape byte trimmed away is 0)
local function page_size(v)
  local s = string.byte(v, 2) or 0
  local n = s % 16
  local at, cb = counts_at(s)
  return at - 1 + cb + __FPB * n
end
-- a page record without an estimator record after it: its trailing zero bytes after the
-- shape byte dropped
local function trim(p)
  return string.sub(p, 1, 2) .. (string.gsub(string.sub(p, 3), '%z+$', ''))
end
-- the value padded to its page record's length (stored without its trailing zero bytes
-- when no estimator record follows), that length and the shape byte
local function padded(v)
  if string.byte(v, 1) ~= __PVER then
    error('no page record (first byte not __PVER): ' .. string.format('%q', string.sub(v, 1, 40)))
  end
  local s = string.byte(v, 2) or 0
  if s >= 2 * __SCNT or s % 16 > __SEEN then
    error('no page record (shape byte ' .. s .. '): ' .. string.format('%q', string.sub(v, 1, 40)))
  end
  local size = page_size(v)
  if #v < size then v = v .. string.rep('\0', size - #v) end
  return v, size, s
end
local function load(v)
  local t = {c = {}, fp = {}, rest = ''}
  local size, s
  v, size, s = padded(v)
  local n, p, c = shape_parts(s)
  local _, _, imp, last = struct.unpack('__HFMT', v)
  t.imp, t.last = imp, last
  local at = __HSIZE + 1
  if p then
    local x = struct.unpack('<f', v, at)
    if x == x then t.prior = x end  -- NaN: none
    at = at + 4
  end
  for i = 1, __N do
    if c then t.c[i] = struct.unpack('<H', v, at); at = at + 2 else t.c[i] = 0 end
  end
  for i = 1, n do
    t.fp[i] = struct.unpack('<I__FPB', v, at)
    at = at + __FPB
  end
  t.rest = string.sub(v, size + 1)
  return t
end
local function dump(t)
  local s, parts = #t.fp, {}
  local prior = t.prior and t.prior == t.prior
  local counts = false
  for i = 1, __N do
    if t.c[i] ~= 0 then counts = true end
  end
  if prior then s = s + __SPRI end
  if counts then s = s + __SCNT end
  parts[1] = struct.pack('__HFMT', __PVER, s, t.imp, t.last)
  if prior then parts[#parts + 1] = struct.pack('<f', t.prior) end
  if counts then
    for i = 1, __N do parts[#parts + 1] = struct.pack('<H', math.min(t.c[i], 65535)) end
  end
  for i = 1, #t.fp do parts[#parts + 1] = struct.pack('<I__FPB', t.fp[i]) end
  local p = table.concat(parts)
  if t.rest == '' then return trim(p) end
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
