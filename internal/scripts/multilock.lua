-- redlock MultiLock script, layout version 1 ("rl1"): all-or-nothing over a
-- sorted, de-duplicated set of Lock names. Its keys ARE the Lock keys, so a
-- MultiLock over {a, b} and a Lock on a exclude each other, and both kinds of
-- waiters share each name's queue (see lock.lua).
-- KEYS: per name i (1-based), 6 keys at 6*(i-1)+1 ..: lock, fence, q (waiter
-- order), qx (waiter expiry), watch flag, gone (tombstones of waiters that left)
-- ARGV[1] op, ARGV[2] token; then op-specific arguments; channels are the
-- last #names arguments (one per name, same order).
local op, tok = ARGV[1], ARGV[2]
local n = #KEYS / 6
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local mine = 'rl1:L:' .. tok
local want = {'string', 'string', 'zset', 'hash', 'string', 'zset'}
local function K(i, j) return KEYS[6 * (i - 1) + j] end

local vals, fences = {}, {}
for i = 1, n do
  for j = 1, 6 do
    local kt = redis.call('TYPE', K(i, j))['ok']
    if kt ~= 'none' and kt ~= want[j] then
      return redis.error_reply('WRONGTYPE redlock: ' .. K(i, j) .. ' is not a redlock lock key')
    end
  end
  local v = redis.call('GET', K(i, 1))
  if v and string.sub(v, 1, 4) ~= 'rl1:' then
    return redis.error_reply('WRONGTYPE redlock: ' .. K(i, 1) .. ' is not a redlock lock key')
  end
  local f = redis.call('GET', K(i, 2))
  if f and not string.match(f, '^%d+$') then
    return redis.error_reply('WRONGTYPE redlock: ' .. K(i, 2) .. ' is not a fence counter')
  end
  vals[i], fences[i] = v, f
end

