-- Membership test that records nothing: 1 when the field exists and has not expired.
-- KEYS[1]: the shard, ARGV[1]: fingerprint
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local current = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0') or 0
if current > now then return 1 end
return 0
