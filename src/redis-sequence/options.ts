import { IdleaseError } from '../errors.js';
import { ACCEPTED_POOLS } from '../drivers/index.js';
import {
  resolveSegmentOptions,
  SEGMENT_OPTION_KEYS,
  type ResolvedSegmentOptions,
  type SegmentAllocatorOptions,
} from '../segment/options.js';
import type { Clock } from '../runtime/clock.js';
import { clockOption, intOption, rejectUnknownKeys } from '../validate.js';
import { redisCommander, type RedisCommander } from './client.js';
import type { RedisSequenceEvent } from './types.js';

/**
 * The database side takes the segment allocator's options (`knex` | `pool` | `store`, `tag`,
 * `table`, `schema`, step bounds, timeouts, `create`), with `targetLeaseMs` defaulting to 10,000 ms:
 * a window should last seconds, not a minute, since a Redis loss costs what is left of it.
 */
export interface RedisSequenceOptions extends Omit<SegmentAllocatorOptions, 'onEvent'> {
  /** A connected node-redis client (`createClient()` from `redis`) or an ioredis client. Not closed by close(). */
  redis: unknown;
  /** Prefix of the Redis key. Default `idlease:seq:`. */
  keyPrefix?: string;
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
  readonly commandTimeoutMs: number;
  readonly claimTimeoutMs: number;
  readonly onEvent: ((event: RedisSequenceEvent) => void) | undefined;
  readonly clock: Clock;
}

const OWN = ['redis', 'keyPrefix', 'commandTimeoutMs', 'claimTimeoutMs', 'clock', 'onEvent'] as const;
// The database side: every segment option but the two the sequence reads itself.
const SHARED = SEGMENT_OPTION_KEYS.filter((k) => k !== 'onEvent' && k !== 'clock');

/** The database side is the segment allocator's, checked by its own resolver; only the Redis options are new here. */
export function resolveRedisSequenceOptions(options: RedisSequenceOptions): ResolvedRedisSequenceOptions {
  if (options === null || typeof options !== 'object') {
    throw new IdleaseError('BAD_CONFIG', "createRedisSequence(options): options must be an object, e.g. { redis, knex, tag: 'order' }.");
  }
  rejectUnknownKeys(options, [...OWN, ...SHARED], 'createRedisSequence');
  const given = [options.knex, options.pool, options.store].filter((x) => x !== undefined).length;
  if (given !== 1) {
    throw new IdleaseError(
      'BAD_CONFIG',
      `createRedisSequence needs exactly one of \`knex\` (a Knex instance), \`pool\` (${ACCEPTED_POOLS}) or \`store\` for the tag's segment row; got ${given}.`,
    );
  }
  if (options.redis === undefined)
    throw new IdleaseError('BAD_CONFIG', 'createRedisSequence needs `redis`: a connected node-redis client or an ioredis client.');
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
    key: keyPrefix + db.tag,
    commandTimeoutMs: intOption(options.commandTimeoutMs, 'commandTimeoutMs', { min: 1, max: 600_000, default: 1_000, unit: 'ms' }),
    claimTimeoutMs: intOption(options.claimTimeoutMs, 'claimTimeoutMs', { min: 1, max: 600_000, default: 2_000, unit: 'ms' }),
    onEvent: options.onEvent,
    clock,
  });
}
