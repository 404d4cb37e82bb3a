-- include: prelude
-- Restamp one slot of a filter for another layout of it (scrapy convert-hash-layout).
-- KEYS[1]: the stamp (stamp.lua); ARGV[1]: what the old layout's stamp says,
-- ARGV[2]: the new layout's.
-- A missing stamp is written too: from this call on, a worker still running the old
-- layout is refused in this slot (dedup:STAMP) instead of writing where nobody reads.
-- Returns 1 when the stamp changed, 0 when it said the new layout already; refuses
-- (STAMP) a stamp of any other filter, writing nothing.
dedup_check_type(KEYS[1], 'string', 'stamp')
local have = rcall('GET', KEYS[1])
if have == ARGV[2] then return 0 end
if have and have ~= ARGV[1] then
  dedup_stamp_mismatch(KEYS[1], have, ARGV[1])
end
rcall('SET', KEYS[1], ARGV[2])
return 1
