-- Create a filter's parameter record unless it exists; return what is stored.
-- KEYS[1]: the record (a hash), ARGV: field, value, field, value, ...
-- Returns {1 if created now else 0, HGETALL of the record}.
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'none' then
  redis.call('HSET', KEYS[1], unpack(ARGV))
  return {1, redis.call('HGETALL', KEYS[1])}
end
if kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE dedup: parameter record ' .. KEYS[1] .. ' holds a ' .. kind)
end
return {0, redis.call('HGETALL', KEYS[1])}
