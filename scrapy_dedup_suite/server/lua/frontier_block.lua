-- include: prelude, frontier
-- A site refused a request (429, 503: scrapy_dedup_suite/frontier/backoff.py): block
-- its download slot for every worker. Its next dispatch comes no sooner than the end
-- of the block (frontier_slots: a slot is handed out one delay before its next
-- dispatch, and the worker holds the request until then).
-- KEYS[1]: the shard's queue (the slot's keys are named from it, frontier_slots).
-- ARGV[1]: the slot's header as a worker tags its requests, "delay jitter concurrency
-- name" (its limits, should the slot be new here), ARGV[2]: the block the site asked
-- for in ms (Retry-After), or -1 for none: the back-off, ARGV[3] ms the first time,
-- doubled for each refusal after a block ended, up to ARGV[4] ms (which also bounds
-- ARGV[2]). A refusal while the slot is blocked (a request sent before the block) does
-- not count again; a slot not refused for as long as its last block lasted, after it
-- ended, starts over.
-- Returns {ms from now until the block ends, refusals counted}.
local queue = KEYS[1]
local asked, first, most = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local slot = frontier_slot_header(ARGV[1])
if not slot or not asked or not first or not most then return { 0, 0 } end -- (not a worker's)
frontier_slot_check_keys(queue)
local now = dedup_now_ms()
local slots = frontier_slot_keys(queue)
local state, known = frontier_slot_state(slots, slot.name)
if not known then frontier_slot_settings(state, slot) end
-- The back-off after k refusals counted: first, doubled k times, at most ``most``.
local function step(k)
  return math.min(first * 2 ^ math.min(math.max(k, 0), 40), most)
end
local block
if asked >= 0 then
  block = math.min(asked, most)
elseif state.blocked > now then
  block = state.blocked - now -- (refused by a request sent before the block)
else
  if now - state.blocked > step(state.strikes - 1) then state.strikes = 0 end
  block = step(state.strikes)
  state.strikes = math.min(state.strikes + 1, 999)
end
state.blocked = math.max(state.blocked, now + math.floor(block))
state.next_at = math.max(state.next_at, state.blocked)
frontier_slot_save(queue, slot.name, state, now)
return { state.blocked - now, state.strikes }
