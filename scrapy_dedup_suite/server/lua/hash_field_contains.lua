-- include: prelude
-- Membership test that records nothing, for shards whose fields the server expires
-- itself: 1 when the field exists (an expired one does not). KEYS[1]: the shard,
-- ARGV[1]: the fingerprint.
return rcall('HEXISTS', KEYS[1], ARGV[1])
