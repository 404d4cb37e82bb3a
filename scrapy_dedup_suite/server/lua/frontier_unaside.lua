-- include: prelude, frontier
-- Give the requests set aside (a worker could not decode them) another try: up to
-- ARGV[1] of them back to the front of the queue, in their order.
-- KEYS[1]: the shard's queue, KEYS[2]: the requests set aside (a list of "priority
-- entry"), KEYS[3]: the shard's bad members (a line that is not "priority entry" goes
-- there as it was), KEYS[4]: its counters. Returns {how many it read, how many of
-- them were bad}.
local queue, aside, bad, counters = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
dedup_check_type(aside, 'list', 'the frontier requests set aside')
dedup_check_type(bad, 'list', 'the frontier members set aside as bad')
local lines = rcall('LRANGE', aside, 0, tonumber(ARGV[1]) - 1)
local back, bads = {}, 0
for _, line in ipairs(lines) do
  local priority, entry = frontier_parse(line)
  if priority then
    back[#back + 1] = { priority, entry }
  else
    rcall('RPUSH', bad, line)
    bads = bads + 1
  end
end
frontier_check(queue, counters)
frontier_enqueue(queue, back, true)
frontier_count(counters, #back)
rcall('LTRIM', aside, #lines, -1)
return { #lines, bads }
