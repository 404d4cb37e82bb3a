-- Membership test in scalable Bloom filters that records nothing.
-- KEYS: one or more filters (layers.lua); ARGV as scalable_add.lua.
-- Returns the 1-based index of the first filter holding the fingerprint, or 0,
-- or <= -11 (more of the schedule needed).
local h1, h2 = dedup_hashes(ARGV[1])
if not h1 then return dedup_bad_fingerprint(ARGV[1]) end
local sched = dedup_schedule(3)
for b = 1, #KEYS do
  local n = dedup_layer_state(KEYS[b])
  if n > #sched then return dedup_need_layers(n) end
  if dedup_layers_hold(KEYS[b], n, sched, h1, h2) then return b end
end
return 0
