-- include: prelude
-- The frontier's queue in runs (scrapy_dedup_suite/frontier/queue.py): one sorted set
-- per shard whose members are runs of requests (up to 4 KB), so that a spider giving
-- each request its own priority does not pay a key per priority.
-- A run: 6 bytes (its place among the runs of its score, big-endian), 1 byte (how many
-- requests it holds), its last request's priority and ';', then per request its
-- priority, ',', its entry's length and its entry (frontier_record), the highest
-- priority first and, within a priority, first in first out. Its score: minus its first
-- request's priority. Runs in the sorted set's order, read one after another, are the
-- queue in order.
-- A request pushed at the back goes after every request of its priority or a higher
-- one; at the front (given back, due again), before every request of its priority or a
-- lower one: in the run holding that place, split in two when it is full. Most pushes
-- go at the end of a run and most takes at the start of the first: neither reads the
-- requests of the run it writes.

-- A run takes requests while it stays within FRONTIER_RUN_BYTES (its head included)
-- and FRONTIER_RUN_MAX requests: with the server's 6 bytes of string header, a run of
-- 4,090 bytes fills the allocator's 4 KB class, so runs filled at their end waste
-- little to rounding (as a list's 8 KB nodes do). A longer request is a run alone.
local FRONTIER_RUN_BYTES, FRONTIER_RUN_MAX = 4090, 255
local FRONTIER_MIDDLE = 140737488355328 -- 2^47: the first run's place; others count from it

-- A priority read back: a whole number of at most 15 digits (the text), or nil.
local function frontier_priority(text)
  local digits = string.match(text, '^%-?(%d+)$')
  if digits and #digits <= 15 then return text end
  return nil
end

-- Minus ``priority`` (text) as text: exact, where a number would print 1e+15.
local function frontier_score(priority)
  if string.sub(priority, 1, 1) == '-' then return string.sub(priority, 2) end
  return '-' .. priority
end

local function frontier_place_text(n)
  local bytes = {}
  for i = 6, 1, -1 do
    bytes[i] = n % 256
    n = math.floor(n / 256)
  end
  return string.char(unpack(bytes))
end

-- A request in a run: its priority, ',', its entry's length (one byte, 1 to 249; else
-- the byte 0, the length in digits and ':'), then its entry.
local function frontier_record(priority, entry)
  if #entry > 0 and #entry < 250 then return priority .. ',' .. string.char(#entry) .. entry end
  return priority .. ',\0' .. #entry .. ':' .. entry
end

-- The request of a run at ``at``: its priority, where its entry starts and ends; nil
-- if it does not parse.
local function frontier_read(member, at)
  local priority, sized = string.match(member, '^(%-?%d+),()', at)
  if not priority or not frontier_priority(priority) then return nil end
  local n, start = string.byte(member, sized), sized + 1
  if n == 0 then
    local digits
    digits, start = string.match(member, '^(%d+):()', sized + 1)
    if not digits or #digits > 9 then return nil end
    n = tonumber(digits)
  end
  if not n or start + n - 1 > #member then return nil end
  return priority, start, start + n - 1
end

local function frontier_runs_of(place, count, last, records)
  return place .. string.char(count) .. last .. ';' .. records
end

-- Whether a run of ``count`` requests and ``bytes`` bytes takes one more of ``more``.
local function frontier_fits(count, bytes, more)
  return count < FRONTIER_RUN_MAX and bytes + more <= FRONTIER_RUN_BYTES
end

-- A run's head: its place, how many requests, the last one's priority and where its
-- requests start; nil for any other member (another client's, a mistake's).
local function frontier_head(member)
  if #member < 12 then return nil end
  local count = string.byte(member, 7)
  local last, start = string.match(member, '^(%-?%d+);()', 8)
  if not last or not frontier_priority(last) or count < 1 then
    return nil
  end
  return string.sub(member, 1, 6), count, last, start
end

