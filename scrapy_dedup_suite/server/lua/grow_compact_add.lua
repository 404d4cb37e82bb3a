-- include: prelude, grow, grow_check
-- Check-and-record fingerprints in compact's growing layout (grow.lua, grow_check.lua),
-- each one atomically; a field's value is empty.
-- argv: as grow_add's, with nothing of the kind's: argv[1] the stamp's value, argv[2]
-- the load, argv[3] the sections...; per fingerprint: its bucket's key index and its
-- field.
-- The add step (scripts.AddStep): alone, or in the frontier's record-and-enqueue.
local EMPTY = {
  answer = function(key, field)
    local seen = rcall('HEXISTS', key, field)
    return seen, seen == 1
  end,
  write = function(key, field)
    rcall('HSET', key, field, '')
  end,
  read = function(key)
    return rcall('HGETALL', key) -- (not HKEYS: a user granted an older ACL line lacks it)
  end,
}

local function dedup_add(keys, argv)
  return grow_add(keys, argv, 2, 2, EMPTY)
end
