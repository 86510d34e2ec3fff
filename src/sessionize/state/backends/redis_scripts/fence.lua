-- Raise a fence. KEYS[1]: a hash whose `fence` field is the newest lease epoch that fenced
-- it. ARGV[2]: the epoch. The field only moves up; returns its value afterwards.
local key, epoch = KEYS[1], tonumber(ARGV[2])
local fence = tonumber(redis.call('HGET', key, 'fence') or '0')
if fence < epoch then
  redis.call('HSET', key, 'fence', epoch)
  fence = epoch
end
return fence