local function channel(i) return ARGV[#ARGV - n + i] end

-- fence counters: kept `keep` ms after their last write and never before
-- (c >> 10) + keep on this node's clock; a fresh start is at least
-- (TIME - skew) << 10 (see lock.lua and docs/lock.md, "Fencing (S2)")
local function fence_ttl(c, keep)
  keep = tonumber(keep)
  return string.format('%.0f', math.max(keep, math.floor(c / 1024) + keep - now))
end

-- head is name i's longest live waiter (id, entry expiry), dropping dead
-- entries on the way; nil when none of the first 32 lives (as lock.lua).
local function head(i)
  local ids = redis.call('ZRANGE', K(i, 3), 0, 31)
  for _, id in ipairs(ids) do
    local exp = tonumber(redis.call('HGET', K(i, 4), id) or '0')
    if exp > now then return id, exp end
    redis.call('ZREM', K(i, 3), id)
    redis.call('HDEL', K(i, 4), id)
  end
  return nil
end

local function dequeue(i, id)
  if redis.call('ZREM', K(i, 3), id) == 1 then redis.call('HDEL', K(i, 4), id) end
end

local TOMBSTONE_MS = 3000
local function bury(i, id)
  redis.call('ZREMRANGEBYSCORE', K(i, 6), '-inf', now)
  redis.call('ZADD', K(i, 6), now + TOMBSTONE_MS, id)
  redis.call('PEXPIRE', K(i, 6), TOMBSTONE_MS)
end
local function buried(i, id)
  local s = redis.call('ZSCORE', K(i, 6), id)
  return s and tonumber(s) > now
end

local function pexpire_max(k, ttl)
  if redis.call('PTTL', k) < ttl then redis.call('PEXPIRE', k, ttl) end
end

-- free a name as lock.lua's free does: reserve it for its longest live
-- waiter (a Lock or a MultiLock waiter) and tell only that one (the SET
-- overwrites the key: no `del` event wakes anyone else); if that waiter is
-- self (whose own attempt is being rolled back) the reservation lasts as
-- long as its queue entry, without a message. With no live waiter: delete
-- the key and wake one listener if one watches.
local function free(i, window, self)
  local id, exp = head(i)
  if id then
    if id == self then
      redis.call('SET', K(i, 1), 'rl1:R:' .. id, 'PX', exp - now)
      return
    end
    redis.call('SET', K(i, 1), 'rl1:R:' .. id, 'PX', window)
    redis.call('PUBLISH', channel(i), 'h:' .. id)
    return
  end
  redis.call('DEL', K(i, 1))
  if redis.call('EXISTS', K(i, 5)) == 1 then
    -- a rollback names its waiter: its own re-check message must not wake it
    if self ~= '' then redis.call('PUBLISH', channel(i), 'n:1:' .. self)
    else redis.call('PUBLISH', channel(i), 'n:1') end
  end
end

if op == 'acquire' then
  -- ARGV: 3 ttl ms, 4 fence keep ms, 5 wait "1"/"0" (a blocked Acquire:
  -- queue on every name and set the watch flags), 6 fence for missing
  -- counters (the caller's hybrid clock), 7 waiter id (stable across one
  -- Acquire's attempts), 8 queue score (chosen once by the waiter, the same
  -- on every node), 9 queue entry ttl ms, 10 fence skew ms, 11 floor: the
  -- fence already chosen by the slot groups taken before this one on a
  -- Redis Cluster node ("0" otherwise)
  local ttl, wid = tonumber(ARGV[3]), ARGV[7]
  local waiting = ARGV[5] == '1'
  local rsv = 'rl1:R:' .. wid
  local exp = {}
  if waiting then
    -- queue on every name, also where it will be granted (a rollback then
    -- finds it first in line and keeps its place, as for a Lock waiter)
    local score = tonumber(ARGV[8]) or 0
    if score <= 0 then score = now end
    local ettl = tonumber(ARGV[9])
    for i = 1, n do
      if not buried(i, wid) then
        redis.call('ZADD', K(i, 3), 'NX', score, wid)
        redis.call('HSET', K(i, 4), wid, now + ettl)
        exp[i] = now + ettl
        pexpire_max(K(i, 3), ettl); pexpire_max(K(i, 4), ettl)
      end
    end
  end
  -- A name is ours to take if free, ours (a resend), reserved for us, or
  -- reserved for a waiter behind us: a reservation follows the head of its
  -- name's queue, so that two waiters can never each keep a name the other
  -- needs (one order of (score, id) on every name and node: the earliest
  -- waiter is the head of every queue it is in).
  local blocked = 0
  for i = 1, n do
    local v = vals[i]
    if v and v ~= mine and v ~= rsv then
      if waiting and exp[i] and string.sub(v, 1, 6) == 'rl1:R:' and head(i) == wid then
        vals[i] = rsv
      elseif blocked == 0 then
        blocked = i
      end
    end
  end
  if blocked > 0 then
    if waiting then
      -- Keep every name reserved for us for as long as our queue entry
      -- lives: waiters behind us wait (FIFO), and we are told when the
      -- name that refused us is freed (we are in its queue).
      for i = 1, n do
        if vals[i] == rsv and exp[i] then redis.call('SET', K(i, 1), rsv, 'PX', exp[i] - now) end
        redis.call('SET', K(i, 5), '1', 'PX', 3000)
      end
    end
    return {0, redis.call('PTTL', K(blocked, 1)), now, 0}
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
  if present < n then f = math.max(f, tonumber(ARGV[6]) or 0, (now - (tonumber(ARGV[10]) or 0)) * 1024) end
  f = math.max(f, tonumber(ARGV[11]) or 0)
  local fs, fttl = string.format('%.0f', f), fence_ttl(f, ARGV[4])
  for i = 1, n do
    if vals[i] == mine then
      -- the same attempt again: never shorten (an Extend may have run)
      pexpire_max(K(i, 1), ttl)
    else
      redis.call('SET', K(i, 1), mine, 'PX', ttl)
    end
    redis.call('SET', K(i, 2), fs, 'PX', fttl)
  end
  return {1, f, now, 0}

elseif op == 'release' then
  -- ARGV: 3 handoff window ms, 4 "1" for a lease's release or "0" for an
  -- attempt's rollback, 5 the waiter id ("" for a TryAcquire), channels.
  -- A rollback keeps the waiter's queue entries (a split attempt keeps its
  -- place) and names it, so that free does not wake it; a release drops
  -- them, and frees a name reserved for it.
  local wid = ARGV[5]
  local release = ARGV[4] == '1'
  local self = ''
  if not release then self = wid end
  local released = 0
  for i = 1, n do
    if release and wid ~= '' then dequeue(i, wid) end
    if vals[i] == mine then
      free(i, ARGV[3], self)
      released = released + 1
    elseif release and wid ~= '' and vals[i] == 'rl1:R:' .. wid then
      free(i, ARGV[3], '')
    end
  end
  return released

elseif op == 'leave' then
  -- a waiter gives up. ARGV: 2 waiter id, 3 handoff window ms, channels.
  local wid = ARGV[2]
  for i = 1, n do
    dequeue(i, wid)
    bury(i, wid)
    if vals[i] == 'rl1:R:' .. wid then free(i, ARGV[3], '') end
  end
  return 1

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
    if vals[i] then
      pexpire_max(K(i, 1), ttl)
    else
      redis.call('SET', K(i, 1), mine, 'PX', ttl)
      retaken = 1
    end
  end
  return 1 + retaken

elseif op == 'fence' then
  -- ARGV: 3 fence, 4 keep ms
  local f = tonumber(ARGV[3])
  for i = 1, n do
    if not fences[i] or tonumber(fences[i]) < f then
      redis.call('SET', K(i, 2), ARGV[3], 'PX', fence_ttl(f, ARGV[4]))
    end
  end
  return 1
end
return redis.error_reply('ERR redlock: unknown op ' .. tostring(op))
