-- redlock CountDownLatch script, layout version 1 ("rl1"). Per node the
-- latch is its initial count plus the SET of count-down ids; the client
-- takes the union over a quorum. One script, one round trip per operation
-- per node; ARGV[1] selects it.
-- KEYS:
--   LATCH hash "<p>{name}:latch":
--     t = "rl1:latch" (type marker)
--     count = initial count
--     opened = "1" once open
--     d = digest of the ids: the sum of the first 52 bits of each id's
--       SHA1, mod 2^52. Equal sets have equal digests, so equal (size,
--       digest) on every reply means no member round is needed.
--   IDS set "<p>{name}:latch:ids"
-- Every op but status takes ARGV 1 op, 2 count, 3 ttl ms, 4 sent, 5 late
-- ms, 6.. the op's own arguments. sent is the client's estimate of the
-- servers' TIME (ms) when it made the call, one value for every node.
-- Each expiry this call sets is absolute: sent + ttl, and never later than
-- ttl from this node's TIME. A call may run late on a node (paused with the
-- call in its socket). It still cannot make that node keep the latch (its
-- open marker or its ids) longer than the nodes that ran it on time, up to
-- the nodes' clock skew. So a later latch of the same name never inherits
-- them. A call that arrives more than `late` ms after sent changes nothing
-- (-3): it may belong to a latch of this name that has expired since.
-- Every op that answers the latch's state replies
--   {code, size, opened (0, or the open latch's remaining TTL ms), digest, existed, time}
-- where:
--   code: 1 ok; -2 another initial count is stored (size = that count);
--     -3 the call arrived too late (nothing changed).
--   existed: 0 when this call created the latch on this node. Its ids are
--     unknown there: a restarted node, never a zero count.
--   time: this node's TIME in ms (the client calibrates sent with it).
-- use: now wrong pexpire_max
local LATCH, IDS = KEYS[1], KEYS[2]
local op = ARGV[1]
-- every op but status: count, ttl_ms (the op's TTL), sent, late (see above)
local count, ttl_ms, sent, late = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4]) or 0, tonumber(ARGV[5]) or 0
-- the state's code (Go: scripts.Latch...)
local OK, OTHER_COUNT, TOO_LATE = 1, -2, -3

local ht = redis.call('TYPE', LATCH)['ok']
if ht ~= 'none' and ht ~= 'hash' then return wrong(LATCH, 'latch key') end
if ht == 'hash' and redis.call('HGET', LATCH, 't') ~= 'rl1:latch' then return wrong(LATCH, 'latch key') end
local st = redis.call('TYPE', IDS)['ok']
if st ~= 'none' and st ~= 'set' then return wrong(IDS, 'latch key') end

if op == 'status' then
  -- read-only view for `redlock status`: {exists, initial count, ids, opened, pttl}
  if ht == 'none' then return {0, 0, 0, 0, -2} end
  return {1, tonumber(redis.call('HGET', LATCH, 'count') or '0'), redis.call('SCARD', IDS),
    redis.call('HGET', LATCH, 'opened') == '1' and 1 or 0, redis.call('PTTL', LATCH)}
end

if sent > 0 and late > 0 and now - sent > late then return {TOO_LATE, 0, 0, '0', 1, now} end
-- the remaining TTL (ms) of an expiry of ttl ms after the call was sent
local function ttl_left(ms)
  ms = tonumber(ms)
  if sent <= 0 then return ms end
  return math.max(math.min(ms, sent + ms - now), 1)
end
local ttl = ttl_left(ttl_ms)

local existed = 1
local stored = false
if ht == 'hash' then stored = tonumber(redis.call('HGET', LATCH, 'count') or '') end
if stored and stored ~= count then return {OTHER_COUNT, stored, 0, '0', 1, now} end
local opened = ht == 'hash' and redis.call('HGET', LATCH, 'opened') == '1'


-- create the latch where it is missing; keep an open latch's TTL (set when
-- it opened), refresh an open one's idle TTL
local function touch()
  if not stored then
    redis.call('HSET', LATCH, 't', 'rl1:latch', 'count', count)
    if redis.call('HEXISTS', LATCH, 'd') == 0 then redis.call('HSET', LATCH, 'd', '0') end
    if ht == 'none' then existed = 0 end
    stored = count
  end
  if not opened then
    pexpire_max(LATCH, ttl)
    if redis.call('EXISTS', IDS) == 1 then pexpire_max(IDS, ttl) end
  end
