-- include: prelude
-- Bit offsets of one fingerprint, scheme dh48-v1 (see scrapy_dedup_suite/bloom_math.py):
--   h1 = fp[0:12], h2 = fp[12:24] read as 48-bit hex numbers,
--   p_0 = h1 mod m, p_i = (p_(i-1) + h2 mod m) mod m, for k offsets.
-- Every value stays below 2^53, where Lua's '%' on doubles is exact.
-- (Hot path: locals and operators, not math.* calls, which cost as much as a GETBIT.)
local strsub, strfind = string.sub, string.find

-- h1, h2 of a hex fingerprint, or nil when it is not one.
local function dedup_hashes(fp)
  if #fp < 32 or not strfind(fp, '^%x+$') then
    return nil
  end
  return tonumber(strsub(fp, 1, 12), 16), tonumber(strsub(fp, 13, 24), 16)
end

-- k offsets from pos, step by step, modulo m.
local function dedup_walk(pos, step, m, k)
  local out = {}
  for i = 1, k do
    out[i] = pos
    pos = (pos + step) % m
  end
  return out
end

local function dedup_positions(fp, m, k)
  local h1, h2 = dedup_hashes(fp)
  if not h1 then
    return nil
  end
  return dedup_walk(h1 % m, h2 % m, m, k)
end

local function dedup_bad_fingerprint(fp)
  dedup_fail('FINGERPRINT', 'fingerprint is not a hex digest of at least 16 bytes: ' .. tostring(fp))
end

-- Index of the first offset whose bit is 0 in key, or 0 when all k are set.
local function dedup_first_missing(key, positions)
  for i = 1, #positions do
    if rcall('GETBIT', key, positions[i]) == 0 then
      return i
    end
  end
  return 0
end

-- Index of the first bitmap in keys holding every offset, else 0.
local function dedup_find(keys, positions)
  for b = 1, #keys do
    if dedup_first_missing(keys[b], positions) == 0 then
      return b
    end
  end
  return 0
end

-- Set the offsets from index first on (the ones before it are known to be set).
local function dedup_set_from(key, positions, first)
  for i = first, #positions do
    rcall('SETBIT', key, positions[i], 1)
  end
end
