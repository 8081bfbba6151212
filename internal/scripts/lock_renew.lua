-- redlock plain Lock renewals, many in one call (layout version 1, "rl1"):
-- for each lease in turn, exactly lock.lua's renew op without an owner and
-- without re-take (docs/architecture.md, "Batched renewals"). A node
-- actor's lane sends one call for the plain renewals of a batch.
-- KEYS[i]: lease i's lock key (any hash tag: not for Redis Cluster).
-- ARGV[2i-1], ARGV[2i]: its value ("rl1:L:" .. token) and TTL in ms.
-- Answers one element per key: RENEWED, NOT_OURS, MISSING, or the error a
-- single renewal answers (WRONGTYPE for a key of another type, a refusal
-- as the server gave it), for that lease alone. It never creates a key.
-- use: renew_codes wrong
local function lease(i) return KEYS[i], ARGV[2 * i - 1], ARGV[2 * i] end
local out = {}
for i = 1, #KEYS do
  local k, val, ttl = lease(i)
  local v = redis.pcall('GET', k)
  if type(v) == 'table' and v.err then
    if string.sub(v.err, 1, 9) == 'WRONGTYPE' then out[i] = wrong(k, 'lock key') else out[i] = v end
  elseif v and string.sub(v, 1, 4) ~= 'rl1:' then
    out[i] = wrong(k, 'lock key')
  elseif not v then
    out[i] = MISSING
  elseif v ~= val then
    out[i] = NOT_OURS
  else
    -- lock.lua's pexpire_max, an error (a refusal) being this lease's
    local p = redis.pcall('PTTL', k)
    if type(p) == 'number' and p < tonumber(ttl) then p = redis.pcall('PEXPIRE', k, ttl) end
    if type(p) == 'table' and p.err then out[i] = p else out[i] = RENEWED end
  end
end
return out
