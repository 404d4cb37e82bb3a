-- include: prelude, stamp, grow
-- Check-and-record fingerprints in buckets that split as the filter grows (compact's
-- growing layout, grow.lua), each one atomically; a field's value is empty.
-- keys: per group of the call, six: the stamp of its slot (stamp.lua), the level
-- record, the two buckets its fingerprints may be in (h mod 2^l, and 2^l more, at the
-- level l the client knows), and the two of a split to come: the k-th group of a slot
-- in the call (from 0) is sent the k-th split after the level and pointer the client
-- knows (grow_advanced), so that a call of many fingerprints may split as often.
-- argv[1]: the stamp's value, argv[2]: the load (fields a bucket averages before a
-- split); then per fingerprint: its group (1-based), its field (8 bytes), and the
-- level and pointer the client knows of its slot's group (l * 2^32 + s).
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
  -- sent (by the new bucket's number: it names the split), whether it refuses, what it
  -- writes. Each group of the call once: its slot's group and the level it was sent.
  local groups, order, entries = {}, {}, {}
  local n = (#argv - 2) / 3
  local of, key_of = {}, {}
  for j = 1, n do
    local i = 3 * j
    local g = tonumber(argv[i]) * 6 - 5
    local h = grow_h(argv[i + 1])
    if not h then dedup_fail('FIELD', 'a field of ' .. #argv[i + 1] .. ' bytes, not 8') end
    local entry = entries[g]
    if not entry then
      local record = keys[g + 1]
      local group = groups[record]
      if not group then
        group = { st = grow_state(record, keys[g]), stamp = keys[g], splits = {}, written = {},
          sent = 0 }
        groups[record] = group
        order[#order + 1] = record
      end
      local known = tonumber(argv[i + 2])
      local l = math.floor(known / GROW_CAP)
      local sl, ss = grow_advanced(l, known - l * GROW_CAP, group.sent)
      group.sent = group.sent + 1
      group.splits[ss + 2 ^ sl] = { keys[g + 4], keys[g + 5] }
      entry = { group = group, level = l }
      entries[g] = entry
    end
    local group = entry.group
    local st = group.st
    of[j] = group
    if entry.level ~= st[1] then
      group.refused = true
    elseif grow_bucket(h, st) < 2 ^ st[1] then
      key_of[j] = keys[g + 2]
    else
      key_of[j] = keys[g + 3]
    end
  end
  -- Every answer before any write (a bucket of another type refuses the whole call).
  local out, planned = {}, {}
  for j = 1, n do
    local group = of[j]
    if not group.refused then
      local field = argv[3 * j + 1]
      local answer = rcall('HEXISTS', key_of[j], field)
      if answer == 0 then
        answer = dedup_repeat(planned, key_of[j], field)
        if answer == 0 then group.written[#group.written + 1] = j end
      end
      out[j] = answer
    end
  end
  -- The split that comes due first must have been sent its keys, else the group
  -- writes nothing either (the client learns how far it split).
  local function next_split(group)
    return group.splits[group.st[2] + 2 ^ group.st[1]]
  end
  -- And the buckets it will split hold hashes: checked before the first write, so
  -- that a key of another type refuses the call rather than lose what a split moves.
  for _, record in ipairs(order) do
    local group = groups[record]
    local st = group.st
    if not group.refused and #group.written > 0
      and grow_due(st, st[3] + #group.written, load) and not next_split(group) then
      group.refused = true
    elseif not group.refused and #group.written > 0 then
      local l, s, n = st[1], st[2], st[3] + #group.written
      for _ = 1, #group.written do
        local sent = n > load * (2 ^ l + s) and group.splits[s + 2 ^ l]
        if not sent then break end
        dedup_check_type(sent[1], 'hash', 'bucket')
        dedup_check_type(sent[2], 'hash', 'bucket')
        l, s = grow_advanced(l, s, 1)
      end
    end
  end
  for j = 1, n do
    local group = of[j]
    if group.refused then
      out[j] = grow_again(group.st)
    elseif out[j] == 0 then
      dedup_stamp(group.stamp, argv[1])
      rcall('HSETNX', key_of[j], argv[3 * j + 1], '')
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
      for _, j in ipairs(group.written) do
        local sent = grow_due(st, st[3], load) and next_split(group)
        if not sent then break end
        grow_split(st, sent[1], sent[2], read, write)
        out[j] = ANSWER_GREW
      end
      grow_save(record, st)
    end
  end
  return out
end
