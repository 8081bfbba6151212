-- redlock FairLock script, layout version 1 ("rl1"). FIFO by (ticket, waiter
-- id): the ticket comes from a quorum counter (op 'ticket'), so every node
-- orders its queue by the same key. One script, one round trip per operation
-- per node; ARGV[1] selects it.
-- KEYS: 1 lock (string), 2 fence counter, 3 queue (zset waiter id -> ticket),
--       4 queue expiry (hash waiter id -> server ms), 5 ticket counter,
--       6 holds (zset hold token -> expiry ms, owner mode), 7 epoch fence (owner mode),
--       8 departed waiters (zset waiter id -> server ms until which its stale
--         attempts are refused)
-- Values of KEYS[1]: "rl1:F:<token>" (held), "rl1:FO:<owner>" (held by a
-- reentrant owner). Tokens and waiter ids carry the holder's metadata
-- (primitives/meta.go): they are compared whole, never parsed.
local op = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- fence counters: kept `keep` ms after their last write and never before
-- (c >> 10) + keep on this node's clock, so that the coordinator's hybrid
-- clock (TIME << 10) is above any counter that expired (docs/lock.md)
local function fence_ttl(c, keep)
  keep = tonumber(keep)
  return string.format('%.0f', math.max(keep, math.floor(c / 1024) + keep - now))
end

local function wrong(k, what)
  return redis.error_reply('WRONGTYPE redlock: ' .. k .. ' is not a redlock ' .. what)
end
local want = {'string', 'string', 'zset', 'hash', 'string', 'zset', 'string', 'zset'}
for i = 1, 8 do
  local kt = redis.call('TYPE', KEYS[i])['ok']
  if kt ~= 'none' and kt ~= want[i] then return wrong(KEYS[i], 'fair lock key') end
end
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, 6) ~= 'rl1:F:' and string.sub(v, 1, 7) ~= 'rl1:FO:' then
  return wrong(KEYS[1], 'fair lock key')
end
local fv = redis.call('GET', KEYS[2])
if fv and not string.match(fv, '^%d+$') then return wrong(KEYS[2], 'fence counter') end
local tv = redis.call('GET', KEYS[5])
if tv and not tonumber(tv) then return wrong(KEYS[5], 'ticket counter') end
local ev = redis.call('GET', KEYS[7])
if ev and not tonumber(ev) then return wrong(KEYS[7], 'epoch fence') end

local function pexpire_max(k, ttl)
  if redis.call('PTTL', k) < tonumber(ttl) then redis.call('PEXPIRE', k, ttl) end
end

-- zadd_max scores member m at least s: a repeated request never lowers
-- the expiry a later renewal or Extend gave it.
local function zadd_max(k, s, m)
  local cur = redis.call('ZSCORE', k, m)
  if not cur or tonumber(cur) < s then redis.call('ZADD', k, s, m) end
end

local function dequeue(wid)
  redis.call('ZREM', KEYS[3], wid)
  redis.call('HDEL', KEYS[4], wid)
end

-- head evicts dead waiters (expiry passed, or no expiry) from the front of
-- the queue and returns the first live waiter id and its expiry, or nil when
-- the queue is empty. After 1024 evictions in one call it answers '' (a
-- placeholder that is nobody's id): the next call goes on evicting.
local evicted = 0
local function head()
  for _ = 1, 64 do
    local ids = redis.call('ZRANGE', KEYS[3], 0, 15)
    if #ids == 0 then return nil, 0 end
    for _, id in ipairs(ids) do
      local exp = tonumber(redis.call('HGET', KEYS[4], id) or '0') or 0
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
  local h = head()
  if h and h ~= '' then redis.call('PUBLISH', ch, 'h:' .. h) end
end

-- owner-mode helpers: holds live in KEYS[6] scored by their expiry
local function holds_left()
  redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now)
  return redis.call('ZCARD', KEYS[6])
end
local function owner_ttl()
  local top = redis.call('ZRANGE', KEYS[6], -1, -1, 'WITHSCORES')
  if #top == 0 then return 0 end
  return tonumber(top[2]) - now
end