end

local function add(id)
  if redis.call('SADD', IDS, id) == 1 then
    local h = tonumber(string.sub(redis.sha1hex(id), 1, 13), 16)
    local d = tonumber(redis.call('HGET', LATCH, 'd') or '0') + h
    d = d % 4503599627370496
    redis.call('HSET', LATCH, 'd', string.format('%.0f', d))
    return 1
  end
  return 0
end

-- the third field is 0 while in progress, else the open latch's remaining
-- TTL in ms (so a read-repair can align a late node's expiry with the others)
local function state()
  return {OK, redis.call('SCARD', IDS), opened and math.max(redis.call('PTTL', LATCH), 1) or 0,
    redis.call('HGET', LATCH, 'd') or '0', existed, now}
end

if op == 'get' then
  -- ARGV: 2 count, 3 idle ms, 4 sent, 5 late
  touch()
  return state()

elseif op == 'countdown' then
  -- ARGV: 2 count, 3 idle ms, 4 sent, 5 late, 6 id, 7 channel, 8 ttl ms
  -- once open. A count-down on an open latch is a no-op.
  -- Each new id tells one waiter per process to re-check. So a count-down
  -- whose own view missed a concurrent one (or whose caller died before
  -- opening) still opens the latch at once.
  -- A node that now holds `count` distinct ids opens itself: that many
  -- count-downs were made (its set is part of the union). A quorum of such
  -- nodes holds every id. So the separate open round is needed only when
  -- the ids are spread over the nodes.
  local id, ch, open_after = ARGV[6], ARGV[7], ARGV[8]
  touch()
  if not opened and add(id) == 1 then
    pexpire_max(IDS, ttl)
    if open_after and redis.call('SCARD', IDS) >= count then
      local open_ttl = ttl_left(open_after)
      redis.call('HSET', LATCH, 'opened', '1')
      redis.call('PEXPIRE', LATCH, open_ttl)
      redis.call('PEXPIRE', IDS, open_ttl)
      opened = true
      redis.call('PUBLISH', ch, 'a')
    else
      redis.call('PUBLISH', ch, 'n:1')
    end
  end
  return state()

elseif op == 'members' then
  -- ARGV: 2 count, 3 idle ms, 4 sent, 5 late. state, then the ids
  touch()
  local out = state()
  for _, id in ipairs(redis.call('SMEMBERS', IDS)) do out[#out + 1] = id end
  return out

elseif op == 'add' then
  -- read-repair: ARGV: 2 count, 3 idle ms, 4 sent, 5 late, 6.. ids
  touch()
  if not opened then
    for i = 6, #ARGV do add(ARGV[i]) end
    if #ARGV >= 6 then pexpire_max(IDS, ttl) end
  end
  return state()

elseif op == 'open' then
  -- ARGV: 2 count, 3 ttl ms after opening, 4 sent, 5 late, 6 channel.
  -- A read-repair passes the other nodes' remaining TTL as the ttl. So no
  -- node keeps an open marker longer than the rest, which would open a
  -- later latch of the same name. Written to every node once the union
  -- reached the count on a quorum; wakes every waiter.
  local ch = ARGV[6]
  touch()
  if not opened then
    redis.call('HSET', LATCH, 'opened', '1')
    redis.call('PEXPIRE', LATCH, ttl)
    if redis.call('EXISTS', IDS) == 1 then redis.call('PEXPIRE', IDS, ttl) end
    opened = true
    redis.call('PUBLISH', ch, 'a')
  end
  return state()
end
return redis.error_reply('ERR redlock: unknown op ' .. tostring(op))
