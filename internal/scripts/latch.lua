-- redlock CountDownLatch script, layout version 1 ("rl1"). Per node the
-- latch is its initial count plus the SET of count-down ids; the client
-- takes the union over a quorum. One script, one round trip per operation
-- per node; ARGV[1] selects it.
-- KEYS[1] hash "<p>{name}:latch": t = "rl1:latch" (type marker), count =
--         initial count, opened = "1" once open, d = digest of the ids (sum
--         of the first 52 bits of each id's SHA1, mod 2^52: equal sets have
--         equal digests, so equal (size, digest) on every reply means no
--         member round is needed)
-- KEYS[2] set "<p>{name}:latch:ids"
-- Every op but status takes ARGV 1 op, 2 count, 3 ttl ms, 4 sent, 5 late
-- ms, 6.. the op's own arguments. sent is the client's estimate of the
-- servers' TIME (ms) when it made the call, one value for every node. Each
-- expiry this call sets is absolute, sent + ttl, and never later than ttl
-- from this node's TIME: a call that runs late on a node (paused with the
-- call in its socket) cannot make that node keep the latch (its open marker
-- or its ids) longer than the nodes that ran it on time, up to the nodes'
-- clock skew, so a later latch of the same name never inherits them. A call
-- that arrives more than `late` ms after sent changes nothing (-3): it may
-- belong to a latch of this name that has expired since.
-- Every op that answers the latch's state replies
--   {code, size, opened (0, or the open latch's remaining TTL ms), digest, existed, time}
-- code 1 = ok, -2 = another initial count is stored (size = that count),
-- -3 = the call arrived too late (nothing changed); existed = 0 when this
-- call created the latch on this node (its ids are unknown there: a
-- restarted node, never a zero count); time = this node's TIME in ms (the
-- client calibrates sent with it).
local op = ARGV[1]
local count = tonumber(ARGV[2])
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)

local function wrong(k) return redis.error_reply('WRONGTYPE redlock: ' .. k .. ' is not a redlock latch key') end
local ht = redis.call('TYPE', KEYS[1])['ok']
if ht ~= 'none' and ht ~= 'hash' then return wrong(KEYS[1]) end
if ht == 'hash' and redis.call('HGET', KEYS[1], 't') ~= 'rl1:latch' then return wrong(KEYS[1]) end
local st = redis.call('TYPE', KEYS[2])['ok']
if st ~= 'none' and st ~= 'set' then return wrong(KEYS[2]) end

if op == 'status' then
  -- read-only view for `redlock status`: {exists, initial count, ids, opened, pttl}
  if ht == 'none' then return {0, 0, 0, 0, -2} end
  return {1, tonumber(redis.call('HGET', KEYS[1], 'count') or '0'), redis.call('SCARD', KEYS[2]),
    redis.call('HGET', KEYS[1], 'opened') == '1' and 1 or 0, redis.call('PTTL', KEYS[1])}
end

local sent, late = tonumber(ARGV[4]) or 0, tonumber(ARGV[5]) or 0
if sent > 0 and late > 0 and now - sent > late then return {-3, 0, 0, '0', 1, now} end
-- the remaining TTL (ms) of an expiry of ttl ms after the call was sent
local function ttl_left(ms)
  ms = tonumber(ms)
  if sent <= 0 then return ms end
  return math.max(math.min(ms, sent + ms - now), 1)
end
local ttl = ttl_left(ARGV[3])

local existed = 1
local stored = false
if ht == 'hash' then stored = tonumber(redis.call('HGET', KEYS[1], 'count') or '') end
if stored and stored ~= count then return {-2, stored, 0, '0', 1, now} end
local opened = ht == 'hash' and redis.call('HGET', KEYS[1], 'opened') == '1'

local function pexpire_max(k, ms)
  if redis.call('PTTL', k) < ms then redis.call('PEXPIRE', k, ms) end
end

