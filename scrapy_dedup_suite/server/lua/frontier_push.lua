-- include: prelude, frontier
-- Enqueue requests without recording them (dont_filter, a takeover's chunk):
-- KEYS: the shard's queue, leases, expiries and counters; ARGV: per request its
-- priority and entry, then 0 (no lease acknowledged) and 0.
-- Returns how many were enqueued.
local taken = frontier_take()
local out = {}
for i = 1, #taken[2] / 2 do out[i] = 0 end
frontier_enqueue(taken, out)
return #out
