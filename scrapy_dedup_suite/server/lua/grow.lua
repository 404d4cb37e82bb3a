-- include: prelude
-- Buckets that split as the filter grows (linear hashing, Litwin 1980), one table per
-- group of buckets (its slot). A fingerprint is an 8-byte field; h, its last 4 bytes
-- (big-endian), chooses its bucket. A group's level record (a string "L s n") says
-- how far it split: at level L with split pointer s it has 2^L + s buckets, numbered
-- from 0; bucket h mod 2^L, or h mod 2^(L+1) when that is below s. n counts the
-- fields held: written, less those a split or the janitor's purge found expired (the
-- hash backend's). Past n > load * buckets, bucket s splits: the fields whose bit L
-- of h is set move to bucket s + 2^L, and s moves on (at 2^L: L + 1, s 0). A split moves
-- one bucket, a few hundred fields at most, and writes both buckets anew (in the
-- server's compact encoding). A missing record is a group that never split.
-- Every bucket a call reads or writes is in its keys: the client sends, per group,
-- the two buckets a fingerprint may be in at the level it knows, and the two of a
-- split to come as it knows it; a call that needs others writes nothing for the group
-- and answers grow_again, with the level and pointer, for the client to send again.

local GROW_CAP = 4294967296 -- (2^32: the pointer's room in an answer)

-- h of a field (nil: not 8 bytes).
local function grow_h(field)
  if #field ~= 8 then return nil end
  local a, b, c, d = string.byte(field, 5, 8)
  return ((a * 256 + b) * 256 + c) * 256 + d
end

-- The level and pointer ``splits`` splits after level l and pointer s.
local function grow_advanced(l, s, splits)
  s = s + splits
  while s >= 2 ^ l do s, l = s - 2 ^ l, l + 1 end
  return l, s
end

-- A level record's text as {level, split, count}; nil when it is not one.
local function grow_parse(raw)
  local l, s, n = string.match(raw, '^(%d+) (%d+) (%d+)$')
  l, s, n = tonumber(l), tonumber(s), tonumber(n)
  if not l or l > 31 or s >= 2 ^ l or n > 2 ^ 52 then return nil end
  return { l, s, n }
end

-- The group's level record at key: {level, split, count}; refused when damaged, or
-- missing while ``written`` exists (a key of the call only a written group has: its
-- stamp, or a bucket past the first): the group lost how far it split. ``raw``: the
-- record's text when the caller read it already (else it is read here).
local function grow_state(key, written, raw)
  raw = raw or rcall('GET', key)
  if not raw then
    if rcall('EXISTS', written) == 1 then
      dedup_fail('SPLITS', 'level record ' .. key .. ' is missing but ' .. written
        .. ' exists: the group lost how far it split; restore it, or delete the filter'
        .. ' (a crawl with SCHEDULER_FLUSH_ON_START = True) if its fingerprints may be lost')
    end
    return { 0, 0, 0 }
  end
  local st = grow_parse(raw)
  if not st then
    dedup_fail('SPLITS', 'level record ' .. key .. ' holds ' .. string.sub(raw, 1, 40)
      .. ', not "level split count": restore it, or delete the filter (a crawl with'
      .. ' SCHEDULER_FLUSH_ON_START = True) if its fingerprints may be lost')
  end
  return st
end

-- The bucket of h in a group at state st.
local function grow_bucket(h, st)
  local b = h % 2 ^ st[1]
  if b < st[2] then b = h % 2 ^ (st[1] + 1) end
  return b
end

-- What a fingerprint of a group refused answers: below ANSWER_MORE, with the
-- group's level and pointer (answers.py).
local function grow_again(st)
  return ANSWER_MORE - 1 - (st[1] * GROW_CAP + st[2])
end

-- Whether the next split of st is due once the group holds n fields.
local function grow_due(st, n, load)
  return n > load * (2 ^ st[1] + st[2])
end

-- Split bucket st[2] (key old) into it and new (its number + 2^L), both written anew,
-- as the layout's ``kind`` (grow_check.lua) reads them: ``kind.read(key)`` gives the
-- bucket's pairs, flat (field, value...); ``kind.expired(value)``, where the kind has
-- it, says a field the split leaves out (no longer counted). ``write(key, pairs)``
-- writes pairs. A field moves when bit L of its h is set: bit L mod 8 of its byte
-- 8 - floor(L / 8). Advances st.
local function grow_split(st, old, new, kind, write)
  local flat = kind.read(old)
  local expired = kind.expired
  local stay, move, ns, nm, dropped = {}, {}, 0, 0, 0
  local at, div = 8 - math.floor(st[1] / 8), 2 ^ (st[1] % 8)
  local byte, floor = string.byte, math.floor
  for i = 1, #flat, 2 do
    local field, value = flat[i], flat[i + 1]
    if expired and expired(value) then
      dropped = dropped + 1
    elseif #field == 8 and floor(byte(field, at) / div) % 2 == 1 then
      move[nm + 1], move[nm + 2], nm = field, value, nm + 2
    else
      stay[ns + 1], stay[ns + 2], ns = field, value, ns + 2
    end
  end
  rcall('DEL', old)
  if ns > 0 then write(old, stay) end
  if nm > 0 then write(new, move) end
  st[2] = st[2] + 1
  if st[2] >= 2 ^ st[1] then st[1], st[2] = st[1] + 1, 0 end
  st[3] = math.max(0, st[3] - dropped)
end

local function grow_save(key, st)
  rcall('SET', key, string.format('%d %d %d', st[1], st[2], st[3]))
end
