-- redlock FairLock script, layout version 1 ("rl1"). FIFO by (ticket,
-- waiter id). The ticket comes from a quorum counter (op 'ticket'), so
-- every node orders its queue by the same key. One script, one round trip
-- per operation per node; ARGV[1] selects it.
-- KEYS:
--   LOCK (string)
--   FENCE counter
--   QUEUE (zset waiter id -> ticket)
--   QEXP queue expiry (hash waiter id -> server ms)
--   TICKET counter
--   HOLDS (zset hold token -> expiry ms, owner mode)
--   EPOCH fence (owner mode)
--   GONE departed waiters (zset waiter id -> server ms until which its
--     stale attempts are refused)
-- Values of LOCK:
--   "rl1:F:<token>": held.
--   "rl1:FO:<owner>": held by a reentrant owner.
--   "rl1:FT:F:<token>" or "rl1:FT:FO:<owner>": released within its
--     min-hold. Nobody holds it until it expires. QEXP field '^' is the
--     grant's min-hold record (see the prelude's min_hold).
-- Tokens and waiter ids carry the holder's metadata (primitives/meta.go).
-- They are compared whole, never parsed.
-- use: now grant_codes wrong check_types pexpire_max
local LOCK, FENCE, QUEUE, QEXP, TICKET, HOLDS, EPOCH, GONE =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local op = ARGV[1]
local HELD, OWNED = 'rl1:F:', 'rl1:FO:'
local TAIL = 'rl1:FT:'

-- Type checks before any write. One MGET reads the four string keys: nil
-- for a missing key and for one of another type. One EXISTS counts all
-- eight. When it counts only the values MGET found, the other keys are
-- missing and no TYPE is needed. Otherwise every key but a string MGET
-- found gets a TYPE, in the layout's order (the first wrong key is named).
-- A refused MGET (an ACL) falls back to a TYPE of each key and the GETs,
-- which give the refusal as they always did.
local v, fv, tv, ev
local got = redis.pcall('MGET', LOCK, FENCE, TICKET, EPOCH)
if got.err then
  local terr = check_types({LOCK, FENCE, QUEUE, QEXP, TICKET, HOLDS, EPOCH, GONE},
    {'string', 'string', 'zset', 'hash', 'string', 'zset', 'string', 'zset'}, 'fair lock key')
  if terr then return terr end
  v, fv, tv, ev = redis.call('GET', LOCK), redis.call('GET', FENCE), redis.call('GET', TICKET), redis.call('GET', EPOCH)
