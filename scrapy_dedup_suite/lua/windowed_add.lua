-- Check-and-add one fingerprint in a time-windowed Bloom filter, atomically.
-- KEYS: the live buckets of one block, the current bucket first
-- ARGV[1]: fingerprint (hex), ARGV[2]: m, ARGV[3]: k,
-- ARGV[4]: milliseconds until the current bucket leaves the window
-- Returns the 1-based index of the bucket that holds the fingerprint (seen),
-- or 0 after adding it to the current bucket (new).
local m = tonumber(ARGV[2])
local positions = dedup_positions(ARGV[1], m, tonumber(ARGV[3]))
if not positions then return dedup_bad_fingerprint(ARGV[1]) end
for b = 1, #KEYS do
  local all = true
  for i = 1, #positions do
    if redis.call('GETBIT', KEYS[b], positions[i]) == 0 then
      all = false
      break
    end
  end
  if all then return b end
end
local key = KEYS[1]
dedup_ensure_bitmap(key, m)
for i = 1, #positions do
  redis.call('SETBIT', key, positions[i], 1)
end
-- A bucket always carries its expiry (restored if it was lost, e.g. by a restore).
if redis.call('PTTL', key) == -1 then
  redis.call('PEXPIRE', key, ARGV[4])
end
return 0
