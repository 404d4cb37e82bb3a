-- include: prelude, purge
-- Janitor, the growing layout of hash (grow.lua): delete the expired fields of
-- consecutive buckets of one group (purge.lua), and count them off the fields its
-- level record holds, in the same atomic call, so that the group splits by the
-- fingerprints it keeps, not by all it was ever given. A record that is missing or
-- not one is left as it is (the add script refuses such a group).
-- KEYS[1]: the group's level record; then its buckets, in order. ARGV: as
-- bucket_purge.lua's. Returns {buckets finished, fields read, fields deleted,
-- fields holding no expiry}.
-- (The record is read first: one of another type refuses the call before a write.)
local l, s, n = string.match(rcall('GET', KEYS[1]) or '', '^(%d+) (%d+) (%d+)$')
local done, scanned, removed, invalid =
  purge_buckets(KEYS, 2, tonumber(ARGV[1]), tonumber(ARGV[2]))
if removed > 0 and n then
  local held = math.max(0, tonumber(n) - removed)
  rcall('SET', KEYS[1], string.format('%d %d %d', tonumber(l), tonumber(s), held))
end
return { done, scanned, removed, invalid }