-- Up to ``limit`` requests of ``member`` from ``at``: {priority, entry} each, and where
-- the next starts; nil if one does not parse.
local function frontier_records(member, at, limit)
  local records = {}
  while at <= #member and #records < limit do
    local priority, start, stop = frontier_read(member, at)
    if not priority then return nil end
    records[#records + 1] = { priority, string.sub(member, start, stop) }
    at = stop + 1
  end
  return records, at
end

-- The requests of ``member`` from ``at`` (a run's, after its head): their priorities
-- and where each starts; nil if one does not parse.
local function frontier_walk(member, at)
  local priorities, starts = {}, {}
  while at <= #member do
    local priority, _, stop = frontier_read(member, at)
    if not priority then return nil end
    priorities[#priorities + 1], starts[#starts + 1] = priority, at
    at = stop + 1
  end
  return priorities, starts
end

-- The place for a run that goes first (or last) among the runs whose first request
-- has ``priority``: one before the first one's (after the last one's).
local function frontier_place(queue, priority, first)
  local score = frontier_score(priority)
  local found
  if first then
    found = rcall('ZRANGEBYSCORE', queue, score, score, 'LIMIT', 0, 2)
  else
    found = rcall('ZREVRANGEBYSCORE', queue, score, score, 'LIMIT', 0, 1)
  end
  for _, member in ipairs(found) do -- (another's member may sort first)
    local place = frontier_head(member)
    if place then
      local n = 0
      for i = 1, 6 do n = n * 256 + string.byte(place, i) end
      return frontier_place_text(n + (first and -1 or 1))
    end
  end
  return frontier_place_text(FRONTIER_MIDDLE)
end

-- Runs of their own for ``entries`` (from the from-th) at ``priority``, each as full
-- as fits, right after the runs before their place: at the back, each after the last
-- of its score; at the front, each before the first (the last run first).
local function frontier_own_runs(queue, priority, entries, from, front)
  local runs, parts, bytes = {}, {}, 8 + #priority -- (a run's head)
  for j = from, #entries do
    local record = frontier_record(priority, entries[j])
    if #parts > 0 and not frontier_fits(#parts, bytes, #record) then
      runs[#runs + 1] = { #parts, table.concat(parts) }
      parts, bytes = {}, 8 + #priority
    end
    parts[#parts + 1] = record
    bytes = bytes + #record
  end
  runs[#runs + 1] = { #parts, table.concat(parts) }
  local score = frontier_score(priority)
  local a, b, step = 1, #runs, 1
  if front then a, b, step = #runs, 1, -1 end
  for r = a, b, step do
    local place = frontier_place(queue, priority, front)
    rcall('ZADD', queue, score, frontier_runs_of(place, runs[r][1], priority, runs[r][2]))
  end
end

-- Insert one request inside the run ``before`` (head read: place, count, last, start;
-- its score), after the at-th request whose priority goes before it; split in two when
-- full. Nil if the run's requests do not parse.
local function frontier_insert(queue, before, score, head, priority, entry, front)
  local place, count, last, start = head[1], head[2], head[3], head[4]
  local p = tonumber(priority)
  local priorities, starts = frontier_walk(before, start)
  if not priorities or #priorities ~= count then return nil end
  local at = count -- (the new request goes after the at-th)
  while at > 1 do
    local r = tonumber(priorities[at])
    if r > p or (r == p and not front) then break end
    at = at - 1
  end
  local pos, record = starts[at + 1] or #before + 1, frontier_record(priority, entry)
  local records = string.sub(before, start, pos - 1) .. record .. string.sub(before, pos)
  rcall('ZREM', queue, before)
  if frontier_fits(count, #before, #record) then
    rcall('ZADD', queue, score, frontier_runs_of(place, count + 1, last, records))
    return true
  end
  -- Full: cut after the new request when it leaves the head half full or more (the
  -- next requests of its priority go after it: runs fill up), else in the middle.
  -- The j-th request of the count + 1 now: its priority, where it starts in ``records``.
  local function priority_of(j)
    if j <= at then return priorities[j] end
    return j == at + 1 and priority or priorities[j - 1]
  end
  local function start_of(j)
    if j <= at then return starts[j] - start + 1 end
    return j == at + 1 and pos - start + 1 or starts[j - 1] - start + 1 + #record
  end
  local n, half, cut = count + 1, #records / 2, 1
  if at + 1 < n and start_of(at + 2) - 1 >= half then
    cut = at + 1
  else
    while cut < n - 1 and start_of(cut + 1) - 1 < half do cut = cut + 1 end
  end
  local split, tail = start_of(cut + 1), priority_of(cut + 1)
  rcall('ZADD', queue, score,
    frontier_runs_of(place, cut, priority_of(cut), string.sub(records, 1, split - 1)))
  -- The tail goes right after the head, first among its score (a lower priority than
  -- the head's first: every run of that score comes after).
  rcall('ZADD', queue, frontier_score(tail), frontier_runs_of(
    frontier_place(queue, tail, true), count + 1 - cut, last, string.sub(records, split)))
  return true
end

-- Push requests of one ``priority`` (text; ``entries`` in their order) at the back of
-- their priority or, with ``front``, at its front: all of them where they go at the
-- end or start of a run, else one. Returns those left to push.
local function frontier_push_some(queue, priority, entries, front)
  local p, score = tonumber(priority), frontier_score(priority)
  -- The run holding the place: the last whose first request goes before the new ones.
  local found = rcall('ZREVRANGEBYSCORE', queue, front and '(' .. score or score, '-inf',
    'WITHSCORES', 'LIMIT', 0, 1)
  local before, place, count, last, start = found[1], nil, nil, nil, nil
  if before then place, count, last, start = frontier_head(before) end
  if not place then -- (none, or not a run): at the start of the next run
    local after = rcall('ZRANGEBYSCORE', queue, front and score or '(' .. score, '+inf',
      'LIMIT', 0, 1)[1]
    local _, next_count, next_last, next_start = nil, nil, nil, nil
    if after then _, next_count, next_last, next_start = frontier_head(after) end
    local parts, bytes = {}, 0
    for i, entry in ipairs(entries) do
      parts[i] = frontier_record(priority, entry)
      bytes = bytes + #parts[i]
    end
    if not next_count or not frontier_fits(next_count + #entries - 1, #after, bytes) then
      frontier_own_runs(queue, priority, entries, 1, front)
      return {}
    end
    rcall('ZREM', queue, after)
    parts[#parts + 1] = string.sub(after, next_start)
    local run = frontier_runs_of(frontier_place(queue, priority, true),
      next_count + #entries, next_last, table.concat(parts))
    rcall('ZADD', queue, score, run)
    return {}
  end
  local q = tonumber(last)
  if q > p or (q == p and not front) then -- at the run's end: as many as it takes there
    local parts, bytes = { string.sub(before, start) }, #before
    while #parts <= #entries do
      local record = frontier_record(priority, entries[#parts])
      if not frontier_fits(count + #parts - 1, bytes, #record) then break end
      parts[#parts + 1], bytes = record, bytes + #record
    end
    local room = #parts - 1
    if room > 0 then -- (its first request stays, so do its score and place)
      rcall('ZREM', queue, before)
      rcall('ZADD', queue, found[2],
        frontier_runs_of(place, count + room, priority, table.concat(parts)))
    end
    if room < #entries then frontier_own_runs(queue, priority, entries, room + 1, front) end
    return {}
  end
  -- Inside the run: one (the last at the front), the rest on the next turn.
  local rest, one = {}, nil
  for i, entry in ipairs(entries) do rest[i] = entry end
  one = table.remove(rest, front and #rest or 1)
  local head = { place, count, last, start }
  if not frontier_insert(queue, before, found[2], head, priority, one, front) then
    frontier_own_runs(queue, priority, entries, 1, front) -- (the take that meets it sets it aside)
    return {}
  end
  return rest
end

-- Push ``items`` ({priority, entry} each) at the back of their priorities or, with
-- ``front``, at their fronts, in their order; those of one priority side by side go
-- together.
local function frontier_push(queue, items, front)
  local groups = {}
  for _, item in ipairs(items) do
    local group = groups[#groups]
    if group and group[1] == item[1] then
      group[2][#group[2] + 1] = item[2]
    else
      groups[#groups + 1] = { item[1], { item[2] } }
    end
  end
  local a, b, step = 1, #groups, 1
  if front then a, b, step = #groups, 1, -1 end
  for g = a, b, step do
    local entries = groups[g][2]
    while #entries > 0 do entries = frontier_push_some(queue, groups[g][1], entries, front) end
  end
end

-- Take up to n requests from the front: {priority, entry} each. ``set_bad(line)``
-- keeps a member that is not a run (it leaves the queue), as "queue <member>".
local function frontier_pop(queue, n, set_bad)
  local got = {}
  while #got < n do
    local top = rcall('ZRANGE', queue, 0, 0, 'WITHSCORES')
    if not top[1] then break end
    rcall('ZREM', queue, top[1])
    local place, count, last, start = frontier_head(top[1])
    local records, at = nil, nil
    if place then records, at = frontier_records(top[1], start, math.min(n - #got, count)) end
    local rest = at and string.sub(top[1], at) or ''
    local rest_first = string.match(rest, '^(%-?%d+),')
    if not records or (#records < count and not rest_first) then
      set_bad('queue ' .. top[1])
    else
      for _, record in ipairs(records) do got[#got + 1] = record end
      if #records < count then -- (the rest stays first: its place too, if its score does)
        local score = frontier_score(rest_first)
        if tonumber(score) ~= tonumber(top[2]) then
          place = frontier_place(queue, rest_first, true)
        end
        rcall('ZADD', queue, score, frontier_runs_of(place, count - #records, last, rest))
      end
    end
  end
  return got
end

-- Whether the counter of waiting requests holds ``value`` as it writes it (or nothing).
local function frontier_waiting_ok(value)
  return not value or (string.match(value, '^%-?%d+$') ~= nil and #value <= 15)
end

-- Add ``by`` to the counter of requests waiting in runs (``counters``'s field
-- ``waiting``), unless it holds another's value (the lease call sets that aside).
local function frontier_count(counters, by)
  if by == 0 then return end
  if not frontier_waiting_ok(rcall('HGET', counters, 'waiting')) then return end
  rcall('HINCRBY', counters, 'waiting', by)
end