if op == 'acquire' then
  -- ARGV: 2 token (new for every attempt), 3 ttl ms, 4 owner, 5 waiter id
  -- (stable across one Acquire), 6 ticket ("0": try only, leave no entry),
  -- 7 waiter timeout ms, 8 ticket counter ttl ms, 9 fence keep ms, 10 channel
  local tok, ttl, owner, wid = ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]
  local ticket = tonumber(ARGV[6])
  if ticket > 0 then
    -- an attempt still in flight when its waiter left (it can reach the node
    -- after the leave): refuse it, and do not re-insert the entry
    local gone = redis.call('ZSCORE', KEYS[8], wid)
    if gone and tonumber(gone) > now then return {0, 1, now, 0} end
    -- heartbeat: (re-)insert our entry with our quorum ticket and refresh
    -- its expiry; the counter never stays below a ticket in use (write-back)
    local wt = tonumber(ARGV[7])
    redis.call('ZADD', KEYS[3], ARGV[6], wid)
    redis.call('HSET', KEYS[4], wid, now + wt)
    pexpire_max(KEYS[3], wt); pexpire_max(KEYS[4], wt)
    if not tv or tonumber(tv) < ticket then
      redis.call('SET', KEYS[5], ARGV[6], 'PX', ARGV[8])
    else
      pexpire_max(KEYS[5], ARGV[8])
    end
  end
  local h, hexp = head()
  local function fence_next()
    if fv then
      local c = redis.call('INCR', KEYS[2])
      redis.call('PEXPIRE', KEYS[2], fence_ttl(c, ARGV[9]))
      return c
    end
    return 0 -- unknown: the coordinator decides
  end
  -- a granted waiter keeps its entry (at the head) for at most one TTL, so
  -- that a rolled-back partial grant keeps its place; release dequeues it
  local function keep_entry()
    if ticket > 0 and redis.call('ZSCORE', KEYS[3], wid) then
      redis.call('HSET', KEYS[4], wid, now + math.min(ttl, tonumber(ARGV[7])))
    end
  end
  local first = (h == nil or h == wid)
  if owner == '' then
    -- (v == ours: this very attempt, repeated after a broken connection)
    if v == 'rl1:F:' .. tok then
      -- the same attempt again (a resend, or a late copy after the lease
      -- was extended): never shorten the key
      pexpire_max(KEYS[1], ttl)
      keep_entry()
      return {1, fence_next(), now, 0}
    end
    if v == false and first then
      redis.call('SET', KEYS[1], 'rl1:F:' .. tok, 'PX', ttl)
      keep_entry()
      return {1, fence_next(), now, 0}
    end
  else
    local mine = 'rl1:FO:' .. owner
    if v == mine and holds_left() > 0 then
      -- reentrant: the owner holds already; it bypassed the queue, so it
      -- leaves no entry behind
      -- (a repeat of this very reentrant attempt keeps the later expiry)
      zadd_max(KEYS[6], now + ttl, tok)
      pexpire_max(KEYS[1], ttl); pexpire_max(KEYS[6], ttl); pexpire_max(KEYS[7], ttl)
      dequeue(wid)
      return {1, tonumber(ev or '0'), now, 1}
    end
    if v == false and first then
      redis.call('DEL', KEYS[6])
      redis.call('SET', KEYS[1], mine, 'PX', ttl)
      redis.call('ZADD', KEYS[6], now + ttl, tok)
      redis.call('PEXPIRE', KEYS[6], ttl)
      local f = fence_next()
      redis.call('SET', KEYS[7], f, 'PX', ttl)
      keep_entry()
      return {1, f, now, 0}
    end
  end
  -- refused. A dead head was evicted while the lock is free: tell the new
  -- head at once.
  if evicted > 0 and v == false and h and h ~= '' and h ~= wid then
    redis.call('PUBLISH', ARGV[10], 'h:' .. h)
  end
  local hint
  if v then
    hint = redis.call('PTTL', KEYS[1])
  elseif h then
    hint = hexp - now -- when the head's entry would expire if it died
  else
    hint = 1
  end
  return {0, math.max(hint, 1), now, 0}

elseif op == 'release' or op == 'rollback' then
  -- ARGV: 2 token, 3 owner, 4 channel, 5 waiter id. A rollback undoes one
  -- attempt's grant (its token is never reused) and keeps the waiter's
  -- place; a release ends a lease and dequeues its waiter entry.
  local tok, owner = ARGV[2], ARGV[3]
  local ours, freed = 0, false
  if owner == '' then
    if v == 'rl1:F:' .. tok then
      redis.call('DEL', KEYS[1])
      ours, freed = 1, true
    end
  elseif v == 'rl1:FO:' .. owner and redis.call('ZREM', KEYS[6], tok) == 1 then
    ours = 1
    if holds_left() == 0 then
      redis.call('DEL', KEYS[1], KEYS[6], KEYS[7])
      freed = true
    else
      local rest = owner_ttl()
      redis.call('PEXPIRE', KEYS[1], rest); redis.call('PEXPIRE', KEYS[6], rest); redis.call('PEXPIRE', KEYS[7], rest)
    end
  end
  if op == 'release' then dequeue(ARGV[5]) end
  if freed then wake(ARGV[4]) end
  return ours

