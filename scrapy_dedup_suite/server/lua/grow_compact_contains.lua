-- include: prelude, grow
-- Membership test that records nothing, in the growing layout (grow.lua): 1 when the
-- fingerprint's field is in its bucket, 0 when not, grow_again when the client sent
-- the buckets of another level. KEYS: the group's level record and the two buckets the
-- field may be in at the level the client knows; ARGV[1]: the field.
local st = grow_state(KEYS[1], KEYS[3])
local b = grow_bucket(grow_h(ARGV[1]) or 0, st)
if b == grow_number(KEYS[2]) then return rcall('HEXISTS', KEYS[2], ARGV[1]) end
if b == grow_number(KEYS[3]) then return rcall('HEXISTS', KEYS[3], ARGV[1]) end
return grow_again(st)
