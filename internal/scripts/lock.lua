-- redlock Lock/MultiLock-compatible lock script, layout version 1 ("rl1").
-- One script, one round trip per operation per node; ARGV[1] selects it.
-- KEYS: 1 lock, 2 fence counter, 3 waiter order (zset), 4 waiter expiry (hash),
--       5 holds (zset, owner mode), 6 epoch fence (owner mode),
--       7 watch flag (a waiter that does not queue, e.g. a MultiLock, is listening),
--       8 tombstones (zset waiter id -> until ms): waiters that left, so that an
--         attempt still in flight when they left (the node actor keeps several
--         batches in flight, so requests of one client can run out of order)
--         cannot enqueue them again
-- Values of KEYS[1]: "rl1:L:<token>" (held), "rl1:O:<owner>" (held by an
-- owner, reentrant), "rl1:R:<token>" (reserved for that waiter by a handoff).
local op = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function wrong(k) return redis.error_reply('WRONGTYPE redlock: ' .. k .. ' is not a redlock lock key') end
-- Type checks before any write. The two string keys are read with pcall (a
-- GET of another type is an error, not a raise); the six others usually do
-- not exist (no waiter, no owner mode), so one EXISTS spares their TYPEs.
local function checked(k)
  -- another type is a WRONGTYPE error (ours, with the key); any other
  -- error (an ACL refusal) is returned as it is
  local r = redis.pcall('GET', k)
  if type(r) == 'table' and r.err then
    if string.sub(r.err, 1, 9) == 'WRONGTYPE' then return nil, wrong(k) end
    return nil, redis.error_reply(r.err)
  end
  return r
end
local v, verr = checked(KEYS[1])
if verr then return verr end
if v and string.sub(v, 1, 4) ~= 'rl1:' then return wrong(KEYS[1]) end
local fv, ferr = checked(KEYS[2])
if ferr then return ferr end
if fv and not string.match(fv, '^%d+$') then return wrong(KEYS[2]) end
local extra = redis.call('EXISTS', KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8])
if extra > 0 then
  local want = {'string', 'string', 'zset', 'hash', 'zset', 'string', 'string', 'zset'}
  for i = 3, 8 do
    local kt = redis.call('TYPE', KEYS[i])['ok']
    if kt ~= 'none' and kt ~= want[i] then return wrong(KEYS[i]) end
  end
end

local function dequeue(tok)
  if redis.call('ZREM', KEYS[3], tok) == 1 then redis.call('HDEL', KEYS[4], tok) end
end

local TOMBSTONE_MS = 3000
local function bury(id)
  redis.call('ZREMRANGEBYSCORE', KEYS[8], '-inf', now)
  redis.call('ZADD', KEYS[8], now + TOMBSTONE_MS, id)
  redis.call('PEXPIRE', KEYS[8], TOMBSTONE_MS)
end
local function buried(id)
  local s = redis.call('ZSCORE', KEYS[8], id)
  return s and tonumber(s) > now
end

-- free ends a hold: it reserves the lock for the longest live waiter and
-- tells only that waiter (the SET overwrites the key: no `del` event wakes
-- anyone else); with no live waiter it deletes the key and, if a waiter that
-- does not queue is listening, tells one local waiter to re-check. Every
-- node orders its queue by the same (score, waiter id), the score being
-- chosen once by the waiter, so all nodes reserve for the same waiter. The
-- entry stays until the waiter's lease is released (or it leaves, or stops
-- heartbeating), so a split attempt does not lose its place.
-- self is the waiter whose own attempt is being rolled back ('' for a
-- release): it keeps waiting, so nothing it is told could let it progress.
-- If it is the longest live waiter, its grant becomes its reservation for
-- as long as its queue entry lives (no message: it keeps its place without
-- waking itself); otherwise the
-- re-check message names it, so that its router wakes another waiter.
-- head is the longest live waiter (id, entry expiry), dropping dead
-- entries on the way; nil when none of the first 32 lives.
local function head()
  local ids = redis.call('ZRANGE', KEYS[3], 0, 31)
  for _, id in ipairs(ids) do
    local exp = tonumber(redis.call('HGET', KEYS[4], id) or '0')
    if exp > now then return id, exp end
    redis.call('ZREM', KEYS[3], id)
    redis.call('HDEL', KEYS[4], id)
  end
  return nil
