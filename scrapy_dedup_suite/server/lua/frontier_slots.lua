-- include: prelude, frontier_runs
-- The frontier's download slots (scrapy_dedup_suite/frontier/slots.py): a request the
-- worker tagged with its slot (Scrapy's download slot: its host, or meta's
-- download_slot) waits in that slot's own queue, and a lease call hands out a slot's
-- request only when the slot is ready for every worker together: its delay since its
-- last dispatch passed (the server's clock), fewer than its concurrency leased.
-- Keys, all in the shard's slot (its hash tag), named from its queue:
-- - queue .. ':slot:' .. name: the slot's queue of runs (frontier_runs), as the shard's;
-- - queue .. ':slots': a hash, name -> "next leased delay jitter concurrency blocked
--   strikes learned waiting": the server's time (ms) of its next dispatch, its requests
--   leased and not done, its delay (ms), jitter (thousandths: 500 is Scrapy's +-50%),
--   concurrency, until when (ms) a site's refusal blocked it, the refusals counted in
--   its back-off (frontier_block.lua), the delay a worker learned it needs (ms:
--   robots.txt's Crawl-delay, AutoThrottle's: a floor under its delay, jitter and all),
--   and the requests in its queue (for dedup-info: counted as they go in and out, 0
--   once its queue is empty); a line of the first five fields (an older version's)
--   reads as none of the others, a line that is not the frontier's as a slot never used;
-- - queue .. ':ready': a sorted set, name -> from when (ms) its next request may be
--   handed out: one delay before its dispatch (the worker holds it until then). A slot
--   is there while its queue holds requests and its leases are fewer than its concurrency.
-- A request tagged with its slot, as the worker sends it and as a lease keeps it: the
-- byte 5, its header's length (a byte), the header "delay jitter concurrency name",
-- then the entry; its delay may be "delay:learned" (a worker that learned one says so;
-- the others leave the slot's as it is). Its slot's queue keeps the entry alone (the
-- name is the key's).

local function frontier_slot_keys(queue)
  return queue .. ':slots', queue .. ':ready'
end

-- The queue of slot ``name``'s requests.
local function frontier_slot_queue(queue, name)
  return queue .. ':slot:' .. name
end

-- Refuse (WRONGTYPE) the slots' hash or ready set of another type.
local function frontier_slot_check_keys(queue)
  local slots, ready = frontier_slot_keys(queue)
  dedup_check_type(slots, 'hash', 'the frontier slots')
  dedup_check_type(ready, 'zset', 'the frontier slots ready')
end

-- ``item`` (an entry, or a wrapped one: byte 3 and a count first) read apart: the
-- header of its slot (nil if untagged) and the item without it.
local function frontier_slot_split(item)
  local lead, rest = '', item
  if #item >= 2 and string.byte(item, 1) == 3 then lead, rest = string.sub(item, 1, 2), string.sub(item, 3) end
  if #rest < 2 or string.byte(rest, 1) ~= 5 then return nil, item end
  local size = string.byte(rest, 2)
  if #rest < 2 + size then return nil, item end
  return string.sub(rest, 3, 2 + size), lead .. string.sub(rest, 3 + size)
end

-- ``item`` tagged with ``header`` again (inside its count, if any).
local function frontier_slot_join(header, item)
  local tag = string.char(5, #header) .. header
  if #item >= 2 and string.byte(item, 1) == 3 then
    return string.sub(item, 1, 2) .. tag .. string.sub(item, 3)
  end
  return tag .. item
end

-- A header read: delay (ms), jitter (thousandths), concurrency, name; nil if it is not one.
local function frontier_slot_header(header)
  local delay, learned, jitter, conc, name =
    string.match(header, '^(%d+):?(%d*) (%d+) (%d+) (.*)$')
  if not delay or #delay > 12 or #learned > 12 or #jitter > 4 or #conc > 6
    or tonumber(conc) < 1 then
    return nil
  end
  return { delay = tonumber(delay), learned = tonumber(learned),
    jitter = math.min(tonumber(jitter), 1000), conc = tonumber(conc), name = name }
end

-- A slot's state (its hash field), read leniently: what does not parse reads as a slot
-- never used (a mistake there costs a delay once, never a stalled slot); and whether
-- the field was there.
local function frontier_slot_state(slots, name)
  local line = rcall('HGET', slots, name)
  local state = { next_at = 0, leased = 0, delay = 0, jitter = 0, conc = 1, blocked = 0,
    strikes = 0, learned = 0, waiting = 0 }
  local a, b, c, d, e, rest = string.match(line or '', '^(%d+) (%d+) (%d+) (%d+) (%d+)(.*)$')
  if a and #a <= 15 and #b <= 9 and #c <= 12 and #d <= 4 and #e <= 6 then
    state.next_at, state.leased, state.delay = tonumber(a), tonumber(b), tonumber(c)
    state.jitter, state.conc = tonumber(d), math.max(1, tonumber(e))
    local f, g, h, i = string.match(rest, '^ (%d+) (%d+) (%d+) ?(%d*)$')
    if f and #f <= 15 and #g <= 3 and #h <= 12 and #i <= 12 then
      state.blocked, state.strikes, state.learned = tonumber(f), tonumber(g), tonumber(h)
      state.waiting = tonumber(i) or 0
    end
  end
  return state, line and true or false
end

-- The slot's delay (ms): its settings' or what a worker learned, the larger.
local function frontier_slot_delay(state)
  return math.max(state.delay, state.learned)
end

-- Write ``state`` back, and the slot's place in the ready set: there while its queue
-- holds requests and its leases are fewer than its concurrency. A slot with nothing
-- queued, nothing leased and its next dispatch past is forgotten.
local function frontier_slot_save(queue, name, state, now)
  local slots, ready = frontier_slot_keys(queue)
  local queued = rcall('EXISTS', frontier_slot_queue(queue, name)) == 1
  if not queued and state.leased <= 0 and state.next_at <= now then
    rcall('HDEL', slots, name)
    rcall('ZREM', ready, name)
    return
  end
  if not queued then state.waiting = 0 end
  rcall('HSET', slots, name, string.format('%d %d %d %d %d %d %d %d %d', state.next_at,
    math.max(0, state.leased), state.delay, state.jitter, state.conc, state.blocked,
    state.strikes, state.learned, math.max(0, state.waiting)))
  if queued and state.leased < state.conc then
    rcall('ZADD', ready, math.max(0, state.next_at - frontier_slot_delay(state)), name)
  else
    rcall('ZREM', ready, name)
  end
end

-- Take ``header``'s delay, jitter and concurrency (the last worker's settings), and the
-- delay it learned, if it says one.
local function frontier_slot_settings(state, slot)
  state.delay, state.jitter, state.conc = slot.delay, slot.jitter, slot.conc
  if slot.learned then state.learned = slot.learned end
end

-- ``items`` ({priority, item} each) by slot: those untagged, in their order; per slot
-- name its last tag's limits and its items untagged; the names in their first order.
local function frontier_slot_groups(items)
  local plain, by_slot, order = {}, {}, {}
  for _, item in ipairs(items) do
    local header, bare = frontier_slot_split(item[2])
    local slot = header and frontier_slot_header(header)
    if slot then
      local group = by_slot[slot.name]
      if not group then
        group = { items = {} }
        by_slot[slot.name] = group
        order[#order + 1] = slot.name
      end
      group.slot = slot -- (the last worker's settings)
      group.items[#group.items + 1] = { item[1], bare }
    else
      plain[#plain + 1] = item
    end
  end
  return plain, by_slot, order
end

-- Refuse (WRONGTYPE), before anything is written, a key of another type where the
-- slots named in ``order`` are kept.
local function frontier_slot_check(queue, order)
  if #order == 0 then return end
  frontier_slot_check_keys(queue)
  for _, name in ipairs(order) do
    dedup_check_type(frontier_slot_queue(queue, name), 'zset', 'the frontier slot queue')
  end
end

-- Push ``items`` ({priority, item} each) as frontier_push does: those tagged with a
-- slot to its queue (untagged), the others to ``queue``.
local function frontier_enqueue(queue, items, front)
  local plain, by_slot, order = frontier_slot_groups(items)
  frontier_slot_check(queue, order)
  if #plain > 0 then frontier_push(queue, plain, front) end
  if #order == 0 then return end
  local now = dedup_now_ms()
  local slots = frontier_slot_keys(queue)
  for _, name in ipairs(order) do
    local group = by_slot[name]
    frontier_push(frontier_slot_queue(queue, name), group.items, front)
    local state = frontier_slot_state(slots, name)
    frontier_slot_settings(state, group.slot)
    state.waiting = state.waiting + #group.items
    frontier_slot_save(queue, name, state, now)
  end
end

-- A lease of a tagged request ends (acknowledged, given back, kept for later, expired,
-- set aside): its slot's concurrency is freed. ``sent``: when the worker sent it (ms,
-- the server's clock, at most now; or nil): the slot's next dispatch is then at least
-- its shortest delay (jitter and all) after it.
local function frontier_slot_free(queue, held, now, sent)
  local space = string.find(held, ' ', 1, true)
  if not space then return end
  local header = frontier_slot_split(string.sub(held, space + 1))
  local slot = header and frontier_slot_header(header)
  if not slot then return end
  local state = frontier_slot_state(frontier_slot_keys(queue), slot.name)
  state.leased = state.leased - 1
  if sent then
    local least = math.max(state.delay * (1 - state.jitter / 1000), state.learned)
    state.next_at = math.max(state.next_at, math.min(sent, now) + math.floor(least))
  end
  frontier_slot_save(queue, slot.name, state, now)
end

-- Up to n requests from the slots ready by ``now``, the longest ready first: {priority,
-- item (tagged, for the lease), ms the worker holds it} each. Each reserves its slot's
-- next dispatch: its delay (jittered by ``rand``, a whole number from 1 to 2^31 - 2
-- that this call steps) after this one's.
local function frontier_slot_take(queue, n, set_bad, now, rand)
  local slots, ready = frontier_slot_keys(queue)
  local got = {}
  while #got < n do
    local top = rcall('ZRANGEBYSCORE', ready, '-inf', now, 'LIMIT', 0, 1)[1]
    if not top then break end
    local state = frontier_slot_state(slots, top)
    local key = frontier_slot_queue(queue, top)
    dedup_check_type(key, 'zset', 'the frontier slot queue')
    local one = frontier_pop(key, 1, set_bad)
    if one[1] then
      local at = math.max(now, state.next_at)
      local delay = state.delay
      if state.jitter > 0 and delay > 0 then
        rand = (rand * 16807) % 2147483647
        delay = delay * (1 + (2 * rand / 2147483647 - 1) * state.jitter / 1000)
      end
      state.next_at = at + math.floor(math.max(delay, state.learned)) -- (learned: a floor)
      state.leased = state.leased + 1
      state.waiting = state.waiting - 1
      local header = state.delay .. ' ' .. state.jitter .. ' ' .. state.conc .. ' ' .. top
      got[#got + 1] = { one[1][1], frontier_slot_join(header, one[1][2]), at - now }
    end
    frontier_slot_save(queue, top, state, now)
  end
  return got
end

-- No lease held in the shard and no slot ready: a slot that still counts leases (deleted
-- by hand, or by an older version), or whose state was not the frontier's, has none;
-- its requests are ready again. Costs the slots that exist, and only then.
local function frontier_slot_recount(queue, now)
  local slots = frontier_slot_keys(queue)
  local names = rcall('HKEYS', slots)
  for _, name in ipairs(names) do
    local state = frontier_slot_state(slots, name)
    state.leased = 0
    frontier_slot_save(queue, name, state, now)
  end
end
