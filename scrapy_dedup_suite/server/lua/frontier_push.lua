-- include: prelude, frontier
-- Enqueue requests without recording them (dont_filter, a takeover's chunk).
-- KEYS[1]: the shard's queue, KEYS[2]: its counters; ARGV: per request its priority
-- and entry.
-- Returns how many were enqueued.
local queue, counters = KEYS[1], KEYS[2]
frontier_check(queue, counters)
local items = {}
for i = 1, #ARGV, 2 do items[#items + 1] = { ARGV[i], ARGV[i + 1] } end
frontier_enqueue(queue, items, false)
frontier_count(counters, #items)
return #items
