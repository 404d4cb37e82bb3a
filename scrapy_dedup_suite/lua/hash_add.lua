-- Check-and-record one fingerprint with an expiry, atomically, on the server's clock.
-- KEYS[1]: the shard (a hash: fingerprint -> expiry in Unix milliseconds)
-- ARGV[1]: fingerprint, ARGV[2]: milliseconds it stays seen
-- Returns 1 when the field exists and has not expired (seen), 0 after (re)writing it.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local current = redis.call('HGET', KEYS[1], ARGV[1])
if current then
  local expiry = tonumber(current)
  if not expiry then
    return redis.error_reply('ERR dedup: field ' .. ARGV[1] .. ' of ' .. KEYS[1] .. ' is not an expiry timestamp: ' .. current)
  end
  if expiry > now then return 1 end
end
redis.call('HSET', KEYS[1], ARGV[1], string.format('%.0f', now + tonumber(ARGV[2])))
return 0
