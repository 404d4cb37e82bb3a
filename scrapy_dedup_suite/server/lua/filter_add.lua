-- include: prelude, positions, stamp
-- Check-and-add fingerprints in fixed-size Bloom filters, each one atomically.
-- keys: one group of 1 + n keys per block the call touches: the block's stamp
-- (stamp.lua), then its n filters (bloom: the block itself; windowed-bloom: the
-- live buckets of the block, the current one first).
-- argv[1]: the stamp's value, argv[2]: m (bits per filter), argv[3]: k,
-- argv[4]: n, argv[5]: expiry in ms the first filter must carry (0: none);
-- then per fingerprint: its group (1-based) and the fingerprint (hex).
-- Returns one answer per fingerprint, in order: the 1-based index of the filter
-- that holds it (seen), or 0 after adding it to the first filter (new). A
-- fingerprint repeated in one call is new once, then seen. Nothing is written
-- before every fingerprint and every stamp of the call is checked; a duplicate
-- only reads, so it sends nothing to replicas or the AOF.
-- The add step (a layout's, scripts.AddStep): run alone on KEYS and ARGV, or by
-- the frontier within its record-and-enqueue (frontier.lua, frontier_record).
local function dedup_add(keys, argv)
  local m, k, n, ttl = tonumber(argv[2]), tonumber(argv[3]), tonumber(argv[4]), tonumber(argv[5])
  local size = n + 1
  local groups, offsets = {}, {}
  for i = 6, #argv, 2 do
    local positions = dedup_positions(argv[i + 1], m, k)
    if not positions then dedup_bad_fingerprint(argv[i + 1]) end
    groups[#groups + 1] = (tonumber(argv[i]) - 1) * size + 1
    offsets[#offsets + 1] = positions
  end
  dedup_check_stamps(keys, size, argv[1])
  -- Every bitmap this call may read or write is checked before the first write, so
  -- a damaged one refuses the whole call instead of keeping what came before it;
  -- one that is missing is created at its first write.
  local missing = {}
  for i = 1, #groups do
    local g = groups[i]
    if missing[keys[g + 1]] == nil then
      missing[keys[g + 1]] = dedup_check_bitmap(keys[g + 1], m) == 0
      for b = 2, n do -- the older buckets, only read: a damaged one would fail the read
        dedup_check_bitmap(keys[g + b], m)
      end
    end
  end
  local out = {}
  for i = 1, #groups do
    local g, positions = groups[i], offsets[i]
    local key = keys[g + 1]
    local first = dedup_first_missing(key, positions)
    local answer = 0
    if first == 0 then
      answer = 1
    else
      for b = 2, n do
        if dedup_first_missing(keys[g + b], positions) == 0 then
          answer = b
          break
        end
      end
    end
    if answer == 0 then
      dedup_stamp(keys[g], argv[1])
      if missing[key] then
        rcall('SETBIT', key, m - 1, 0) -- created at its full size (see dedup_ensure_bitmap)
        missing[key] = false
      end
      dedup_set_from(key, positions, first)
      -- A time bucket always carries its expiry (restored if it was lost, e.g. by a restore).
      dedup_keep_ttl(key, ttl)
    end
    out[i] = answer
  end
  return out
end
