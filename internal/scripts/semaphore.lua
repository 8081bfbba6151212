-- redlock Semaphore script, layout version 1 ("rl1"). A semaphore of P
-- permits is P slots, each an exclusive quorum lock. One script, one round
-- trip per operation per node; ARGV[1] selects it. ARGV[2] is the slot key
-- prefix "<p>{name}:s:". Slot i is prefix .. i. Every slot key shares the
-- hash tag of KEYS[1], so it lives in the same cluster slot.
-- KEYS:
--   CFG config hash "<p>{name}:sem":
--     t = "rl1:sem" (type marker)
--     p = permits
--     hi = slots that may still be held (> p while a shrink drains)
--     f<i> = fence counter of slot i
--   QUEUE waiter order (zset: waiter id, score chosen by the waiter, the
--     same on every node)
--   QSTATE waiter state (hash):
--     <id> -> entry expiry in server ms
--     r:<id> -> the slot reserved for it here
--     a:<id> -> it made no attempt since that reservation
-- Slot values:
--   "rl1:S:<token>": held.
--   "rl1:R:<waiter id>": reserved for that waiter by a handoff.
-- Tokens and waiter ids carry the holder's metadata (primitives/meta.go).
-- They are compared whole, never parsed.
-- use: now grant_codes renew_codes wrong pexpire_max
local CFG, QUEUE, QSTATE = KEYS[1], KEYS[2], KEYS[3]
local op, prefix = ARGV[1], ARGV[2]
-- acquire answer: another permit count is stored (Go: scripts.SemOtherPermits)
local OTHER_PERMITS = -2
local ct = redis.call('TYPE', CFG)['ok']
if ct ~= 'none' and ct ~= 'hash' then return wrong(CFG, 'semaphore key') end
if ct == 'hash' and redis.call('HGET', CFG, 't') ~= 'rl1:sem' then
  return wrong(CFG, 'semaphore key')
end
local qt = redis.call('TYPE', QUEUE)['ok']
if qt ~= 'none' and qt ~= 'zset' then return wrong(QUEUE, 'semaphore queue') end
local xt = redis.call('TYPE', QSTATE)['ok']
if xt ~= 'none' and xt ~= 'hash' then return wrong(QSTATE, 'semaphore queue') end
local cp = false
if ct == 'hash' then cp = tonumber(redis.call('HGET', CFG, 'p') or '') or false end

-- slot(i) returns the slot's value (false when free) or nil, err on a
-- foreign key.
local function slot(i)
  local k = prefix .. i
  local v = redis.pcall('GET', k)
  if type(v) == 'table' and v.err then return nil, wrong(k, 'semaphore slot') end
  if v and string.sub(v, 1, 4) ~= 'rl1:' then return nil, wrong(k, 'semaphore slot') end
  return v
end

