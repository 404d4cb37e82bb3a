-- include: prelude
-- Whether one fingerprint is in any of the server's own Bloom filters at KEYS
-- (a block's filter, or its live buckets). ARGV[1]: the fingerprint.
-- Returns the 1-based index of the first filter that holds it, 0 if none does.
for i = 1, #KEYS do
  if rcall('BF.EXISTS', KEYS[i], ARGV[1]) == 1 then return i end
end
return 0
