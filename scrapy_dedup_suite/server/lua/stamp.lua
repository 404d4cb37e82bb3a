-- include: prelude
-- Stamps. A filter's parameter record (K:meta) may live on another cluster node
-- than its data, so each slot that holds data also holds a stamp: a string key
-- in the same hash tag naming the parameters the data there was written with.
-- Every script that writes data checks the stamp first and writes it when it is
-- missing, in the same atomic call, so data never exists without a record of
-- what it means (after a clear() by another worker, FLUSHALL, or a lost K:meta,
-- the next open() finds the stamps and recreates K:meta from them).
local function dedup_stamp(key, want)
  local have = rcall('GET', key)
  if have == want then return end
  if not have then
    rcall('SET', key, want)
    return
  end
  dedup_stamp_mismatch(key, have, want)
end

-- Refuse, before anything is written, a call whose groups of ``size`` keys of
-- ``keys`` (each starting with its stamp) hold a stamp of other parameters. A call of one
-- group (the per-request path) needs no such pass: dedup_stamp checks its stamp
-- before its first write. Each stamp is read once (groups of one slot share it).
local function dedup_check_stamps(keys, size, want)
  if #keys <= size then return end
  local read = {}
  for g = 1, #keys, size do
    local have = not read[keys[g]] and rcall('GET', keys[g])
    read[keys[g]] = true
    if have and have ~= want then
      dedup_stamp_mismatch(keys[g], have, want)
    end
  end
end

-- A bitmap is created at its full size (SETBIT on the last offset of a missing
-- key allocates exactly m/8 bytes), so Redis never grows it piecemeal; one that
-- exists with another length was damaged (truncated, overwritten) and is refused.
-- The length of the bitmap at key: 0 (missing) or m/8 bytes; any other is refused.
local function dedup_check_bitmap(key, m)
  local len = rcall('STRLEN', key)
  local want = (m + 7 - (m + 7) % 8) / 8
  if len ~= 0 and len ~= want then
    dedup_fail('BITMAP', 'Bloom bitmap ' .. key .. ' holds ' .. len .. ' bytes, not ' .. want
      .. ': it was truncated or overwritten, so it no longer holds what was recorded')
  end
  return len
end

local function dedup_ensure_bitmap(key, m)
  if dedup_check_bitmap(key, m) == 0 then
    rcall('SETBIT', key, m - 1, 0)
    return 1
  end
  return 0
end
