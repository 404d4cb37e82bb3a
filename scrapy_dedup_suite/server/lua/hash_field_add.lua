-- include: prelude, stamp
-- Check-and-record fingerprints whose fields the server expires itself (hash-field
-- TTL: Redis >= 7.4, Valkey >= 9), each one atomically. An expired field does not
-- exist for HEXISTS, whether or not the server has reclaimed it yet.
-- KEYS: one group per shard the call touches: the shard's stamp (stamp.lua), then
-- the shard (a hash: fingerprint -> 1, each field with its own expiry).
-- ARGV[1]: the stamp's value; ARGV[2]: unused here (the arguments are hash_add.lua's);
-- then per fingerprint: its group (1-based), its field, and the milliseconds it stays seen.
-- Returns one answer per fingerprint, in order: 1 when its field exists (seen), 0
-- after writing it with its expiry. A fingerprint repeated in one call is new once,
-- then seen. Nothing is written before every stamp and shard of the call is read.
dedup_check_stamps(2, ARGV[1])
-- A shard of another type fails its first read: every shard is read before any write.
local checked = {}
for i = 3, #ARGV, 3 do
  local shard = KEYS[tonumber(ARGV[i]) * 2]
  if not checked[shard] then
    checked[shard] = true
    rcall('HLEN', shard)
  end
end
local out = {}
for i = 3, #ARGV, 3 do
  local g = tonumber(ARGV[i]) * 2 - 1
  local shard, fp = KEYS[g + 1], ARGV[i + 1]
  local answer = rcall('HEXISTS', shard, fp)
  if answer == 0 then
    dedup_stamp(KEYS[g], ARGV[1])
    rcall('HSET', shard, fp, '1')
    rcall('HPEXPIRE', shard, ARGV[i + 2], 'FIELDS', 1, fp)
  end
  out[#out + 1] = answer
end
return out
