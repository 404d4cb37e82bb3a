-- include: prelude
-- Check-and-add fingerprints in scrapy-redis's set, each one atomically.
-- KEYS[1]: the set; ARGV: the fingerprints.
-- Returns one answer per fingerprint, in order: 1 if it was a member (seen),
-- 0 after adding it (new). A fingerprint repeated in one call is new once.
local key, out = KEYS[1], {}
for i = 1, #ARGV do
  out[i] = 1 - rcall('SADD', key, ARGV[i])
end
return out
