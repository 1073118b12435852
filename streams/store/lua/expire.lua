-- KEYS: inflight;  ARGV: url, order_id
local fl = redis.call('HGET', KEYS[1], ARGV[1])
if not fl or string.match(fl, '^([^|]*)|') ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
return 1