end
local function free(window, ch, self)
  -- (extra == 0: no queue and no watch flag existed when the script began,
  -- and no op creates either before it frees)
  if extra > 0 then
    local id, exp = head()
    if id then
      if id == self then
        redis.call('SET', KEYS[1], 'rl1:R:' .. id, 'PX', exp - now)
        return
      end
      redis.call('SET', KEYS[1], 'rl1:R:' .. id, 'PX', window)
      redis.call('PUBLISH', ch, 'h:' .. id)
      return
    end
  end
  redis.call('DEL', KEYS[1])
  if extra > 0 and redis.call('EXISTS', KEYS[7]) == 1 then
    if self ~= '' then
      redis.call('PUBLISH', ch, 'n:1:' .. self)
    else
      redis.call('PUBLISH', ch, 'n:1')
    end
  end
end

-- Fence counters (docs/lock.md, "Fencing (S2)"): a counter c is kept
-- `keep` ms after its last write and never expires before this node's clock
-- reads (c >> 10) + keep; a counter started fresh is at least
-- (TIME - skew) << 10. With keep > skew a fresh counter is above any
-- counter that expired on this node (as long as its clock does not step
-- back by keep - skew), so a counter the hybrid clock has passed can go.
local function fence_ttl(c, keep)
  keep = tonumber(keep)
  return math.max(keep, math.floor(c / 1024) + keep - now)
end
local function fence_floor(skew)
  return (now - (tonumber(skew or '0') or 0)) * 1024
end

local function pexpire_max(k, ttl)
  if redis.call('PTTL', k) < ttl then redis.call('PEXPIRE', k, ttl) end
end

-- owner-mode helpers: holds live in KEYS[5] scored by their expiry
local function holds_left()
  redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
  return redis.call('ZCARD', KEYS[5])
end
local function owner_ttl()
  local top = redis.call('ZRANGE', KEYS[5], -1, -1, 'WITHSCORES')
  if #top == 0 then return 0 end
  return tonumber(top[2]) - now
end

