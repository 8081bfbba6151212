-- redlock MultiLock script, layout version 1 ("rl1"): all-or-nothing over a
-- sorted, de-duplicated set of Lock names. Its keys ARE the Lock keys, so a
-- MultiLock over {a, b} and a Lock on a exclude each other.
-- KEYS: per name i (1-based), 5 keys: lock, fence, q, qx, watch at 5*(i-1)+1 ..
-- ARGV[1] op, ARGV[2] token; then op-specific arguments; channels are the
-- last #names arguments (one per name, same order).
local op, tok = ARGV[1], ARGV[2]
local n = #KEYS / 5
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local mine = 'rl1:L:' .. tok
local want = {'string', 'string', 'zset', 'hash', 'string'}

local vals, fences = {}, {}
for i = 1, n do
  local b = 5 * (i - 1)
  for j = 1, 5 do
    local kt = redis.call('TYPE', KEYS[b + j])['ok']
    if kt ~= 'none' and kt ~= want[j] then
      return redis.error_reply('WRONGTYPE redlock: ' .. KEYS[b + j] .. ' is not a redlock lock key')
    end
  end
  local v = redis.call('GET', KEYS[b + 1])
  if v and string.sub(v, 1, 4) ~= 'rl1:' then
    return redis.error_reply('WRONGTYPE redlock: ' .. KEYS[b + 1] .. ' is not a redlock lock key')
  end
  local f = redis.call('GET', KEYS[b + 2])
  if f and not string.match(f, '^%d+$') then
    return redis.error_reply('WRONGTYPE redlock: ' .. KEYS[b + 2] .. ' is not a fence counter')
  end
  vals[i], fences[i] = v, f
end

-- fence counters: kept `keep` ms after their last write and never before
-- (c >> 10) + keep on this node's clock; a fresh start is at least
-- (TIME - skew) << 10 (see lock.lua and docs/lock.md, "Fencing (S2)")
local function fence_ttl(c, keep)
  keep = tonumber(keep)
  return string.format('%.0f', math.max(keep, math.floor(c / 1024) + keep - now))
end

local function channel(i) return ARGV[#ARGV - n + i] end

-- free a name: reserve it for the longest live Lock waiter (overwriting the
-- key: no `del` event), else delete it and wake a listener if one watches
local function free(i, window, self)
  local b = 5 * (i - 1)
  local ids = redis.call('ZRANGE', KEYS[b + 3], 0, 31)
  for _, id in ipairs(ids) do
    local exp = tonumber(redis.call('HGET', KEYS[b + 4], id) or '0')
    redis.call('ZREM', KEYS[b + 3], id)
    redis.call('HDEL', KEYS[b + 4], id)
    if exp > now then
      redis.call('SET', KEYS[b + 1], 'rl1:R:' .. id, 'PX', window)
      redis.call('PUBLISH', channel(i), 'h:' .. id)
      return
    end
  end
  redis.call('DEL', KEYS[b + 1])
  if redis.call('EXISTS', KEYS[b + 5]) == 1 then
    -- a rollback names its waiter: its own re-check message must not wake it
    if self ~= '' then redis.call('PUBLISH', channel(i), 'n:1:' .. self)
    else redis.call('PUBLISH', channel(i), 'n:1') end
  end
end

if op == 'acquire' then
  -- ARGV: 3 ttl ms, 4 fence keep ms, 5 watch "1"/"0" (a blocked Acquire
  -- asks releases of these names to wake it), 6 fence for missing counters
  -- (the caller's hybrid clock), 7 fence skew ms, 8 floor: the fence already chosen by the slot groups taken before this
  -- one on a Redis Cluster node ("0" otherwise)
  for i = 1, n do
    local v = vals[i]
    if v and v ~= mine then
      if ARGV[5] == '1' then
        for j = 1, n do redis.call('SET', KEYS[5 * (j - 1) + 5], '1', 'PX', 3000) end
      end
      return {0, redis.call('PTTL', KEYS[5 * (i - 1) + 1]), now, 0}
    end
  end
  -- every key is free, ours or reserved for us: take them all
  local m, present = 0, 0
  for i = 1, n do
    if fences[i] then present = present + 1; m = math.max(m, tonumber(fences[i])) end
  end
  -- max + 1 over the names' counters; a missing counter is unknown (or
  -- expired, and then below (TIME - skew) << 10), so with some missing the
  -- caller's hybrid-clock value and that bound are floors
  local f = 0
  if present > 0 then f = m + 1 end
  if present < n then f = math.max(f, tonumber(ARGV[6]) or 0, (now - (tonumber(ARGV[7]) or 0)) * 1024) end
  f = math.max(f, tonumber(ARGV[8]) or 0)
  local fs, fttl = string.format('%.0f', f), fence_ttl(f, ARGV[4])
  for i = 1, n do
    local b = 5 * (i - 1)
    if vals[i] == mine then
      -- the same attempt again: never shorten (an Extend may have run)
      if redis.call('PTTL', KEYS[b + 1]) < tonumber(ARGV[3]) then redis.call('PEXPIRE', KEYS[b + 1], ARGV[3]) end
    else
      redis.call('SET', KEYS[b + 1], mine, 'PX', ARGV[3])
    end
    if redis.call('ZREM', KEYS[b + 3], tok) == 1 then redis.call('HDEL', KEYS[b + 4], tok) end
    redis.call('SET', KEYS[b + 2], fs, 'PX', fttl)
  end
  return {1, f, now, 0}

elseif op == 'release' then
  -- ARGV: 3 handoff window ms, 4 "1" for a lease's release or "0" for an
  -- attempt's rollback, 5 (rollback) the waiter that made it, channels
  local self = ''
  if ARGV[4] == '0' and #ARGV > 4 + n then self = ARGV[5] end
  local released = 0
  for i = 1, n do
    if vals[i] == mine then
      free(i, ARGV[3], self)
      released = released + 1
    end
  end
  return released

elseif op == 'renew' then
  -- ARGV: 3 ttl ms, 4 retake "1"/"0". All keys must be ours; a vanished key
  -- answers 3 unless retake=1 (see lock.lua), then it is re-created.
  for i = 1, n do
    local v = vals[i]
    if v and v ~= mine then return 0 end
    if not v and ARGV[4] ~= '1' then return 3 end
  end
  local ttl = tonumber(ARGV[3])
  local retaken = 0
  for i = 1, n do
    local k = KEYS[5 * (i - 1) + 1]
    if vals[i] then
      if redis.call('PTTL', k) < ttl then redis.call('PEXPIRE', k, ttl) end
    else
      redis.call('SET', k, mine, 'PX', ttl)
      retaken = 1
    end
  end
  return 1 + retaken

elseif op == 'fence' then
  -- ARGV: 3 fence, 4 keep ms
  local f = tonumber(ARGV[3])
  for i = 1, n do
    if not fences[i] or tonumber(fences[i]) < f then
      redis.call('SET', KEYS[5 * (i - 1) + 2], ARGV[3], 'PX', fence_ttl(f, ARGV[4]))
    end
  end
  return 1
end
return redis.error_reply('ERR redlock: unknown op ' .. tostring(op))
