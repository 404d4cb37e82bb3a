-- include: prelude
-- Membership test that records nothing: 1 when the field exists and has not expired.
-- KEYS[1]: the shard, ARGV[1]: fingerprint
local now = dedup_now_ms()
local current = tonumber(rcall('HGET', KEYS[1], ARGV[1]) or '0') or 0
if current > now then return 1 end
return 0
