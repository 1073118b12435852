-- KEYS: control, offsets;  ARGV: offset field, offset, field, value, ...
if applied(KEYS[2], ARGV[1], ARGV[2]) then return 'dup-offset' end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
for i = 3, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
return 'applied'
