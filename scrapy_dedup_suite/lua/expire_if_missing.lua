-- Give a key an expiry only if it has none (PTTL -1); never shortens or extends one.
-- KEYS[1]: the key, ARGV[1]: milliseconds from now. Returns 1 if an expiry was set.
if redis.call('PTTL', KEYS[1]) == -1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return 1
end
return 0
