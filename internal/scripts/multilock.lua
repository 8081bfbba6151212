-- redlock MultiLock script, layout version 1 ("rl1"): all-or-nothing over a
-- sorted, de-duplicated set of Lock names. Its keys ARE the Lock keys. So a
-- MultiLock over {a, b} and a Lock on a exclude each other, and both kinds
-- of waiters share each name's queue (see lock.lua).
-- KEYS: 6 per name i (1-based), at 6*(i-1)+1 ..:
--   lock, fence, q (waiter order), qx (waiter expiry), watch flag,
--   gone (tombstones of waiters that left).
-- ARGV[1] op, ARGV[2] token, then op-specific arguments. The channels are
-- the last #names arguments (one per name, same order).
-- K(i, LOCK) is name i's lock key, and so on
-- use: now grant_codes wrong pexpire_max head
local LOCK, FENCE, QUEUE, QEXP, WATCH, GONE = 1, 2, 3, 4, 5, 6
local function K(i, j) return KEYS[6 * (i - 1) + j] end
local n = #KEYS / 6
-- channel(i) is name i's channel
local function channel(i) return ARGV[#ARGV - n + i] end
local op, tok = ARGV[1], ARGV[2]
local mine = 'rl1:L:' .. tok
local RESERVED = 'rl1:R:'
-- acquire answers {GRANTED, fence, now, 0} or {REFUSED, pttl, now, 0}
local want = {'string', 'string', 'zset', 'hash', 'string', 'zset'}

-- Type checks before any write. One MGET reads every string key: the
-- lock, fence and watch flag of each name. It gives nil for a missing key
-- and for one of another type. One EXISTS counts all keys. When it counts
-- only the values MGET found, the other keys are missing and no TYPE is
-- needed. Otherwise each key but a string MGET found gets a TYPE, name by
-- name in the layout's order (the first wrong key is named). A refused
-- MGET (an ACL) falls back to a TYPE and GET of each key, as always.
local vals, fences = {}, {}
local sk = {}
for i = 1, n do
  local b = 3 * (i - 1)
  sk[b + 1], sk[b + 2], sk[b + 3] = K(i, LOCK), K(i, FENCE), K(i, WATCH)
end
local got = redis.pcall('MGET', unpack(sk))
local sure = false
if not got.err then
  local c = redis.call('EXISTS', unpack(KEYS))
  for i = 1, #sk do
    if got[i] then c = c - 1 end
  end
  sure = c == 0
else
  got = {}
end
local at = {[LOCK] = 1, [FENCE] = 2, [WATCH] = 3}
for i = 1, n do
  if not sure then
    for j = 1, 6 do
      if not (at[j] and got[3 * (i - 1) + at[j]]) then
        local kt = redis.call('TYPE', K(i, j))['ok']
        if kt ~= 'none' and kt ~= want[j] then return wrong(K(i, j), 'lock key') end
      end
    end
  end
  local v, f = got[3 * i - 2], got[3 * i - 1]
  if v == nil then v = redis.call('GET', K(i, LOCK)) end
  if v and string.sub(v, 1, 4) ~= 'rl1:' then return wrong(K(i, LOCK), 'lock key') end
  if f == nil then f = redis.call('GET', K(i, FENCE)) end
  if f and not string.match(f, '^%d+$') then return wrong(K(i, FENCE), 'fence counter') end
  vals[i], fences[i] = v, f
end


local function dequeue(i, id)
  if redis.call('ZREM', K(i, QUEUE), id) == 1 then redis.call('HDEL', K(i, QEXP), id) end
end

local TOMBSTONE_MS = 3000
local function bury(i, id)
  redis.call('ZREMRANGEBYSCORE', K(i, GONE), '-inf', now)
  redis.call('ZADD', K(i, GONE), now + TOMBSTONE_MS, id)
  redis.call('PEXPIRE', K(i, GONE), TOMBSTONE_MS)
end
local function buried(i, id)
  local s = redis.call('ZSCORE', K(i, GONE), id)
  return s and tonumber(s) > now
end

-- free frees a name as lock.lua's free does. It reserves the name for its
-- longest live waiter (a Lock or a MultiLock waiter) and tells only that
-- one: the SET overwrites the key, so no `del` event wakes anyone else.
-- If that waiter is self (whose own attempt is being rolled back), the
-- reservation lasts as long as its queue entry, without a message. With
-- no live waiter it deletes the key and wakes one listener if one watches.
local function free(i, window, self)
  local id, exp = head(K(i, QUEUE), K(i, QEXP))
  if id then
    if id == self then
      redis.call('SET', K(i, LOCK), RESERVED .. id, 'PX', exp - now)
      return
    end
    redis.call('SET', K(i, LOCK), RESERVED .. id, 'PX', window)
    redis.call('PUBLISH', channel(i), 'h:' .. id)
    return
  end
  redis.call('DEL', K(i, LOCK))
  if redis.call('EXISTS', K(i, WATCH)) == 1 then
    -- a rollback names its waiter: its own re-check message must not wake it
    if self ~= '' then redis.call('PUBLISH', channel(i), 'n:1:' .. self)
    else redis.call('PUBLISH', channel(i), 'n:1') end
  end
end

if op == 'acquire' then
  -- use: fence_ttl fence_floor
  -- Arguments:
  --   waiting: a blocked Acquire; it queues on every name and sets the
  --     watch flags.
  --   fence_init: the fence for missing counters (the caller's hybrid
  --     clock).
  --   wid: the waiter id, stable across one Acquire's attempts.
  --   score: its queue score, chosen once by the waiter, the same on every
  --     node.
  --   floor: the fence already chosen by the slot groups taken before this
  --     one on a Redis Cluster node (0 otherwise).
  local ttl, keep, waiting, fence_init, wid, score, entry_ttl, skew, floor =
    tonumber(ARGV[3]), ARGV[4], ARGV[5] == '1', tonumber(ARGV[6]) or 0, ARGV[7], tonumber(ARGV[8]) or 0,
    tonumber(ARGV[9]), ARGV[10], tonumber(ARGV[11]) or 0
  local rsv = 'rl1:R:' .. wid
  local exp = {}
  if waiting then
    -- queue on every name, also where it will be granted (a rollback then
    -- finds it first in line and keeps its place, as for a Lock waiter)
    if score <= 0 then score = now end
    for i = 1, n do
      if not buried(i, wid) then
        redis.call('ZADD', K(i, QUEUE), 'NX', score, wid)
        redis.call('HSET', K(i, QEXP), wid, now + entry_ttl)
        exp[i] = now + entry_ttl
        pexpire_max(K(i, QUEUE), entry_ttl); pexpire_max(K(i, QEXP), entry_ttl)
      end
    end
  end
  -- A name is ours to take if free, ours (a resend), reserved for us, or
  -- reserved for a waiter behind us. A reservation follows the head of its
  -- name's queue, so two waiters can never each keep a name the other
  -- needs. There is one order of (score, id) on every name and node: the
  -- earliest waiter is the head of every queue it is in.
  local blocked = 0
  for i = 1, n do
    local v = vals[i]
    if v and v ~= mine and v ~= rsv then
      if waiting and exp[i] and string.sub(v, 1, 6) == RESERVED and head(K(i, QUEUE), K(i, QEXP)) == wid then
        vals[i] = rsv
      elseif blocked == 0 then
        blocked = i
      end
    end
  end
  if blocked > 0 then
    if waiting then
      -- Keep every name reserved for us while our queue entry lives.
      -- Waiters behind us wait (FIFO). We are told when the name that
      -- refused us is freed, since we are in its queue.
      for i = 1, n do
        if vals[i] == rsv and exp[i] then redis.call('SET', K(i, LOCK), rsv, 'PX', exp[i] - now) end
        -- never shorter: an observer (Lock.Observe) may keep it longer
        if redis.call('PTTL', K(i, WATCH)) < 3000 then redis.call('SET', K(i, WATCH), '1', 'PX', 3000) end
      end
    end
    return {REFUSED, redis.call('PTTL', K(blocked, LOCK)), now, 0}
  end
  -- every key is free, ours or reserved for us: take them all
  local m, present = 0, 0
  for i = 1, n do
    if fences[i] then present = present + 1; m = math.max(m, tonumber(fences[i])) end
  end
  -- max + 1 over the names' counters. A missing counter is unknown, or
  -- expired and then below (TIME - skew) << 10. So with some missing, the
  -- caller's hybrid-clock value and that bound are floors.
  local f = 0
  if present > 0 then f = m + 1 end
  if present < n then f = math.max(f, fence_init, fence_floor(skew)) end
  f = math.max(f, floor)
  local fs, fttl = string.format('%.0f', f), fence_ttl(f, keep)
  for i = 1, n do
    if vals[i] == mine then
      -- the same attempt again: never shorten (an Extend may have run)
      pexpire_max(K(i, LOCK), ttl)
    else
      redis.call('SET', K(i, LOCK), mine, 'PX', ttl)
      -- a grant tells the name's observers (Lock.Observe), as lock.lua's does
      -- (MGET read the flag; after a refused MGET, EXISTS does)
      if got[3 * i] or (#got == 0 and redis.call('EXISTS', K(i, WATCH)) == 1) then
        redis.call('PUBLISH', channel(i), 'o')
      end
    end
    redis.call('SET', K(i, FENCE), fs, 'PX', fttl)
  end
  return {GRANTED, f, now, 0}

elseif op == 'release' then
  -- window: the handoff window ms. release: a lease's release (else an
  -- attempt's rollback). wid: the waiter id ("" for a TryAcquire).
  -- A rollback keeps the waiter's queue entries, so a split attempt keeps
  -- its place. It names the waiter, so that free does not wake it. A
  -- release drops them and frees a name reserved for it.
  local window, release, wid = ARGV[3], ARGV[4] == '1', ARGV[5]
  local self = ''
  if not release then self = wid end
  local released = 0
  for i = 1, n do
    if release and wid ~= '' then dequeue(i, wid) end
    if vals[i] == mine then
      free(i, window, self)
      released = released + 1
    elseif release and wid ~= '' and vals[i] == RESERVED .. wid then
      free(i, window, '')
    end
  end
  return released

elseif op == 'leave' then
  -- a waiter gives up
  local wid, window = ARGV[2], ARGV[3]
  for i = 1, n do
    dequeue(i, wid)
    bury(i, wid)
    if vals[i] == RESERVED .. wid then free(i, window, '') end
  end
  return 1

elseif op == 'renew' then
  -- use: renew_codes
  -- All keys must be ours; a vanished key answers MISSING unless retake
  -- (see lock.lua), then it is re-created.
  local ttl, retake = tonumber(ARGV[3]), ARGV[4] == '1'
  for i = 1, n do
    local v = vals[i]
    if v and v ~= mine then return NOT_OURS end
    if not v and not retake then return MISSING end
  end
  local answer = RENEWED
  for i = 1, n do
    if vals[i] then
      pexpire_max(K(i, LOCK), ttl)
    else
      redis.call('SET', K(i, LOCK), mine, 'PX', ttl)
      answer = RETAKEN
    end
  end
  return answer

elseif op == 'fence' then
  -- use: fence_ttl
  -- write back a fence decided by the coordinator
  local fs, keep = ARGV[3], ARGV[4]
  local f = tonumber(fs)
  for i = 1, n do
    if not fences[i] or tonumber(fences[i]) < f then
      redis.call('SET', K(i, FENCE), fs, 'PX', fence_ttl(f, keep))
    end
  end
  return 1
end
return redis.error_reply('ERR redlock: unknown op ' .. tostring(op))
