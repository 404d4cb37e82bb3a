-- Migration: OR a bitmap uploaded beside a Bloom block (or bucket) into it,
-- atomically. Bits are only added; bits set meanwhile by crawlers are kept.
-- KEYS[1]: the target bitmap, KEYS[2]: the uploaded bitmap (same hash tag)
-- ARGV[1]: m, bits in the target; ARGV[2]: expiry in ms to give the target
-- when it has none (0: none, the plain Bloom filter)
local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'string' and kind ~= 'none' then
  return redis.error_reply('WRONGTYPE dedup: Bloom bitmap ' .. KEYS[1] .. ' holds a ' .. kind)
end
if kind == 'none' then
  redis.call('SETBIT', KEYS[1], tonumber(ARGV[1]) - 1, 0)
end
-- BITOP stores a new value, which drops the key's expiry: keep it.
local ttl = redis.call('PTTL', KEYS[1])
redis.call('BITOP', 'OR', KEYS[1], KEYS[1], KEYS[2])
redis.call('UNLINK', KEYS[2])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
elseif tonumber(ARGV[2]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
