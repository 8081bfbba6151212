-- redlock Lock/MultiLock-compatible lock script, layout version 1 ("rl1").
-- One script, one round trip per operation per node; ARGV[1] selects it.
-- KEYS:
--   1 lock
--   2 fence counter
--   3 waiter order (zset)
--   4 waiter expiry (hash). Field '=' .. id is a Lock waiter's direct grant
--     record (see direct_state); field '^' is the grant's min-hold record
--     (see min_hold).
--   5 holds (zset, owner mode)
--   6 epoch fence (owner mode)
--   7 watch flag: a waiter that does not queue (a MultiLock), or an
--     observer (Lock.Observe), is listening. While it lives, a grant
--     publishes 'o' on the channel, so observers re-read.
--   8 tombstones (zset waiter id -> until ms) of waiters that left.
--     An attempt that reaches this node after its waiter left must not
--     enqueue it again. The node actor runs one resource's requests in
--     order, but a request written on a connection that then broke can
--     still run after a later one.
-- Values of KEYS[1]:
--   "rl1:L:<token>": held.
--   "rl1:O:<owner>": held by an owner (reentrant).
--   "rl1:R:<token>": reserved for that waiter by a handoff.
--   "rl1:T:L:<token>" or "rl1:T:O:<owner>": released within its min-hold.
--     Nobody holds it until it expires.
-- use: grant_codes wrong head
local LOCK, FENCE, QUEUE, QEXP, HOLDS, EPOCH, WATCH, GONE =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local op = ARGV[1]
-- A plain renewal (no owner) reads and writes only the lock key, as the
-- native SET … IFEQ renewal does (docs/lock.md).
local lock_only = op == 'renew' and ARGV[4] == ''
local HELD, OWNED, RESERVED = 'rl1:L:', 'rl1:O:', 'rl1:R:'
local TAIL = 'rl1:T:'
-- A direct grant holds the lock under its attempt's token with DIRECT
-- appended. No attempt sends that token, so no rollback of the attempt
-- can match it, however late (docs/lock.md, "Why it is safe").
local DIRECT = '~d'
-- mark: "" here. A release's marking copy (nodeactor.MarkLine) replaces
-- this line with the node guard's check, and a direct grant it makes is
-- then told as `G:<identity>:...` (docs/lock.md, "A marked grant needs no
-- confirmation round"). Nothing here reads #KEYS or #ARGV.
local function mark() return '' end
-- acquire answers {GRANTED, fence, now, reentrant} or {REFUSED, pttl, now, holder}

-- Type checks before any write. The two string keys are read with pcall:
-- a GET of another type is an error, not a raise. The six others usually
-- do not exist (no waiter, no owner mode), so one EXISTS spares their
-- TYPEs. One MGET instead of the two GETs costs more: its reply is a
-- table, and a nil in it does not tell a missing key from another type.
local function checked(k)
  -- Another type is a WRONGTYPE error (ours, with the key). Any other
  -- error (an ACL refusal) is returned as it is.
  local r = redis.pcall('GET', k)
  if type(r) == 'table' and r.err then
    if string.sub(r.err, 1, 9) == 'WRONGTYPE' then return nil, wrong(k, 'lock key') end
    return nil, redis.error_reply(r.err)
  end
  return r
end
local v, verr = checked(LOCK)
if verr then return verr end
if v and string.sub(v, 1, 4) ~= 'rl1:' then return wrong(LOCK, 'lock key') end
local fv, extra
if not lock_only then
  local ferr
  fv, ferr = checked(FENCE)
  if ferr then return ferr end
  if fv and not string.match(fv, '^%d+$') then return wrong(FENCE, 'lock key') end
  extra = redis.call('EXISTS', QUEUE, QEXP, HOLDS, EPOCH, WATCH, GONE)
  if extra > 0 then
    -- use: check_types
    local terr = check_types({QUEUE, QEXP, HOLDS, EPOCH, WATCH, GONE},
      {'zset', 'hash', 'zset', 'string', 'string', 'zset'}, 'lock key')
    if terr then return terr end
  end
end
-- TIME (now) where an op reads it: a plain release or renewal does not
if op ~= 'release' and op ~= 'rollback' and op ~= 'renew' then clock() end

local function dequeue(id)
  if redis.call('ZREM', QUEUE, id) == 1 then
    redis.call('HDEL', QEXP, id, '=' .. id)
    return true
  end
  return false
end

-- a waiter that left is buried in GONE for TOMBSTONE_MS (see the header)
local TOMBSTONE_MS = 3000
local function bury(id)
  redis.call('ZREMRANGEBYSCORE', GONE, '-inf', now)
  redis.call('ZADD', GONE, now + TOMBSTONE_MS, id)
  redis.call('PEXPIRE', GONE, TOMBSTONE_MS)
end

-- A Lock waiter that takes direct grants keeps the state of its latest
-- attempt here, next to its queue entry (field '=' .. id):
--   "W <seq> <ttl> <keep> <skew> <proc> <token>" while it waits: free may
--     grant the lock to that token, and proc names its process's channel.
--   "G ..." once free granted it: its later attempt takes the grant over
--     (see acquire).
-- direct_state parses it: state, seq, ttl, keep, skew, proc, token, and
-- the record as read.
local function direct_state(id)
  local d = redis.call('HGET', QEXP, '=' .. id)
  if not d then return nil end
  local st, seq, ttl, keep, skew, proc, tok = string.match(d, '^(%a) (%d+) (%d+) (%d+) (%d+) (%x+) (.*)$')
  if not st then return nil end
  return st, tonumber(seq), tonumber(ttl), keep, skew, proc, tok, d
end

-- free ends a hold. It reserves the lock for the longest live waiter and
-- tells only that waiter: the SET overwrites the key, so no `del` event
-- wakes anyone else. With no live waiter it deletes the key. If a waiter
-- that does not queue is listening, it then tells one local waiter to
-- re-check.
-- Every node orders its queue by the same (score, waiter id). The waiter
-- chooses its score once, so all nodes reserve for the same waiter. The
-- entry stays until the waiter's lease is released, it leaves, or it stops
-- heartbeating, so a split attempt does not lose its place.
-- self is the waiter whose own attempt is being rolled back ('' for a
-- release). It keeps waiting, so nothing it is told could help it. If it
-- is the longest live waiter, its grant becomes its reservation while its
-- queue entry lives, without a message. Otherwise the re-check message
-- names it, so that its router wakes another waiter.
-- told tells the observers that the lock changed hands (a grant). They
-- listen only while the watch flag lives, so it costs nothing otherwise.
-- ch defaults to the resource's channel, "<prefix>{<name>}:ch", beside
-- its lock key.
local function told(ch)
  if extra > 0 and redis.call('EXISTS', WATCH) == 1 then
    redis.call('PUBLISH', ch or (string.sub(LOCK, 1, -5) .. 'ch'), 'o')
  end
end

local function free(window, ch, self)
  -- extra == 0: no queue and no watch flag existed when the script began,
  -- and no op creates either before it frees.
  if extra > 0 then
    local id, exp = head(QUEUE, QEXP)
    if id then
      -- Direct grant (docs/lock.md, "Direct grant"). A waiting Lock
      -- waiter gets the lock under its latest attempt's token, with a
      -- stepped fence. The grant lasts that attempt's TTL, never past the
      -- queue entry. `g:<seq>:<fence>:<now>:<id>` on its process's channel
      -- tells it (`G:<identity>:...` when marked). It holds once a quorum
      -- of nodes granted the same attempt (seq), without a round of its
      -- own. This needs its process to
      -- listen here (a dead process has no subscription left). Otherwise
      -- the lock is reserved for it as for any waiter.
      local st, seq, gttl, keep, skew, proc, gtok, rec = direct_state(id)
      if st == 'W' then
        -- use: fence_step fence_floor
        local f
        if fv then
          f = fence_step(FENCE, keep)
        else
          f = fence_floor(skew)
          redis.call('SET', FENCE, string.format('%.0f', f), 'PX', fence_ttl(f, keep))
        end
        fv = fv or string.format('%.0f', f)
        local msg = seq .. ':' .. string.format('%.0f', f) .. ':' .. now .. ':' .. id
        local m = mark()
        if m ~= '' then msg = 'G:' .. m .. ':' .. msg else msg = 'g:' .. msg end
        if redis.call('PUBLISH', ch .. ':' .. proc, msg) > 0 then
          redis.call('SET', LOCK, HELD .. gtok .. DIRECT, 'PX', math.min(gttl, exp - now))
          redis.call('HSET', QEXP, '=' .. id, 'G' .. string.sub(rec, 2))
          told(ch)
          return
        end
      end
      if id == self then
        redis.call('SET', LOCK, RESERVED .. id, 'PX', exp - now)
        return
      end
      redis.call('SET', LOCK, RESERVED .. id, 'PX', window)
      redis.call('PUBLISH', ch, 'h:' .. id)
      return
    end
  end
  redis.call('DEL', LOCK)
  if extra > 0 and redis.call('EXISTS', WATCH) == 1 then
    if self ~= '' then
      redis.call('PUBLISH', ch, 'n:1:' .. self)
    else
      redis.call('PUBLISH', ch, 'n:1')
    end
  end
end

if op == 'acquire' then
  -- use: pexpire_max
  -- Arguments:
  --   token: new for every attempt.
  --   owner: '' or the reentrant owner.
  --   enqueue: "1" for a blocked Acquire.
  --   entry_ttl: its queue entry's ttl.
  --   keep: the fence keep.
  --   wid: the waiter id, stable across one Acquire's attempts. The queue
  --     entry and a handoff reservation are for it.
  --   score: its queue score, chosen once by the waiter from a server
  --     TIME. It is the same on every node.
  --   fence_init: the fence for a missing counter: the caller's hybrid
  --     clock, the same on every node (0: unknown).
  --   skew: a missing counter starts at least at (TIME - skew) << 10.
  --   seq: the attempt's number within its Acquire (1, 2, ...) if the
  --     waiter takes direct grants (plain mode only), else 0.
  --   proc: its process id (direct grants).
  --   min_hold: ms the name stays held from a grant (0: none). Such a
  --     waiter takes no direct grants.
  -- px is the ttl as sent, for SET … PX: a number argument to redis.call
  -- costs a conversion.
  local tok, ttl, owner, enqueue, entry_ttl, keep, wid, score, fence_init, skew, seq, proc =
    ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5] == '1', tonumber(ARGV[6]), ARGV[7], ARGV[8],
    tonumber(ARGV[9] or '0') or 0, ARGV[10], ARGV[11], tonumber(ARGV[12] or '0') or 0, ARGV[13] or ''
  local px = ARGV[3]
  local mh = tonumber(ARGV[14] or '0') or 0
  -- use: min_hold
  local rsv = RESERVED .. wid
  local direct = enqueue and seq > 0 and owner == '' and string.match(proc, '^%x+$') ~= nil
  local dstate, dseq, dtok = nil, 0, nil
  if direct and extra > 0 then
    local _
    dstate, dseq, _, _, _, _, dtok = direct_state(wid)
    dseq = dseq or 0
  end
  -- This node granted the lock directly to an earlier attempt of this
  -- waiter (free), which the waiter did not take: too few nodes, or too
  -- little validity left. A later attempt takes the grant over. An
  -- earlier attempt arriving late never does (seq orders them).
  if dstate == 'G' and seq > dseq and v == HELD .. dtok .. DIRECT then v = rsv end
  local function buried(id)
    local s = redis.call('ZSCORE', GONE, id)
    return s and tonumber(s) > now
  end
  local function fence_next()
    -- use: fence_step
    if fv then return fence_step(FENCE, keep) end
    -- use: fence_floor
    local init, s = tonumber(fence_init or '0') or 0, fence_init
    local floor = fence_floor(skew)
    if init < floor then init, s = floor, string.format('%.0f', floor) end
    redis.call('SET', FENCE, s, 'PX', fence_ttl(init, keep))
    return init
  end
  -- A waiter (enqueue) takes its place in the queue whether this node
  -- grants or refuses. If the attempt fails elsewhere, its rollback here
  -- finds it first in line. It then keeps its place without a message
  -- (see free), instead of deleting the key (a `del` event would wake it).
  -- A refused waiter that takes direct grants records this attempt (if it
  -- is its latest here) for free; a grant drops that record.
  local function queue_up(granted)
    if enqueue and not buried(wid) then
      if score <= 0 then score = now end
      redis.call('ZADD', QUEUE, 'NX', score, wid)
      if direct and not granted and seq > dseq then
        redis.call('HSET', QEXP, wid, now + entry_ttl,
          '=' .. wid, 'W ' .. seq .. ' ' .. ttl .. ' ' .. keep .. ' ' .. skew .. ' ' .. proc .. ' ' .. tok)
      else
        redis.call('HSET', QEXP, wid, now + entry_ttl)
        if granted and dstate and seq >= dseq then redis.call('HDEL', QEXP, '=' .. wid) end
      end
      pexpire_max(QUEUE, entry_ttl); pexpire_max(QEXP, entry_ttl)
    end
  end
  -- A reservation follows the head of the queue: a waiter that is the live
  -- head takes one made for a waiter behind it. A MultiLock waiter keeps a
  -- name reserved while it waits for its other names. A waiter that joined
  -- later with an earlier score goes first, on every node alike.
  if v and v ~= rsv and enqueue and string.sub(v, 1, 6) == RESERVED then
    queue_up(false)
    if head(QUEUE, QEXP) == wid then v = rsv end
  end
  if owner == '' then
    local mine = HELD .. tok
    if v == mine then
      -- The same attempt again (a resend, or a late copy after the lease
      -- was extended or re-taken): never shorten the key.
      pexpire_max(LOCK, ttl)
      return {GRANTED, fence_next(), now, 0}
    end
    if v == false or v == rsv then
      redis.call('SET', LOCK, mine, 'PX', px)
      if mh > 0 then min_hold_grant(LOCK, QEXP, mine, mh) end
      queue_up(true)
      told(nil)
      return {GRANTED, fence_next(), now, 0}
    end
  else
    local mine = OWNED .. owner
    if v == mine then
      -- reentrant: another hold of the owner, if one still lives
      redis.call('ZREMRANGEBYSCORE', HOLDS, '-inf', now)
      if redis.call('ZCARD', HOLDS) > 0 then
        redis.call('ZADD', HOLDS, now + ttl, tok)
        pexpire_max(LOCK, ttl); pexpire_max(HOLDS, ttl); pexpire_max(EPOCH, ttl)
        return {GRANTED, tonumber(redis.call('GET', EPOCH) or '0'), now, 1}
      end
    end
    if v == false or v == rsv then
      -- use: take_owned
      local f = fence_next()
      take_owned(LOCK, HOLDS, EPOCH, mine, tok, ttl, f)
      if mh > 0 then min_hold_grant(LOCK, QEXP, mine, mh) end
      told(nil)
      return {GRANTED, f, now, 0}
    end
  end
  queue_up(false)
  -- holder tags the value refused for: the first 8 hex digits of its token
  -- or waiter id as a number (0 if not hex). One tag on a quorum is one
  -- holder. Different tags are a split vote, which TryAcquire retries.
  return {REFUSED, redis.call('PTTL', LOCK), now, tonumber(string.sub(v, 7, 14), 16) or 0}

