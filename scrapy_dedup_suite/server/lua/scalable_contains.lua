-- include: prelude, layers
-- Membership test in scalable Bloom filters that records nothing.
-- KEYS: one group of keys per filter (layers.lua: its record, then one key per layer sent).
-- ARGV[1]: fingerprint (hex), ARGV[2]: the number of layers a filter may have,
-- ARGV[3..]: m, k and capacity per block of the layers sent (layers.lua).
-- Returns the 1-based index of the first filter holding the fingerprint, or 0,
-- or below ANSWER_MORE (more of the schedule needed: answers.py).
local h1, h2 = dedup_hashes(ARGV[1])
if not h1 then dedup_bad_fingerprint(ARGV[1]) end
local sched = dedup_schedule(ARGV, 3, #ARGV)
local size = #sched + 1
for b = 1, #KEYS / size do
  local g = 1 + (b - 1) * size
  local n = dedup_layer_state(KEYS, g)
  if n > #sched then return dedup_need_layers(n) end
  if dedup_layers_hold(KEYS, g, n, sched, h1, h2) then return b end
end
return 0