-- fence fields f<i>: the config hash is kept as a fence counter is (the
-- prelude's fence_ttl). So the coordinator's hybrid clock is above any
-- fence that expired with it.

-- touch creates the config where missing (or where it lost its permits)
-- and keeps it alive for the idle time.
local function touch(p, idle)
  if not cp then
    redis.call('HSET', CFG, 't', 'rl1:sem', 'p', p)
    if tonumber(redis.call('HGET', CFG, 'hi') or '0') < tonumber(p) then redis.call('HSET', CFG, 'hi', p) end
    cp = tonumber(p)
  end
  pexpire_max(CFG, idle)
end

local function dequeue(id)
  redis.call('ZREM', QUEUE, id)
  redis.call('HDEL', QSTATE, id, 'r:' .. id, 'a:' .. id)
end

-- reserved(id) returns the slot reserved for waiter id on this node, if any
local function reserved(id)
  local r = redis.call('HGET', QSTATE, 'r:' .. id)
  if r and redis.pcall('GET', prefix .. r) == 'rl1:R:' .. id then return tonumber(r) end
  return nil
end

-- handoff: slot i was freed. Reserve it for the longest live waiter that
-- holds no reservation here, and tell that waiter. With none (or a slot a
-- shrink removed), free the slot and tell one local waiter per process to
-- re-check. Every node orders the waiters by the same score, chosen by the
-- waiter, so the nodes reserve a freed slot for the same waiter. A waiter
-- keeps its place until it wins, leaves or expires. One that made no
-- attempt since its last reservation here lapsed is dropped. A dead waiter
-- costs one handoff window; a live one queues again under its score.
local function handoff(i, window, ch)
  if not cp or i < cp then
    local ids = redis.call('ZRANGE', QUEUE, 0, 31)
    for _, id in ipairs(ids) do
      local exp = tonumber(redis.call('HGET', QSTATE, id) or '0')
      local live = exp > now
      local r = reserved(id)
      if live and not r and redis.call('HEXISTS', QSTATE, 'a:' .. id) == 1 then live = false end
      if not live then
        dequeue(id)
      elseif not r then
        redis.call('SET', prefix .. i, 'rl1:R:' .. id, 'PX', window)
        redis.call('HSET', QSTATE, 'r:' .. id, i, 'a:' .. id, 1)
        redis.call('PUBLISH', ch, 'h:' .. id)
        return
      end
    end
  end
  redis.call('DEL', prefix .. i)
  redis.call('PUBLISH', ch, 'n:1')
end

-- unqueue(id): the waiter won or gave up: drop its entry and pass on a
-- reservation made for it here
local function unqueue(id, window, ch)
  local r = reserved(id)
  dequeue(id)
  if r then handoff(r, window, ch) end
end

if op == 'acquire' then
  -- use: fence_ttl
  -- ARGV:
  --   3 token (fresh per attempt)
  --   4 slot
  --   5 permits
  --   6 resize "1"/"0"
  --   7 ttl ms
  --   8 idle ms (at least the fence keep)
  --   9 scan start
  --   10 max free slots returned
  --   11 waiter id (stable across one Acquire)
  --   12 enqueue "1"/"0"
  --   13 queue entry ttl ms
  --   14 queue score: server ms the waiter first saw refused ("0": this
  --     node's now)
  --   15 handoff window ms
  --   16 channel
  -- Reply:
  --   {1, fence, now, 0}: granted.
  --   {0, soonest expiry ms, now, drain, n, slots...}: refused. The first
  --     n slots are reserved for this waiter and the rest are free.
  --   {-2, stored permits, now, 0}: another permit count is stored.
  -- Every check that can fail runs before the first write.
  local tok, s, p, resize, ttl, idle, start, maxfree, wid, enqueue, entry_ttl, score, window, ch =
    ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6] == '1', ARGV[7], ARGV[8], tonumber(ARGV[9]),
    tonumber(ARGV[10]), ARGV[11], ARGV[12] == '1', tonumber(ARGV[13]), tonumber(ARGV[14]), ARGV[15], ARGV[16]
  if cp and cp ~= p and not resize then return {OTHER_PERMITS, cp, now, 0} end
  local v, err = slot(s)
  if err then return err end
  local mine, rsv = 'rl1:S:' .. tok, 'rl1:R:' .. wid
  local hi, busy = p, -1
  if resize then
    -- WithResize: this client's permit count wins. A shrink refuses the
    -- resizer until the removed slots [p, hi) are free on this node (nobody
    -- proposes them any more once p is written).
    hi = math.max(tonumber(redis.call('HGET', CFG, 'hi') or '0'), cp or 0, p)
    for i = p, hi - 1 do
      local x, e = slot(i)
      if e then return e end
      if x then busy = math.max(busy, redis.call('PTTL', prefix .. i)) end
    end
  end
  local granted = busy < 0 and s < p and (v == false or v == mine or v == rsv)
  local out
  if granted then
    out = {GRANTED, 0, now, 0}
  elseif busy >= 0 then
    out = {REFUSED, busy, now, 1, 0} -- draining: no free list
  else
    -- Refused: this node's slots reserved for us, then its free slots, and
    -- the soonest expiry of the others. The scan starts at the client's
    -- start, so that every node returns the same window.
    local soon, mineR, free = -1, {}, {}
    for j = 0, p - 1 do
      local i = (start + j) % p
      local x, e = slot(i)
      if e then return e end
      if x == rsv then
        mineR[#mineR + 1] = i
      elseif not x then
        if #free < maxfree then free[#free + 1] = i end
      else
        local pt = redis.call('PTTL', prefix .. i)
        if soon < 0 or pt < soon then soon = pt end
      end
    end
    out = {REFUSED, soon, now, 0, #mineR}
    for _, i in ipairs(mineR) do out[#out + 1] = i end
    for _, i in ipairs(free) do out[#out + 1] = i end
  end
  touch(p, idle)
  if resize then
    if busy < 0 then hi = p end
    redis.call('HSET', CFG, 'p', p, 'hi', hi)
  end
  if granted then
    if v == mine then
      -- the same attempt again (a resend, or a late copy after the lease
      -- was extended): never shorten the slot
      pexpire_max(prefix .. s, ttl)
    else
      redis.call('SET', prefix .. s, mine, 'PX', ttl)
    end
    unqueue(wid, window, ch)
    if redis.call('HEXISTS', CFG, 'f' .. s) == 1 then
      out[2] = redis.call('HINCRBY', CFG, 'f' .. s, 1)
      pexpire_max(CFG, fence_ttl(out[2], idle))
    end
  elseif enqueue and busy < 0 then
    if score <= 0 then score = now end
    redis.call('ZADD', QUEUE, 'NX', score, wid)
    redis.call('HSET', QSTATE, wid, now + entry_ttl)
    redis.call('HDEL', QSTATE, 'a:' .. wid) -- it is alive
    pexpire_max(QUEUE, entry_ttl); pexpire_max(QSTATE, entry_ttl)
  end
  return out

elseif op == 'release' or op == 'rollback' then
  -- ARGV: 3 token, 4 slot, 5 handoff window ms, 6 channel. Only our own
  -- token frees the slot, so a stale or double release never adds a
  -- permit. A release hands the slot to the longest waiter. A rollback
  -- undoes one attempt's grant (its token is never reused) and frees the
  -- slot for everyone. The attempt lost a contention (or a reservation it
  -- could not use); passing the slot to the next waiter here could repeat
  -- that.
  local tok, s, window, ch = ARGV[3], tonumber(ARGV[4]), ARGV[5], ARGV[6]
  local v, err = slot(s)
  if err then return err end
  if v == 'rl1:S:' .. tok then
    if op == 'release' then
      handoff(s, window, ch)
    else
      redis.call('DEL', prefix .. s)
      redis.call('PUBLISH', ch, 'n:1')
    end
    return 1
  end
  return 0

elseif op == 'claim' or op == 'leave' then
  -- leave: a waiter gives up. claim: a waiter won a permit on a quorum
  -- without this node. Either way drop its queue entry here and pass on a
  -- reservation made for it, so no release hands a permit to a waiter that
  -- is gone. (A claim does not take the won slot here: it can arrive after
  -- the lease's own release.)
  -- ARGV: 3 waiter id, 4 handoff window ms, 5 channel
  local wid, window, ch = ARGV[3], ARGV[4], ARGV[5]
  unqueue(wid, window, ch)
  return 1

elseif op == 'renew' then
  -- ARGV: 3 token, 4 slot, 5 ttl ms, 6 idle ms, 7 permits, 8 retake "1"/"0"
  local tok, s, ttl, idle, p, retake = ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8] == '1'
  local v, err = slot(tonumber(s))
  if err then return err end
  local mine = 'rl1:S:' .. tok
  if v == mine then
    pexpire_max(prefix .. s, ttl)
    touch(p, idle)
    return RENEWED
  end
  if v == false and not retake then return MISSING end -- re-take only when asked (see lock.lua)
  if v == false then
    -- the key vanished (restarted node) while the lease is valid: re-take it
    redis.call('SET', prefix .. s, mine, 'PX', ttl)
    touch(p, idle)
    return RETAKEN
  end
  return NOT_OURS

elseif op == 'fence' then
  -- use: fence_ttl
  -- write back a fence decided by the coordinator to slot s's field
  local s, fs, idle, p = ARGV[3], ARGV[4], ARGV[5], ARGV[6]
  local fk, f = 'f' .. s, tonumber(fs)
  local cur = tonumber(redis.call('HGET', CFG, fk) or '0')
  if cur < f then redis.call('HSET', CFG, fk, fs) end
  touch(p, idle)
  pexpire_max(CFG, fence_ttl(math.max(cur, f), idle))
  return 1

elseif op == 'info' then
  -- use: live_queue
  -- read-only view for `redlock status`: {stored permits (0 if none),
  -- queued waiters, {taken slots}, {their values}, {the first ARGV[3] live
  -- waiters with their scores}} (a reserved slot is taken)
  local max_waiters = tonumber(ARGV[3] or '0') or 0
  local hi = 0
  if ct == 'hash' then hi = tonumber(redis.call('HGET', CFG, 'hi') or '0') end
  local taken, vals, q = {}, {}, {}
  for i = 0, math.max(hi, cp or 0) - 1 do
    local x, e = slot(i)
    if e then return e end
    if x then taken[#taken + 1] = i; vals[#vals + 1] = x end
  end
  if max_waiters > 0 then q = live_queue(QUEUE, QSTATE, max_waiters) end
  return {cp or 0, redis.call('ZCARD', QUEUE), taken, vals, q}

elseif op == 'status' then
  -- read-only: {stored permits (0 if none), taken slots...} over
  -- [0, max(permits, stored, hi)); a reserved slot is taken
  local permits = tonumber(ARGV[3])
  local hi = 0
  if ct == 'hash' then hi = tonumber(redis.call('HGET', CFG, 'hi') or '0') end
  local out = {cp or 0}
  for i = 0, math.max(permits, hi, cp or 0) - 1 do
    local x, e = slot(i)
    if e then return e end
    if x then out[#out + 1] = i end
  end
  return out
end
return redis.error_reply('ERR redlock: unknown op ' .. tostring(op))
