-- Migration: OR a bitmap uploaded beside a Bloom block (or bucket) into it,
-- atomically. Bits are only added; bits set meanwhile by crawlers are kept.
-- KEYS[1]: the target bitmap, KEYS[2]: the uploaded bitmap (same hash tag)
-- ARGV[1]: m, bits in the target; ARGV[2]: expiry in ms to give the target
-- when it has none (0: none, the plain Bloom filter)
-- KEYS[3], ARGV[3] (a scalable filter's first layer): its layer record, and the
-- number of fingerprints the bitmap holds, added to the record's count
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
if KEYS[3] then
  redis.call('HINCRBY', KEYS[3], 'count', ARGV[3])
  if tonumber(ARGV[2]) > 0 and redis.call('PTTL', KEYS[3]) == -1 then
    redis.call('PEXPIRE', KEYS[3], ARGV[2])
  end
end
return 1