if op == 'acquire' then
  -- ARGV: 2 token (new for every attempt), 3 ttl ms, 4 owner, 5 enqueue "1"/"0",
  -- 6 queue entry ttl ms, 7 fence keep ms, 8 waiter id (stable across one
  -- Acquire's attempts: the queue entry and a handoff reservation are for it),
  -- 9 queue score (chosen once by the waiter from a server TIME, the same on
  -- every node), 10 fence for a missing counter (the caller's hybrid clock,
  -- the same on every node; 0 = unknown), 11 fence skew ms (a missing
  -- counter starts at least at (TIME - skew) << 10)
  local tok, ttl, owner, wid = ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[8]
  local rsv = 'rl1:R:' .. wid
  local function fence_next()
    if fv then
      local c = redis.call('INCR', KEYS[2])
      redis.call('PEXPIRE', KEYS[2], fence_ttl(c, ARGV[7]))
      return c
    end
    local init, s = tonumber(ARGV[10] or '0') or 0, ARGV[10]
    local floor = fence_floor(ARGV[11])
    if init < floor then init, s = floor, string.format('%.0f', floor) end
    redis.call('SET', KEYS[2], s, 'PX', fence_ttl(init, ARGV[7]))
    return init
  end
  -- A waiter (enqueue "1") takes its place in the queue whether this node
  -- grants or refuses: if the attempt fails elsewhere, its rollback here
  -- finds it first in line and keeps its place without a message (see
  -- free), instead of deleting the key (a `del` event would wake it).
  local function enqueue()
    if ARGV[5] == '1' and not buried(wid) then
      local ettl = tonumber(ARGV[6])
      local score = tonumber(ARGV[9] or '0') or 0
      if score <= 0 then score = now end
      redis.call('ZADD', KEYS[3], 'NX', score, wid)
      redis.call('HSET', KEYS[4], wid, now + ettl)
      pexpire_max(KEYS[3], ettl); pexpire_max(KEYS[4], ettl)
    end
  end
  -- A reservation follows the head of the queue: a waiter that is the live
  -- head takes one made for a waiter behind it (a MultiLock waiter keeps a
  -- name reserved while it waits for its other names; a waiter that joined
  -- later with an earlier score goes first, on every node alike).
  if v and v ~= rsv and ARGV[5] == '1' and string.sub(v, 1, 6) == 'rl1:R:' then
    enqueue()
    if head() == wid then v = rsv end
  end
  if owner == '' then
    local mine = 'rl1:L:' .. tok
    if v == mine then
      -- the same attempt again (a resend, or a late copy after the lease
      -- was extended or re-taken): never shorten the key
      pexpire_max(KEYS[1], ttl)
      return {1, fence_next(), now, 0}
    end
    if v == false or v == rsv then
      redis.call('SET', KEYS[1], mine, 'PX', ttl)
      enqueue()
      return {1, fence_next(), now, 0}
    end
  else
    local mine = 'rl1:O:' .. owner
    if v == mine and holds_left() > 0 then
      redis.call('ZADD', KEYS[5], now + ttl, tok)
      pexpire_max(KEYS[1], ttl); pexpire_max(KEYS[5], ttl); pexpire_max(KEYS[6], ttl)
      return {1, tonumber(redis.call('GET', KEYS[6]) or '0'), now, 1}
    end
    if v == false or v == rsv then
      redis.call('DEL', KEYS[5])
      redis.call('SET', KEYS[1], mine, 'PX', ttl)
      redis.call('ZADD', KEYS[5], now + ttl, tok)
      redis.call('PEXPIRE', KEYS[5], ttl)
      local f = fence_next()
      redis.call('SET', KEYS[6], f, 'PX', ttl)
      return {1, f, now, 0}
    end
  end
  enqueue()
  return {0, redis.call('PTTL', KEYS[1]), now, 0}

elseif op == 'release' or op == 'rollback' then
  -- ARGV: 2 token, 3 owner, 4 handoff window ms, 5 channel, 6 waiter id.
  -- A rollback undoes one attempt's grant (its token is never reused) and
  -- keeps the waiter's queue entry, so a split attempt keeps its place
  -- (ARGV[6] names the waiter, which free must not wake); a release ends a
  -- lease: it drops the holder's entry (kept while it held) and frees a
  -- reservation a late release made for it.
  local tok, owner = ARGV[2], ARGV[3]
  local self = ''
  if op == 'rollback' then self = ARGV[6] or '' end
  if op == 'release' and ARGV[6] and ARGV[6] ~= '' then
    dequeue(ARGV[6])
    if v == 'rl1:R:' .. ARGV[6] then free(ARGV[4], ARGV[5], ''); return 0 end
  end
  if owner == '' then
    if v == 'rl1:L:' .. tok then
      free(ARGV[4], ARGV[5], self)
      return 1
    end
  elseif v == 'rl1:O:' .. owner and redis.call('ZREM', KEYS[5], tok) == 1 then
    if holds_left() == 0 then
      redis.call('DEL', KEYS[5], KEYS[6])
      free(ARGV[4], ARGV[5], self)
    else
      local rest = owner_ttl()
      redis.call('PEXPIRE', KEYS[1], rest); redis.call('PEXPIRE', KEYS[5], rest); redis.call('PEXPIRE', KEYS[6], rest)
    end
    return 1
  end
  return 0

elseif op == 'leave' then
  -- a waiter gives up. ARGV: 2 waiter id, 3 handoff window ms, 4 channel
  dequeue(ARGV[2])
  bury(ARGV[2])
  if v == 'rl1:R:' .. ARGV[2] then free(ARGV[3], ARGV[4], '') end
  return 1

elseif op == 'renew' then
  -- ARGV: 2 token, 3 ttl ms, 4 owner, 5 fence (for a re-take), 6 retake "1"/"0".
  -- Answers 1 renewed, 0 another owner, 3 the key is missing (a restarted
  -- node). Only a follow-up call with retake=1, sent after a renewal round
  -- confirmed the lease on a quorum, re-creates a missing key (answer 2): a
  -- plain renewal that reaches a node after the lease's release must never
  -- bring the key back.
  local tok, ttl, owner = ARGV[2], tonumber(ARGV[3]), ARGV[4]
  local retake = ARGV[6] == '1'
  if v == false and not retake then return 3 end
  if owner == '' then
    local mine = 'rl1:L:' .. tok
    if v == mine then pexpire_max(KEYS[1], ttl); return 1 end
    if v == false then redis.call('SET', KEYS[1], mine, 'PX', ttl); return 2 end
    return 0
  end
  local mine = 'rl1:O:' .. owner
  if v == mine then
    local s = redis.call('ZSCORE', KEYS[5], tok)
    if s and tonumber(s) > now then
      if tonumber(s) < now + ttl then redis.call('ZADD', KEYS[5], now + ttl, tok) end
      pexpire_max(KEYS[1], ttl); pexpire_max(KEYS[5], ttl); pexpire_max(KEYS[6], ttl)
      return 1
    end
    return 0
  end
  if v == false then
    redis.call('SET', KEYS[1], mine, 'PX', ttl)
    redis.call('DEL', KEYS[5])
    redis.call('ZADD', KEYS[5], now + ttl, tok)
    redis.call('PEXPIRE', KEYS[5], ttl)
    redis.call('SET', KEYS[6], ARGV[5], 'PX', ttl)
    return 2
  end
  return 0

elseif op == 'fence' then
  -- write back a fence decided by the coordinator. ARGV: 2 fence, 3 keep ms, 4 owner
  local f = ARGV[2]
  if not fv or tonumber(fv) < tonumber(f) then
    redis.call('SET', KEYS[2], f, 'PX', fence_ttl(tonumber(f), ARGV[3]))
  end
  if ARGV[4] ~= '' and v == 'rl1:O:' .. ARGV[4] then
    redis.call('SET', KEYS[6], f, 'KEEPTTL')
  end
  return 1

elseif op == 'force' then
  -- an operator's forced release (`redlock release --force`). ARGV: 2
  -- handoff window ms, 3 channel, 4 fence keep ms, 5 fence skew ms. Deletes the hold whoever holds it (owner
  -- mode: every hold of the owner), steps the fence counter (if any) so
  -- that every later grant's fence is above the forced holder's, and hands
  -- the lock to the longest live waiter as a release does. The forced
  -- holder's renewals then find the key missing or another owner's.
  -- Reply: {1 deleted / 0 nothing held, the holder's value, fence counter}.
  if not v or (string.sub(v, 1, 6) ~= 'rl1:L:' and string.sub(v, 1, 6) ~= 'rl1:O:') then
    return {0, v or '', tonumber(fv or '0')}
  end
  local f
  if fv then
    f = redis.call('INCR', KEYS[2])
  else
    -- expired here: a fresh start is above it (see fence_ttl)
    f = fence_floor(ARGV[5])
    redis.call('SET', KEYS[2], string.format('%.0f', f))
  end
  redis.call('PEXPIRE', KEYS[2], fence_ttl(f, ARGV[4]))
  redis.call('DEL', KEYS[5], KEYS[6])
  free(ARGV[2], ARGV[3], '')
  return {1, v, f}

elseif op == 'status' then
  -- read-only view for `redlock status`: {value, pttl, fence, waiters,
  -- the first ARGV[2] waiters with their scores (queued since, server ms),
  -- the latest hold (owner mode: its token carries the holder's metadata)}
  local n = tonumber(ARGV[2] or '0') or 0
  local q = {}
  if n > 0 then q = redis.call('ZRANGE', KEYS[3], 0, n - 1, 'WITHSCORES') end
  local h = ''
  if v and string.sub(v, 1, 6) == 'rl1:O:' then
    local top = redis.call('ZRANGE', KEYS[5], -1, -1)
    if #top > 0 then h = top[1] end
  end
  return {v or '', redis.call('PTTL', KEYS[1]), fv or '', redis.call('ZCARD', KEYS[3]), q, h}
end
return redis.error_reply('ERR redlock: unknown op ' .. tostring(op))
