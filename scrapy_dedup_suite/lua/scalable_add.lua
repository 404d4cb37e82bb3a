-- Check-and-add one fingerprint in scalable Bloom filters, atomically.
-- KEYS: the filters to check (bloom: one block; windowed-bloom: the live
-- buckets of one block, the current one first); the fingerprint goes into KEYS[1].
-- ARGV[1]: fingerprint (hex), ARGV[2]: expiry in ms for keys created (0: none),
-- ARGV[3..]: the layer schedule (layers.lua).
-- Returns the 1-based index of the filter holding the fingerprint (seen), or
-- 0 / -1 / -2 after adding it (new; -1: a layer was added; -2: past the last
-- layer), or <= -11 (more of the schedule needed; nothing written).
local h1, h2 = dedup_hashes(ARGV[1])
if not h1 then return dedup_bad_fingerprint(ARGV[1]) end
local sched, total = dedup_schedule(3)
local n1, count1
for b = 1, #KEYS do
  local n, count = dedup_layer_state(KEYS[b])
  if n > #sched then return dedup_need_layers(n) end
  if b == 1 then n1, count1 = n, count end
  if dedup_layers_hold(KEYS[b], n, sched, h1, h2) then return b end
end
return dedup_layers_add(KEYS[1], n1, count1, sched, total, h1, h2, tonumber(ARGV[2]))
