-- redlock RWLock script, layout version 1 ("rl1"). Phase-fair: a waiting
-- writer blocks new readers; when a write ends, the readers that waited
-- during it are admitted ahead of waiting writers; writers go in FIFO order.
-- KEYS: 1 writer (string "rl1:W:<token>"), 2 readers (zset token -> expiry ms),
--       3 waiting writers (zset wid -> first enqueue ms), 4 waiting-writer expiry (hash),
--       5 waiting readers (zset wid -> expiry ms), 6 admitted readers (zset wid -> expiry ms),
--       7 fence counter, 8 marker (string "rl1:rw")
-- Tokens and waiter ids carry the holder's metadata (primitives/meta.go):
-- they are compared whole, never parsed.
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

local want = {'string', 'zset', 'zset', 'hash', 'zset', 'zset', 'string', 'string'}
for i = 1, 8 do
  local kt = redis.call('TYPE', KEYS[i])['ok']
  if kt ~= 'none' and kt ~= want[i] then
    return redis.error_reply('WRONGTYPE redlock: ' .. KEYS[i] .. ' is not a redlock rwlock key')
  end
end
local w = redis.call('GET', KEYS[1])
if w and string.sub(w, 1, 6) ~= 'rl1:W:' then
  return redis.error_reply('WRONGTYPE redlock: ' .. KEYS[1] .. ' is not a redlock rwlock key')
end
local mk = redis.call('GET', KEYS[8])
if mk and mk ~= 'rl1:rw' then
  return redis.error_reply('WRONGTYPE redlock: ' .. KEYS[8] .. ' is not a redlock rwlock marker')
end
local fv = redis.call('GET', KEYS[7])
if fv and not string.match(fv, '^%d+$') then
  return redis.error_reply('WRONGTYPE redlock: ' .. KEYS[7] .. ' is not a fence counter')
end

-- drop expired entries
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now)
local function ww_head()
  local ids = redis.call('ZRANGE', KEYS[3], 0, 31)
  for _, id in ipairs(ids) do
    if tonumber(redis.call('HGET', KEYS[4], id) or '0') > now then return id end
    redis.call('ZREM', KEYS[3], id)
    redis.call('HDEL', KEYS[4], id)
  end
  return nil
end
local function pexpire_max(k, ttl)
  if redis.call('PTTL', k) < ttl then redis.call('PEXPIRE', k, ttl) end
end
local function marker(ttl)
  redis.call('SET', KEYS[8], 'rl1:rw')
  redis.call('PEXPIRE', KEYS[8], ttl)
end
-- keep the marker alive as long as any of our keys
local function touch_marker()
  local m = 0
  for i = 1, 6 do m = math.max(m, redis.call('PTTL', KEYS[i])) end
  if m > 0 then marker(m) else redis.call('DEL', KEYS[8]) end
end
local function fence_read()
  if fv then return tonumber(fv) end
  return 0
end
-- a write ended: admit every reader that waited during it, then wake
local function end_write(window, ch)
  local rs = redis.call('ZRANGE', KEYS[5], 0, -1)
  if #rs > 0 then
    for _, id in ipairs(rs) do redis.call('ZADD', KEYS[6], now + window, id) end
    redis.call('DEL', KEYS[5])
    pexpire_max(KEYS[6], window)
    redis.call('PUBLISH', ch, 'a')
    return
  end
  local h = ww_head()
  if h then redis.call('PUBLISH', ch, 'h:' .. h) else redis.call('PUBLISH', ch, 'n:1') end
end

