-- include: prelude
-- Delete keys only if each holds its expected type (or none), all or nothing,
-- so that a key another program wrote under the same name is never deleted by
-- mistake. Called with keys of one cluster slot, it is atomic: a crawler never
-- sees part of what it deletes (a layer without its record, data without its stamp).
-- KEYS: the keys, ARGV: their expected types, one each ('a|b': either type).
-- Returns {number deleted, ''} or, when a key holds another type, {-i, type}
-- for the first such key i, deleting nothing.
local found = {}
for i = 1, #KEYS do
  local kind = rcall('TYPE', KEYS[i]).ok
  if kind ~= 'none' and not string.find('|' .. ARGV[i] .. '|', '|' .. kind .. '|', 1, true) then
    return { -i, kind }
  end
  found[i] = kind
end
local deleted = 0
for i = 1, #KEYS do
  if found[i] ~= 'none' then
    rcall('UNLINK', KEYS[i])
    deleted = deleted + 1
  end
end
return { deleted, '' }