elseif op == 'release' or op == 'rollback' then
  -- A rollback undoes one attempt's grant (its token is never reused). It
  -- keeps the waiter's queue entry, so a split attempt keeps its place; wid
  -- names the waiter, which free must not wake. A release ends a lease. It
  -- drops the holder's entry (kept while it held) and frees a reservation
  -- that a late release made for it.
  -- Answers: 1 released; 0 not ours (the key missing, or nothing of ours
  -- left); for a release, 2 where another holder's key is (an overtaken
  -- lease).
  local tok, owner, window, ch, wid = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6] or ''
  if owner ~= '' or extra > 0 then clock() end
  local self = ''
  if op == 'rollback' then self = wid end
  -- A release within the grant's min-hold leaves the key as a tail (no
  -- handoff). A rollback frees as ever.
  local function freed(val)
    if op == 'release' and extra > 0 then
      -- use: min_hold
      if min_hold_tail(LOCK, QEXP, val, TAIL .. string.sub(val, 5)) then return end
    end
    free(window, ch, self)
  end
  if op == 'release' and wid ~= '' and extra > 0 then
    -- A lease of a waiter: its queue entry goes. A tombstone keeps an
    -- attempt of it still in flight from queueing it again (a dead waiter
    -- would be granted the lock). A grant made for it meanwhile is freed.
    local st, _, _, _, _, _, gtok = direct_state(wid)
    if dequeue(wid) then bury(wid) end
    if v == RESERVED .. wid or (st == 'G' and v == HELD .. gtok .. DIRECT and gtok .. DIRECT ~= tok) then
      free(window, ch, ''); return 0
    end
  end
  if owner == '' then
    if v == HELD .. tok then
      freed(v)
      return 1
    end
  elseif v == OWNED .. owner then
    -- use: drop_hold
    local last = drop_hold(LOCK, HOLDS, EPOCH, tok)
    if last then freed(v) end
    -- the holds left never end the min-hold early
    if last == false and extra > 0 then
      local mr = string.match(redis.call('HGET', QEXP, '^') or '', '^(%d+) ' .. OWNED)
      if mr and tonumber(mr) > now then
        -- use: pexpire_max
        pexpire_max(LOCK, tonumber(mr) - now)
      end
    end
    if last ~= nil then return 1 end
  end
  -- our own min-hold tail: a repeated release, released already
  if v == TAIL .. 'L:' .. tok or (owner ~= '' and v == TAIL .. 'O:' .. owner) then return 1 end
  if op == 'release' and v and v ~= OWNED .. owner then return 2 end
  return 0

