-- include: prelude
-- Check-and-add fingerprints in scrapy-redis's set, each one atomically.
-- keys[1]: the set; argv: the fingerprints.
-- Returns one answer per fingerprint, in order: 1 if it was a member (seen),
-- 0 after adding it (new). A fingerprint repeated in one call is new once.
-- The add step (a layout's, scripts.AddStep): run alone on KEYS and ARGV, or by
-- the frontier within its record-and-enqueue (frontier.lua, frontier_record).
local function dedup_add(keys, argv)
  local key, out = keys[1], {}
  for i = 1, #argv do
    out[i] = 1 - rcall('SADD', key, argv[i])
  end
  return out
end
