-- include: prelude, layers
-- Check-and-add fingerprints in scalable Bloom filters, each one atomically.
-- keys: one group per block the call touches: the block's stamp (stamp.lua),
-- then f filters (bloom: the block; windowed-bloom: the live buckets of the
-- block, the current one first), each its layer record and the layers sent
-- (layers.lua). Fingerprints go into the first filter.
-- argv[1]: the stamp's value, argv[2]: expiry in ms for keys created (0: none),
-- argv[3]: f, argv[4]: the number of layers a filter may have, argv[5]: s, the
-- layers sent, argv[6 .. 5 + 3s]: their m, k and capacity per block; then per
-- fingerprint: its group (1-based) and the fingerprint (hex).
-- Returns one answer per fingerprint, in order: the 1-based index of the
-- filter holding it (seen), or 0 / ANSWER_GREW / ANSWER_FULL after adding it
-- (new; a layer was added; past the last layer), or below ANSWER_MORE: more of the
-- schedule is needed (answers.py); then nothing was written for it nor for any later fingerprint of
-- its group, which all answer the same, and the client calls again with them.
-- A damaged layer record or bitmap refuses the whole call before any write.
-- The add step (a layout's, scripts.AddStep): run alone on KEYS and ARGV, or by
-- the frontier within its record-and-enqueue (frontier.lua, frontier_record).
local function dedup_add(keys, argv)
  local ttl, f, total, s = tonumber(argv[2]), tonumber(argv[3]), tonumber(argv[4]), tonumber(argv[5])
  local sched = dedup_schedule(argv, 6, 5 + 3 * s)
  local fsize = s + 1
  local size = 1 + f * fsize
  local groups, h1s, h2s = {}, {}, {}
  for i = 6 + 3 * s, #argv, 2 do
    local h1, h2 = dedup_hashes(argv[i + 1])
    if not h1 then dedup_bad_fingerprint(argv[i + 1]) end
    groups[#groups + 1] = (tonumber(argv[i]) - 1) * size + 1
    h1s[#h1s + 1], h2s[#h2s + 1] = h1, h2
  end
  dedup_check_stamps(keys, size, argv[1])
  -- Every layer record and every layer bitmap this call may read or write is
  -- checked before the first write, so a damaged one refuses the whole call
  -- instead of keeping what came before it.
  local checked = {}
  for i = 1, #groups do
    local g = groups[i]
    if not checked[g] then
      checked[g] = true
      for b = 1, f do
        local fg = g + 1 + (b - 1) * fsize
        local n = dedup_layer_state(keys, fg)
        for j = 1, math.min(n + 1, s) do -- the layers in use, and the next one if sent
          dedup_check_bitmap(keys[fg + j], sched[j][1])
        end
      end
    end
  end
  local out, blocked = {}, {}
  for i = 1, #groups do
    local g, h1, h2 = groups[i], h1s[i], h2s[i]
    local answer = blocked[g]
    if not answer then
      local n1, count1
      for b = 1, f do
        local fg = g + 1 + (b - 1) * fsize
        local n, count = dedup_layer_state(keys, fg)
        if n > s then
          answer = dedup_need_layers(n)
          break
        end
        if b == 1 then n1, count1 = n, count end
        if dedup_layers_hold(keys, fg, n, sched, h1, h2) then
          answer = b
          break
        end
      end
      if not answer then
        dedup_stamp(keys[g], argv[1])
        answer = dedup_layers_add(keys, g + 1, n1, count1, sched, total, h1, h2, ttl)
      end
      if answer < ANSWER_MORE then blocked[g] = answer end
    end
    out[i] = answer
  end
  return out
end