else
  v, fv, tv, ev = got[1], got[2], got[3], got[4]
  local n = redis.call('EXISTS', LOCK, FENCE, QUEUE, QEXP, TICKET, HOLDS, EPOCH, GONE)
  for i = 1, 4 do
    if got[i] then n = n - 1 end
  end
  if n > 0 then
    local keys = {LOCK, FENCE, QUEUE, QEXP, TICKET, HOLDS, EPOCH, GONE}
    local want = {'string', 'string', 'zset', 'hash', 'string', 'zset', 'string', 'zset'}
    local found = {got[1], got[2], false, false, got[3], false, got[4], false}
    local ks, ts = {}, {}
    for i, k in ipairs(keys) do
      if not found[i] then ks[#ks + 1], ts[#ts + 1] = k, want[i] end
    end
    local terr = check_types(ks, ts, 'fair lock key')
    if terr then return terr end
  end
end
if v and string.sub(v, 1, 6) ~= HELD and string.sub(v, 1, 7) ~= OWNED and string.sub(v, 1, 7) ~= TAIL then
  return wrong(LOCK, 'fair lock key')
end
if fv and not string.match(fv, '^%d+$') then return wrong(FENCE, 'fence counter') end
if tv and not tonumber(tv) then return wrong(TICKET, 'ticket counter') end
if ev and not tonumber(ev) then return wrong(EPOCH, 'epoch fence') end

local function dequeue(wid)
  redis.call('ZREM', QUEUE, wid)
  redis.call('HDEL', QEXP, wid)
end

-- fair_head evicts dead waiters (expiry passed, or no expiry) from the
-- front of the queue. It returns the first live waiter id and its expiry,
-- or nil when the queue is empty. The prelude's head gives up after 32;
-- this one goes on. After 1024 evictions in one call it answers '', a
-- placeholder that is nobody's id, and the next call goes on evicting. So
-- FIFO order never skips a live waiter.
local evicted = 0
local function fair_head()
  for _ = 1, 64 do
    local ids = redis.call('ZRANGE', QUEUE, 0, 15)
    if #ids == 0 then return nil, 0 end
    for _, id in ipairs(ids) do
      local exp = tonumber(redis.call('HGET', QEXP, id) or '0') or 0
      if exp > now then return id, exp end
      dequeue(id)
      evicted = evicted + 1
    end
  end
  return '', now + 10
end

-- wake tells the head of the queue (only it) that the lock is free. With an
-- empty queue nobody needs telling: a waiter not yet enqueued makes its
-- first enqueued attempt right after subscribing, and sees the lock free.
local function wake(ch)
  local h = fair_head()
  if h and h ~= '' then redis.call('PUBLISH', ch, 'h:' .. h) end
end

if op == 'acquire' then
  -- use: zadd_max
  -- Arguments:
  --   token: new for every attempt.
  --   wid: the waiter id, stable across one Acquire.
  --   ticket: its quorum ticket (0: try only, leave no entry).
  --   wt: the waiter timeout (its entry's TTL).
  --   ticket_ttl: the ticket counter's TTL.
  --   keep: the fence keep.
  --   mh: the min-hold in ms (0: none).
  local tok, ttl, owner, wid, ticket_s, wt, ticket_ttl, keep, ch =
    ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5], ARGV[6], tonumber(ARGV[7]), ARGV[8], ARGV[9], ARGV[10]
  local mh = tonumber(ARGV[11] or '0') or 0
  -- use: min_hold
  local ticket = tonumber(ticket_s)
  if ticket > 0 then
    -- an attempt still in flight when its waiter left (it can reach the node
    -- after the leave): refuse it, and do not re-insert the entry
    local gone = redis.call('ZSCORE', GONE, wid)
    if gone and tonumber(gone) > now then return {REFUSED, 1, now, 0} end
    -- heartbeat: (re-)insert our entry with our quorum ticket and refresh
    -- its expiry; the counter never stays below a ticket in use (write-back)
    redis.call('ZADD', QUEUE, ticket_s, wid)
    redis.call('HSET', QEXP, wid, now + wt)
    pexpire_max(QUEUE, wt); pexpire_max(QEXP, wt)
    if not tv or tonumber(tv) < ticket then
      redis.call('SET', TICKET, ticket_s, 'PX', ticket_ttl)
    else
      pexpire_max(TICKET, ticket_ttl)
    end
  end
  local h, hexp = fair_head()
  local function fence_next()
    -- use: fence_step
    if fv then return fence_step(FENCE, keep) end
    return 0 -- unknown: the coordinator decides
  end
  -- a granted waiter keeps its entry (at the head) for at most one TTL, so
  -- that a rolled-back partial grant keeps its place; release dequeues it
  local function keep_entry()
    if ticket > 0 and redis.call('ZSCORE', QUEUE, wid) then
      redis.call('HSET', QEXP, wid, now + math.min(ttl, wt))
    end
  end
  local first = (h == nil or h == wid)
  if owner == '' then
    local mine = HELD .. tok
    if v == mine then
      -- the same attempt again (a resend, or a late copy after the lease
      -- was extended): never shorten the key
      pexpire_max(LOCK, ttl)
      keep_entry()
      return {GRANTED, fence_next(), now, 0}
    end
    if v == false and first then
      redis.call('SET', LOCK, mine, 'PX', ttl)
      if mh > 0 then min_hold_grant(LOCK, QEXP, mine, mh) end
      keep_entry()
      return {GRANTED, fence_next(), now, 0}
    end
  else
    local mine = OWNED .. owner
    local holding = false
    if v == mine then
      redis.call('ZREMRANGEBYSCORE', HOLDS, '-inf', now)
      holding = redis.call('ZCARD', HOLDS) > 0
    end
    if holding then
      -- reentrant: the owner holds already; it bypassed the queue, so it
      -- leaves no entry behind
      -- (a repeat of this very reentrant attempt keeps the later expiry)
      zadd_max(HOLDS, now + ttl, tok)
      pexpire_max(LOCK, ttl); pexpire_max(HOLDS, ttl); pexpire_max(EPOCH, ttl)
      dequeue(wid)
      return {GRANTED, tonumber(ev or '0'), now, 1}
    end
    if v == false and first then
      -- use: take_owned
      local f = fence_next()
      take_owned(LOCK, HOLDS, EPOCH, mine, tok, ttl, f)
      if mh > 0 then min_hold_grant(LOCK, QEXP, mine, mh) end
      keep_entry()
      return {GRANTED, f, now, 0}
    end
  end
  -- refused. A dead head was evicted while the lock is free: tell the new
  -- head at once.
  if evicted > 0 and v == false and h and h ~= '' and h ~= wid then
    redis.call('PUBLISH', ch, 'h:' .. h)
  end
  local hint
  if v then
    hint = redis.call('PTTL', LOCK)
  elseif h then
    hint = hexp - now -- when the head's entry would expire if it died
  else
    hint = 1
  end
  return {REFUSED, math.max(hint, 1), now, 0}

elseif op == 'release' or op == 'rollback' then
  -- use: drop_hold
  -- A rollback undoes one attempt's grant (its token is never reused) and
  -- keeps the waiter's place; a release ends a lease and dequeues its
  -- waiter entry. Answers 1 released, 0 not ours.
  local tok, owner, ch, wid = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
  local ours, freed = 0, false
  -- a release within the grant's min-hold leaves the key as a tail (no
  -- wake); a rollback frees as ever
  local function free(val)
    if op == 'release' then
      -- use: min_hold
      if min_hold_tail(LOCK, QEXP, val, TAIL .. string.sub(val, 5)) then return false end
    end
    redis.call('DEL', LOCK)
    return true
  end
  if owner == '' then
    if v == HELD .. tok then
      ours, freed = 1, free(v)
    end
  elseif v == OWNED .. owner then
    local last = drop_hold(LOCK, HOLDS, EPOCH, tok)
    if last then last = free(v) end
    -- the holds left never end the min-hold early
    local mr = last == false and string.match(redis.call('HGET', QEXP, '^') or '', '^(%d+) ' .. OWNED)
    if mr and tonumber(mr) > now then pexpire_max(LOCK, tonumber(mr) - now) end
    if last ~= nil then ours, freed = 1, last end
  end
  if op == 'release' then dequeue(wid) end
  if freed then wake(ch) end
  return ours

