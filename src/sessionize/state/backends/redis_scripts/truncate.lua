-- Forget the versions after one. KEYS: head, exp, versions, info. ARGV: undo prefix,
-- the version to keep (-1: all go). Returns the number of versions left.
local to = tonumber(ARGV[2])
local oldest = redis.call('ZRANGE', vers, 0, 0)
if to < 0 or (oldest[1] and to < tonumber(oldest[1])) then
  drop_all()
else
  roll_back(ARGV[2])
end
return redis.call('ZCARD', vers)
