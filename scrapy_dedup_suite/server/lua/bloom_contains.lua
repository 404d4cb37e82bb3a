-- include: prelude, positions, stamp
-- Membership test that records nothing.
-- KEYS: one or more bitmaps (Bloom blocks or time buckets of one block)
-- ARGV[1]: fingerprint (hex), ARGV[2]: m, ARGV[3]: k
-- Returns the 1-based index of the first key holding all k bits, or 0.
local positions = dedup_positions(ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]))
if not positions then dedup_bad_fingerprint(ARGV[1]) end
return dedup_find(KEYS, positions)
