-- include: prelude, stamp
-- Check-and-record fingerprints whose fields the server expires itself (hash-field
-- TTL: Redis >= 7.4, Valkey >= 9), each one atomically. An expired field does not
-- exist for HEXISTS, whether or not the server has reclaimed it yet.
-- keys: one group per shard the call touches: the shard's stamp (stamp.lua), then
-- the shard (a hash: fingerprint -> 1, each field with its own expiry).
-- argv[1]: the stamp's value; argv[2]: unused here (the arguments are hash_add.lua's);
-- then per fingerprint: its group (1-based), its field, and the milliseconds it stays seen.
-- Returns one answer per fingerprint, in order: 1 when its field exists (seen), 0
-- after writing it with its expiry. A fingerprint repeated in one call is new once,
-- then seen. Nothing is written before every stamp and shard of the call is read.
-- The add step (a layout's, scripts.AddStep): run alone on KEYS and ARGV, or by
-- the frontier within its record-and-enqueue (frontier.lua, frontier_record).
local function dedup_add(keys, argv)
  dedup_check_stamps(keys, 2, argv[1])
  -- A shard of another type fails its first read: every shard is read before any write.
  local checked = {}
  for i = 3, #argv, 3 do
    local shard = keys[tonumber(argv[i]) * 2]
    if not checked[shard] then
      checked[shard] = true
      rcall('HLEN', shard)
    end
  end
  local out = {}
  for i = 3, #argv, 3 do
    local g = tonumber(argv[i]) * 2 - 1
    local shard, fp = keys[g + 1], argv[i + 1]
    local answer = rcall('HEXISTS', shard, fp)
    if answer == 0 then
      dedup_stamp(keys[g], argv[1])
      rcall('HSET', shard, fp, '1')
      rcall('HPEXPIRE', shard, argv[i + 2], 'FIELDS', 1, fp)
    end
    out[#out + 1] = answer
  end
  return out
end
