-- Shared by every script (prepended to each). KEYS: head, exp, versions, info of one
-- partition. ARGV[1]: the prefix of its undo hashes. Byte strings are compared with
-- string.byte (Redis sets LC_COLLATE, so '<' on strings would follow the locale).
local head, exp, vers, info = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local undo = ARGV[1]

local function before(a, b)  -- a < b, first 8 bytes, unsigned
  for i = 1, 8 do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return false
end

local function index_member(value, key) return string.sub(value, 1, 8) .. key end

local function committed(v) return redis.call('ZSCORE', vers, v) end

local function forget_version(v)
  redis.call('DEL', undo .. v)
  redis.call('ZREM', vers, v)
  redis.call('HDEL', info, 'm:' .. v, 'k:' .. v, 'b:' .. v)
end

-- Undo every version after `to` (>= the oldest retained one), newest first.
local function roll_back(to)
  local later = redis.call('ZRANGEBYSCORE', vers, '(' .. to, '+inf')
  for i = #later, 1, -1 do
    local saved = redis.call('HGETALL', undo .. later[i])
    for j = 1, #saved, 2 do
      local key, old = saved[j], saved[j + 1]
      local cur = redis.call('HGET', head, key)
      if cur then redis.call('ZREM', exp, index_member(cur, key)) end
      if old == '' then
        redis.call('HDEL', head, key)
      else
        redis.call('HSET', head, key, old)
        redis.call('ZADD', exp, 0, index_member(old, key))
      end
    end
    forget_version(later[i])
  end
end

local function drop_all()
  local all = redis.call('ZRANGE', vers, 0, -1)
  for i = 1, #all do redis.call('DEL', undo .. all[i]) end
  local fence = redis.call('HGET', info, 'fence')  -- outlives the versions
  redis.call('DEL', head, exp, vers, info)
  if fence then redis.call('HSET', info, 'fence', fence) end
end

-- The versions after v, ascending (v committed).
local function after(v) return redis.call('ZRANGEBYSCORE', vers, '(' .. v, '+inf') end

local function is_head(v)
  local newest = redis.call('ZREVRANGE', vers, 0, 0)
  return newest[1] == v
end
