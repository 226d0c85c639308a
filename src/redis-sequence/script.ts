import { createHash } from 'node:crypto';

/**
 * The one Lua script every Redis sequence runs, with an operation name as ARGV[1]. One script, so
 * one SHA to load; every operation reads the server's identity first.
 *
 * The tag's hash holds: `inc` (the incarnation that installed the window: run_id/master_replid),
 * `base` (64-bit decimal string: the window is (base, base + size]), `size` and `off` (small
 * numbers: IDs issued so far are base+1 … base+off), `nbase`/`nsize` (one prefetched window, queued),
 * `hi` (the highest window end this key was given: the regression check), `claim` (ms deadline of
 * the one caller elected to lease the next window, so that a thousand callers do not lease at once).
 *
 * Why the identity is read here, on every call, and not cached by the client: `run_id` changes on
 * every start of redis-server and `master_replid` on every promotion (a replica's, or a demoted then
 * re-promoted primary's), and nothing written to the dataset can stand in for them — a restart from
 * an RDB or AOF file, or a replica that missed the last writes, brings back the key *and* any marker
 * written before the snapshot. A client-side cache would be carried across a reconnection to a new
 * incarnation by a queued or resent command. INFO in a script is allowed on Redis 7 (scripts
 * replicate their effects); it costs about a sixth of a bare call (bench/redis.ts).
 *
 * Arithmetic on 64-bit values never happens in Lua (its numbers are doubles): bases and ends travel
 * as decimal strings and are only compared (length, then text); offsets stay below 2^31.
 *
 * Replies are arrays of strings, the same on node-redis and ioredis:
 *   next n threshold claimMs   → ok, left, elected-identity or '', then (base, off, count)… ;
 *                                 stale, identity (the key was another incarnation's: reset, caller elected)
 *   install expected base size end → current | queued | lost | low hi | stale identity
 *   unqueue expected base      → removed | absent | stale identity
 *   release expected           → released (the election is open again: its holder cannot lease)
 *   status                     → identity and every field
 */
export const SEQUENCE_SCRIPT = `
local key = KEYS[1]
local op = ARGV[1]
local info = redis.call('INFO', 'server', 'replication')
-- Plain finds, not patterns: half the cost. Both ids are 40 characters; replication follows server.
local i = string.find(info, 'run_id:', 1, true)
local j = string.find(info, 'master_replid:', i, true)
local me = string.sub(info, i + 7, i + 46) .. '/' .. string.sub(info, j + 14, j + 53)
local h = redis.call('HMGET', key, 'inc', 'base', 'size', 'off', 'nbase', 'nsize', 'hi', 'claim')
local hi = h[7] or '0'

local function below(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end

local function nowMs()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

if op == 'status' then
  return {me, h[1] or '', h[2] or '', h[3] or '', h[4] or '', h[5] or '', h[6] or '', hi, h[8] or ''}
end

if op == 'install' or op == 'unqueue' or op == 'release' then
  if ARGV[2] ~= me then return {'stale', me} end
end

if op == 'release' then
  if h[1] == me then redis.call('HDEL', key, 'claim') end
  return {'released'}
end

if h[1] ~= me then
  if op == 'unqueue' then return {'stale', me} end
  -- Another incarnation's window (restored, promoted, demoted) or no key: never issue from it
  -- again. Only the high-water mark survives, for the regression check.
  redis.call('DEL', key)
  redis.call('HSET', key, 'inc', me, 'hi', hi)
  if op == 'next' then
    redis.call('HSET', key, 'claim', tostring(nowMs() + tonumber(ARGV[4])))
    return {'stale', me}
  end
  h = {me, false, false, false, false, false, hi, false}
end

local base, size, off = h[2], tonumber(h[3] or '0'), tonumber(h[4] or '0')
local nbase, nsize = h[5], tonumber(h[6] or '0')

if op == 'install' then
  local wbase, wsize, wend = ARGV[3], ARGV[4], ARGV[5]
  -- Whatever the answer, this install ends the caller's election.
  if below(wbase, hi) then
    redis.call('HDEL', key, 'claim')
    return {'low', hi}
  end
  if base and off < size then
    if nbase then
      redis.call('HDEL', key, 'claim')
      return {'lost'}
    end
    redis.call('HSET', key, 'nbase', wbase, 'nsize', wsize, 'hi', wend)
    redis.call('HDEL', key, 'claim')
    return {'queued'}
  end
  redis.call('HSET', key, 'base', wbase, 'size', wsize, 'off', '0', 'hi', wend)
  redis.call('HDEL', key, 'nbase', 'nsize', 'claim')
  return {'current'}
end

if op == 'unqueue' then
  if nbase ~= ARGV[3] then return {'absent'} end
  redis.call('HDEL', key, 'nbase', 'nsize')
  redis.call('HSET', key, 'hi', ARGV[3])
  return {'removed'}
end

-- next
local n = tonumber(ARGV[2])
local out = {'ok', '', ''}
local moved = false
for _ = 1, 2 do
  if base and off < size and n > 0 then
    local take = math.min(n, size - off)
    out[#out + 1] = base
    out[#out + 1] = tostring(off)
    out[#out + 1] = tostring(take)
    off = off + take
    n = n - take
    moved = true
  end
  if nbase and (not base or off >= size) then
    base, size, off = nbase, nsize, 0
    nbase, nsize = false, 0
    redis.call('HSET', key, 'base', base, 'size', tostring(size))
    redis.call('HDEL', key, 'nbase', 'nsize')
    moved = true
  end
end
if moved then redis.call('HSET', key, 'off', tostring(off)) end
local left = (base and (size - off) or 0) + nsize
out[2] = tostring(left)
if not nbase and left <= tonumber(ARGV[3]) then
  local now = nowMs()
  local claimMs = tonumber(ARGV[4])
  -- A deadline further away than one claim can set is a server clock that stepped back: void.
  if not h[8] or tonumber(h[8]) <= now or tonumber(h[8]) > now + claimMs then
    redis.call('HSET', key, 'claim', tostring(now + claimMs))
    out[3] = me
  end
end
return out
`;

export const SEQUENCE_SCRIPT_SHA = createHash('sha1').update(SEQUENCE_SCRIPT).digest('hex');
