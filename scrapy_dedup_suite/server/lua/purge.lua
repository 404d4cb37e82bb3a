-- include: prelude
-- The janitor's purge of buckets whose fields' values are their expiries: each bucket
-- read whole (HGETALL: a listpack bucket is read whole anyway) and its expired fields
-- deleted in the same atomic call, so a field a crawler refreshed is never deleted.
-- purge_buckets(keys, first, budget, unit): the buckets keys[first..], in order, until
-- the one where it has read ``budget`` fields; ``unit``: of the stored expiries, in
-- milliseconds (see hash_add.lua). Returns buckets finished, fields read, fields
-- deleted, fields holding no expiry.
local function purge_buckets(keys, first, budget, unit)
  local now = dedup_now_ms()
  local done, scanned, removed, invalid = 0, 0, 0, 0
  for k = first, #keys do
    local flat = rcall('HGETALL', keys[k])
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
      rcall('HDEL', keys[k], unpack(expired, j, math.min(j + 999, #expired)))
    end
    scanned = scanned + #flat / 2
    removed = removed + #expired
    done = done + 1
    if scanned >= budget then break end
  end
  return done, scanned, removed, invalid
end
