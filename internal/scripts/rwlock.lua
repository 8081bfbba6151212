-- redlock RWLock script, layout version 1 ("rl1"). Phase-fair: a waiting
-- writer blocks new readers; when a write ends, the readers that waited
-- during it are admitted ahead of waiting writers; writers go in FIFO order.
-- KEYS: WRITER (string "rl1:W:<token>"), READERS (zset token -> expiry ms),
--       WW waiting writers (zset wid -> first enqueue ms), WWX their expiry (hash),
--       WR waiting readers (zset wid -> expiry ms), ADM admitted readers (zset wid -> expiry ms),
--       FENCE counter, MARK type marker (string "rl1:rw")
-- Tokens and waiter ids carry the holder's metadata (primitives/meta.go):
-- they are compared whole, never parsed.
-- use: now grant_codes renew_codes wrong check_types pexpire_max head
local WRITER, READERS, WW, WWX, WR, ADM, FENCE, MARK =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local op = ARGV[1]
local HELD = 'rl1:W:'

local terr = check_types({WRITER, READERS, WW, WWX, WR, ADM, FENCE, MARK},
  {'string', 'zset', 'zset', 'hash', 'zset', 'zset', 'string', 'string'}, 'rwlock key')
if terr then return terr end
local w = redis.call('GET', WRITER)
if w and string.sub(w, 1, 6) ~= HELD then return wrong(WRITER, 'rwlock key') end
local mk = redis.call('GET', MARK)
if mk and mk ~= 'rl1:rw' then return wrong(MARK, 'rwlock marker') end
local fv = redis.call('GET', FENCE)
if fv and not string.match(fv, '^%d+$') then return wrong(FENCE, 'fence counter') end

if op == 'status' then
  -- use: live_queue
  -- read-only (run with EVALSHA_RO): {writer, live readers, waiting
  -- writers, live waiting readers, fence, then the first max_waiters of:
  -- reader tokens, live waiting writers with their scores, waiting (and
  -- admitted, not yet acquired) reader ids}. It writes nothing: expired
  -- entries are skipped, not dropped.
  local max_waiters = tonumber(ARGV[2] or '0') or 0
  local live = '(' .. now
  local rd, wr = {}, {}
  if max_waiters > 0 then
    rd = redis.call('ZRANGEBYSCORE', READERS, live, '+inf', 'LIMIT', 0, max_waiters)
    for _, k in ipairs({WR, ADM}) do
      for _, id in ipairs(redis.call('ZRANGEBYSCORE', k, live, '+inf', 'LIMIT', 0, max_waiters)) do wr[#wr + 1] = id end
    end
  end
  return {w or '', redis.call('ZCOUNT', READERS, live, '+inf'), redis.call('ZCARD', WW),
    redis.call('ZCOUNT', WR, live, '+inf'), fv or '', rd, live_queue(WW, WWX, max_waiters), wr}
end

-- drop expired entries
redis.call('ZREMRANGEBYSCORE', READERS, '-inf', now)
redis.call('ZREMRANGEBYSCORE', WR, '-inf', now)
redis.call('ZREMRANGEBYSCORE', ADM, '-inf', now)
local function marker(ttl)
  redis.call('SET', MARK, 'rl1:rw')
  redis.call('PEXPIRE', MARK, ttl)
end
-- keep the marker alive as long as any of our keys
local function touch_marker()
  local m = 0
  for _, k in ipairs({WRITER, READERS, WW, WWX, WR, ADM}) do m = math.max(m, redis.call('PTTL', k)) end
  if m > 0 then marker(m) else redis.call('DEL', MARK) end
end
local function fence_read()
  if fv then return tonumber(fv) end
  return 0
end
-- a write ended: admit every reader that waited during it, then wake
local function end_write(window, ch)
  local rs = redis.call('ZRANGE', WR, 0, -1)
  if #rs > 0 then
    for _, id in ipairs(rs) do redis.call('ZADD', ADM, now + window, id) end
    redis.call('DEL', WR)
    pexpire_max(ADM, window)
    redis.call('PUBLISH', ch, 'a')
    return
  end
  local h = head(WW, WWX)
  if h then redis.call('PUBLISH', ch, 'h:' .. h) else redis.call('PUBLISH', ch, 'n:1') end
end
-- drop_writer removes a waiting writer's entry
local function drop_writer(wid)
  if wid and wid ~= '' then
    redis.call('ZREM', WW, wid)
    redis.call('HDEL', WWX, wid)
  end
end

if op == 'racquire' then
  -- token: new for every attempt; enqueue: wait as a reader (entry_ttl
  -- its entry's TTL); wid: the waiter id
  local tok, ttl, enqueue, entry_ttl, wid = ARGV[2], tonumber(ARGV[3]), ARGV[4] == '1', tonumber(ARGV[5]), ARGV[6]
  local admitted = redis.call('ZSCORE', ADM, wid)
  local ok = false
  if not w then
    if admitted then ok = true
    elseif not head(WW, WWX) then ok = true end
  end
  if ok then
    -- (a repeat of this very attempt after an Extend keeps the later expiry)
    local cur = redis.call('ZSCORE', READERS, tok)
    if not cur or tonumber(cur) < now + ttl then redis.call('ZADD', READERS, now + ttl, tok) end
    pexpire_max(READERS, ttl)
    redis.call('ZREM', WR, wid)
    redis.call('ZREM', ADM, wid)
    marker(math.max(ttl, redis.call('PTTL', MARK)))
    return {GRANTED, fence_read(), now, 1}
  end
  if enqueue then
    redis.call('ZADD', WR, now + entry_ttl, wid)
    pexpire_max(WR, entry_ttl)
    touch_marker()
  end
  local pttl = 0
  if w then pttl = redis.call('PTTL', WRITER) end
  return {REFUSED, pttl, now, 0}

elseif op == 'wacquire' then
  -- use: fence_step
  -- As racquire, and:
  --   keep: the fence keep.
  --   score: the queue score, chosen once by the waiter. It is the same on
  --     every node, so every node orders the waiting writers alike. 0: not
  --     known yet; this node's now stands in until the waiter's next
  --     attempt carries one.
  local tok, ttl, enqueue, entry_ttl, wid, keep, score =
    ARGV[2], tonumber(ARGV[3]), ARGV[4] == '1', tonumber(ARGV[5]), ARGV[6], ARGV[7], tonumber(ARGV[8] or '0')
  if w == HELD .. tok then -- a repeated request (resent after a reconnect)
    pexpire_max(WRITER, ttl)
    return {GRANTED, fence_read(), now, 0}
  end
  local first = head(WW, WWX)
  local free = (not w) and redis.call('ZCARD', READERS) == 0 and redis.call('ZCARD', ADM) == 0
  if free and (first == nil or first == wid) then
    -- a queued writer keeps its entry until its release (or downgrade): a
    -- grant rolled back after a split vote keeps its place at the head
    redis.call('SET', WRITER, HELD .. tok, 'PX', ttl)
    marker(math.max(ttl, redis.call('PTTL', MARK)))
    local f = 0
    if fv then f = fence_step(FENCE, keep) end
    return {GRANTED, f, now, 0}
  end
  if enqueue then
    if score > 0 then
      redis.call('ZADD', WW, score, wid)
    else
      redis.call('ZADD', WW, 'NX', now, wid)
    end
    redis.call('HSET', WWX, wid, now + entry_ttl)
    pexpire_max(WW, entry_ttl); pexpire_max(WWX, entry_ttl)
    touch_marker()
  end
  local pttl = 0
  if w then pttl = redis.call('PTTL', WRITER) else
    local top = redis.call('ZRANGE', READERS, -1, -1, 'WITHSCORES')
    if #top > 0 then pttl = tonumber(top[2]) - now end
  end
  return {REFUSED, pttl, now, 0}

elseif op == 'rrelease' then
  local tok, ch = ARGV[2], ARGV[3]
  local n = redis.call('ZREM', READERS, tok)
  if n == 1 and redis.call('ZCARD', READERS) == 0 then
    local h = head(WW, WWX)
    if h then redis.call('PUBLISH', ch, 'h:' .. h) end
  end
  touch_marker()
  return n

elseif op == 'wrelease' then
  -- window: the admission window; wid: the waiter id of a release ("" for
  -- a rollback: the waiter keeps its place)
  local tok, window, ch, wid = ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]
  drop_writer(wid)
  if w == HELD .. tok then
    redis.call('DEL', WRITER)
    end_write(window, ch)
    touch_marker()
    return 1
  end
  return 0

elseif op == 'downgrade' then
  -- wid: the writer's waiter id ("" if it never queued): its entry goes
  local tok, ttl, window, ch, wid = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], ARGV[6]
  drop_writer(wid)
  if w ~= HELD .. tok then
    -- a repeated request (resent after a reconnect) finds itself a reader
    if not w and redis.call('ZSCORE', READERS, tok) then return 1 end
    return 0
  end
  redis.call('DEL', WRITER)
  redis.call('ZADD', READERS, now + ttl, tok)
  pexpire_max(READERS, ttl)
  end_write(window, ch)
  touch_marker()
  return 1

