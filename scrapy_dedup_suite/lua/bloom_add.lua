-- Check-and-add one fingerprint in one Bloom block, atomically.
-- KEYS[1]: the block's stamp (stamp.lua), KEYS[2]: the block (a Redis string used as a bitmap)
-- ARGV[1]: the stamp's value, ARGV[2]: fingerprint (hex), ARGV[3]: m (bits in the block), ARGV[4]: k
-- Returns 1 when all k bits were set already (seen), 0 when bits were added (new).
-- A duplicate only reads, so it sends nothing to replicas or the AOF.
local key = KEYS[2]
local m = tonumber(ARGV[3])
local positions = dedup_positions(ARGV[2], m, tonumber(ARGV[4]))
if not positions then return dedup_bad_fingerprint(ARGV[2]) end
local first = dedup_first_missing(key, positions)
if first == 0 then return 1 end
dedup_stamp(KEYS[1], ARGV[1])
dedup_ensure_bitmap(key, m)
dedup_set_from(key, positions, first)
return 0
