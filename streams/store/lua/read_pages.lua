-- KEYS: pages, buckets, est
-- ARGV: urls
-- Returns per url its page value and its old-form estimator record ('' = none): a read
-- that finds each page's bucket (lib.lua's page_key) in one step.
local out = {}
for i = 1, #ARGV do
  local url = ARGV[i]
  out[#out + 1] = redis.call('HGET', page_key(KEYS[1], KEYS[2], url), url) or ''
  out[#out + 1] = redis.call('HGET', KEYS[3], url) or ''
end
return out
