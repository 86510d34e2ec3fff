-- Write a job record (or the job's settings) unless a newer epoch fenced the job. KEYS: the
-- records hash (the job's `job` hash), the job's fence hash. ARGV: (unused), version
-- ('settings'), record (settings) JSON, the writer's lease epoch ('': unfenced).
local records, fenced, epoch = KEYS[1], KEYS[2], ARGV[4]
if epoch ~= '' then
  local fence = redis.call('HGET', fenced, 'fence')
  if fence and tonumber(fence) > tonumber(epoch) then
    return redis.error_reply('sessionize: fenced ' .. fence)
  end
end
redis.call('HSET', records, ARGV[2], ARGV[3])
return 1
