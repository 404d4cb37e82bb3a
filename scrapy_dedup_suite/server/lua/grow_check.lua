-- include: prelude, grow
-- The check-and-add of the growing layout (grow.lua), each fingerprint atomically,
-- shared by compact's (an empty value: grow_compact_add.lua) and hash's (the value
-- is the field's expiry: grow_hash_add.lua). What a value is, is the ``kind``'s:
--   kind.answer(key, field): 1 seen, 0 to write; and whether the field exists (a
--     field written again, expired, adds none to the count);
--   kind.write(key, field, at): writes the field (``at``: the index in argv of the
--     fingerprint's first argument of the kind's);
--   kind.read(key): a bucket's pairs, flat (field, value...);
--   kind.expired(value), where the kind has it: a field a split leaves out.
-- keys: per group of buckets the call touches (a section, one slot): its stamp
-- (stamp.lua), its level record, the buckets of the next `pairs` splits as the client
-- knows its level and pointer (each: the bucket split, then the new one, 2^l above),
-- then the buckets its fingerprints are in as the client knows them.
-- argv[1]: the stamp's value, argv[2]: the load (fields a bucket averages before a
-- split), then the kind's up to argv[head]; argv[head + 1]: the sections; per section:
-- the index of its first key, its `pairs`, and the level and pointer the client knows
-- (l * 2^32 + s); then per fingerprint (``width`` arguments): the index of its bucket's
-- key, its field (8 bytes), then the kind's.
-- Answers per fingerprint, in order: 1 seen; 0 written (new); ANSWER_GREW written,
-- and its section split once more (a split per fingerprint written at most); below
-- ANSWER_MORE nothing written for any fingerprint of its section (it split otherwise
-- than the client knew, where the call names a bucket or must split one):
-- grow_again's level and pointer, and the client sends them again. A fingerprint
-- repeated in one call is new once, then seen.
local function grow_add(keys, argv, head, width, kind)
  local want, load, count = argv[1], tonumber(argv[2]), tonumber(argv[head + 1])
  local sections, section_of, names = {}, {}, {}
  for i = 1, count do
    local a = head + 2 + 3 * (i - 1)
    local first, known = tonumber(argv[a]), tonumber(argv[a + 2])
    local l = math.floor(known / GROW_CAP)
    sections[i] = { first = first, pairs = tonumber(argv[a + 1]), kl = l, ks = known - l * GROW_CAP,
      stamp = keys[first], record = keys[first + 1], written = {}, added = 0 }
    names[2 * i - 1], names[2 * i] = keys[first], keys[first + 1]
  end
  -- Each section's stamp and state, before anything is written: all read at once; a
  -- section missing either reads both again alone (MGET reads a key of another type
  -- as missing, where GET refuses it).
  local read = {}
  for i = 1, #names, 1000 do
    local got = rcall('MGET', unpack(names, i, math.min(i + 999, #names)))
    for k = 1, #got do read[i + k - 1] = got[k] end
  end
  for i = 1, count do
    local sec = sections[i]
    local have, raw = read[2 * i - 1], read[2 * i]
    if not (have and raw) then have, raw = rcall('GET', sec.stamp), nil end
    if have and have ~= want then
      dedup_stamp_mismatch(sec.stamp, have, want)
    end
    sec.have = have
    sec.st = grow_state(sec.record, sec.stamp, raw)
    sec.refused = sec.st[1] ~= sec.kl
    sec.high = 2 ^ sec.st[1]
    local last = i < count and sections[i + 1].first - 1 or #keys
    for k = sec.first + 2 + 2 * sec.pairs, last do section_of[k] = sec end
  end
  -- The splits sent to a section (by the new bucket's number: it names the split).
  local function splits_of(sec)
    if not sec.splits then
      sec.splits = {}
      local l, s = sec.kl, sec.ks
      for p = 0, sec.pairs - 1 do
        local k = sec.first + 2 + 2 * p
        sec.splits[s + 2 ^ l] = { keys[k], keys[k + 1] }
        l, s = grow_advanced(l, s, 1)
      end
    end
    return sec.splits
  end
  -- Each fingerprint's section and bucket: refused where the bucket it is in now is not
  -- the one the client named.
  local base = head + 1 + 3 * count
  local n = (#argv - base) / width
  local of, key_of, field_of, at_of = {}, {}, {}, {}
  for j = 1, n do
    local at = base + width * (j - 1)
    local k, field = tonumber(argv[at + 1]), argv[at + 2]
    if #field ~= 8 then dedup_fail('FIELD', 'a field of ' .. #field .. ' bytes, not 8') end
    local sec = section_of[k]
    of[j], key_of[j], field_of[j], at_of[j] = sec, keys[k], field, at + 3
    if not sec.refused and sec.st[2] ~= sec.ks then
      -- (the same level: the bucket differs where h mod 2^l lies between the pointers)
      local low = grow_h(field) % sec.high
      if (low < sec.st[2]) ~= (low < sec.ks) then sec.refused = true end
    end
  end
  -- Every answer before any write (a bucket of another type, or a damaged value,
  -- refuses the whole call).
  local out, planned = {}, {}
  for j = 1, n do
    local sec = of[j]
    if not sec.refused then
      local answer, exists = kind.answer(key_of[j], field_of[j])
      if answer == 0 then
        answer = dedup_repeat(planned, key_of[j], field_of[j])
        if answer == 0 then
          sec.written[#sec.written + 1] = j
          if not exists then sec.added = sec.added + 1 end
        end
      end
      out[j] = answer
    end
  end
  -- The split that comes due first must have been sent its keys, else the section
  -- writes nothing either (the client learns how far it split); and the buckets it will
  -- split hold hashes: checked before the first write, so that a key of another type
  -- refuses the call rather than lose what a split moves.
  local function next_split(sec)
    return splits_of(sec)[sec.st[2] + 2 ^ sec.st[1]]
  end
  for i = 1, count do
    local sec = sections[i]
    local st = sec.st
    if not sec.refused and #sec.written > 0
      and grow_due(st, st[3] + sec.added, load) and not next_split(sec) then
      sec.refused = true
    elseif not sec.refused and #sec.written > 0 then
      local l, s, total = st[1], st[2], st[3] + sec.added
      for _ = 1, #sec.written do
        local sent = total > load * (2 ^ l + s) and splits_of(sec)[s + 2 ^ l]
        if not sent then break end
        dedup_check_type(sent[1], 'hash', 'bucket')
        dedup_check_type(sent[2], 'hash', 'bucket')
        l, s = grow_advanced(l, s, 1)
      end
    end
  end
  for j = 1, n do
    local sec = of[j]
    if sec.refused then
      out[j] = grow_again(sec.st)
    elseif out[j] == 0 then
      if not sec.have then
        rcall('SET', sec.stamp, want)
        sec.have = want
      end
      kind.write(key_of[j], field_of[j], at_of[j])
    end
  end
  local function write(key, pairs_)
    for i = 1, #pairs_, 1000 do rcall('HSET', key, unpack(pairs_, i, math.min(i + 999, #pairs_))) end
  end
  for i = 1, count do
    local sec = sections[i]
    local st = sec.st
    if not sec.refused and #sec.written > 0 then
      st[3] = st[3] + sec.added
      -- A split per fingerprint written at most, while due and sent.
      for _, j in ipairs(sec.written) do
        local sent = grow_due(st, st[3], load) and next_split(sec)
        if not sent then break end
        grow_split(st, sent[1], sent[2], kind, write)
        out[j] = ANSWER_GREW
      end
      grow_save(sec.record, st)
    end
  end
  return out
end
