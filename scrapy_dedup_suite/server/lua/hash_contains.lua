-- include: prelude
-- Membership test that records nothing: 1 when the field exists and has not expired.
-- KEYS[1]: the hash (a shard or a bucket), ARGV[1]: the field, ARGV[2]: the unit of
-- its stored expiry in milliseconds (see hash_add.lua)
local now = dedup_now_ms()
local current = tonumber(rcall('HGET', KEYS[1], ARGV[1]) or '0') or 0
if current * tonumber(ARGV[2]) > now then return 1 end
return 0
