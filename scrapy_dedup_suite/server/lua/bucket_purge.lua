-- include: prelude
-- Janitor, bucket layout: delete the expired fields of consecutive buckets of one
-- slot, each bucket read whole (HGETALL: a listpack bucket is read whole anyway) and
-- its expired fields deleted in the same atomic call, so a field a crawler refreshed
-- is never deleted. Stops after the bucket where it has read ARGV[1] fields.
-- KEYS: the buckets, in order. ARGV[1]: fields to read before stopping; ARGV[2]: the
-- unit of the stored expiries in milliseconds (see hash_add.lua).
-- Returns {buckets finished, fields read, fields deleted, fields holding no expiry}.
local now = dedup_now_ms()
local budget, unit = tonumber(ARGV[1]), tonumber(ARGV[2])
local done, scanned, removed, invalid = 0, 0, 0, 0
for k = 1, #KEYS do
  local flat = rcall('HGETALL', KEYS[k])
  local expired = {}
  for j = 1, #flat, 2 do
    local expiry = tonumber(flat[j + 1])
    if not expiry then
      invalid = invalid + 1
    elseif expiry * unit <= now then
      expired[#expired + 1] = flat[j]
    end
  end
  for j = 1, #expired, 1000 do
    rcall('HDEL', KEYS[k], unpack(expired, j, math.min(j + 999, #expired)))
  end
  scanned = scanned + #flat / 2
  removed = removed + #expired
  done = k
  if scanned >= budget then break end
end
return {done, scanned, removed, invalid}