elseif op == 'rrenew' then
  -- a missing entry answers MISSING unless retake (see lock.lua)
  local tok, ttl, retake = ARGV[2], tonumber(ARGV[3]), ARGV[4] == '1'
  local s = redis.call('ZSCORE', READERS, tok)
  if s then
    if tonumber(s) < now + ttl then redis.call('ZADD', READERS, now + ttl, tok) end
    pexpire_max(READERS, ttl)
    touch_marker()
    return RENEWED
  end
  if not retake then return MISSING end
  if not w then -- vanished (restarted node): re-take while no writer holds
    redis.call('ZADD', READERS, now + ttl, tok)
    pexpire_max(READERS, ttl)
    touch_marker()
    return RETAKEN
  end
  return NOT_OURS

elseif op == 'wrenew' then
  local tok, ttl, retake = ARGV[2], tonumber(ARGV[3]), ARGV[4] == '1'
  local mine = HELD .. tok
  if w == mine then
    pexpire_max(WRITER, ttl)
    touch_marker()
    return RENEWED
  end
  if not w and not retake then return MISSING end
  if not w and redis.call('ZCARD', READERS) == 0 then
    redis.call('SET', WRITER, mine, 'PX', ttl)
    touch_marker()
    return RETAKEN
  end
  return NOT_OURS

elseif op == 'leave' then
  local wid, ch = ARGV[2], ARGV[3]
  redis.call('ZREM', WR, wid)
  redis.call('ZREM', ADM, wid)
  if redis.call('ZREM', WW, wid) == 1 then
    redis.call('HDEL', WWX, wid)
    -- a waiting writer that leaves may unblock readers
    redis.call('PUBLISH', ch, 'a')
  end
  touch_marker()
  return 1

elseif op == 'fence' then
  -- use: write_fence
  -- write back a fence decided by the coordinator (no owner mode)
  local f, keep = ARGV[2], ARGV[3]
  return write_fence(FENCE, nil, fv, w, nil, f, keep)
end
return redis.error_reply('ERR redlock: unknown op ' .. tostring(op))
