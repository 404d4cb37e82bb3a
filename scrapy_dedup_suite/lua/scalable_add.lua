-- Check-and-add one fingerprint in scalable Bloom filters, atomically.
-- KEYS[1]: the block's stamp (stamp.lua); then one group of keys per filter to
-- check (layers.lua: its record, then one key per layer sent)
-- (bloom: one block; windowed-bloom: the live buckets of one block, the current
-- one first); the fingerprint goes into the first filter.
-- ARGV[1]: the stamp's value, ARGV[2]: fingerprint (hex), ARGV[3]: expiry in ms
-- for keys created (0: none), ARGV[4..]: the layer schedule (layers.lua).
-- Returns the 1-based index of the filter holding the fingerprint (seen), or
-- 0 / -1 / -2 after adding it (new; -1: a layer was added; -2: past the last
-- layer), or <= -11 (more of the schedule needed; nothing written).
local h1, h2 = dedup_hashes(ARGV[2])
if not h1 then return dedup_bad_fingerprint(ARGV[2]) end
local sched, total = dedup_schedule(4)
local size = #sched + 1
local n1, count1
for b = 1, (#KEYS - 1) / size do
  local g = 2 + (b - 1) * size
  local n, count = dedup_layer_state(g)
  if n > #sched then return dedup_need_layers(n) end
  if b == 1 then n1, count1 = n, count end
  if dedup_layers_hold(g, n, sched, h1, h2) then return b end
end
dedup_stamp(KEYS[1], ARGV[1])
return dedup_layers_add(2, n1, count1, sched, total, h1, h2, tonumber(ARGV[3]))
