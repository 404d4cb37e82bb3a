-- include: prelude
-- The prelude: what every script of this package starts with. A script names it
-- on its first line, with the other fragments it uses, in the order they go:
--   -- include: prelude, positions, stamp
-- (scrapy_dedup_suite/scripts.py puts each fragment in once, before the script).
local rcall, tonumber = redis.call, tonumber

-- Fail the whole call. The reply reads "ERR dedup:<CODE> <message>"; the client
-- maps CODE to the package's exception (scrapy_dedup_suite/failures.py), never
-- the message. Codes: FINGERPRINT (not a hex digest), WRONGTYPE (a key of another
-- type), STAMP (data written with other parameters), BITMAP (a Bloom bitmap of
-- the wrong length), LAYERS (a scalable filter lost its layer record), SPLITS (a
-- growing filter's level record is damaged or lost), FIELD (a hash field that is not
-- an expiry, or not 8 bytes), FULL (a non-scaling filter cannot take the call's
-- fingerprints), REFUSED (the server's Bloom filter refused one).
-- A script checks what can fail before its first write, so a failed call wrote nothing.
-- Redis >= 7 takes an error table (the reply is its text); Redis 6.2's error handler
-- concatenates what is raised, so there the text is raised as a string (level 0: no
-- place of ours; Redis puts its own before it, which the client takes off).
local function dedup_fail(code, message)
  local text = 'ERR dedup:' .. code .. ' ' .. message
  if redis.REDIS_VERSION_NUM then error({ err = text }) end
  error(text, 0)
end

-- Refuse (STAMP) the data beside stamp ``key``: it says ``have``, this filter is ``want``.
local function dedup_stamp_mismatch(key, have, want)
  dedup_fail('STAMP', 'stamp ' .. key .. ' says the data beside it was written as ' .. have
    .. ', this filter is ' .. want)
end

-- The server's clock in Unix milliseconds: every worker and the janitor agree on it.
local function dedup_now_ms()
  local t = rcall('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Give key an expiry of ttl milliseconds unless it has one (PTTL -1): never shortens
-- or extends one, so a time bucket ends when it was meant to. ttl <= 0: nothing.
-- Returns 1 when it set one.
local function dedup_keep_ttl(key, ttl)
  if ttl > 0 and rcall('PTTL', key) == -1 then
    rcall('PEXPIRE', key, ttl)
    return 1
  end
  return 0
end

-- Refuse (WRONGTYPE) a key that holds another type than want; a missing one passes.
-- ``what`` names the key's role for the message. Returns the type found.
local function dedup_check_type(key, want, what)
  local kind = rcall('TYPE', key).ok
  if kind ~= 'none' and kind ~= want then
    dedup_fail('WRONGTYPE', what .. ' ' .. key .. ' holds a ' .. kind)
  end
  return kind
end

-- For a script that answers every fingerprint before it writes: whether the field
-- ``field`` of ``key`` is to be written (0: first seen in this call) or a repeat of one
-- written earlier in the same call (1: new once, then seen). ``planned`` is the call's
-- table of fields to write.
local function dedup_repeat(planned, key, field)
  local id = key .. '\0' .. field
  if planned[id] then return 1 end
  planned[id] = true
  return 0
end
