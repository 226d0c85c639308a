/**
 * The one thing a Redis sequence needs from a Redis client: send a command on a key, get the reply.
 * Which client it is, is told by shape once, at creation, so idlease imports neither `redis` nor
 * `ioredis` (both optional peers) and the sequence code never asks again. One small adapter per
 * shape:
 *   - node-redis `createClient()`: `sendCommand(args)`;
 *   - node-redis 6 `createSentinel()`: `sendCommand(isReadonly, args)` (false: the master);
 *   - node-redis `createCluster()`: `sendCommand(firstKey, isReadonly, args)`: routed by the key's
 *     slot, MOVED and ASK followed by the client;
 *   - ioredis `new Redis()`, with or without `{ sentinels, name }`, and ioredis `Cluster`:
 *     `call(command, ...args)` (a Cluster reads the key from EVALSHA's numkeys itself and follows
 *     MOVED, ASK, TRYAGAIN and CLUSTERDOWN).
 * On a cluster every call names one key, hash-tagged by the idlease tag (keys.ts), and the
 * script's incarnation check reads the node it runs on: the master of the key's slot. What a
 * client does not absorb (CLUSTERDOWN while a failover is under way, TRYAGAIN, redirections
 * exhausted) reaches the sequence as a failed call, retried within waitTimeoutMs, then
 * REDIS_UNAVAILABLE.
 */
import { IdleaseError } from '../errors.js';
import { SEQUENCE_SCRIPT, SEQUENCE_SCRIPT_SHA } from './script.js';

export type RedisClientKind = 'node-redis' | 'node-redis-sentinel' | 'node-redis-cluster' | 'ioredis' | 'ioredis-cluster';

export interface RedisCommander {
  readonly kind: RedisClientKind;
  /** `key`: the key the command reads or writes (a cluster client routes by it). */
  send(args: readonly string[], key: string): Promise<unknown>;
}

interface NodeRedisLike {
  sendCommand(args: readonly string[]): Promise<unknown>;
}

interface NodeRedisSentinelLike {
  sendCommand(isReadonly: boolean, args: readonly string[]): Promise<unknown>;
}

interface NodeRedisClusterLike {
  sendCommand(firstKey: string, isReadonly: boolean, args: readonly string[]): Promise<unknown>;
}

interface IoRedisLike {
  call(command: string, ...args: string[]): Promise<unknown>;
}

interface Shape {
  call?: unknown;
  status?: unknown;
  isCluster?: unknown;
  sendCommand?: unknown;
  isOpen?: unknown;
  getSentinelNode?: unknown;
  getSlotRandomNode?: unknown;
}

export const ACCEPTED_REDIS =
  'a node-redis client (createClient(), createSentinel() or createCluster() from `redis`, connected) or an ioredis client (new Redis(), with or without { sentinels, name }, or new Cluster())';

/** The adapter for `client`'s shape; BAD_CONFIG for anything else. */
export function redisCommander(client: unknown): RedisCommander {
  if (client !== null && typeof client === 'object') {
    const c = client as Shape;
    if (typeof c.call === 'function' && typeof c.status === 'string') {
      const io = client as IoRedisLike;
      return { kind: c.isCluster === true ? 'ioredis-cluster' : 'ioredis', send: (args) => io.call(args[0]!, ...args.slice(1)) };
    }
    if (typeof c.sendCommand === 'function' && typeof c.isOpen === 'boolean') {
      if (typeof c.getSlotRandomNode === 'function') {
        const cl = client as NodeRedisClusterLike;
        // isReadonly false: the master of the key's slot, never a replica.
        return { kind: 'node-redis-cluster', send: (args, key) => cl.sendCommand(key, false, args) };
      }
      if (typeof c.getSentinelNode === 'function') {
        const s = client as NodeRedisSentinelLike;
        // isReadonly false: the command goes to the master Sentinel names, never to a replica.
        return { kind: 'node-redis-sentinel', send: (args) => s.sendCommand(false, args) };
      }
      const nr = client as NodeRedisLike;
      return { kind: 'node-redis', send: (args) => nr.sendCommand(args) };
    }
  }
  throw new IdleaseError('BAD_CONFIG', `redis must be ${ACCEPTED_REDIS}; got ${client === null ? 'null' : typeof client}.`);
}

/** A key of another type (a string, a list …) under the sequence's name: another program's key. */
export function isWrongType(err: unknown): boolean {
  return /WRONGTYPE/.test(String((err as Error)?.message ?? err));
}

/** EVALSHA, and EVAL (which also caches the script) when this server has not seen it: after a restart, a failover, SCRIPT FLUSH. */
export async function runScript(redis: RedisCommander, key: string, args: readonly string[]): Promise<string[]> {
  let reply: unknown;
  try {
    reply = await redis.send(['EVALSHA', SEQUENCE_SCRIPT_SHA, '1', key, ...args], key);
  } catch (err) {
    if (isWrongType(err)) throw wrongType(key, err);
    if (!/NOSCRIPT/.test(String((err as Error)?.message ?? err))) throw err;
    try {
      reply = await redis.send(['EVAL', SEQUENCE_SCRIPT, '1', key, ...args], key);
    } catch (err2) {
      if (isWrongType(err2)) throw wrongType(key, err2);
      throw err2;
    }
  }
  if (!Array.isArray(reply)) throw notOurs(reply);
  for (let i = 0; i < reply.length; i++) {
    if (typeof reply[i] !== 'string') {
      if (!Buffer.isBuffer(reply[i])) throw notOurs(reply);
      reply[i] = String(reply[i]);
    }
  }
  return reply as string[];
}

function wrongType(key: string, cause: unknown): IdleaseError {
  return new IdleaseError(
    'BAD_CONFIG',
    `Redis key ${key} holds a value that is not a hash: it is another program's key, not a Redis sequence's. Nothing was issued. ` +
      'Give the sequence a keyPrefix of its own (option keyPrefix, CLI --key-prefix), or delete that key if it is yours.',
    { cause },
  );
}

function notOurs(reply: unknown): IdleaseError {
  return new IdleaseError(
    'INVARIANT',
    `The Redis sequence script answered ${JSON.stringify(reply)}, not an array of strings: is ${SEQUENCE_SCRIPT_SHA} another script on this server?`,
  );
}
