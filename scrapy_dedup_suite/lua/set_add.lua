-- include: prelude
-- Check-and-add fingerprints in scrapy-redis's set, each one atomically.
-- KEYS: the set; ARGV: per fingerprint, its set's number in KEYS (1) and itself.
-- Returns one answer per fingerprint, in order: 1 if it was a member (seen),
-- 0 after adding it (new). A fingerprint repeated in one call is new once.
local out = {}
for i = 1, #ARGV, 2 do
  out[#out + 1] = 1 - rcall('SADD', KEYS[tonumber(ARGV[i])], ARGV[i + 1])
end
return out
