-- Drop what versions before keep_from need. KEYS: head, exp, versions, info. ARGV: undo
-- prefix, keep_from. Returns the number of undo hashes deleted.
local keep_from = tonumber(ARGV[2])
local old = redis.call('ZRANGEBYSCORE', vers, '-inf', keep_from)
for i = 1, #old do
  redis.call('DEL', undo .. old[i])
  if tonumber(old[i]) < keep_from then forget_version(old[i]) end
end
return #old
