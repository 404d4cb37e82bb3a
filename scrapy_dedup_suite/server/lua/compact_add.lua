-- include: prelude, stamp
-- Check-and-record fingerprints in small hash buckets (the compact layout), each one
-- atomically. A fingerprint is a field of 8 bytes in one bucket; the field's value is
-- empty. Buckets stay small enough for the server's compact (listpack) encoding.
-- keys: one group per bucket the call touches: the stamp of the bucket's shard
-- (stamp.lua), then the bucket (a hash).
-- argv[1]: the stamp's value; then per fingerprint: its group (1-based) and its field.
-- Returns one answer per fingerprint, in order: 1 when its field was there (seen),
-- 0 after writing it (new). A fingerprint repeated in one call is new once, then seen.
-- The add step (a layout's, scripts.AddStep): run alone on KEYS and ARGV, or by
-- the frontier within its record-and-enqueue (frontier.lua, frontier_record).
local function dedup_add(keys, argv)
  dedup_check_stamps(keys, 2, argv[1])
  -- First every answer (a bucket of another type refuses the whole call here, before
  -- anything is written), then the writes.
  local out, writes, written = {}, {}, {}
  for i = 2, #argv, 2 do
    local g = tonumber(argv[i]) * 2 - 1
    local answer = rcall('HEXISTS', keys[g + 1], argv[i + 1])
    if answer == 0 then
      answer = dedup_repeat(written, keys[g + 1], argv[i + 1])
      if answer == 0 then writes[#writes + 1] = i end
    end
    out[#out + 1] = answer
  end
  for _, i in ipairs(writes) do
    local g = tonumber(argv[i]) * 2 - 1
    dedup_stamp(keys[g], argv[1])
    rcall('HSET', keys[g + 1], argv[i + 1], '')
  end
  return out
end
