-- include: prelude, stamp
-- Check-and-record fingerprints with an expiry, each one atomically, on the server's clock.
-- keys: one group per shard the call touches: the shard's stamp (stamp.lua), then
-- the hash (a shard: fingerprint -> expiry; or a bucket: 8 digest bytes -> expiry).
-- argv[1]: the stamp's value; argv[2]: the unit of the stored expiries in milliseconds
-- (1: Unix milliseconds, the shards'; 1000: Unix seconds, the buckets', rounded up);
-- then per fingerprint: its group (1-based), its field, and the milliseconds it stays seen.
-- Returns one answer per fingerprint, in order: 1 when its field exists and has
-- not expired (seen), 0 after (re)writing it. A fingerprint repeated in one call
-- is new once, then seen.
-- The add step (a layout's, scripts.AddStep): run alone on KEYS and ARGV, or by
-- the frontier within its record-and-enqueue (frontier.lua, frontier_record).
local function dedup_add(keys, argv)
  local now = dedup_now_ms()
  local unit = tonumber(argv[2])
  dedup_check_stamps(keys, 2, argv[1])
  -- First every answer, then the writes: a damaged field refuses the whole call
  -- before anything is written.
  local out, writes, written = {}, {}, {}
  for i = 3, #argv, 3 do
    local g = tonumber(argv[i]) * 2 - 1
    local shard, fp = keys[g + 1], argv[i + 1]
    local answer = 0
    local current = rcall('HGET', shard, fp)
    if current then
      local expiry = tonumber(current)
      if not expiry then
        dedup_fail('FIELD', 'field ' .. fp .. ' of ' .. shard .. ' is not an expiry timestamp: ' .. current)
      end
      if expiry * unit > now then answer = 1 end
    end
    if answer == 0 then
      answer = dedup_repeat(written, shard, fp)
      if answer == 0 then writes[#writes + 1] = i end
    end
    out[#out + 1] = answer
  end
  for _, i in ipairs(writes) do
    local g = tonumber(argv[i]) * 2 - 1
    dedup_stamp(keys[g], argv[1])
    local expiry = math.ceil((now + tonumber(argv[i + 2])) / unit)
    rcall('HSET', keys[g + 1], argv[i + 1], string.format('%.0f', expiry))
  end
  return out
end
