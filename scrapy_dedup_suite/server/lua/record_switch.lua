-- include: prelude
-- Replace a hash filter's parameter record by the record of its new layout (scrapy
-- convert-hash-layout), unless it names the new layout already.
-- KEYS[1]: the record; ARGV[1]: the layout it names now, ARGV[2]: the new layout; then
-- field, value, field, value, ... of the new record (``layout`` among them).
-- Returns 1 when the record was replaced (or created: it was lost), 0 when it named the
-- new layout already; refuses (STAMP) a record of another filter, writing nothing.
local kind = dedup_check_type(KEYS[1], 'hash', 'parameter record')
if kind == 'hash' then
  local backend = rcall('HGET', KEYS[1], 'backend')
  local layout = rcall('HGET', KEYS[1], 'layout')
  if backend == 'hash' and layout == ARGV[2] then return 0 end
  if backend ~= 'hash' or layout ~= ARGV[1] then
    dedup_fail('STAMP', 'record ' .. KEYS[1] .. ' describes a ' .. tostring(backend)
      .. ' filter of layout ' .. tostring(layout) .. ', not a hash filter of layout ' .. ARGV[1])
  end
  rcall('DEL', KEYS[1])
end
rcall('HSET', KEYS[1], unpack(ARGV, 3))
return 1
