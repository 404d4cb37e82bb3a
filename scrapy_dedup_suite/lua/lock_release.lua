-- include: prelude
-- Release a lock only if this holder still owns it. KEYS[1]: lock, ARGV[1]: token
if rcall('GET', KEYS[1]) == ARGV[1] then
  return rcall('DEL', KEYS[1])
end
return 0
