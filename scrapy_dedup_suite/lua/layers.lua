-- Scalable Bloom filters (Almeida et al., 2007), one per block (or per bucket of
-- a block). Layer j (1-based here) of the filter at base lives at base (j = 1)
-- or base..':L'..(j-1): the same hash tag, so the same cluster slot. The hash
-- base..':layers' holds n (layers in use; missing = 1) and count (fingerprints
-- added to the newest layer). ARGV from index i: the number of layers the
-- filter may have, then m, k and capacity per block of the first layers, as
-- many as the client sends (those in use and one more, to keep calls short).
-- A script that needs a layer it was not sent answers -(10 + layers needed),
-- and the client calls again with more.

local function dedup_schedule(i)
  local s = {}
  for b = i + 1, #ARGV, 3 do
    s[#s + 1] = { tonumber(ARGV[b]), tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]) }
  end
  return s, tonumber(ARGV[i])
end

local function dedup_layer_key(base, j)
  if j == 1 then return base end
  return base .. ':L' .. (j - 1)
end

-- Layers in use and the count of the newest one.
local function dedup_layer_state(base)
  local st = rcall('HMGET', base .. ':layers', 'n', 'count')
  return tonumber(st[1]) or 1, tonumber(st[2]) or 0
end

-- Offsets in a layer, scheme dh48p-v1 (bloom_math.py): m is a prime, the step
-- 1 + h2 mod (m - 1), so the k offsets are distinct. (h1, h2: dedup_hashes.)
local function dedup_offsets(h1, h2, m, k)
  return dedup_walk(h1 % m, 1 + h2 % (m - 1), m, k)
end

-- The answer that asks the client for the schedule of ``needed`` layers.
local function dedup_need_layers(needed)
  return -(10 + needed)
end

-- Whether a layer of the filter at base holds the fingerprint (n: its layers).
local function dedup_layers_hold(base, n, sched, h1, h2)
  for j = n, 1, -1 do -- newest first: recent fingerprints are the likeliest duplicates
    local layer = sched[j]
    if dedup_first_missing(dedup_layer_key(base, j), dedup_offsets(h1, h2, layer[1], layer[2])) == 0 then
      return true
    end
  end
  return false
end

-- Add to the newest layer, after adding a layer when that one is full.
-- Returns 0, or -1 when a layer was added, or -2 when the newest layer was full
-- and it is the last one the filter may have (the fingerprint is added anyway),
-- or dedup_need_layers() before writing anything.
-- ttl > 0: keys created here get that expiry in milliseconds (time buckets).
local function dedup_layers_add(base, n, count, sched, total, h1, h2, ttl)
  local state = base .. ':layers'
  local code = 0
  if count >= sched[n][3] then
    if n < total and n + 1 > #sched then
      return dedup_need_layers(n + 1)
    end
    if n < total then
      n = n + 1
      code = -1
      rcall('HSET', state, 'n', n, 'count', 0)
    else
      code = -2
    end
  end
  local layer = sched[n]
  local key = dedup_layer_key(base, n)
  local offsets = dedup_offsets(h1, h2, layer[1], layer[2])
  local first = dedup_first_missing(key, offsets)
  dedup_ensure_bitmap(key, layer[1])
  if first > 0 then
    dedup_set_from(key, offsets, first)
  end
  rcall('HINCRBY', state, 'count', 1)
  if ttl > 0 then
    if rcall('PTTL', key) == -1 then rcall('PEXPIRE', key, ttl) end
    if rcall('PTTL', state) == -1 then rcall('PEXPIRE', state, ttl) end
  end
  return code
end
