-- Delete a key only if it holds the expected type, so that a key another
-- program wrote under the same name is never deleted by mistake.
-- KEYS[1]: the key, ARGV[1]: expected type. Returns the type found.
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == ARGV[1] then
  redis.call('UNLINK', KEYS[1])
end
return kind
