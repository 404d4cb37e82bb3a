-- include: prelude, grow
-- Forget fingerprints of one group of the growing layout (grow.lua): each field is
-- deleted from both buckets it may be in at the level the client knows (a split moves
-- fields between those two alone), and the level record counts off what was deleted,
-- in the same atomic call, so that the group splits by the fields it holds.
-- KEYS[1]: the group's level record, KEYS[2]: its stamp; then per field the two buckets
-- it may be in (h mod 2^l, and 2^l more). ARGV[1]: the level l the client knows; then
-- the fields, in the order of their buckets.
-- Returns how many fields it deleted; grow_again's answer (below ANSWER_MORE) when the
-- group is at another level, having deleted nothing (the client sends it again).
-- Every bucket's type is checked first: one of another type refuses the call unwritten.
local st = grow_state(KEYS[1], KEYS[2])
if tonumber(ARGV[1]) ~= st[1] then return grow_again(st) end
local checked = {}
for k = 3, #KEYS do
  if not checked[KEYS[k]] then
    dedup_check_type(KEYS[k], 'hash', 'bucket')
    checked[KEYS[k]] = true
  end
end
local removed = 0
for i = 2, #ARGV do
  local k = 2 * i - 1
  removed = removed + rcall('HDEL', KEYS[k], ARGV[i]) + rcall('HDEL', KEYS[k + 1], ARGV[i])
end
if removed > 0 then
  st[3] = math.max(0, st[3] - removed)
  grow_save(KEYS[1], st)
end
return removed
