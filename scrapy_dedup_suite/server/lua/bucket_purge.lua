-- include: prelude, purge
-- Janitor, bucket layout: delete the expired fields of consecutive buckets of one
-- slot (purge.lua). Stops after the bucket where it has read ARGV[1] fields.
-- KEYS: the buckets, in order. ARGV[1]: fields to read before stopping; ARGV[2]: the
-- unit of the stored expiries in milliseconds (see hash_add.lua).
-- Returns {buckets finished, fields read, fields deleted, fields holding no expiry}.
return { purge_buckets(KEYS, 1, tonumber(ARGV[1]), tonumber(ARGV[2])) }
