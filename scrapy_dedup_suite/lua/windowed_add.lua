-- Check-and-add one fingerprint in a time-windowed Bloom filter, atomically.
-- KEYS[1]: the block's stamp (stamp.lua), KEYS[2..]: the live buckets of one
-- block, the current bucket first
-- ARGV[1]: the stamp's value, ARGV[2]: fingerprint (hex), ARGV[3]: m, ARGV[4]: k,
-- ARGV[5]: milliseconds until the current bucket leaves the window
-- Returns the 1-based index of the bucket that holds the fingerprint (seen),
-- or 0 after adding it to the current bucket (new).
local key = KEYS[2]
local m = tonumber(ARGV[3])
local positions = dedup_positions(ARGV[2], m, tonumber(ARGV[4]))
if not positions then return dedup_bad_fingerprint(ARGV[2]) end
local first = dedup_first_missing(key, positions)
if first == 0 then return 1 end
for b = 3, #KEYS do
  if dedup_first_missing(KEYS[b], positions) == 0 then return b - 1 end
end
dedup_stamp(KEYS[1], ARGV[1])
dedup_ensure_bitmap(key, m)
dedup_set_from(key, positions, first)
-- A bucket always carries its expiry (restored if it was lost, e.g. by a restore).
if rcall('PTTL', key) == -1 then
  rcall('PEXPIRE', key, ARGV[5])
end
return 0
