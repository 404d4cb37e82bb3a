-- include: prelude
-- Replace a filter's parameter record by the record of its new layout (scrapy
-- convert-hash-layout, convert-to-growing), unless it names the new layout already.
-- KEYS[1]: the record; ARGV[1]: the filter's backend, ARGV[2]: the record's field that
-- tells its layouts apart, ARGV[3]: what that field says now, ARGV[4]: what it says in
-- the new layout; then field, value, field, value, ... of the new record.
-- Returns 1 when the record was replaced (or created: it was lost), 0 when it named the
-- new layout already; refuses (STAMP) a record of another filter, writing nothing.
local kind = dedup_check_type(KEYS[1], 'hash', 'parameter record')
if kind == 'hash' then
  local backend = rcall('HGET', KEYS[1], 'backend')
  local layout = rcall('HGET', KEYS[1], ARGV[2])
  if backend == ARGV[1] and layout == ARGV[4] then return 0 end
  if backend ~= ARGV[1] or layout ~= ARGV[3] then
    dedup_fail('STAMP', 'record ' .. KEYS[1] .. ' describes a ' .. tostring(backend)
      .. ' filter with ' .. ARGV[2] .. ' ' .. tostring(layout) .. ', not a ' .. ARGV[1]
      .. ' filter with ' .. ARGV[2] .. ' ' .. ARGV[3])
  end
  rcall('DEL', KEYS[1])
end
rcall('HSET', KEYS[1], unpack(ARGV, 5))
return 1
