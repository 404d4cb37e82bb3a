-- include: prelude, grow, purge
-- Janitor, the growing layout of hash (grow.lua): delete the expired fields of
-- consecutive buckets of one group (purge.lua), and count them off the fields its
-- level record holds, in the same atomic call, so that the group splits by the
-- fingerprints it keeps, not by all it was ever given. A record that is missing or
-- not one is left as it is (the add script refuses such a group).
-- KEYS[1]: the group's level record; then its buckets, in order. ARGV: as
-- bucket_purge.lua's. Returns {buckets finished, fields read, fields deleted,
-- fields holding no expiry}.
-- (The record is read first: one of another type refuses the call before a write.)
local raw = rcall('GET', KEYS[1])
local st = raw and grow_parse(raw)
local done, scanned, removed, invalid =
  purge_buckets(KEYS, 2, tonumber(ARGV[1]), tonumber(ARGV[2]))
if removed > 0 and st then
  st[3] = math.max(0, st[3] - removed)
  grow_save(KEYS[1], st)
end
return { done, scanned, removed, invalid }
