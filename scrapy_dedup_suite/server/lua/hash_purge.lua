-- include: prelude
-- Janitor: delete the given fields of one shard whose expiry has passed by the
-- server's clock, compared and deleted atomically: a field a crawler refreshed
-- after the janitor read it has a future expiry now and is kept.
-- KEYS[1]: the shard, ARGV: fields (a bounded batch)
-- Returns the number of fields deleted.
local now = dedup_now_ms()
local removed = 0
for i = 1, #ARGV do
  local expiry = tonumber(rcall('HGET', KEYS[1], ARGV[i]) or '')
  if expiry and expiry <= now then
    rcall('HDEL', KEYS[1], ARGV[i])
    removed = removed + 1
  end
end
return removed
