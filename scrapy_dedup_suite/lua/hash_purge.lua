-- Janitor: delete the given fields of one shard whose expiry has passed by the
-- server's clock, compared and deleted atomically: a field a crawler refreshed
-- after the janitor read it has a future expiry now and is kept.
-- KEYS[1]: the shard, ARGV: fields (a bounded batch)
-- Returns the number of fields deleted.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local removed = 0
for i = 1, #ARGV do
  local expiry = tonumber(redis.call('HGET', KEYS[1], ARGV[i]) or '')
  if expiry and expiry <= now then
    redis.call('HDEL', KEYS[1], ARGV[i])
    removed = removed + 1
  end
end
return removed
