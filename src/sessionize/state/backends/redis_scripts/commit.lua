-- Publish a version. KEYS: head, exp, versions, info, stage. ARGV: undo prefix, base
-- version, version, meta JSON, the committer's lease epoch ('': unfenced). Returns {keys,
-- bytes} of the new version.
local stage, base, version = KEYS[5], ARGV[2], ARGV[3]
if ARGV[5] ~= '' then
  local fence = redis.call('HGET', info, 'fence')
  if fence and tonumber(fence) > tonumber(ARGV[5]) then
    redis.call('DEL', stage)
    return redis.error_reply('sessionize: fenced ' .. fence)
  end
end
local keys, bytes = 0, 0
if base == '-1' then
  drop_all()
else
  if not committed(base) then return redis.error_reply('sessionize: base version gone') end
  roll_back(base)
  keys = tonumber(redis.call('HGET', info, 'k:' .. base) or '0')
  bytes = tonumber(redis.call('HGET', info, 'b:' .. base) or '0')
end
local saved = undo .. version
redis.call('DEL', saved)
local staged = redis.call('HGETALL', stage)
local n = #staged / 2
-- In slices of 1000 keys: one HMGET, then one HSET/ZREM/ZADD/HDEL per slice, not per key.
for lo = 1, n, 1000 do
  local hi = math.min(n, lo + 999)
  local names = {}
  for i = lo, hi do names[#names + 1] = staged[2 * i - 1] end
  local olds = redis.call('HMGET', head, unpack(names))
  local undo_args, unindex, set_args, index_args, gone = {}, {}, {}, {}, {}
  for j = 1, #names do
    local key, new, old = names[j], staged[2 * (lo + j - 1)], olds[j]
    if old then
      undo_args[#undo_args + 1] = key
      undo_args[#undo_args + 1] = old
      unindex[#unindex + 1] = index_member(old, key)
      keys = keys - 1
      bytes = bytes - (#old - 8)
    elseif new ~= '' then
      undo_args[#undo_args + 1] = key
      undo_args[#undo_args + 1] = ''
    end
    if new ~= '' then
      set_args[#set_args + 1] = key
      set_args[#set_args + 1] = new
      index_args[#index_args + 1] = 0
      index_args[#index_args + 1] = index_member(new, key)
      keys = keys + 1
      bytes = bytes + (#new - 8)
    elseif old then
      gone[#gone + 1] = key
    end
  end
  if #undo_args > 0 then redis.call('HSET', saved, unpack(undo_args)) end
  if #unindex > 0 then redis.call('ZREM', exp, unpack(unindex)) end
  if #set_args > 0 then redis.call('HSET', head, unpack(set_args)) end
  if #index_args > 0 then redis.call('ZADD', exp, unpack(index_args)) end
  if #gone > 0 then redis.call('HDEL', head, unpack(gone)) end
end
redis.call('DEL', stage)
redis.call('ZADD', vers, version, version)
redis.call('HSET', info, 'm:' .. version, ARGV[4], 'k:' .. version, keys, 'b:' .. version, bytes)
return {keys, bytes}
