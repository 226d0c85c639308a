/**
 * The one thing a Redis sequence needs from a Redis client: send a command, get the reply.
 * Which client it is, is told by shape, so idlease imports neither `redis` nor `ioredis` (both
 * optional peers): node-redis answers `sendCommand(args)` and has `isOpen`; ioredis answers
 * `call(command, ...args)` and has a `status` string.
 */
import { IdleaseError } from '../errors.js';
import { SEQUENCE_SCRIPT, SEQUENCE_SCRIPT_SHA } from './script.js';

export interface RedisCommander {
  readonly kind: 'node-redis' | 'ioredis';
  send(args: readonly string[]): Promise<unknown>;
}

interface NodeRedisLike {
  sendCommand(args: readonly string[]): Promise<unknown>;
  isOpen: boolean;
}

interface IoRedisLike {
  call(command: string, ...args: string[]): Promise<unknown>;
  status: string;
}

export const ACCEPTED_REDIS = 'a node-redis client (createClient() from `redis`, connected) or an ioredis client (new Redis())';

export function redisCommander(client: unknown): RedisCommander {
  if (client !== null && typeof client === 'object') {
    const c = client as Partial<IoRedisLike & NodeRedisLike>;
    if (typeof c.call === 'function' && typeof c.status === 'string') {
      const io = client as IoRedisLike;
      return { kind: 'ioredis', send: (args) => io.call(args[0]!, ...args.slice(1)) };
    }
    if (typeof c.sendCommand === 'function' && typeof c.isOpen === 'boolean') {
      const nr = client as NodeRedisLike;
      return { kind: 'node-redis', send: (args) => nr.sendCommand(args) };
    }
  }
  throw new IdleaseError(
    'BAD_CONFIG',
    `redis must be ${ACCEPTED_REDIS}; got ${client === null ? 'null' : typeof client}. A cluster client is not accepted: give the client of the node that holds the tag's key.`,
  );
}

/** EVALSHA, and EVAL (which also caches the script) when this server has not seen it: after a restart, a failover, SCRIPT FLUSH. */
export async function runScript(redis: RedisCommander, key: string, args: readonly string[]): Promise<string[]> {
  let reply: unknown;
  try {
    reply = await redis.send(['EVALSHA', SEQUENCE_SCRIPT_SHA, '1', key, ...args]);
  } catch (err) {
    if (!/NOSCRIPT/.test(String((err as Error)?.message ?? err))) throw err;
    reply = await redis.send(['EVAL', SEQUENCE_SCRIPT, '1', key, ...args]);
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

function notOurs(reply: unknown): IdleaseError {
  return new IdleaseError(
    'INVARIANT',
    `The Redis sequence script answered ${JSON.stringify(reply)}, not an array of strings: is ${SEQUENCE_SCRIPT_SHA} another script on this server?`,
  );
}
