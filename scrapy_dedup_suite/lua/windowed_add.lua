-- Check-and-add one fingerprint in a time-windowed Bloom filter, atomically.
-- KEYS: the live buckets of one block, the current bucket first
-- ARGV[1]: fingerprint (hex), ARGV[2]: m, ARGV[3]: k,
-- ARGV[4]: milliseconds until the current bucket leaves the window
-- Returns the 1-based index of the bucket that holds the fingerprint (seen),
-- or 0 after adding it to the current bucket (new).
local key = KEYS[1]
local m = tonumber(ARGV[2])
local positions = dedup_positions(ARGV[1], m, tonumber(ARGV[3]))
if not positions then return dedup_bad_fingerprint(ARGV[1]) end
local first = dedup_first_missing(key, positions)
if first == 0 then return 1 end
for b = 2, #KEYS do
  if dedup_first_missing(KEYS[b], positions) == 0 then return b end
end
dedup_ensure_bitmap(key, m)
dedup_set_from(key, positions, first)
-- A bucket always carries its expiry (restored if it was lost, e.g. by a restore).
if rcall('PTTL', key) == -1 then
  rcall('PEXPIRE', key, ARGV[4])
end
return 0
