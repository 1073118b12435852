-- KEYS: pages, buckets[, prior]
-- ARGV: urls
-- Returns per url its page value ('' = none): a read that finds each page's bucket and
-- field (lib.lua's find) in one step; with the host's prior key, its sums n, mean, log
-- ('' = none) follow (what an outcome's estimator update reads with the pages).
local out = {}
for i = 1, #ARGV do
  local _, _, cur = find(KEYS[1], KEYS[2], ARGV[i])
  out[#out + 1] = cur or ''
end
if KEYS[3] then
  local s = redis.call('HMGET', KEYS[3], 'n', 'mean', 'log')
  for k = 1, 3 do out[#out + 1] = s[k] or '' end
end
return out
