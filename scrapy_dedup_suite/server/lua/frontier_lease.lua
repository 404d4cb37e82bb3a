-- include: prelude, frontier
-- A worker's one call to a shard of the frontier: acknowledge, renew and give back
-- the leases it names, return to the queue what a dead worker held past its lease,
-- then lease up to n requests.
-- KEYS[1]: the shard's queue (frontier_runs.lua), KEYS[2]: its leases (a hash: lease
-- id -> priority, a space, the entry), KEYS[3]: their expiries (a sorted set: lease id
-- -> the server's time in ms when it ends), KEYS[4]: its counters (a hash: reclaimed,
-- waiting),
-- KEYS[5]: the requests set aside (a list of "priority entry": a worker could not
-- decode them), KEYS[6]: the pages to try again later (a sorted set: "priority entry"
-- -> the server's time in ms when it is due), KEYS[7]: members of these keys that are
-- not the frontier's (a list, each as it was found; a member of the queue that is not
-- a run as "queue <member>"), KEYS[8]: the workers seen (a sorted set: worker -> the
-- server's time in ms of its last call; those not seen for an hour are dropped).
-- ARGV[1]: the lease in ms, ARGV[2]: n, ARGV[3]: the prefix of the worker's lease ids,
-- ARGV[4]: the number of its first new lease, ARGV[5]: how many times a request may come
-- back from workers that held it past their lease (0: no bound; once more, it is set
-- aside in KEYS[5] instead), ARGV[6]: 1 if the caller is a worker of the crawl, to
-- be seen in KEYS[8] (0: a command's call), ARGV[7]: a random whole number from 1 to
-- 2^31 - 2 (the slots' jitter: frontier_slots); then five lists, each its length first:
-- the ids acknowledged (done with), the ids renewed (still being worked on), the ids
-- released (taken but not started, at a graceful close), the ids set aside (their
-- entry could not be decoded: kept in KEYS[5] rather than given back again and again),
-- and per page whose download failed for good, four items: its lease id, the delay in
-- ms, its priority and its entry to try again (its lease ends: it waits in KEYS[6]).
-- The pages due go back to the front of the queue before requests are leased.
-- Requests tagged with their download slot are leased from the slots ready
-- (frontier_slots), the others from KEYS[1] after them.
-- A lease that ended holding a request on its way to another shard (frontier_moving)
-- is handed to this caller to move: renewed for it, under the same id, and returned.
-- (An older version's call gives such a request back to the queue, marked: it is
-- leased here without its mark.)
-- Returns {runs waiting (members of KEYS[1]) and slots ready or due, leases held,
-- reclaimed by this call, bad members set aside by this call, k: requests set aside by
-- this call for coming back too often, ms until the first page of KEYS[6] is due or
-- the first slot is ready (-1: none), the server's time (ms), m: requests to move,
-- then those k requests' entries, then per request to move: its lease id, priority
-- and entry, then per request leased: its priority, entry and the ms to hold it before
-- it is sent};
-- the i-th leased has id prefix .. (ARGV[4] + i - 1).
local queue, leases, expiries, counters, aside = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local later, bad, workers = KEYS[6], KEYS[7], KEYS[8]
local lease_ms, n = tonumber(ARGV[1]), tonumber(ARGV[2])
local prefix, first, max_returns = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
dedup_check_type(leases, 'hash', 'the frontier leases')
dedup_check_type(expiries, 'zset', 'the frontier lease expiries')
dedup_check_type(counters, 'hash', 'the frontier counters')
dedup_check_type(aside, 'list', 'the frontier requests set aside')
dedup_check_type(later, 'zset', 'the frontier pages to try again later')
dedup_check_type(bad, 'list', 'the frontier members set aside as bad')
dedup_check_type(workers, 'zset', 'the frontier workers seen')
frontier_slot_check_keys(queue)
local bads = 0
local function set_bad(member)
  rcall('RPUSH', bad, member)
  bads = bads + 1
end
local rand = tonumber(ARGV[7]) or 1
local lists, at = {}, 8
for l = 1, 5 do
  local len = tonumber(ARGV[at])
  local ids = {}
  for i = 1, len do ids[i] = ARGV[at + i] end
  lists[l], at = ids, at + len + 1
end
-- Acknowledgements and renewals first: a lease done, or renewed by the worker that
-- holds it, is never given back, even one that ended.
local now = dedup_now_ms()
if ARGV[6] == '1' then -- (the worker: its ids' prefix, less ':')
  rcall('ZADD', workers, now, string.sub(prefix, 1, -2))
  rcall('ZREMRANGEBYSCORE', workers, '-inf', now - 3600000)
end
frontier_ack(queue, leases, expiries, lists[1])
for _, id in ipairs(lists[4]) do
  local held = rcall('HGET', leases, id)
  if held then rcall('RPUSH', aside, held) end
end
frontier_ack(queue, leases, expiries, lists[4])
local failed = lists[5]
for i = 1, #failed, 4 do -- (a lease already reclaimed went back to the queue: no more)
  local held = rcall('HGET', leases, failed[i])
  if held then -- (its slot's tag, if any, stays with it: it comes back to its slot)
    local _, item = frontier_parse(held)
    local header = item and frontier_slot_split(item)
    local entry = header and frontier_slot_join(header, failed[i + 3]) or failed[i + 3]
    rcall('ZADD', later, now + tonumber(failed[i + 1]), failed[i + 2] .. ' ' .. entry)
    frontier_ack(queue, leases, expiries, { failed[i] })
  end
end
for _, id in ipairs(lists[2]) do
  rcall('ZADD', expiries, 'XX', now + lease_ms, id)
end
local expired = rcall('ZRANGEBYSCORE', expiries, '-inf', now, 'LIMIT', 0, 100)
-- What goes back to the queue, read first: every list it goes to is checked before
-- the first write.
-- A request that comes back from a lease that ended counts it in its list item (see
-- frontier_wrap); past max_returns it is set aside (a page that kills or freezes every
-- worker that takes it), and its entry returned for the worker to name it.
local back, returned, moves = {}, {}, {}
local function give_back(ids, ended)
  for _, id in ipairs(ids) do
    local held = rcall('HGET', leases, id)
    if held then
      local priority, item = frontier_parse(held)
      if not priority then
        set_bad(held)
        frontier_ack(queue, leases, expiries, { id })
      elseif frontier_moving(item) then
        rcall('ZADD', expiries, now + lease_ms, id)
        moves[#moves + 1] = { id, priority, frontier_moving(item) }
      elseif not ended then
        back[#back + 1] = { id, priority, item }
      else
        local times, entry = frontier_unwrap(item)
        if max_returns > 0 and times >= max_returns then
          rcall('RPUSH', aside, priority .. ' ' .. entry)
          frontier_ack(queue, leases, expiries, { id })
          returned[#returned + 1] = entry
        else
          back[#back + 1] = { id, priority, frontier_wrap(times + 1, entry) }
        end
      end
    end
  end
end
give_back(lists[3], false)
local released = #back
give_back(expired, true)
local due = rcall('ZRANGEBYSCORE', later, '-inf', now, 'LIMIT', 0, 100)
local due_back = 0
for _, held in ipairs(due) do
  local priority, entry = frontier_parse(held)
  if priority then
    due_back = due_back + 1
    back[#back + 1] = { false, priority, entry }
  else
    set_bad(held) -- (removed from KEYS[6] with the others below)
  end
end
frontier_check(queue, counters)
local waiting = rcall('HGET', counters, 'waiting')
if not frontier_waiting_ok(waiting) then
  set_bad('counter waiting ' .. waiting) -- (another's value: every count would fail)
  rcall('HDEL', counters, 'waiting')
end
local items = {}
for i, item in ipairs(back) do items[i] = { item[2], item[3] } end
frontier_enqueue(queue, items, true) -- (at the front, in their order)
for _, item in ipairs(back) do
  if item[1] then frontier_ack(queue, leases, expiries, { item[1] }) end
end
if #due > 0 then rcall('ZREM', later, unpack(due)) end
local reclaimed = #back - released - due_back
if reclaimed > 0 then
  local count = rcall('HGET', counters, 'reclaimed')
  if count and not (string.match(count, '^%d+$') and #count <= 15) then
    set_bad('counter reclaimed ' .. count) -- (another's value: HINCRBY would fail each call)
    rcall('HDEL', counters, 'reclaimed')
  end
  rcall('HINCRBY', counters, 'reclaimed', reclaimed)
end
local out = { 0, 0, reclaimed, 0, #returned, -1, now, #moves }
for _, entry in ipairs(returned) do out[#out + 1] = entry end
for _, move in ipairs(moves) do
  for _, x in ipairs(move) do out[#out + 1] = x end
end
local slots, ready = frontier_slot_keys(queue)
if n > 0 and rcall('ZCARD', ready) == 0 and rcall('HLEN', leases) == 0
    and rcall('EXISTS', slots) == 1 then
  frontier_slot_recount(queue, now)
end
local leased = frontier_slot_take(queue, n, set_bad, now, rand)
for _, record in ipairs(frontier_pop(queue, n - #leased, set_bad)) do
  leased[#leased + 1] = { record[1], record[2], 0 }
end
for i, record in ipairs(leased) do
  local id = prefix .. (first + i - 1)
  rcall('HSET', leases, id, record[1] .. ' ' .. record[2])
  rcall('ZADD', expiries, now + lease_ms, id)
  local _, bare = frontier_unwrap(record[2])
  local _, plain = frontier_slot_split(frontier_moving(bare) or bare) -- (see below)
  out[#out + 1] = record[1]
  out[#out + 1] = plain
  out[#out + 1] = record[3]
end
frontier_count(counters, #back - #leased)
if rcall('EXISTS', queue, slots) == 0 then rcall('HDEL', counters, 'waiting') end
out[2] = rcall('HLEN', leases)
out[1] = rcall('ZCARD', queue) + rcall('ZCARD', ready)
out[4] = bads
local first_due = tonumber(rcall('ZRANGE', later, 0, 0, 'WITHSCORES')[2] or '')
local first_ready = tonumber(rcall('ZRANGE', ready, 0, 0, 'WITHSCORES')[2] or '')
if first_ready and (not first_due or first_ready < first_due) then first_due = first_ready end
if first_due then out[6] = math.max(0, math.floor(first_due - now)) end
return out
