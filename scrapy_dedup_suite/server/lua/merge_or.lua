-- include: prelude, stamp
-- Migration: OR a bitmap uploaded beside a Bloom block (or bucket) into it,
-- atomically. Bits are only added; bits set meanwhile by crawlers are kept.
-- KEYS[1]: the block's stamp (stamp.lua), KEYS[2]: the target bitmap,
-- KEYS[3]: the uploaded bitmap (same hash tag)
-- ARGV[1]: the stamp's value, ARGV[2]: m, bits in the target; ARGV[3]: expiry in
-- ms to give the target when it has none (0: none, the plain Bloom filter)
-- KEYS[4], ARGV[4], ARGV[5] (a scalable filter's first layer): its layer record,
-- the number of fingerprints the bitmap holds, added to the record's count, and
-- the round's token: a round merged again (a resumed migration) adds no count.
dedup_check_type(KEYS[2], 'string', 'Bloom bitmap')
dedup_stamp(KEYS[1], ARGV[1])
local created = dedup_ensure_bitmap(KEYS[2], tonumber(ARGV[2]))
if created == 1 and KEYS[4] then
  rcall('HSET', KEYS[4], 'n', 1, 'count', 0)
end
-- BITOP stores a new value, which drops the key's expiry: keep it.
local ttl = rcall('PTTL', KEYS[2])
rcall('BITOP', 'OR', KEYS[2], KEYS[2], KEYS[3])
rcall('UNLINK', KEYS[3])
if ttl > 0 then
  rcall('PEXPIRE', KEYS[2], ttl)
elseif tonumber(ARGV[3]) > 0 then
  rcall('PEXPIRE', KEYS[2], ARGV[3])
end
if KEYS[4] then
  if rcall('HGET', KEYS[4], 'merged') ~= ARGV[5] then
    rcall('HINCRBY', KEYS[4], 'count', ARGV[4])
    rcall('HSET', KEYS[4], 'merged', ARGV[5])
  end
  dedup_keep_ttl(KEYS[4], tonumber(ARGV[3]))
end
return 1
