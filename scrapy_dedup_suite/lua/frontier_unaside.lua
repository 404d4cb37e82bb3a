-- include: prelude, frontier
-- Give the requests set aside (a worker could not decode them) another try: up to
-- ARGV[1] of them back to the front of the queue, in their order.
-- KEYS[1]: the shard's queue, KEYS[2]: the requests set aside (a list of "priority
-- entry"). Returns how many went back.
local queue, aside = KEYS[1], KEYS[2]
dedup_check_type(aside, 'list', 'the frontier requests set aside')
local lines = rcall('LRANGE', aside, 0, tonumber(ARGV[1]) - 1)
local back, priorities = {}, {}
for i, line in ipairs(lines) do
  local space = string.find(line, ' ', 1, true)
  back[i] = { string.sub(line, 1, space - 1), string.sub(line, space + 1) }
  priorities[back[i][1]] = true
end
frontier_check(queue, priorities)
for i = #back, 1, -1 do
  frontier_push(queue, back[i][1], back[i][2], true)
end
rcall('LTRIM', aside, #lines, -1)
return #lines
