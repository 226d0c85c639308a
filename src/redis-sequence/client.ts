/**
 * The one thing a Redis sequence needs from a Redis client: send a command, get the reply.
 * Which client it is, is told by shape once, at creation, so idlease imports neither `redis` nor
 * `ioredis` (both optional peers) and the sequence code never asks again. One small adapter per
 * shape:
 *   - node-redis `createClient()`: `sendCommand(args)`;
 *   - node-redis 6 `createSentinel()`: `sendCommand(isReadonly, args)` (false: the master);
 *   - ioredis `new Redis()`, with or without `{ sentinels, name }`: `call(command, ...args)`.
 * Cluster clients (ioredis `Cluster`, node-redis `createCluster()`) are refused here with a typed
 * error: the sequence's key is not hash-tagged and its incarnation check reads the node it runs
 * on, so a cluster client is not a shape this adapter layer serves (docs/redis.md).
 */
import { IdleaseError } from '../errors.js';
import { SEQUENCE_SCRIPT, SEQUENCE_SCRIPT_SHA } from './script.js';

export interface RedisCommander {
  readonly kind: 'node-redis' | 'node-redis-sentinel' | 'ioredis';
  send(args: readonly string[]): Promise<unknown>;
}

interface NodeRedisLike {
  sendCommand(args: readonly string[]): Promise<unknown>;
}

interface NodeRedisSentinelLike {
  sendCommand(isReadonly: boolean, args: readonly string[]): Promise<unknown>;
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
  'a node-redis client (createClient() or createSentinel() from `redis`, connected) or an ioredis client (new Redis(), with or without { sentinels, name })';

function clusterRefused(library: string): IdleaseError {
  return new IdleaseError(
    'BAD_CONFIG',
    `redis is a ${library} cluster client: Redis Cluster is not supported by the Redis sequence (its key is not hash-tagged, and its ` +
      'incarnation check reads the node the script runs on). Give a client of a single primary, or a Sentinel client: ioredis new Redis({ sentinels, name }) or node-redis createSentinel() (docs/redis.md).',
  );
}

/** The adapter for `client`'s shape; BAD_CONFIG for a cluster client or anything else. */
export function redisCommander(client: unknown): RedisCommander {
  if (client !== null && typeof client === 'object') {
    const c = client as Shape;
    if (typeof c.call === 'function' && typeof c.status === 'string') {
      if (c.isCluster === true) throw clusterRefused('ioredis');
      const io = client as IoRedisLike;
      return { kind: 'ioredis', send: (args) => io.call(args[0]!, ...args.slice(1)) };
    }
    if (typeof c.sendCommand === 'function' && typeof c.isOpen === 'boolean') {
      if (typeof c.getSlotRandomNode === 'function') throw clusterRefused('node-redis');
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
    reply = await redis.send(['EVALSHA', SEQUENCE_SCRIPT_SHA, '1', key, ...args]);
  } catch (err) {
    if (isWrongType(err)) throw wrongType(key, err);
    if (!/NOSCRIPT/.test(String((err as Error)?.message ?? err))) throw err;
    try {
      reply = await redis.send(['EVAL', SEQUENCE_SCRIPT, '1', key, ...args]);
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
