-- redlock prelude: named parts that a script pulls in where it needs them.
-- A script line `-- use: a b` is replaced by parts a and b (and the parts
-- they use), all on that one line. So a line number in a Redis error
-- ("user_script:N") is line N of the script's own file. A part pulled in
-- at the top of a script (no indent) is there for every op. One pulled in
-- inside an op's branch costs only that op (each function is one closure
-- per call). A part may use only parts above it. No comment after code in
-- a part: its lines are joined.
-- part: clock
-- now: this node's TIME in ms, read by clock(). The parts below read now.
-- A script that pulls them in without part now calls clock() before them,
-- on each path that runs them. A plain release or renewal needs no TIME.
local now
local function clock()
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- part: now
-- now, read at once for every op.
clock()
-- part: renew_codes
-- Renewal answers (Go: scripts.RenewNotOurs ...):
--   NOT_OURS: another holder, or the key is of another lease.
--   RENEWED: renewed.
--   RETAKEN: a missing key re-created (retake).
--   MISSING: the key is missing (a restarted node); only a retake
--     re-creates it.
local NOT_OURS, RENEWED, RETAKEN, MISSING = 0, 1, 2, 3
-- part: grant_codes
-- Acquire answers (Go: scripts.Granted, scripts.Refused): {GRANTED, fence,
-- now, ...} or {REFUSED, a retry hint in ms, now, ...}.
local REFUSED, GRANTED = 0, 1
-- part: wrong
-- wrong is the WRONGTYPE error for key k that is not a redlock `what`.
local function wrong(k, what)
  return redis.error_reply('WRONGTYPE redlock: ' .. k .. ' is not a redlock ' .. what)
end
-- part: check_types
-- check_types is nil when each key of keys is missing or of the type want
-- names at its index, else the WRONGTYPE error (a redlock `what`).
local function check_types(keys, want, what)
  for i, k in ipairs(keys) do
    local kt = redis.call('TYPE', k)['ok']
    if kt ~= 'none' and kt ~= want[i] then return wrong(k, what) end
  end
end
-- part: pexpire_max
-- pexpire_max never shortens a key's TTL.
local function pexpire_max(k, ttl)
  if redis.call('PTTL', k) < tonumber(ttl) then redis.call('PEXPIRE', k, ttl) end
end
-- part: zadd_max
-- zadd_max scores member m at least s: a repeated request never lowers the
-- expiry a later renewal or Extend gave it.
local function zadd_max(k, s, m)
  local cur = redis.call('ZSCORE', k, m)
  if not cur or tonumber(cur) < s then redis.call('ZADD', k, s, m) end
end
-- part: min_hold
-- Min-hold ("at most once per period": lock.lua, fairlock.lua). A grant
-- with min-hold m ms records "<until> <value>" in hash QX, field '^'.
-- until is now + m; value is the lock key's value as granted. The key
-- lives at least m. min_hold_tail is the release of value. Before until,
-- it turns the key into tail, which expires at until, and answers true.
-- Nobody is granted or handed the lock before then. Else it answers false.
local function min_hold_grant(LOCK, QX, val, m)
  redis.call('HSET', QX, '^', string.format('%.0f', now + m) .. ' ' .. val)
  pexpire_max(QX, m)
  pexpire_max(LOCK, m)
end
local function min_hold_tail(LOCK, QX, val, tail)
  local r = redis.call('HGET', QX, '^')
  local u, rv = string.match(r or '', '^(%d+) (.*)$')
  if rv ~= val then return false end
  redis.call('HDEL', QX, '^')
  u = tonumber(u) - now
  if u <= 0 then return false end
  redis.call('SET', LOCK, tail, 'PX', u)
  return true
end
-- part: fence_ttl
-- Fence counters (docs/lock.md, "Fencing"). A counter c is kept `keep` ms
-- after its last write. It never expires before this node's clock reads
-- (c >> 10) + keep. A counter started fresh is at least (TIME - skew) << 10
-- (fence_floor). With keep > skew a fresh counter is above any counter
-- that expired on this node, as long as its clock does not step back by
-- keep - skew. So a counter the hybrid clock has passed can go.
-- When keep wins it is returned as given: an ARGV string is passed on to
-- PEXPIRE as is, while a number argument costs a conversion in redis.call.
local function fence_ttl(c, keep)
  local k = tonumber(keep)
  local t = math.floor(c / 1024) + k - now
  if t <= k then return keep end
  return t
end
-- part: fence_step
-- fence_step steps the counter FENCE (it exists) and keeps it as above.
-- INCR and PEXPIRE cost less than one SET of the value + 1, whose
-- string.format and number argument cost more than the second command.
local function fence_step(FENCE, keep)
  local c = redis.call('INCR', FENCE)
  redis.call('PEXPIRE', FENCE, fence_ttl(c, keep))
  return c
end
-- part: fence_floor
local function fence_floor(skew)
  return (now - (tonumber(skew) or 0)) * 1024
