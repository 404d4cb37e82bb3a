-- include: prelude, frontier
-- Move requests from scrapy-redis's queue into a shard of the frontier, each one once.
-- KEYS[1]: scrapy-redis's queue (a sorted set: its PriorityQueue; a list: its FifoQueue
-- or LifoQueue), KEYS[2]: the shard's queue, KEYS[3]: its counters. ARGV: per
-- request, its member in the old queue, its priority and its entry here. A member no
-- longer in the old queue (another worker moved it first) is not pushed again.
-- Returns how many were moved.
local source, queue, counters = KEYS[1], KEYS[2], KEYS[3]
local kind = rcall('TYPE', source).ok
if kind ~= 'zset' and kind ~= 'list' and kind ~= 'none' then
  dedup_fail('WRONGTYPE', "scrapy-redis's queue " .. source .. ' holds a ' .. kind)
end
frontier_check(queue, counters)
local moved = {}
for i = 1, #ARGV, 3 do
  local gone = 0
  if kind == 'zset' then
    gone = rcall('ZREM', source, ARGV[i])
  elseif kind == 'list' then
    gone = rcall('LREM', source, -1, ARGV[i])
  end
  if gone > 0 then
    moved[#moved + 1] = { ARGV[i + 1], ARGV[i + 2] }
  end
end
frontier_enqueue(queue, moved, false)
frontier_count(counters, #moved)
return #moved
