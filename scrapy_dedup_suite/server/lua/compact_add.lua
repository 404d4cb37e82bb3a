-- include: prelude, stamp
-- Check-and-record fingerprints in small hash buckets (the compact layout), each one
-- atomically. A fingerprint is a field of 8 bytes in one bucket; the field's value is
-- empty. Buckets stay small enough for the server's compact (listpack) encoding.
-- KEYS: one group per bucket the call touches: the stamp of the bucket's shard
-- (stamp.lua), then the bucket (a hash).
-- ARGV[1]: the stamp's value; then per fingerprint: its group (1-based) and its field.
-- Returns one answer per fingerprint, in order: 1 when its field was there (seen),
-- 0 after writing it (new). A fingerprint repeated in one call is new once, then seen.
dedup_check_stamps(2, ARGV[1])
-- First every answer (a bucket of another type refuses the whole call here, before
-- anything is written), then the writes.
local out, writes, written = {}, {}, {}
for i = 2, #ARGV, 2 do
  local g = tonumber(ARGV[i]) * 2 - 1
  local answer = rcall('HEXISTS', KEYS[g + 1], ARGV[i + 1])
  if answer == 0 then
    answer = dedup_repeat(written, KEYS[g + 1], ARGV[i + 1])
    if answer == 0 then writes[#writes + 1] = i end
  end
  out[#out + 1] = answer
end
for _, i in ipairs(writes) do
  local g = tonumber(ARGV[i]) * 2 - 1
  dedup_stamp(KEYS[g], ARGV[1])
  rcall('HSETNX', KEYS[g + 1], ARGV[i + 1], '')
end
return out
