-- The page record (streams/store/page_record.py's docstring): load() gives a table
-- {imp, prior (nil = none), last, c = counts[__N], fp = fingerprints[__SEEN], rest = the
-- estimator record after the __PSIZE bytes of the page ('' = none)} from a binary record
-- (first byte __PVER) or the old text one; dump() packs it (always binary) with its rest,
-- or without its trailing zero bytes when it has none.
local function load(v)
  local t = {c = {}, fp = {}, rest = ''}
  if string.byte(v, 1) == __PVER then
    -- stored without its trailing zero bytes when no estimator record follows
    if #v < __PSIZE then v = v .. string.rep('\0', __PSIZE - #v) end
    local r = {struct.unpack('__PFMT', v)}
    t.imp, t.last = r[2], r[4]
    if r[3] == r[3] then t.prior = r[3] end  -- NaN: none
    for i = 1, __N do t.c[i] = r[4 + i] end
    for i = 1, __SEEN do t.fp[i] = r[4 + __N + i] end
    t.rest = string.sub(v, __PSIZE + 1)
  else
    local a, b, c, d = string.match(v, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)$')
    t.imp, t.prior, t.last = tonumber(a), tonumber(b), tonumber(c)
    local i = 0
    for n in string.gmatch(d, '[^,]+') do i = i + 1; t.c[i] = tonumber(n) end
    for k = 1, __N do t.c[k] = t.c[k] or 0 end
    for k = 1, __SEEN do t.fp[k] = 0 end
  end
  return t
end
local function dump(t)
  local a = {__PVER, t.imp, t.prior or 0, t.last}
  for i = 1, __N do a[4 + i] = math.min(t.c[i], 65535) end
  for i = 1, __SEEN do a[4 + __N + i] = t.fp[i] end
  local p = struct.pack('__PFMT', unpack(a))
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
