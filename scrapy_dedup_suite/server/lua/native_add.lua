-- include: prelude, stamp
-- Check-and-add fingerprints in the server's own Bloom filters (BF.*: Redis 8,
-- RedisBloom, valkey-bloom), each one atomically.
-- keys: one group of 1 + n keys per block the call touches: the block's stamp
-- (stamp.lua), then its n filters (native-bloom: the block's filter;
-- windowed-native-bloom: the block's live buckets, the current one first).
-- argv[1]: the stamp's value, argv[2]: capacity of a block's filter, argv[3]: its
-- error rate, argv[4]: expansion (0: NONSCALING), argv[5]: n, argv[6]: expiry in ms
-- the first filter must carry (0: none); then per fingerprint: its group (1-based)
-- and the fingerprint.
-- Returns one answer per fingerprint, in order: the 1-based index of the filter
-- that holds it (seen), or 0 after adding it to the first filter (new).
-- BF.INSERT, not BF.ADD: after FLUSHALL, eviction or a clear() by another worker,
-- BF.ADD would create the missing filter with the server's defaults (capacity
-- 100, 1% error), where BF.INSERT creates it with this filter's parameters.
-- The add step (a layout's, scripts.AddStep): run alone on KEYS and ARGV, or by
-- the frontier within its record-and-enqueue (frontier.lua, frontier_record).
local function dedup_add(keys, argv)
  local n, ttl = tonumber(argv[5]), tonumber(argv[6])
  local size = n + 1
  local insert = { 'CAPACITY', argv[2], 'ERROR', argv[3] }
  if argv[4] == '0' then
    insert[#insert + 1] = 'NONSCALING'
  else
    insert[#insert + 1] = 'EXPANSION'
    insert[#insert + 1] = argv[4]
  end
  insert[#insert + 1] = 'ITEMS'
  local items = #insert + 1
  dedup_check_stamps(keys, size, argv[1])
  -- First every answer (BF.EXISTS), then the writes. A NONSCALING filter that could
  -- not take every fingerprint this call adds to it refuses the whole call before
  -- anything is written: never a part of a batch recorded and the rest refused.
  local out, pending, adds = {}, {}, {}
  for i = 7, #argv, 2 do
    local g = (tonumber(argv[i]) - 1) * size + 1
    local fp = argv[i + 1]
    local answer = 0
    for b = 2, n do
      if rcall('BF.EXISTS', keys[g + b], fp) == 1 then
        answer = b
        break
      end
    end
    if answer == 0 and rcall('BF.EXISTS', keys[g + 1], fp) == 1 then answer = 1 end
    if answer == 0 then
      -- How many distinct fingerprints this call may add to each first filter.
      local key = keys[g + 1]
      local field = key .. '\0' .. fp
      if not pending[field] then
        pending[field] = true
        adds[key] = (adds[key] or 0) + 1
      end
    end
    out[#out + 1] = answer
  end
  if argv[4] == '0' then
    local capacity = tonumber(argv[2])
    for key, count in pairs(adds) do
      local held = rcall('BF.CARD', key)
      if held + count > capacity then
        dedup_fail('FULL', 'Bloom filter ' .. key .. ': non scaling filter is full (it holds ' .. held
          .. ' of its capacity ' .. capacity .. ' and this call would add ' .. count .. ')')
      end
    end
  end
  for i = 7, #argv, 2 do
    local j = (i - 5) / 2
    if out[j] == 0 then
      local g = (tonumber(argv[i]) - 1) * size + 1
      local key = keys[g + 1]
      dedup_stamp(keys[g], argv[1])
      insert[items] = argv[i + 1]
      local added = rcall('BF.INSERT', key, unpack(insert))[1]
      if type(added) == 'table' then
        -- A NONSCALING filter that is full: refuse, never answer "seen".
        dedup_fail('REFUSED', 'Bloom filter ' .. key .. ' refused a fingerprint: ' .. tostring(added.err))
      end
      -- 0: a repeat within this call (or a false positive of the bits just set): seen.
      if added == 0 then out[j] = 1 end
      -- A time bucket always carries its expiry (restored if it was lost, e.g. by a restore).
      dedup_keep_ttl(key, ttl)
    end
  end
  return out
end
