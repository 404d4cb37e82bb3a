-- Check-and-add one fingerprint in one Bloom block, atomically.
-- KEYS[1]: the block (a Redis string used as a bitmap)
-- ARGV[1]: fingerprint (hex), ARGV[2]: m (bits in the block), ARGV[3]: k
-- Returns 1 when all k bits were set already (seen), 0 when bits were added (new).
-- A duplicate only reads, so it sends nothing to replicas or the AOF.
local key = KEYS[1]
local m = tonumber(ARGV[2])
local positions = dedup_positions(ARGV[1], m, tonumber(ARGV[3]))
if not positions then return dedup_bad_fingerprint(ARGV[1]) end
local first = dedup_first_missing(key, positions)
if first == 0 then return 1 end
dedup_ensure_bitmap(key, m)
dedup_set_from(key, positions, first)
return 0