elseif op == 'leave' then
  -- a waiter gives up; its attempts still in flight are refused for wt ms
  local wid, ch, wt = ARGV[2], ARGV[3], ARGV[4]
  local h = fair_head()
  dequeue(wid)
  redis.call('ZREMRANGEBYSCORE', GONE, '-inf', now)
  redis.call('ZADD', GONE, now + tonumber(wt), wid)
  pexpire_max(GONE, wt)
  if v == false and h == wid then wake(ch) end
  return 1

elseif op == 'claim' then
  -- the waiter won a quorum without this node: drop its entry here
  local wid = ARGV[2]
  dequeue(wid)
  return 1

elseif op == 'ticket' then
  -- enqueue round: one more ticket; the counter lives ticket_ttl ms
  local ticket_ttl = ARGV[2]
  local n = redis.call('INCR', TICKET)
  pexpire_max(TICKET, ticket_ttl)
  return n

elseif op == 'fence' then
  -- use: write_fence
  -- write back a fence decided by the coordinator
  local f, keep, owner = ARGV[2], ARGV[3], ARGV[4]
  return write_fence(FENCE, EPOCH, fv, v, owner ~= '' and OWNED .. owner, f, keep)

elseif op == 'renew' then
  -- use: renew_hold
  -- fence: the owner's fence, for a re-take; a missing key answers MISSING
  -- unless retake (see lock.lua)
  local tok, ttl, owner, fence, retake = ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5], ARGV[6] == '1'
  return renew_hold(v, LOCK, HOLDS, EPOCH, HELD .. tok, owner ~= '' and OWNED .. owner, tok, ttl, fence, retake)

elseif op == 'status' then
  -- use: live_queue
  -- Read-only (run with EVALSHA_RO). Reply: {value, pttl, fence, live
  -- queue ids in order, ticket counter, the latest hold, the first
  -- max_waiters live ids with their tickets}. In owner mode the latest
  -- hold's token carries the holder's metadata.
  local max_waiters = tonumber(ARGV[2] or '0') or 0
  local all, live, q = live_queue(QUEUE, QEXP, -1), {}, {}
  for i = 1, #all, 2 do
    live[#live + 1] = all[i]
    if #live <= max_waiters then q[#q + 1] = all[i]; q[#q + 1] = all[i + 1] end
  end
  local h = ''
  if v and string.sub(v, 1, 7) == OWNED then
    local top = redis.call('ZRANGE', HOLDS, -1, -1)
    if #top > 0 then h = top[1] end
  end
  return {v or '', redis.call('PTTL', LOCK), fv or '', live, tv or '', h, q}
end
return redis.error_reply('ERR redlock: unknown op ' .. tostring(op))
