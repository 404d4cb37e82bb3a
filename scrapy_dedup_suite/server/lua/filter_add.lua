-- include: prelude, positions, stamp
-- Check-and-add fingerprints in fixed-size Bloom filters, each one atomically.
-- KEYS: one group of 1 + n keys per block the call touches: the block's stamp
-- (stamp.lua), then its n filters (bloom: the block itself; windowed-bloom: the
-- live buckets of the block, the current one first).
-- ARGV[1]: the stamp's value, ARGV[2]: m (bits per filter), ARGV[3]: k,
-- ARGV[4]: n, ARGV[5]: expiry in ms the first filter must carry (0: none);
-- then per fingerprint: its group (1-based) and the fingerprint (hex).
-- Returns one answer per fingerprint, in order: the 1-based index of the filter
-- that holds it (seen), or 0 after adding it to the first filter (new). A
-- fingerprint repeated in one call is new once, then seen. Nothing is written
-- before every fingerprint and every stamp of the call is checked; a duplicate
-- only reads, so it sends nothing to replicas or the AOF.
local m, k, n, ttl = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local size = n + 1
local groups, offsets = {}, {}
for i = 6, #ARGV, 2 do
  local positions = dedup_positions(ARGV[i + 1], m, k)
  if not positions then dedup_bad_fingerprint(ARGV[i + 1]) end
  groups[#groups + 1] = (tonumber(ARGV[i]) - 1) * size + 1
  offsets[#offsets + 1] = positions
end
dedup_check_stamps(size, ARGV[1])
-- Every bitmap this call may read or write is checked before the first write, so
-- a damaged one refuses the whole call instead of keeping what came before it;
-- one that is missing is created at its first write.
local missing = {}
for i = 1, #groups do
  local g = groups[i]
  if missing[KEYS[g + 1]] == nil then
    missing[KEYS[g + 1]] = dedup_check_bitmap(KEYS[g + 1], m) == 0
    for b = 2, n do -- the older buckets, only read: a damaged one would fail the read
      dedup_check_bitmap(KEYS[g + b], m)
    end
  end
end
local out = {}
for i = 1, #groups do
  local g, positions = groups[i], offsets[i]
  local key = KEYS[g + 1]
  local first = dedup_first_missing(key, positions)
  local answer = 0
  if first == 0 then
    answer = 1
  else
    for b = 2, n do
      if dedup_first_missing(KEYS[g + b], positions) == 0 then
        answer = b
        break
      end
    end
  end
  if answer == 0 then
    dedup_stamp(KEYS[g], ARGV[1])
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