end
-- part: head
-- head is the longest live waiter of queue q (zset waiter id -> score),
-- with entry expiries in hash qx. Field '=' .. id of qx is a Lock waiter's
-- direct grant state (lock.lua). It drops dead entries on the way and
-- answers nil when none of the first 32 lives.
local function head(q, qx)
  local ids = redis.call('ZRANGE', q, 0, 31)
  for _, id in ipairs(ids) do
    local exp = tonumber(redis.call('HGET', qx, id) or '0')
    if exp > now then return id, exp end
    redis.call('ZREM', q, id)
    redis.call('HDEL', qx, id, '=' .. id)
  end
  return nil
end
-- part: live_queue
-- live_queue lists the live waiters of queue q (expiries in hash qx) in
-- order, at most n ({id, score, ...}; n < 0: all). It writes nothing: a
-- read-only op skips the dead entries a writing op would drop.
local function live_queue(q, qx, n)
  local out = {}
  if n == 0 then return out end
  local ids = redis.call('ZRANGE', q, 0, -1, 'WITHSCORES')
  for i = 1, #ids, 2 do
    if (tonumber(redis.call('HGET', qx, ids[i]) or '0') or 0) > now then
      out[#out + 1] = ids[i]; out[#out + 1] = ids[i + 1]
      if n > 0 and #out >= 2 * n then break end
    end
  end
  return out
end
-- part: take_owned
-- Owner mode (a reentrant lock: lock.lua, fairlock.lua). The key LOCK holds
-- owned (the owner's value); each hold of the owner is a token in the zset
-- HOLDS scored by its expiry; EPOCH is the owner's fence.
-- take_owned makes the owner's first hold tok (a grant or a re-take).
local function take_owned(LOCK, HOLDS, EPOCH, owned, tok, ttl, fence)
  redis.call('SET', LOCK, owned, 'PX', ttl)
  redis.call('DEL', HOLDS)
  redis.call('ZADD', HOLDS, now + ttl, tok)
  redis.call('PEXPIRE', HOLDS, ttl)
  redis.call('SET', EPOCH, fence, 'PX', ttl)
end
-- part: renew_hold
-- renew_hold is the renew op. The lease's value is plain (one token), or in
-- owner mode (owned not false) owned with the hold tok. A missing key
-- answers MISSING unless retake: then it is re-created (with fence in
-- EPOCH).
local function renew_hold(v, LOCK, HOLDS, EPOCH, plain, owned, tok, ttl, fence, retake)
  if v == false and not retake then return MISSING end
  if not owned then
    if v == plain then pexpire_max(LOCK, ttl); return RENEWED end
    if v == false then redis.call('SET', LOCK, plain, 'PX', ttl); return RETAKEN end
    return NOT_OURS
  end
  if v == owned then
    local s = redis.call('ZSCORE', HOLDS, tok)
    if s and tonumber(s) > now then
      if tonumber(s) < now + ttl then redis.call('ZADD', HOLDS, now + ttl, tok) end
      pexpire_max(LOCK, ttl); pexpire_max(HOLDS, ttl); pexpire_max(EPOCH, ttl)
      return RENEWED
    end
    return NOT_OURS
  end
  if v == false then
    take_owned(LOCK, HOLDS, EPOCH, owned, tok, ttl, fence)
    return RETAKEN
  end
  return NOT_OURS
end
-- part: drop_hold
-- drop_hold ends the owner's hold tok. It answers nil if tok is not one.
-- It answers true when it was the last: HOLDS and EPOCH are deleted, and
-- the caller frees LOCK. It answers false when others remain: LOCK, HOLDS
-- and EPOCH then live as long as the longest of them.
local function drop_hold(LOCK, HOLDS, EPOCH, tok)
  if redis.call('ZREM', HOLDS, tok) == 0 then return nil end
  redis.call('ZREMRANGEBYSCORE', HOLDS, '-inf', now)
  local top = redis.call('ZRANGE', HOLDS, -1, -1, 'WITHSCORES')
  if #top == 0 then
    redis.call('DEL', HOLDS, EPOCH)
    return true
  end
  local rest = tonumber(top[2]) - now
  redis.call('PEXPIRE', LOCK, rest); redis.call('PEXPIRE', HOLDS, rest); redis.call('PEXPIRE', EPOCH, rest)
  return false
end
-- part: write_fence
-- write_fence is the fence op. It writes back a fence f decided by the
-- coordinator to the counter FENCE (fv its value, never lowered). If the
-- key holds owned (owner mode; false: none), it writes f to EPOCH too.
local function write_fence(FENCE, EPOCH, fv, v, owned, f, keep)
  if not fv or tonumber(fv) < tonumber(f) then
    redis.call('SET', FENCE, f, 'PX', fence_ttl(tonumber(f), keep))
  end
  if owned and v == owned then redis.call('SET', EPOCH, f, 'KEEPTTL') end
  return 1
end
