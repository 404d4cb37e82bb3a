-- include: prelude
-- Extend a lock only if this holder still owns it.
-- KEYS[1]: the lock, ARGV[1]: the holder's token, ARGV[2]: new lifetime (ms)
if rcall('GET', KEYS[1]) == ARGV[1] then
  return rcall('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