elseif op == 'leave' then
  -- a waiter gives up. ARGV: 2 waiter id, 3 channel, 4 waiter timeout ms
  local h = head()
  dequeue(ARGV[2])
  redis.call('ZREMRANGEBYSCORE', KEYS[8], '-inf', now)
  redis.call('ZADD', KEYS[8], now + tonumber(ARGV[4]), ARGV[2])
  pexpire_max(KEYS[8], ARGV[4])
  if v == false and h == ARGV[2] then wake(ARGV[3]) end
  return 1

elseif op == 'claim' then
  -- the waiter won a quorum without this node: drop its entry here.
  -- ARGV: 2 waiter id
  dequeue(ARGV[2])
  return 1

elseif op == 'ticket' then
  -- enqueue round: one more ticket. ARGV: 2 counter ttl ms
  local n = redis.call('INCR', KEYS[5])
  pexpire_max(KEYS[5], ARGV[2])
  return n

elseif op == 'renew' then
  -- ARGV: 2 token, 3 ttl ms, 4 owner, 5 fence (for a re-take), 6 retake "1"/"0".
  -- A missing key answers 3 unless retake=1 (see lock.lua).
  local tok, ttl, owner = ARGV[2], tonumber(ARGV[3]), ARGV[4]
  if v == false and ARGV[6] ~= '1' then return 3 end
  if owner == '' then
    local mine = 'rl1:F:' .. tok
    if v == mine then pexpire_max(KEYS[1], ttl); return 1 end
    if v == false then redis.call('SET', KEYS[1], mine, 'PX', ttl); return 2 end
    return 0
  end
  local mine = 'rl1:FO:' .. owner
  if v == mine then
    local s = redis.call('ZSCORE', KEYS[6], tok)
    if s and tonumber(s) > now then
      if tonumber(s) < now + ttl then redis.call('ZADD', KEYS[6], now + ttl, tok) end
      pexpire_max(KEYS[1], ttl); pexpire_max(KEYS[6], ttl); pexpire_max(KEYS[7], ttl)
      return 1
    end
    return 0
  end
  if v == false then
    redis.call('SET', KEYS[1], mine, 'PX', ttl)
    redis.call('DEL', KEYS[6])
    redis.call('ZADD', KEYS[6], now + ttl, tok)
    redis.call('PEXPIRE', KEYS[6], ttl)
    redis.call('SET', KEYS[7], ARGV[5], 'PX', ttl)
    return 2
  end
  return 0

elseif op == 'fence' then
  -- write back a fence decided by the coordinator. ARGV: 2 fence, 3 keep ms, 4 owner
  local f = ARGV[2]
  if not fv or tonumber(fv) < tonumber(f) then
    redis.call('SET', KEYS[2], f, 'PX', fence_ttl(tonumber(f), ARGV[3]))
  end
  if ARGV[4] ~= '' and v == 'rl1:FO:' .. ARGV[4] then
    redis.call('SET', KEYS[7], f, 'KEEPTTL')
  end
  return 1

elseif op == 'status' then
  -- read-only view: {value, pttl, fence, live queue ids in order, ticket
  -- counter, the latest hold (owner mode: its token carries the holder's
  -- metadata), the first ARGV[2] live ids with their tickets}
  local ids, live, q = redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES'), {}, {}
  local n = tonumber(ARGV[2] or '0') or 0
  for i = 1, #ids, 2 do
    if (tonumber(redis.call('HGET', KEYS[4], ids[i]) or '0') or 0) > now then
      table.insert(live, ids[i])
      if #live <= n then table.insert(q, ids[i]); table.insert(q, ids[i + 1]) end
    end
  end
  local h = ''
  if v and string.sub(v, 1, 7) == 'rl1:FO:' then
    local top = redis.call('ZRANGE', KEYS[6], -1, -1)
    if #top > 0 then h = top[1] end
  end
  return {v or '', redis.call('PTTL', KEYS[1]), fv or '', live, tv or '', h, q}
end
return redis.error_reply('ERR redlock: unknown op ' .. tostring(op))
