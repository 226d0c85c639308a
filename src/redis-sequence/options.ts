import { IdleaseError } from '../errors.js';
import { ACCEPTED_POOLS, executorFor } from '../drivers/index.js';
import { engineOf } from '../dialects/engine.js';
import { readInstallId } from '../dialects/install.js';
import {
  DATABASE_KEYS,
  resolveSegmentOptions,
  SEGMENT_OPTION_KEYS,
  type ResolvedSegmentOptions,
  type SegmentAllocatorOptions,
} from '../segment/options.js';
import type { Clock } from '../runtime/clock.js';
import { clockOption, exactlyOne, intOption, rejectUnknownKeys } from '../validate.js';
import { redisCommander, type RedisCommander } from './client.js';
import { redisKeyName } from './keys.js';
import type { RedisSequenceEvent } from './types.js';

/**
 * The database side takes the segment allocator's options (`knex` | `pool` | `store`, `tag`,
 * `table`, `schema`, step bounds, timeouts, `create`), with `targetLeaseMs` defaulting to 10,000 ms:
 * a window should last seconds, not a minute, since a Redis loss costs what is left of it.
 */
export interface RedisSequenceOptions extends Omit<SegmentAllocatorOptions, 'onEvent'> {
  /** A connected node-redis client (`createClient()`, `createSentinel()`, `createCluster()`) or an ioredis client (`Redis`, `Cluster`). Not closed by close(). */
  redis: unknown;
  /** Prefix of the Redis key `<keyPrefix>{<tag>}` (the braces: a Redis Cluster hash tag). Default `idlease:seq:`. */
  keyPrefix?: string;
  /**
   * What the key is bound to. Default: the database's install id (written by `migrate`), the
   * schema, the table and the tag, read at the first call: a key written for another database row
   * is refused (BAD_CONFIG), never issued from. Required with `store` (a string that names the row
   * your store leases from, the same in every process that shares it).
   */
  owner?: string;
  /** Bound of one Redis call; a call past it is abandoned (what it issued is a gap) and retried. Default 1,000 ms. */
  commandTimeoutMs?: number;
  /**
   * How long the caller elected to lease a window keeps the election before another may take it.
   * Default 2,000 ms: past it a second caller leases too, which costs at most a window given back,
   * while a longer claim makes every caller wait that long for a leaser that crashed.
   */
  claimTimeoutMs?: number;
  onEvent?: (event: RedisSequenceEvent) => void;
  /** Monotonic time and sleeps (tests); default the system clock. */
  clock?: Clock;
}

export interface ResolvedRedisSequenceOptions extends Omit<ResolvedSegmentOptions, 'onEvent'> {
  readonly redis: RedisCommander;
  readonly key: string;
  /** Reads what the key is bound to (once per sequence). */
  readonly owner: () => Promise<string>;
  readonly commandTimeoutMs: number;
  readonly claimTimeoutMs: number;
  readonly onEvent: ((event: RedisSequenceEvent) => void) | undefined;
  readonly clock: Clock;
}

const OWN = ['redis', 'keyPrefix', 'owner', 'commandTimeoutMs', 'claimTimeoutMs', 'clock', 'onEvent'] as const;
// The database side: every segment option but the two the sequence reads itself.
const SHARED = SEGMENT_OPTION_KEYS.filter((k) => k !== 'onEvent' && k !== 'clock');

/** The database side is the segment allocator's, checked by its own resolver; only the Redis options are new here. */
export function resolveRedisSequenceOptions(options: RedisSequenceOptions): ResolvedRedisSequenceOptions {
  if (options === null || typeof options !== 'object') {
    throw new IdleaseError('BAD_CONFIG', "createRedisSequence(options): options must be an object, e.g. { redis, knex, tag: 'order' }.");
  }
  rejectUnknownKeys(options, [...OWN, ...SHARED], 'createRedisSequence');
  exactlyOne(
    options,
    DATABASE_KEYS,
    `createRedisSequence needs exactly one of \`knex\` (a Knex instance), \`pool\` (${ACCEPTED_POOLS}) or \`store\` for the tag's segment row`,
  );
  if (options.redis === undefined)
    throw new IdleaseError(
      'BAD_CONFIG',
      'createRedisSequence needs `redis`: a connected node-redis client (createClient, createSentinel, createCluster) or an ioredis client (Redis, Cluster).',
    );
  const redis = redisCommander(options.redis);
  const shared: Record<string, unknown> = { targetLeaseMs: 10_000 };
  for (const k of SHARED) if (options[k] !== undefined) shared[k] = options[k];
  const db = resolveSegmentOptions(shared as unknown as SegmentAllocatorOptions);
  const keyPrefix = options.keyPrefix ?? 'idlease:seq:';
  if (typeof keyPrefix !== 'string' || keyPrefix.length > 256)
    throw new IdleaseError(
      'BAD_CONFIG',
      `keyPrefix must be a string of at most 256 characters, got ${String(keyPrefix)}. Example: keyPrefix: 'idlease:seq:'.`,
    );
  if (options.onEvent !== undefined && typeof options.onEvent !== 'function')
    throw new IdleaseError('BAD_CONFIG', 'onEvent must be a function (event) => void.');
  const clock = clockOption(options.clock);
  return Object.freeze({
    ...db,
    redis,
    key: redisKeyName(keyPrefix, db.tag),
    commandTimeoutMs: intOption(options.commandTimeoutMs, 'commandTimeoutMs', { min: 1, max: 600_000, default: 1_000, unit: 'ms' }),
    claimTimeoutMs: intOption(options.claimTimeoutMs, 'claimTimeoutMs', { min: 1, max: 600_000, default: 2_000, unit: 'ms' }),
    onEvent: options.onEvent,
    clock,
    owner: ownerReader(options, db),
  });
}

/**
 * The key's owner: install id / schema.table / tag. The install id survives a database failover (a
 * promoted replica carries the row) and differs between two databases migrated apart; the table
 * and tag tell rows of one install apart.
 */
function ownerReader(options: RedisSequenceOptions, db: ResolvedSegmentOptions): () => Promise<string> {
  if (options.owner !== undefined) {
    if (typeof options.owner !== 'string' || options.owner.length < 1 || options.owner.length > 512)
      throw new IdleaseError('BAD_CONFIG', `owner must be a string of 1 to 512 characters, got ${String(options.owner)}.`);
    const owner = options.owner;
    return () => Promise.resolve(owner);
  }
  if (options.store !== undefined)
    throw new IdleaseError(
      'BAD_CONFIG',
      "createRedisSequence with `store` needs `owner`: a string naming the database row your store leases from (e.g. 'billing-db/idlease_segments/order'), the same in every process, so that the Redis key is bound to it.",
    );
  const exec = executorFor(options.knex ?? options.pool, options.knex !== undefined ? 'knex' : 'pool');
  return async () => {
    const id = await readInstallId(exec, db.schema, db.statementTimeoutMs);
    return `${id}/${db.schema ?? (await engineOf(exec)).defaultSchema ?? ''}.${db.table}/${db.tag}`;
  };
}