elseif op == 'leave' then
  -- a waiter gives up
  local wid, window, ch = ARGV[2], ARGV[3], ARGV[4]
  local st, _, _, _, _, _, gtok = direct_state(wid)
  dequeue(wid)
  bury(wid)
  -- a reservation or a direct grant made for it goes to the next waiter
  if v == RESERVED .. wid or (st == 'G' and v == HELD .. gtok .. DIRECT) then free(window, ch, '') end
  return 1

elseif op == 'renew' then
  -- fence: the owner's fence, for a re-take. Only a follow-up call with
  -- retake "1" re-creates a missing key (RETAKEN). It is sent after a
  -- renewal round confirmed the lease on a quorum. A plain renewal that
  -- reaches a node after the lease's release must never bring it back.
  -- use: renew_hold
  -- A plain renewal passes ttl on as sent: a number argument to
  -- redis.call costs a conversion.
  local tok, ttl, owner, fence, retake = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6] == '1'
  if owner ~= '' then clock(); ttl = tonumber(ttl) end
  return renew_hold(v, LOCK, HOLDS, EPOCH, HELD .. tok, owner ~= '' and OWNED .. owner, tok, ttl, fence, retake)

elseif op == 'fence' then
  -- write back a fence decided by the coordinator
  -- use: write_fence
  local f, keep, owner = ARGV[2], ARGV[3], ARGV[4]
  return write_fence(FENCE, EPOCH, fv, v, owner ~= '' and OWNED .. owner, f, keep)

