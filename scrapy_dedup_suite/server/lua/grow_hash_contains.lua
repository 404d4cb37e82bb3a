-- include: prelude, grow
-- Membership test that records nothing, in hash's growing layout (grow.lua): 1 when
-- the fingerprint's field is in its bucket and its expiry has not passed, 0 when not,
-- grow_again when the client knew another level. KEYS: as grow_compact_contains.lua's;
-- ARGV: the field, the level the client knows, and the unit of the stored expiries
-- in milliseconds (see hash_add.lua).
local st = grow_state(KEYS[1], KEYS[3])
if tonumber(ARGV[2]) ~= st[1] then return grow_again(st) end
local b = grow_bucket(grow_h(ARGV[1]) or 0, st)
local current = rcall('HGET', b < 2 ^ st[1] and KEYS[2] or KEYS[3], ARGV[1])
local expiry = tonumber(current or '0') or 0
if expiry * tonumber(ARGV[3]) > dedup_now_ms() then return 1 end
return 0