if op == 'racquire' then
  -- ARGV: 2 token, 3 ttl ms, 4 enqueue, 5 entry ttl ms, 6 waiter id
  local tok, ttl, wid = ARGV[2], tonumber(ARGV[3]), ARGV[6]
  local admitted = redis.call('ZSCORE', KEYS[6], wid)
  local ok = false
  if not w then
    if admitted then ok = true
    elseif not ww_head() then ok = true end
  end
  if ok then
    -- (a repeat of this very attempt after an Extend keeps the later expiry)
    local cur = redis.call('ZSCORE', KEYS[2], tok)
    if not cur or tonumber(cur) < now + ttl then redis.call('ZADD', KEYS[2], now + ttl, tok) end
    pexpire_max(KEYS[2], ttl)
    redis.call('ZREM', KEYS[5], wid)
    redis.call('ZREM', KEYS[6], wid)
    marker(math.max(ttl, redis.call('PTTL', KEYS[8])))
    return {1, fence_read(), now, 1}
  end
  if ARGV[4] == '1' then
    local e = tonumber(ARGV[5])
    redis.call('ZADD', KEYS[5], now + e, wid)
    pexpire_max(KEYS[5], e)
    touch_marker()
  end
  local pttl = 0
  if w then pttl = redis.call('PTTL', KEYS[1]) end
  return {0, pttl, now, 0}

elseif op == 'wacquire' then
  -- ARGV: 2 token, 3 ttl ms, 4 enqueue, 5 entry ttl ms, 6 waiter id, 7 fence
  -- keep ms, 8 queue score (chosen once by the waiter, the same on every
  -- node, so every node orders the waiting writers alike; "0": not known
  -- yet, this node's now until the waiter's next attempt carries one)
  local tok, ttl, wid = ARGV[2], tonumber(ARGV[3]), ARGV[6]
  local score = tonumber(ARGV[8] or '0')
  if w == 'rl1:W:' .. tok then -- a repeated request (resent after a reconnect)
    pexpire_max(KEYS[1], ttl)
    return {1, fence_read(), now, 0}
  end
  local head = ww_head()
  local free = (not w) and redis.call('ZCARD', KEYS[2]) == 0 and redis.call('ZCARD', KEYS[6]) == 0
  if free and (head == nil or head == wid) then
    -- a queued writer keeps its entry until its release (or downgrade): a
    -- grant rolled back after a split vote keeps its place at the head
    redis.call('SET', KEYS[1], 'rl1:W:' .. tok, 'PX', ttl)
    marker(math.max(ttl, redis.call('PTTL', KEYS[8])))
    local f = 0
    if fv then
      f = redis.call('INCR', KEYS[7])
      redis.call('PEXPIRE', KEYS[7], fence_ttl(f, ARGV[7]))
    end
    return {1, f, now, 0}
  end
  if ARGV[4] == '1' then
    local e = tonumber(ARGV[5])
    if score > 0 then
      redis.call('ZADD', KEYS[3], score, wid)
    else
      redis.call('ZADD', KEYS[3], 'NX', now, wid)
    end
    redis.call('HSET', KEYS[4], wid, now + e)
    pexpire_max(KEYS[3], e); pexpire_max(KEYS[4], e)
    touch_marker()
  end
  local pttl = 0
  if w then pttl = redis.call('PTTL', KEYS[1]) else
    local top = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
    if #top > 0 then pttl = tonumber(top[2]) - now end
  end
  return {0, pttl, now, 0}

elseif op == 'rrelease' then
  -- ARGV: 2 token, 3 channel
  local n = redis.call('ZREM', KEYS[2], ARGV[2])
  if n == 1 and redis.call('ZCARD', KEYS[2]) == 0 then
    local h = ww_head()
    if h then redis.call('PUBLISH', ARGV[3], 'h:' .. h) end
  end
  touch_marker()
  return n

elseif op == 'wrelease' then
  -- ARGV: 2 token, 3 admission window ms, 4 channel, 5 waiter id of a
  -- release ("" for a rollback: the waiter keeps its place)
  if ARGV[5] and ARGV[5] ~= '' then
    redis.call('ZREM', KEYS[3], ARGV[5])
    redis.call('HDEL', KEYS[4], ARGV[5])
  end
  if w == 'rl1:W:' .. ARGV[2] then
    redis.call('DEL', KEYS[1])
    end_write(tonumber(ARGV[3]), ARGV[4])
    touch_marker()
    return 1
  end
  return 0

