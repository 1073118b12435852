-- A batch of pings of one host from one (topic, partition), in offset order: the stored
-- offset is read once and written once (a ping at or below it is 'dup-offset').
-- KEYS: pages, offsets, seen
-- ARGV: offset field, t_delay_s, dedup window s, most fingerprints kept, then per ping 6
-- values: offset, url, source index (1-based), changed_at ('' = unknown),
-- received_at, fingerprint
-- Returns code, page value per ping.  The rule is models.decision.pings' "live"
-- (tests/streams/test_ping_rule_lua.py).  Duplicates: a fingerprint seen within the window;
-- the window is trimmed once at the end, and an entry the sequential trims would already
-- have removed (score below ``cut``) does not count, so a batch decides exactly as the
-- pings one at a time would.
local stored = redis.call('HGET', KEYS[2], ARGV[1])
local done = stored and tonumber(stored) or -1
local top, top_s = done, nil
local t_delay, window, most = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local cut = nil
local res = {}
for i = 5, #ARGV, 6 do
  local off, url = tonumber(ARGV[i]), ARGV[i + 1]
  local cur = redis.call('HGET', KEYS[1], url)
  local code, v = nil, cur or ''
  if off <= done then
    code = 'dup-offset'
  else
    if off > top then top, top_s = off, ARGV[i] end
    if not cur then
      code = 'unknown'
    else
      local received, fp = tonumber(ARGV[i + 4]), ARGV[i + 5]
      local seen = redis.call('ZSCORE', KEYS[3], fp)
      if seen and (cut == nil or tonumber(seen) >= cut) then
        code = 'duplicate'
      else
        redis.call('ZADD', KEYS[3], received, fp)
        if cut == nil or received - window > cut then cut = received - window end
        local imp, prior, last_s, counts = parts(cur)
        local last = tonumber(last_s)
        local changed = tonumber(ARGV[i + 3])
        if last > 0 and ((changed and changed < last) or received < last) then
          code = 'before-crawl'
        elseif last > 0 and received <= last + t_delay then
          code = 'within-delay'
        else
          local n, k, out = tonumber(ARGV[i + 2]), 0, {}
          for c in string.gmatch(counts, '[^,]+') do
            k = k + 1
            if k == n then c = tostring(tonumber(c) + 1) end
            out[#out + 1] = c
          end
          v = imp .. '|' .. prior .. '|' .. last_s .. '|' .. table.concat(out, ',')
          redis.call('HSET', KEYS[1], url, v)
          code = 'applied'
        end
      end
    end
  end
  res[#res + 1] = code
  res[#res + 1] = v
end
if top_s then redis.call('HSET', KEYS[2], ARGV[1], top_s) end
if cut then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. cut)
  -- and at most `most` fingerprints per host (the oldest go first): a flood of distinct
  -- pings cannot grow the set toward Redis OOM; an old duplicate may then count again
  local over = redis.call('ZCARD', KEYS[3]) - most
  if over > 0 then redis.call('ZREMRANGEBYRANK', KEYS[3], 0, over - 1) end
end
return res
