-- include: prelude
-- Membership test that records nothing: 1 when the fingerprint's field is in its bucket.
-- KEYS[1]: the bucket (a hash), ARGV[1]: the field.
return rcall('HEXISTS', KEYS[1], ARGV[1])
