-- include: prelude, stamp, grow
-- Check-and-record fingerprints in buckets that split as the filter grows (compact's
-- growing layout, grow.lua), each one atomically; a field's value is empty.
-- keys: per group of the call, six: the stamp of its slot (stamp.lua), the level
-- record, the two buckets its fingerprints may be in, and two of a split to come (the
-- client gives the groups of one slot consecutive splits: s, s + 1, ...).
-- argv[1]: the stamp's value, argv[2]: the load (fields a bucket averages before a
-- split); then per fingerprint: its group (1-based) and its field (8 bytes).
-- Answers per fingerprint, in order: 1 seen; 0 written (new); ANSWER_GREW written,
-- and its slot's group split once more (a split per fingerprint written at most);
-- below ANSWER_MORE nothing written for any fingerprint of its slot's group:
-- grow_again's level and pointer, and the client sends them again. A fingerprint
-- repeated in one call is new once, then seen.
-- The add step (scripts.AddStep): alone, or in the frontier's record-and-enqueue.
local function dedup_add(keys, argv)
  dedup_check_stamps(keys, 6, argv[1])
  local load = tonumber(argv[2])
  -- Each slot's group once, by its level record: its state, the splits the call was
  -- sent (by the new bucket's number, the buckets there are before it: its keys),
  -- whether it refuses, what it writes.
  local groups, order, places = {}, {}, {}
  for i = 3, #argv, 2 do
    local g = tonumber(argv[i]) * 6 - 5
    local h = grow_h(argv[i + 1])
    if not h then dedup_fail('FIELD', 'a field of ' .. #argv[i + 1] .. ' bytes, not 8') end
    local record = keys[g + 1]
    local group = groups[record]
    if not group then
      group = { st = grow_state(record, keys[g]), stamp = keys[g], splits = {}, written = {} }
      groups[record] = group
      order[#order + 1] = record
    end
    group.splits[grow_number(keys[g + 5])] = { keys[g + 4], keys[g + 5] }
    local b, key = grow_bucket(h, group.st), nil
    if b == grow_number(keys[g + 2]) then key = keys[g + 2]
    elseif b == grow_number(keys[g + 3]) then key = keys[g + 3]
    else group.refused = true end
    places[#places + 1] = { i = i, group = group, key = key }
  end
  -- Every answer before any write (a bucket of another type refuses the whole call).
  local out, planned = {}, {}
  for n, p in ipairs(places) do
    if not p.group.refused then
      out[n] = rcall('HEXISTS', p.key, argv[p.i + 1])
      if out[n] == 0 then
        out[n] = dedup_repeat(planned, p.key, argv[p.i + 1])
        if out[n] == 0 then table.insert(p.group.written, n) end
      end
    end
  end
  -- The split that comes due first must have been sent its keys, else the group
  -- writes nothing either (the client learns how far it split).
  local function next_split(group)
    local st = group.st
    local sent = group.splits[st[2] + 2 ^ st[1]]
    if sent and grow_number(sent[1]) == st[2] then return sent end
  end
  for _, record in ipairs(order) do
    local group = groups[record]
    local st = group.st
    if not group.refused and #group.written > 0
      and grow_due(st, st[3] + #group.written, load) and not next_split(group) then
      group.refused = true
    end
  end
  for n, p in ipairs(places) do
    if p.group.refused then
      out[n] = grow_again(p.group.st)
    elseif out[n] == 0 then
      dedup_stamp(p.group.stamp, argv[1])
      rcall('HSETNX', p.key, argv[p.i + 1], '')
    end
  end
  local function read(key)
    local pairs_ = {}
    for _, f in ipairs(rcall('HKEYS', key)) do
      pairs_[#pairs_ + 1] = f
      pairs_[#pairs_ + 1] = ''
    end
    return pairs_
  end
  local function write(key, pairs_)
    for i = 1, #pairs_, 1000 do rcall('HSET', key, unpack(pairs_, i, math.min(i + 999, #pairs_))) end
  end
  for _, record in ipairs(order) do
    local group = groups[record]
    local st = group.st
    if not group.refused and #group.written > 0 then
      st[3] = st[3] + #group.written
      -- A split per fingerprint written at most, while due and sent.
      for _, n in ipairs(group.written) do
        local sent = grow_due(st, st[3], load) and next_split(group)
        if not sent then break end
        grow_split(st, sent[1], sent[2], read, write)
        out[n] = ANSWER_GREW
      end
      grow_save(record, st)
    end
  end
  return out
end
