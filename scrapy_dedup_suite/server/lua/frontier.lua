-- include: prelude, frontier_runs
-- The frontier's shard (scrapy_dedup_suite/frontier/queue.py): its queue of runs
-- (frontier_runs), its leases and their expiries, its counters.
-- A script that records and enqueues (an add script with this fragment, see
-- frontier_take) gets as its last keys the shard's queue, leases, lease expiries and
-- counters and, after the add script's own arguments, per fingerprint its request's
-- priority and entry, then the lease ids it acknowledges, how many, and how many of
-- ARGV were the add script's.

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

-- A worker is done with these leases (their requests' children are safe).
local function frontier_ack(leases, expiries, ids)
  for _, id in ipairs(ids) do
    rcall('HDEL', leases, id)
    rcall('ZREM', expiries, id)
  end
end

-- Take the frontier's part off KEYS and ARGV, so that the add script reads its own
-- (and the fragments it uses read them) as when it runs alone; check the types of
-- what the pushes and acknowledgements will write. Returns the queue, the (priority,
-- entry) pairs, the leases and expiries keys, the lease ids to acknowledge and the
-- counters key.
local function frontier_take()
  local own = tonumber(table.remove(ARGV))
  local nacks = tonumber(table.remove(ARGV))
  local counters, expiries = table.remove(KEYS), table.remove(KEYS)
  local leases, queue = table.remove(KEYS), table.remove(KEYS)
  local pairs_, acks = {}, {}
  for i = own + 1, #ARGV - nacks do pairs_[#pairs_ + 1] = ARGV[i] end
  for i = #ARGV - nacks + 1, #ARGV do acks[#acks + 1] = ARGV[i] end
  for i = #ARGV, own + 1, -1 do ARGV[i] = nil end
  frontier_check(queue, counters)
  if #acks > 0 then
    dedup_check_type(leases, 'hash', 'the frontier leases')
    dedup_check_type(expiries, 'zset', 'the frontier lease expiries')
  end
  return { queue, pairs_, leases, expiries, acks, counters }
end

-- After the add script answered ``out`` (one answer per fingerprint: > 0 seen;
-- ANSWER_MORE .. 0 new, written; below ANSWER_MORE nothing written, to be sent
-- again; answers.py): push the request
-- of each fingerprint written as new, then acknowledge the leases named (last: an
-- error before leaves them held). Returns ``out``.
local function frontier_enqueue(taken, out)
  local pairs_, items = taken[2], {}
  for i = 1, #out do
    local answer = out[i]
    if answer <= 0 and answer >= ANSWER_MORE then
      items[#items + 1] = { pairs_[2 * i - 1], pairs_[2 * i] }
    end
  end
  frontier_push(taken[1], items, false)
  frontier_count(taken[6], #items)
  frontier_ack(taken[3], taken[4], taken[5])
  return out
end
