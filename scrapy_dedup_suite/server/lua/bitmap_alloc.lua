-- include: prelude, stamp
-- Allocate a Bloom bitmap at its full size unless it exists, with its stamp
-- (stamp.lua) and, for the first layer of a scalable filter, its layer record.
-- Never clears a bit.
-- KEYS[1]: the stamp, KEYS[2]: the bitmap, KEYS[3] (scalable): the layer record
-- ARGV[1]: the stamp's value, ARGV[2]: m
-- Returns 1 if the bitmap was created, 0 if it existed.
dedup_check_type(KEYS[2], 'string', 'Bloom block')
dedup_stamp(KEYS[1], ARGV[1])
local created = dedup_ensure_bitmap(KEYS[2], tonumber(ARGV[2]))
if KEYS[3] and rcall('EXISTS', KEYS[3]) == 0 then
  -- A first layer with bits but no record has lost its counts (eviction, DEL).
  if created == 0 and rcall('BITCOUNT', KEYS[2]) > 0 then
    dedup_fail('LAYERS', 'layer record ' .. KEYS[3] .. ' is missing but ' .. KEYS[2]
      .. ' holds fingerprints: the filter lost what it knew of its layers')
  end
  rcall('HSET', KEYS[3], 'n', 1, 'count', 0)
end
return created
