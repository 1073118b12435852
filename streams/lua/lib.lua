local function parts(v)
  local a, b, c, d = string.match(v, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)$')
  return a, b, c, d
end
local function applied(okey, field, offset)
  local last = redis.call('HGET', okey, field)
  return last and tonumber(last) >= tonumber(offset)
end
