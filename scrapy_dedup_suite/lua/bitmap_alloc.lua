-- Allocate a Bloom block at its full size unless it exists. Never clears a bit.
-- KEYS[1]: the block, ARGV[1]: m. Returns 1 if it was created, 0 if it existed.
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'string' then return 0 end
if kind ~= 'none' then
  return redis.error_reply('WRONGTYPE dedup: Bloom block ' .. KEYS[1] .. ' holds a ' .. kind)
end
redis.call('SETBIT', KEYS[1], tonumber(ARGV[1]) - 1, 0)
return 1
