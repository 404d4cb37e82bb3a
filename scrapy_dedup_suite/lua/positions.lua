-- Bit offsets of one fingerprint, scheme dh48-v1 (see scrapy_dedup_suite/bloom_math.py):
--   h1 = fp[0:12], h2 = fp[12:24] read as 48-bit hex numbers,
--   p_0 = h1 mod m, p_i = (p_(i-1) + h2 mod m) mod m, for k offsets.
-- All values stay below 2^53, so double arithmetic is exact.
local function dedup_positions(fp, m, k)
  local h1 = tonumber(string.sub(fp, 1, 12), 16)
  local h2 = tonumber(string.sub(fp, 13, 24), 16)
  if not h1 or not h2 or string.len(fp) < 32 then
    return nil
  end
  local pos = math.fmod(h1, m)
  local step = math.fmod(h2, m)
  local out = {}
  for i = 1, k do
    out[i] = pos
    pos = math.fmod(pos + step, m)
  end
  return out
end

local function dedup_bad_fingerprint(fp)
  return redis.error_reply('ERR dedup: fingerprint is not a hex digest of at least 16 bytes: ' .. tostring(fp))
end

-- A bitmap is created at its full size (SETBIT on the last offset of a missing
-- key allocates exactly m/8 bytes), so Redis never grows it piecemeal.
local function dedup_ensure_bitmap(key, m)
  if redis.call('EXISTS', key) == 0 then
    redis.call('SETBIT', key, m - 1, 0)
    return true
  end
  return false
end
