-- include: prelude, grow
-- Membership test that records nothing, in the growing layout (grow.lua): 1 when the
-- fingerprint's field is in its bucket, 0 when not, grow_again when the client knew
-- another level. KEYS: the group's level record and the two buckets the field may be
-- in at the level the client knows (h mod 2^l, and 2^l more); ARGV: the field, and
-- that level l.
local st = grow_state(KEYS[1], KEYS[3])
if tonumber(ARGV[2]) ~= st[1] then return grow_again(st) end
local b = grow_bucket(grow_h(ARGV[1]) or 0, st)
return rcall('HEXISTS', b < 2 ^ st[1] and KEYS[2] or KEYS[3], ARGV[1])
