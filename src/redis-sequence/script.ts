import { createHash } from 'node:crypto';

/**
 * The one Lua script every Redis sequence runs, with an operation name as ARGV[1] and the key's
 * owner as ARGV[2]. One script, so one SHA to load; every operation reads the server's identity first.
 *
 * The tag's hash holds: `own` (the owner: the database row whose windows the key issues — install
 * id, schema, table, tag), `inc` (the incarnation that installed the window: run_id/master_replid),
 * `base` (64-bit decimal string: the window is (base, base + size]), `size` and `off` (small
 * numbers: IDs issued so far are base+1 … base+off), `nbase`/`nsize` (one prefetched window, queued),
 * `hi` (the highest window end this key was given: the regression check), `tb`/`to` (base and
 * offset of the last window replaced: with the current window, the highest ID issued), `cnt` (IDs
 * issued since the key was last reset: the rate every process measures), `claim`/`cby` (ms deadline
 * and token of the one process elected to lease the next window, so that a thousand callers do not
 * lease at once).
 *
 * The owner is checked before anything else: a key of another owner — another database, another
 * table, another install sharing this Redis and key prefix — answers `foreign` and is never issued
 * from nor changed. A key without an owner (written by idlease 0.2) is adopted like a key of another
 * incarnation: its windows are dropped unissued (a gap), its high-water mark kept.
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
 * Replies are arrays of strings, the same on node-redis and ioredis; `foreign, owner` to any
 * operation but status when the key belongs to another owner:
 *   next owner n threshold claimMs token → ok, left, elected-identity or '', cnt, then (base, off, count)… ;
 *                                 stale, identity (the key was another incarnation's: reset, caller elected)
 *   install owner expected base size end → current | queued | lost | low hi topBase topOff | stale identity
 *   unqueue owner expected base  → removed | absent | stale identity
 *   release owner expected       → released (the election is open again: its holder cannot lease)
 *   status                       → identity and every field
 */
export const SEQUENCE_SCRIPT = `
local key = KEYS[1]
local op = ARGV[1]
local owner = ARGV[2]
local info = redis.call('INFO', 'server', 'replication')
-- Plain finds, not patterns: half the cost. Both ids are 40 characters; replication follows server.
local i = string.find(info, 'run_id:', 1, true)
local j = string.find(info, 'master_replid:', i, true)
local me = string.sub(info, i + 7, i + 46) .. '/' .. string.sub(info, j + 14, j + 53)
local h = redis.call('HMGET', key, 'inc', 'base', 'size', 'off', 'nbase', 'nsize', 'hi', 'claim', 'own', 'cnt', 'tb', 'to', 'cby')
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
  return {me, h[1] or '', h[2] or '', h[3] or '', h[4] or '', h[5] or '', h[6] or '', hi, h[8] or '', h[9] or '', h[11] or '', h[12] or ''}
end

if h[9] and h[9] ~= owner then return {'foreign', h[9]} end

if op == 'install' or op == 'unqueue' or op == 'release' then
  if ARGV[3] ~= me then return {'stale', me} end
end

if op == 'release' then
  if h[1] == me and h[9] == owner then redis.call('HDEL', key, 'claim', 'cby') end
  return {'released'}
end

local tb, to = h[11], h[12]
if h[1] ~= me or h[9] ~= owner then
  if op == 'unqueue' then return {'stale', me} end
  -- Another incarnation's window (restored, promoted, demoted), a key of idlease 0.2 (no owner), or
  -- no key: never issue from it again. Only the high-water mark and the highest ID issued survive.
  if h[2] and tonumber(h[4] or '0') > 0 then tb, to = h[2], h[4] end
  redis.call('DEL', key)
  redis.call('HSET', key, 'own', owner, 'inc', me, 'hi', hi)
  if tb then redis.call('HSET', key, 'tb', tb, 'to', to) end
  if op == 'next' then
    redis.call('HSET', key, 'claim', tostring(nowMs() + tonumber(ARGV[5])), 'cby', ARGV[6])
    return {'stale', me}
  end
  h = {me, false, false, false, false, false, hi, false, owner, false, tb, to, false}
end

local base, size, off = h[2], tonumber(h[3] or '0'), tonumber(h[4] or '0')
local nbase, nsize = h[5], tonumber(h[6] or '0')

if op == 'install' then
  local wbase, wsize, wend = ARGV[4], ARGV[5], ARGV[6]
  -- Whatever the answer, this install ends the caller's election.
  if below(wbase, hi) then
    redis.call('HDEL', key, 'claim', 'cby')
    if base and off > 0 then return {'low', hi, base, tostring(off)} end
    return {'low', hi, tb or '0', to or '0'}
  end
  if base and off < size then
    if nbase then
      redis.call('HDEL', key, 'claim', 'cby')
      return {'lost'}
    end
    redis.call('HSET', key, 'nbase', wbase, 'nsize', wsize, 'hi', wend)
    redis.call('HDEL', key, 'claim', 'cby')
    return {'queued'}
  end
  if base and off > 0 then redis.call('HSET', key, 'tb', base, 'to', tostring(off)) end
  redis.call('HSET', key, 'base', wbase, 'size', wsize, 'off', '0', 'hi', wend)
  redis.call('HDEL', key, 'nbase', 'nsize', 'claim', 'cby')
  return {'current'}
end

if op == 'unqueue' then
  if nbase ~= ARGV[4] then return {'absent'} end
  redis.call('HDEL', key, 'nbase', 'nsize')
  redis.call('HSET', key, 'hi', ARGV[4])
  return {'removed'}
end

-- next
local n = tonumber(ARGV[3])
local cnt = tonumber(h[10] or '0')
local out = {'ok', '', '', ''}
local moved = false
for _ = 1, 2 do
  if base and off < size and n > 0 then
    local take = math.min(n, size - off)
    out[#out + 1] = base
    out[#out + 1] = tostring(off)
    out[#out + 1] = tostring(take)
    off = off + take
    n = n - take
    cnt = cnt + take
    moved = true
  end
  if nbase and (not base or off >= size) then
    if base and off > 0 then redis.call('HSET', key, 'tb', base, 'to', tostring(off)) end
    base, size, off = nbase, nsize, 0
    nbase, nsize = false, 0
    redis.call('HSET', key, 'base', base, 'size', tostring(size))
    redis.call('HDEL', key, 'nbase', 'nsize')
    moved = true
  end
end
if moved then redis.call('HSET', key, 'off', tostring(off), 'cnt', tostring(cnt)) end
local left = (base and (size - off) or 0) + nsize
out[2] = tostring(left)
out[4] = tostring(cnt)
if not nbase and left <= tonumber(ARGV[4]) then
  local now = nowMs()
  local claimMs = tonumber(ARGV[5])
  -- A deadline further away than one claim can set is a server clock that stepped back: void.
  if not h[8] or tonumber(h[8]) <= now or tonumber(h[8]) > now + claimMs then
    redis.call('HSET', key, 'claim', tostring(now + claimMs), 'cby', ARGV[6])
    out[3] = me
  elseif h[13] == ARGV[6] then
    -- Still this process's election (a reply that elected it may have been lost to a timeout):
    -- elected again, without moving the deadline, so a stuck leaser still loses it in time.
    out[3] = me
  end
end
return out
`;

export const SEQUENCE_SCRIPT_SHA = createHash('sha1').update(SEQUENCE_SCRIPT).digest('hex');