elseif op == 'downgrade' then
  -- ARGV: 2 token, 3 ttl ms, 4 admission window ms, 5 channel, 6 the
  -- writer's waiter id ("" if it never queued): its entry goes
  if ARGV[6] and ARGV[6] ~= '' then
    redis.call('ZREM', KEYS[3], ARGV[6])
    redis.call('HDEL', KEYS[4], ARGV[6])
  end
  if w ~= 'rl1:W:' .. ARGV[2] then
    -- a repeated request (resent after a reconnect) finds itself a reader
    if not w and redis.call('ZSCORE', KEYS[2], ARGV[2]) then return 1 end
    return 0
  end
  local ttl = tonumber(ARGV[3])
  redis.call('DEL', KEYS[1])
  redis.call('ZADD', KEYS[2], now + ttl, ARGV[2])
  pexpire_max(KEYS[2], ttl)
  end_write(tonumber(ARGV[4]), ARGV[5])
  touch_marker()
  return 1

elseif op == 'rrenew' then
  -- ARGV: 2 token, 3 ttl ms, 4 retake "1"/"0" (a missing entry answers 3
  -- unless retake=1: see lock.lua)
  local tok, ttl = ARGV[2], tonumber(ARGV[3])
  local s = redis.call('ZSCORE', KEYS[2], tok)
  if s then
    if tonumber(s) < now + ttl then redis.call('ZADD', KEYS[2], now + ttl, tok) end
    pexpire_max(KEYS[2], ttl)
    touch_marker()
    return 1
  end
  if ARGV[4] ~= '1' then return 3 end
  if not w then -- vanished (restarted node): re-take while no writer holds
    redis.call('ZADD', KEYS[2], now + ttl, tok)
    pexpire_max(KEYS[2], ttl)
    touch_marker()
    return 2
  end
  return 0

elseif op == 'wrenew' then
  -- ARGV: 2 token, 3 ttl ms, 4 retake "1"/"0"
  local mine, ttl = 'rl1:W:' .. ARGV[2], tonumber(ARGV[3])
  if w == mine then
    pexpire_max(KEYS[1], ttl)
    touch_marker()
    return 1
  end
  if not w and ARGV[4] ~= '1' then return 3 end
  if not w and redis.call('ZCARD', KEYS[2]) == 0 then
    redis.call('SET', KEYS[1], mine, 'PX', ttl)
    touch_marker()
    return 2
  end
  return 0

elseif op == 'leave' then
  -- ARGV: 2 waiter id, 3 channel
  redis.call('ZREM', KEYS[5], ARGV[2])
  redis.call('ZREM', KEYS[6], ARGV[2])
  if redis.call('ZREM', KEYS[3], ARGV[2]) == 1 then
    redis.call('HDEL', KEYS[4], ARGV[2])
    -- a waiting writer that leaves may unblock readers
    redis.call('PUBLISH', ARGV[3], 'a')
  end
  touch_marker()
  return 1

elseif op == 'fence' then
  -- ARGV: 2 fence, 3 keep ms
  if not fv or tonumber(fv) < tonumber(ARGV[2]) then
    redis.call('SET', KEYS[7], ARGV[2], 'PX', fence_ttl(tonumber(ARGV[2]), ARGV[3]))
  end
  return 1

elseif op == 'status' then
  -- {writer, readers, waiting writers, waiting readers, fence, then the
  -- first ARGV[2] of: reader tokens, live waiting writers with their
  -- scores, waiting (and admitted, not yet acquired) reader ids}
  local n = tonumber(ARGV[2] or '0') or 0
  local rd, ww, wr = {}, {}, {}
  if n > 0 then
    rd = redis.call('ZRANGE', KEYS[2], 0, n - 1)
    local ids = redis.call('ZRANGE', KEYS[3], 0, n - 1, 'WITHSCORES')
    for i = 1, #ids, 2 do
      if tonumber(redis.call('HGET', KEYS[4], ids[i]) or '0') > now then
        ww[#ww + 1] = ids[i]; ww[#ww + 1] = ids[i + 1]
      end
    end
    for _, k in ipairs({KEYS[5], KEYS[6]}) do
      for _, id in ipairs(redis.call('ZRANGE', k, 0, n - 1)) do wr[#wr + 1] = id end
    end
  end
  return {w or '', redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', KEYS[3]), redis.call('ZCARD', KEYS[5]), fv or '', rd, ww, wr}
end
return redis.error_reply('ERR redlock: unknown op ' .. tostring(op))
