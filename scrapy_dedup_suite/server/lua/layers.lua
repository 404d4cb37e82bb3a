-- include: prelude, positions, stamp
-- Scalable Bloom filters (Almeida et al., 2007), one per block (or per bucket of
-- a block). Every key a call touches is in its keys: a filter is a group of keys
-- from index g, keys[g] its layer record (a hash: n, layers in use, and count,
-- fingerprints added to the newest layer), keys[g + j] its layer j (1-based),
-- for as many layers as the client sends. The record is created with the first
-- layer; a first layer without its record has lost its counts and is refused.
-- The layer schedule is sent in its arguments: m, k and capacity per block of each layer
-- sent (those in use and one more, to keep calls short), beside the number of
-- layers the filter may have. A call that needs a layer it was not sent answers
-- ANSWER_MORE - (layers needed) before writing anything, and the client calls again
-- with more (the ANSWER_ names: answers.py, the first line of every script).

-- The layers sent, from argv[first] to argv[last].
local function dedup_schedule(argv, first, last)
  local s = {}
  for b = first, last, 3 do
    s[#s + 1] = { tonumber(argv[b]), tonumber(argv[b + 1]), tonumber(argv[b + 2]) }
  end
  return s
end

-- Layers in use and the count of the newest one, for the filter at group g.
local function dedup_layer_state(keys, g)
  local st = rcall('HMGET', keys[g], 'n', 'count')
  if not st[1] and not st[2] and rcall('EXISTS', keys[g + 1]) == 1 then
    dedup_fail('LAYERS', 'layer record ' .. keys[g] .. ' is missing but ' .. keys[g + 1]
      .. ' exists: the filter lost what it knew of its layers')
  end
  return tonumber(st[1]) or 1, tonumber(st[2]) or 0
end

-- Offsets in a layer, scheme dh48p-v1 (bloom_math.py): m is a prime, the step
-- 1 + h2 mod (m - 1), so the k offsets are distinct. (h1, h2: dedup_hashes.)
local function dedup_offsets(h1, h2, m, k)
  return dedup_walk(h1 % m, 1 + h2 % (m - 1), m, k)
end

-- The answer that asks the client for the schedule of ``needed`` layers.
local function dedup_need_layers(needed)
  return ANSWER_MORE - needed
end

-- Whether a layer of the filter at group g holds the fingerprint (n: its layers).
local function dedup_layers_hold(keys, g, n, sched, h1, h2)
  for j = n, 1, -1 do -- newest first: recent fingerprints are the likeliest duplicates
    local layer = sched[j]
    if dedup_first_missing(keys[g + j], dedup_offsets(h1, h2, layer[1], layer[2])) == 0 then
      return true
    end
  end
  return false
end

-- Add to the newest layer of the filter at group g, after adding a layer when
-- that one is full. Returns 0, or ANSWER_GREW when a layer was added, or ANSWER_FULL
-- when the newest layer was full and it is the last one the filter may have (the
-- fingerprint is added anyway), or dedup_need_layers() before writing anything.
-- ttl > 0: keys created here get that expiry in milliseconds (time buckets).
local function dedup_layers_add(keys, g, n, count, sched, total, h1, h2, ttl)
  local state = keys[g]
  local code = 0
  if count >= sched[n][3] then
    if n < total and n + 1 > #sched then
      return dedup_need_layers(n + 1)
    end
    if n < total then
      n = n + 1
      code = ANSWER_GREW
      count = 0
    else
      code = ANSWER_FULL
    end
  end
  local layer = sched[n]
  local key = keys[g + n]
  local offsets = dedup_offsets(h1, h2, layer[1], layer[2])
  local first = dedup_first_missing(key, offsets)
  dedup_ensure_bitmap(key, layer[1])
  if first > 0 then
    dedup_set_from(key, offsets, first)
  end
  rcall('HSET', state, 'n', n, 'count', count + 1)
  dedup_keep_ttl(key, ttl)
  dedup_keep_ttl(state, ttl)
  return code
end
