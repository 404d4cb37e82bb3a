-- Membership test that records nothing.
-- KEYS: one or more bitmaps (Bloom blocks or time buckets of one block)
-- ARGV[1]: fingerprint (hex), ARGV[2]: m, ARGV[3]: k
-- Returns the 1-based index of the first key holding all k bits, or 0.
local positions = dedup_positions(ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]))
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
return 0
