-- include: prelude, frontier_runs, frontier_slots
-- The frontier's shard (scrapy_dedup_suite/frontier/queue.py): its queue of runs
-- (frontier_runs), its leases and their expiries, its counters.
-- What records and enqueues in one call: frontier_record, below.

-- A member read back from the frontier's other keys, "priority entry": the priority (a
-- whole number) and the entry, or nil for anything else (another client's, an older
-- version's, a mistake's): the caller sets it aside in the shard's list of bad members
-- rather than fail on it, loop on it or lose the good ones beside it.
local function frontier_parse(line)
  local space = string.find(line, ' ', 1, true)
  if not space then return nil end
  local priority = frontier_priority(string.sub(line, 1, space - 1))
  if not priority then return nil end
  return priority, string.sub(line, space + 1)
end

-- A request given back by a worker that died holding it (its lease ended): the byte
-- 3, how many times it came back (one byte), then the entry (the codec's entries start
-- with the byte 1, 2 or 4). A worker is always sent the entry alone.
local function frontier_unwrap(item)
  if #item >= 2 and string.byte(item, 1) == 3 then
    return string.byte(item, 2), string.sub(item, 3)
  end
  return 0, item
end

local function frontier_wrap(times, entry)
  return string.char(3, math.min(times, 255)) .. entry
end

-- Refuse (WRONGTYPE) a queue or counters of another type before anything is written.
local function frontier_check(queue, counters)
  dedup_check_type(queue, 'zset', 'the frontier queue')
  dedup_check_type(counters, 'hash', 'the frontier counters')
end

-- A lease that holds a request on its way to its slot's home shard (on a Cluster: it
-- was recorded here, and a worker pushes it there, then acknowledges this lease), as
-- its entry with the byte 6 first: the entry, or nil for a lease of a request taken.
-- Such a lease took no slot's concurrency; when it ends unacknowledged, the next call
-- here hands it to its worker to move (frontier_lease.lua), never to the queue here.
local function frontier_moving(item)
  if item and string.byte(item, 1) == 6 then return string.sub(item, 2) end
  return nil
end

-- These leases end (a worker is done with them, gave them back, or they expired): their
-- slots' concurrency is freed. An id may say when its request was sent, "id@ms" (the
-- server's clock): its slot's next turn is then at least a delay after that
-- (frontier_slot_free), so a request sent late never leaves the next one less than a
-- delay behind it.
local function frontier_ack(queue, leases, expiries, ids)
  local now = nil
  for _, given in ipairs(ids) do
    local id, sent = string.match(given, '^(.*)@(%d+)$')
    if not id or #sent > 15 then id, sent = given, nil end
    local held = rcall('HGET', leases, id)
    if held then
      rcall('HDEL', leases, id)
      rcall('ZREM', expiries, id)
      local _, item = frontier_parse(held)
      if string.find(held, '\5', 1, true) and not frontier_moving(item) then
        now = now or dedup_now_ms()
        frontier_slot_free(queue, held, now, tonumber(sent))
      end
    end
  end
end

-- Record fingerprints with a layout's add step and enqueue the requests of those it
-- wrote as new, in one script run: the script of each layout family that records and
-- enqueues is `return frontier_record(KEYS, ARGV, dedup_add)` after its add step
-- (scripts.AddStep, frontier/record.py).
-- keys: the add step's keys, then the shard's queue, leases, lease expiries and
-- counters (its last four).
-- argv[1]: how many of the arguments after these three are the add step's; argv[2]:
-- how many lease ids end argv (the leases this call acknowledges); argv[3]: the lease
-- (ms) of a request on its way to another shard; then the add step's arguments, per
-- fingerprint its request's priority, entry and a lease id ('' for a request queued
-- here; else the request is held under that lease, as frontier_moving says, for its
-- worker to push to its slot's home shard), then the lease ids acknowledged.
-- add(keys, argv): the add step, one answer per fingerprint (> 0 seen; ANSWER_MORE
-- .. 0 new, written; below ANSWER_MORE nothing written, to be sent again: answers.py).
-- The request of each fingerprint written as new is pushed (or held to be moved),
-- then the leases are acknowledged (last: an error before leaves them held). Returns
-- the add's answers.
local function frontier_record(keys, argv, add)
  local own, nacks, lease_ms = tonumber(argv[1]), tonumber(argv[2]), tonumber(argv[3])
  local n = #keys
  local queue, leases, expiries, counters = keys[n - 3], keys[n - 2], keys[n - 1], keys[n]
  local add_keys, add_argv, triples, acks = {}, {}, {}, {}
  for i = 1, n - 4 do add_keys[i] = keys[i] end
  for i = 4, 3 + own do add_argv[#add_argv + 1] = argv[i] end
  for i = 4 + own, #argv - nacks do triples[#triples + 1] = argv[i] end
  for i = #argv - nacks + 1, #argv do acks[#acks + 1] = argv[i] end
  frontier_check(queue, counters)
  local entries, moving = {}, false
  for i = 1, #triples, 3 do
    entries[#entries + 1] = { triples[i], triples[i + 1] }
    moving = moving or triples[i + 2] ~= ''
  end
  local _, _, slots = frontier_slot_groups(entries)
  frontier_slot_check(queue, slots) -- (before the add step writes a fingerprint)
  if #acks > 0 or moving then
    dedup_check_type(leases, 'hash', 'the frontier leases')
    dedup_check_type(expiries, 'zset', 'the frontier lease expiries')
  end
  local out = add(add_keys, add_argv)
  local items, now = {}, nil
  for i = 1, #out do
    local answer, id = out[i], triples[3 * i]
    if answer <= 0 and answer >= ANSWER_MORE then
      if id == '' then
        items[#items + 1] = entries[i]
      else
        now = now or dedup_now_ms()
        rcall('HSET', leases, id, entries[i][1] .. ' ' .. string.char(6) .. entries[i][2])
        rcall('ZADD', expiries, now + lease_ms, id)
      end
    end
  end
  frontier_enqueue(queue, items, false)
  frontier_count(counters, #items)
  frontier_ack(queue, leases, expiries, acks)
  return out
end
