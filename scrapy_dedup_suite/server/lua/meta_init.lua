-- include: prelude
-- Create a filter's parameter record unless it exists; return what is stored.
-- KEYS[1]: the record (a hash), ARGV: field, value, field, value, ...
-- Returns {1 if created now else 0, HGETALL of the record}.
local kind = dedup_check_type(KEYS[1], 'hash', 'parameter record')
if kind == 'none' then
  rcall('HSET', KEYS[1], unpack(ARGV))
  return {1, rcall('HGETALL', KEYS[1])}
end
return {0, rcall('HGETALL', KEYS[1])}
