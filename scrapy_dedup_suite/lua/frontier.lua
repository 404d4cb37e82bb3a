-- include: prelude
-- The frontier's queue (scrapy_dedup_suite/frontier/queue.py), one per shard: at the
-- shard's key a sorted set of the priorities that have requests waiting (member: the
-- priority, score: minus it, so that the highest comes first), and per priority a list
-- of encoded requests at key .. ':' .. priority, first in first out; a request given
-- back (released, or reclaimed from a dead worker) goes to the front. The lists are
-- named from the shard's key in the script: the same hash tag, so the same slot.
-- A script that records and enqueues (an add script with this fragment, see
-- frontier_take) gets the queue as its last key and, after the add script's own
-- arguments, per fingerprint its request's priority and entry, then how many of ARGV
-- were the add script's.

local function frontier_list(queue, priority)
  return queue .. ':' .. priority
end

-- Refuse (WRONGTYPE) a queue or list of another type before anything is written.
local function frontier_check(queue, priorities)
  dedup_check_type(queue, 'zset', 'the frontier queue')
  for priority in pairs(priorities) do
    dedup_check_type(frontier_list(queue, priority), 'list', 'the frontier list')
  end
end

local function frontier_push(queue, priority, entry, front)
  rcall(front and 'LPUSH' or 'RPUSH', frontier_list(queue, priority), entry)
  rcall('ZADD', queue, -tonumber(priority), priority)
end

-- Take the frontier's part off KEYS and ARGV, so that the add script reads its own
-- (and the fragments it uses read them) as when it runs alone; check the types of
-- what the pushes will write. Returns the queue and the (priority, entry) pairs.
local function frontier_take()
  local own = tonumber(table.remove(ARGV))
  local queue = table.remove(KEYS)
  local pairs_, priorities = {}, {}
  for i = own + 1, #ARGV do pairs_[#pairs_ + 1] = ARGV[i] end
  for i = #ARGV, own + 1, -1 do ARGV[i] = nil end
  for i = 1, #pairs_, 2 do priorities[pairs_[i]] = true end
  frontier_check(queue, priorities)
  return { queue, pairs_ }
end

-- After the add script answered ``out`` (one answer per fingerprint: > 0 seen; 0 or
-- -1 .. -10 new, written; <= -11 nothing written, to be sent again): push the request
-- of each fingerprint written as new. Returns ``out``.
local function frontier_enqueue(taken, out)
  local queue, pairs_ = taken[1], taken[2]
  for i = 1, #out do
    local answer = out[i]
    if answer <= 0 and answer > -11 then
      frontier_push(queue, pairs_[2 * i - 1], pairs_[2 * i], false)
    end
  end
  return out
end
