-- include: prelude, grow, grow_check
-- Check-and-record fingerprints with an expiry in the growing layout (grow.lua,
-- grow_check.lua), each one atomically, on the server's clock: a field's value is its
-- expiry (in the unit argv[3] says: 1000 for Unix seconds, rounded up), which the
-- janitor purges (grow_hash_purge.lua). A field whose expiry has passed is not there:
-- the fingerprint is new, its field written again with its new expiry; a split leaves
-- it out.
-- argv: as grow_add's, with argv[3] the unit of the stored expiries in milliseconds;
-- per fingerprint: its bucket's key index, its field, and the milliseconds it stays seen.
-- The add step (scripts.AddStep): alone, or in the frontier's record-and-enqueue.
local function dedup_add(keys, argv)
  local now, unit = dedup_now_ms(), tonumber(argv[3])
  local kind = {
    answer = function(key, field)
      local current = rcall('HGET', key, field)
      if not current then return 0, false end
      local expiry = tonumber(current)
      if not expiry then
        dedup_fail('FIELD', 'field ' .. field .. ' of ' .. key .. ' is not an expiry timestamp: '
          .. current)
      end
      return (expiry * unit > now) and 1 or 0, true
    end,
    write = function(key, field, at)
      local ttl = tonumber(argv[at])
      rcall('HSET', key, field, string.format('%.0f', math.ceil((now + ttl) / unit)))
    end,
    read = function(key)
      return rcall('HGETALL', key)
    end,
    -- (a value that is no expiry stays, as the janitor leaves it)
    expired = function(value)
      local expiry = tonumber(value)
      return expiry ~= nil and expiry * unit <= now
    end,
  }
  return grow_add(keys, argv, 3, 3, kind)
end
