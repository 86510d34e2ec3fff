-- The values of keys at a version. KEYS: head, exp, versions, info. ARGV: undo prefix,
-- version, key... Returns one value (or false) per key.
local v = ARGV[2]
if not committed(v) then return redis.error_reply('sessionize: version gone') end
local out = {}
if is_head(v) then
  return redis.call('HMGET', head, unpack(ARGV, 3))
end
local later = after(v)
for i = 3, #ARGV do
  local key, value = ARGV[i], nil
  for j = 1, #later do
    local old = redis.call('HGET', undo .. later[j], key)
    if old then value = old; break end
  end
  if value == nil then value = redis.call('HGET', head, key) end
  if value == '' then value = false end
  out[i - 2] = value
end
return out
