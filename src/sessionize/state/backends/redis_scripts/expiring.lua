-- The index members (e8 .. key) of the keys expiring before a time, at a version.
-- KEYS: head, exp, versions, info. ARGV: undo prefix, version, e8 of the time.
local v, upto = ARGV[2], ARGV[3]
if not committed(v) then return redis.error_reply('sessionize: version gone') end
local found = redis.call('ZRANGEBYLEX', exp, '-', '(' .. upto)
if is_head(v) then return found end
local at_v = {}  -- key -> its value at v, for the keys changed after v
local later = after(v)
for j = 1, #later do
  local saved = redis.call('HGETALL', undo .. later[j])
  for i = 1, #saved, 2 do
    if at_v[saved[i]] == nil then at_v[saved[i]] = saved[i + 1] end
  end
end
local out = {}
for i = 1, #found do
  if at_v[string.sub(found[i], 9)] == nil then out[#out + 1] = found[i] end
end
for key, value in pairs(at_v) do
  if value ~= '' and before(value, upto) then out[#out + 1] = index_member(value, key) end
end
return out