elseif op == 'force' then
  -- An operator's forced release (`redlock release --force`). It deletes
  -- the hold whoever holds it (owner mode: every hold of the owner). It
  -- steps the fence counter (if any), so every later grant's fence is above
  -- the forced holder's. It hands the lock to the longest live waiter, as a
  -- release does. The forced holder's renewals then find the key missing
  -- or another owner's.
  -- Reply: {1 deleted / 0 nothing held, the holder's value, fence counter}.
  -- use: fence_ttl fence_floor
  local window, ch, keep, skew = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
  if not v or (string.sub(v, 1, 6) ~= HELD and string.sub(v, 1, 6) ~= OWNED and string.sub(v, 1, 6) ~= TAIL) then
    return {0, v or '', tonumber(fv or '0')}
  end
  if extra > 0 then redis.call('HDEL', QEXP, '^') end -- it overrides a min-hold
  local f
  if fv then
    f = redis.call('INCR', FENCE)
  else
    -- expired here: a fresh start is above it (see fence_ttl)
    f = fence_floor(skew)
    redis.call('SET', FENCE, string.format('%.0f', f))
  end
  redis.call('PEXPIRE', FENCE, fence_ttl(f, keep))
  fv = string.format('%.0f', f) -- a direct grant by free steps past it
  redis.call('DEL', HOLDS, EPOCH)
  free(window, ch, '')
  return {1, v, f}

elseif op == 'status' or op == 'observe' then
  -- status is read-only (run with EVALSHA_RO), for `redlock status`.
  -- Reply: {value, pttl, fence, waiters, the first max_waiters waiters
  -- with their scores, the latest hold}. A waiter's score is when it
  -- queued (server ms). In owner mode the latest hold's token carries the
  -- holder's metadata. observe (Lock.Observe) gives the same reply,
  -- without waiters. It first keeps the watch flag alive for ARGV[2] ms,
  -- never shortening it, so that grants and releases publish.
  local max_waiters = tonumber(ARGV[2] or '0') or 0
  if op == 'observe' then
    local ms = max_waiters
    max_waiters = 0
    if ms > 0 and redis.call('PTTL', WATCH) < ms then redis.call('SET', WATCH, 'o', 'PX', ms) end
  end
  local q = {}
  if max_waiters > 0 then q = redis.call('ZRANGE', QUEUE, 0, max_waiters - 1, 'WITHSCORES') end
  local h = ''
  if v and string.sub(v, 1, 6) == OWNED then
    local top = redis.call('ZRANGE', HOLDS, -1, -1)
    if #top > 0 then h = top[1] end
  end
  return {v or '', redis.call('PTTL', LOCK), fv or '', redis.call('ZCARD', QUEUE), q, h}
end
return redis.error_reply('ERR redlock: unknown op ' .. tostring(op))
