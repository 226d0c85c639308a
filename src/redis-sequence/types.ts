import type { ConnectionProblem } from '../dialects/connection-errors.js';

/** What a metrics exporter reads from `sequence.stats()`: a frozen snapshot. */
export interface RedisSequenceStats {
  /** Which allocator made this snapshot: metrics/ picks the allocator's table by it. */
  readonly kind: 'redis';
  readonly tag: string;
  /** The Redis key of the tag. */
  readonly key: string;
  /** IDs handed out by this process. */
  readonly served: number;
  /** Script calls (one per next() or nextBatch(), more while a window is awaited). */
  readonly calls: number;
  /** Windows this process leased from the database and installed in Redis. */
  readonly windows: number;
  /** Times this process found the key written by another Redis incarnation (restart, restore, promotion) and reset it. */
  readonly reseeds: number;
  /** Windows leased but not installed: another caller's was (a race), or Redis changed under the install. Given back, or a gap. */
  readonly lostWindows: number;
  /** IDs returned to the database row (close, lost installs whose give-back succeeded). */
  readonly givenBack: bigint;
  /** Windows refused because the database went below what Redis had already seen. */
  readonly regressions: number;
  /** Failed Redis calls (each retried within waitTimeoutMs) and failed leases. */
  readonly redisErrors: number;
  readonly leaseErrors: number;
  /** Calls that gave up with REDIS_UNAVAILABLE or DB_UNAVAILABLE. */
  readonly timeouts: number;
  /** Size of the last window this process leased (0 before the first). */
  readonly windowSize: number;
  /** IDs left in the key (current window + prefetched one) at the last call. */
  readonly left: number;
  /** IDs per second the key issued (all processes, gaps included), as measured by this process. */
  readonly ratePerSecond: number | undefined;
  readonly lastError: unknown;
  readonly closed: boolean;
}

export type RedisSequenceEvent =
  /** A window leased from the database and installed in Redis, as the current one or the prefetched one. */
  | {
      readonly type: 'window';
      readonly tag: string;
      readonly start: bigint;
      readonly end: bigint;
      readonly as: 'current' | 'queued';
      readonly ms: number;
    }
  /** The key belonged to another incarnation (`found`, '' when the key was missing) and was reset for `identity`. */
  | { readonly type: 'reseed'; readonly tag: string; readonly identity: string }
  /** A leased window was not installed; `givenBack` when the row took it back, otherwise it is a gap. */
  | {
      readonly type: 'lost-window';
      readonly tag: string;
      readonly start: bigint;
      readonly end: bigint;
      readonly reason: 'race' | 'incarnation';
      readonly givenBack: boolean;
    }
  | {
      readonly type: 'regression';
      readonly tag: string;
      readonly start: bigint;
      readonly end: bigint;
      readonly redisHigh: bigint;
      readonly maxId: bigint;
    }
  | { readonly type: 'redis-error'; readonly tag: string; readonly error: unknown }
  | {
      readonly type: 'lease-error';
      readonly tag: string;
      readonly error: unknown;
      readonly problem: ConnectionProblem | undefined;
      readonly attempt: number;
      readonly retryInMs: number;
    }
  | { readonly type: 'timeout'; readonly tag: string; readonly error: unknown }
  | { readonly type: 'give-back'; readonly tag: string; readonly from: bigint; readonly to: bigint; readonly ok: boolean };

export interface RedisSequence {
  readonly tag: string;
  /**
   * The next ID: one Lua call on the tag's key. Strictly increasing across every process using the
   * tag, except while an isolated old primary still accepts writes (docs/redis.md); never a duplicate.
   */
  next(): Promise<bigint>;
  /** `n` increasing IDs, in one call unless a window runs out in the middle. 1 ≤ n ≤ maxBatch, else BAD_ARGUMENT. */
  nextBatch(n: number): Promise<bigint[]>;
  stats(): RedisSequenceStats;
  /** Listen to events from now on; returns the function that stops listening. */
  onEvent(listener: (event: RedisSequenceEvent) => void): () => void;
  /** Stop prefetching, give back the prefetched window this process queued if nobody started it. Bounded by closeTimeoutMs; idempotent. Does not close the Redis client or the database. */
  close(): Promise<void>;
}
