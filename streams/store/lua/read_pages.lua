-- KEYS: pages, buckets
-- ARGV: urls
-- Returns per url its page value ('' = none): a read that finds each page's bucket and
-- field (lib.lua's find) in one step.
local out = {}
for i = 1, #ARGV do
  local _, _, cur = find(KEYS[1], KEYS[2], ARGV[i])
  out[#out + 1] = cur or ''
end
return out
