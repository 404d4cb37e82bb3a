-- Check-and-record one fingerprint with an expiry, atomically, on the server's clock.
-- KEYS[1]: the shard's stamp (stamp.lua), KEYS[2]: the shard (a hash:
-- fingerprint -> expiry in Unix milliseconds)
-- ARGV[1]: the stamp's value, ARGV[2]: fingerprint, ARGV[3]: milliseconds it stays seen
-- Returns 1 when the field exists and has not expired (seen), 0 after (re)writing it.
local t = rcall('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local current = rcall('HGET', KEYS[2], ARGV[2])
if current then
  local expiry = tonumber(current)
  if not expiry then
    return redis.error_reply('ERR dedup: field ' .. ARGV[2] .. ' of ' .. KEYS[2] .. ' is not an expiry timestamp: ' .. current)
  end
  if expiry > now then return 1 end
end
dedup_stamp(KEYS[1], ARGV[1])
rcall('HSET', KEYS[2], ARGV[2], string.format('%.0f', now + tonumber(ARGV[3])))
return 0
