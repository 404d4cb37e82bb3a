-- include: prelude
-- Give a key an expiry only if it has none (PTTL -1); never shortens or extends one.
-- KEYS[1]: the key, ARGV[1]: milliseconds from now. Returns 1 if an expiry was set.
return dedup_keep_ttl(KEYS[1], tonumber(ARGV[1]))