-- create the latch where it is missing; keep an open latch's TTL (set when
-- it opened), refresh an open one's idle TTL
local function touch()
  if not stored then
    redis.call('HSET', KEYS[1], 't', 'rl1:latch', 'count', count)
    if redis.call('HEXISTS', KEYS[1], 'd') == 0 then redis.call('HSET', KEYS[1], 'd', '0') end
    if ht == 'none' then existed = 0 end
    stored = count
  end
  if not opened then
    pexpire_max(KEYS[1], ttl)
    if redis.call('EXISTS', KEYS[2]) == 1 then pexpire_max(KEYS[2], ttl) end
  end
end

local function add(id)
  if redis.call('SADD', KEYS[2], id) == 1 then
    local h = tonumber(string.sub(redis.sha1hex(id), 1, 13), 16)
    local d = tonumber(redis.call('HGET', KEYS[1], 'd') or '0') + h
    d = d % 4503599627370496
    redis.call('HSET', KEYS[1], 'd', string.format('%.0f', d))
    return 1
  end
  return 0
end

-- the third field is 0 while in progress, else the open latch's remaining
-- TTL in ms (so a read-repair can align a late node's expiry with the others)
local function state()
  return {1, redis.call('SCARD', KEYS[2]), opened and math.max(redis.call('PTTL', KEYS[1]), 1) or 0,
    redis.call('HGET', KEYS[1], 'd') or '0', existed, now}
end

if op == 'get' then
  -- ARGV: 2 count, 3 idle ms, 4 sent, 5 late
  touch()
  return state()

elseif op == 'countdown' then
  -- ARGV: 2 count, 3 idle ms, 4 sent, 5 late, 6 id, 7 channel, 8 ttl ms
  -- once open. A count-down on an open latch is a no-op. Each new id tells
  -- one waiter per process to re-check, so a count-down whose own view missed a
  -- concurrent one (or whose caller died before opening) still opens the
  -- latch at once. A node that now holds `count` distinct ids opens itself:
  -- that many count-downs were made (its set is part of the union), and a
  -- quorum of such nodes is a quorum that holds every id, so the separate
  -- open round is needed only when the ids are spread over the nodes.
  touch()
  if not opened and add(ARGV[6]) == 1 then
    pexpire_max(KEYS[2], ttl)
    if ARGV[8] and redis.call('SCARD', KEYS[2]) >= count then
      local open_ttl = ttl_left(ARGV[8])
      redis.call('HSET', KEYS[1], 'opened', '1')
      redis.call('PEXPIRE', KEYS[1], open_ttl)
      redis.call('PEXPIRE', KEYS[2], open_ttl)
      opened = true
      redis.call('PUBLISH', ARGV[7], 'a')
    else
      redis.call('PUBLISH', ARGV[7], 'n:1')
    end
  end
  return state()

elseif op == 'members' then
  -- ARGV: 2 count, 3 idle ms, 4 sent, 5 late. state, then the ids
  touch()
  local out = state()
  for _, id in ipairs(redis.call('SMEMBERS', KEYS[2])) do out[#out + 1] = id end
  return out

elseif op == 'add' then
  -- read-repair: ARGV: 2 count, 3 idle ms, 4 sent, 5 late, 6.. ids
  touch()
  if not opened then
    for i = 6, #ARGV do add(ARGV[i]) end
    if #ARGV >= 6 then pexpire_max(KEYS[2], ttl) end
  end
  return state()

elseif op == 'open' then
  -- ARGV: 2 count, 3 ttl ms after opening (a read-repair passes the other
  -- nodes' remaining TTL, so no node keeps an open marker longer than the
  -- rest and opens a later latch of the same name), 4 sent, 5 late, 6
  -- channel. Written to every node once the union reached the count on a
  -- quorum; wakes every waiter.
  touch()
  if not opened then
    redis.call('HSET', KEYS[1], 'opened', '1')
    redis.call('PEXPIRE', KEYS[1], ttl)
    if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('PEXPIRE', KEYS[2], ttl) end
    opened = true
    redis.call('PUBLISH', ARGV[6], 'a')
  end
  return state()
end
return redis.error_reply('ERR redlock: unknown op ' .. tostring(op))
