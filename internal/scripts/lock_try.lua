-- redlock Lock: the acquire op of lock.lua for an attempt that does not
-- queue, has no owner and no min-hold (a TryAcquire, the first attempt of
-- a blocked Acquire). Same keys (LockKeys), same checks, same writes and
-- same reply as lock.lua's acquire in that case; only the code and the
-- arguments that case never reads are left out, which the server pays for
-- on every call (docs/benchmarks.md, "Issue 28"). TestLockTryMatchesAcquire
-- runs both on the same states and compares.
-- ARGV: token, ttl (ms, as sent), fence keep, fence_init, skew, wid.
--   wid: the waiter id ('' for a TryAcquire); a reservation for it is
--   taken, as lock.lua's acquire does.
-- Every call sends all 8 keys and 6 arguments, and the script reads no
-- others (never #KEYS or #ARGV): the node guard's armed copy appends its
-- arm key and identity and checks them without copying KEYS and ARGV
-- (nodeactor.NewFixedScript).
-- use: grant_codes wrong check_types clock pexpire_max fence_ttl fence_step fence_floor
local LOCK, FENCE, WATCH = KEYS[1], KEYS[2], KEYS[7]
local tok, px, keep, fence_init, skew, wid = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
-- type checks before any write, as in lock.lua
local v = redis.pcall('GET', LOCK)
if type(v) == 'table' and v.err then
  if string.sub(v.err, 1, 9) == 'WRONGTYPE' then return wrong(LOCK, 'lock key') end
  return redis.error_reply(v.err)
end
if v and string.sub(v, 1, 4) ~= 'rl1:' then return wrong(LOCK, 'lock key') end
local fv = redis.pcall('GET', FENCE)
if type(fv) == 'table' and fv.err then
  if string.sub(fv.err, 1, 9) == 'WRONGTYPE' then return wrong(FENCE, 'lock key') end
  return redis.error_reply(fv.err)
end
if fv and not string.match(fv, '^%d+$') then return wrong(FENCE, 'lock key') end
local extra = redis.call('EXISTS', KEYS[3], KEYS[4], KEYS[5], KEYS[6], WATCH, KEYS[8])
if extra > 0 then
  local terr = check_types({KEYS[3], KEYS[4], KEYS[5], KEYS[6], WATCH, KEYS[8]},
    {'zset', 'hash', 'zset', 'string', 'string', 'zset'}, 'lock key')
  if terr then return terr end
end
clock()
local function fence_next()
  if fv then return fence_step(FENCE, keep) end
  local init, s = tonumber(fence_init) or 0, fence_init
  local floor = fence_floor(skew)
  if init < floor then init, s = floor, string.format('%.0f', floor) end
  redis.call('SET', FENCE, s, 'PX', fence_ttl(init, keep))
  return init
end
local mine = 'rl1:L:' .. tok
if v == mine then
  -- the same attempt again: never shorten the key
  pexpire_max(LOCK, px)
  return {GRANTED, fence_next(), now, 0}
end
if v == false or (wid ~= '' and v == 'rl1:R:' .. wid) then
  redis.call('SET', LOCK, mine, 'PX', px)
  -- observers listen while the watch flag lives (lock.lua's told)
  if extra > 0 and redis.call('EXISTS', WATCH) == 1 then
    redis.call('PUBLISH', string.sub(LOCK, 1, -5) .. 'ch', 'o')
  end
  return {GRANTED, fence_next(), now, 0}
end
return {REFUSED, redis.call('PTTL', LOCK), now, tonumber(string.sub(v, 7, 14), 16) or 0}
