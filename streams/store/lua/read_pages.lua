-- KEYS: pages, buckets, est
-- ARGV: urls
-- Returns per url its page value and its old-form estimator record ('' = none): a read
-- that finds each page's bucket and field (lib.lua's find) in one step.  The est hash
-- (state written before record version 1) is looked into only when it exists.
local out = {}
local est = redis.call('EXISTS', KEYS[3]) == 1
for i = 1, #ARGV do
  local url = ARGV[i]
  local _, _, cur = find(KEYS[1], KEYS[2], url)
  out[#out + 1] = cur or ''
  out[#out + 1] = est and redis.call('HGET', KEYS[3], url) or ''
end
return out
