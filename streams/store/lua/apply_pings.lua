-- A batch of pings of one host from one (topic, partition), in offset order: the stored
-- offset is read once and written once (a ping at or below it is 'dup-offset').
-- KEYS: pages, offsets, buckets
-- ARGV: offset field, t_delay_s, (unused: was the dedup window), (unused: was the most
-- fingerprints kept), then per ping 6 values: offset, url, source index (1-based),
-- changed_at ('' = unknown), received_at, fingerprint (1..2^48-1, __FPB bytes in the record)
-- Returns code, page value per ping.  The rule is models.decision.pings' "live"
-- (tests/integration/test_ping_rule_lua.py).  Duplicates: the page record keeps the
-- fingerprints of its last __SEEN pings that were not duplicates (any source, newest
-- first, the shape byte counting them); a ping with one of them is 'duplicate' (a re-sent
-- ping, however late, while fewer than __SEEN other pings of the page came in between).  A non-duplicate ping
-- records its fingerprint whatever its verdict (as the old per-host set did).
local stored = redis.call('HGET', KEYS[2], ARGV[1])
local done = stored and tonumber(stored) or -1
local top, top_s = done, nil
local t_delay = tonumber(ARGV[2])
local res = {}
for i = 5, #ARGV, 6 do
  local off, url = tonumber(ARGV[i]), ARGV[i + 1]
  local pkey, f, cur, okey = find(KEYS[1], KEYS[3], url)
  local code, v = nil, cur or ''
  if off <= done then
    code = 'dup-offset'
  else
    if off > top then top, top_s = off, ARGV[i] end
    if not cur then
      code = 'unknown'
    else
      -- the fields a ping reads and writes taken at their offsets and spliced in, the
      -- bytes dump(load(cur)) would write without unpacking the record (a quarter of
      -- Redis's time per ping, docs/benchmarks.md "Design decisions")
      local v0, size, shape = padded(cur)
      local n, fpb = tonumber(ARGV[i + 2]), struct.pack('<I__FPB', tonumber(ARGV[i + 5]))
      local at, cb = counts_at(shape)
      local counts = string.sub(v0, at, at + cb - 1)
      local seen = string.sub(v0, at + cb, size)
      local s = string.find(seen, fpb, 1, true)
      while s and (s - 1) % __FPB ~= 0 do  -- aligned only
        s = string.find(seen, fpb, s + 1, true)
      end
      if s then
        code = 'duplicate'
      else
        local received = tonumber(ARGV[i + 4])
        local last = struct.unpack('<d', v0, __LPOS)
        local changed = tonumber(ARGV[i + 3])
        if last > 0 and ((changed and changed < last) or received < last) then
          code = 'before-crawl'
        elseif last > 0 and received <= last + t_delay then
          code = 'within-delay'
        else
          -- the counts inserted (all zero) when not stored, then source n's one more
          if cb == 0 then counts, shape = string.rep('\0', __CB), shape + __SCNT end
          local k = 2 * n - 1
          local c = struct.unpack('<H', counts, k)
          counts = string.sub(counts, 1, k - 1) .. struct.pack('<H', math.min(c + 1, 65535))
            .. string.sub(counts, k + 2)
          code = 'applied'
        end
        -- the new fingerprint first, the oldest dropped when __SEEN are kept
        local keep = math.min(#seen / __FPB, __SEEN - 1)
        v = string.sub(v0, 1, 1) .. string.char(shape - shape % 16 + keep + 1)
          .. string.sub(v0, 3, at - 1) .. counts .. fpb .. string.sub(seen, 1, __FPB * keep)
          .. string.sub(v0, size + 1)
        if #cur <= size then v = trim(v) end  -- as dump()
        put(pkey, f, v, okey, url)
      end
    end
  end
  res[#res + 1] = code
  res[#res + 1] = v
end
if top_s then redis.call('HSET', KEYS[2], ARGV[1], top_s) end
return res
