import type { ConnectionProblem } from '../dialects/connection-errors.js';
import type { IdleaseErrorCode } from '../errors.js';

/**
 * Codes a failed lease is retried after although ERROR_CATEGORIES calls them fatal: the lease loop
 * has always retried them (no built-in store raises them from a lease). Every other code outside
 * `unavailable` stops the allocator and fails its waiters.
 */
export const SEGMENT_LEASE_RETRIED: readonly IdleaseErrorCode[] = Object.freeze(['BAD_ARGUMENT', 'MIGRATION_FAILED']);

/** What a metrics exporter reads from `allocator.stats()`: a frozen snapshot. */
export interface SegmentStats {
  /** Which allocator made this snapshot: metrics/ picks the allocator's table by it. */
  readonly kind: 'segment';
  readonly tag: string;
  /** Successful leases (database round trips that moved max_id). */
  readonly leases: number;
  /** Failed lease attempts (each is retried with backoff). */
  readonly leaseErrors: number;
  /** Calls that found memory empty and waited for a lease. */
  readonly waits: number;
  /** Calls that gave up waiting with DB_UNAVAILABLE. */
  readonly timeouts: number;
  /** Leases refused because the row went below this allocator's previous lease (failover to a stale replica, restore). */
  readonly regressions: number;
  /**
   * Leases of this allocator that were the first on a new database instance (a promoted standby)
   * and jumped the row by its failover gap before leasing (docs/failover.md).
   */
  readonly failoverJumps: number;
  /** IDs handed out by this allocator. */
  readonly served: number;
  /** Size of the last lease. */
  readonly currentStep: number;
  /** The row's admin step as last read (undefined before the first lease). */
  readonly rowStep: number | undefined;
  /** IDs in memory (current segment + preloaded one). */
  readonly remaining: bigint;
  /** The segment IDs come from now (`cursor`: the next one it gives); undefined before the first lease. */
  readonly current: { readonly start: bigint; readonly end: bigint; readonly cursor: bigint } | undefined;
  /** The segment preloaded behind it; undefined while none is ready. */
  readonly preloaded: IdRange | undefined;
  /** Whether a lease is running now. */
  readonly leaseInFlight: boolean;
  /** Epoch ms of the last successful lease. */
  readonly lastLeaseAt: number | undefined;
  /** Duration of the last successful lease (read + update). */
  readonly lastLeaseMs: number | undefined;
  /** Measured consumption, IDs per second. */
  readonly ratePerSecond: number | undefined;
  /** IDs returned to the row by close(). */
  readonly givenBack: bigint;
  /** The last lease failure, until a lease succeeds again. */
  readonly lastError: unknown;
  readonly closed: boolean;
}

export type SegmentEvent =
  | {
      readonly type: 'lease';
      readonly tag: string;
      readonly start: bigint;
      readonly end: bigint;
      readonly step: number;
      readonly ms: number;
    }
  /** `problem` says what the driver error means for the connection, when it is one of those. */
  | {
      readonly type: 'lease-error';
      readonly tag: string;
      readonly error: unknown;
      readonly problem: ConnectionProblem | undefined;
      readonly attempt: number;
      readonly retryInMs: number;
    }
  | { readonly type: 'wait'; readonly tag: string }
  | { readonly type: 'timeout'; readonly tag: string; readonly error: unknown }
  /** A lease came back at or below `previousEnd`: not served; the row was pushed to `raisedTo`. */
  | {
      readonly type: 'regression';
      readonly tag: string;
      readonly start: bigint;
      readonly end: bigint;
      readonly previousEnd: bigint;
      readonly raisedTo: bigint;
    }
  /** This allocator's lease was the first on a new database instance: the row jumped from `rowWas` past `gap` before (start − 1, end] was leased. */
  | {
      readonly type: 'failover-jump';
      readonly tag: string;
      readonly rowWas: bigint;
      readonly start: bigint;
      readonly end: bigint;
      readonly gap: bigint;
    }
  | { readonly type: 'give-back'; readonly tag: string; readonly from: bigint; readonly to: bigint; readonly ok: boolean };

/** IDs `start` to `end`, both included, in increasing order. */
export interface IdRange {
  readonly start: bigint;
  readonly end: bigint;
}

export interface SegmentAllocator {
  readonly tag: string;
  /** The next ID. Memory-speed except when a lease is late; never a duplicate, strictly increasing per allocator. */
  next(): Promise<bigint>;
  /**
   * The next ID when the current segment still holds one, with no promise (a hot path that
   * answers at once: serve's Leaf route); `undefined` when `next()` would wait for the spare
   * segment, a lease or the end of the tag — then call `next()`. The same sequence as `next()`.
   */
  nextInMemory(): bigint | undefined;
  /**
   * `n` IDs in increasing order (may span segments). 1 ≤ n ≤ maxBatch, else BAD_ARGUMENT. The one
   * exception is the tag's last batch: when fewer than `n` IDs are left below 2^63−1, it resolves
   * with those (fewer than `n`) and every call after it rejects with EXHAUSTED.
   */
  nextBatch(n: number): Promise<bigint[]>;
  /**
   * The same `n` IDs as `nextBatch(n)` would give, as ascending inclusive ranges (one, unless the
   * batch spans segments): for callers that write IDs out (serve's batch answers) and need no
   * bigint per ID.
   */
  nextRanges(n: number): Promise<IdRange[]>;
  /** Stop preloading and give the unused tail back if nobody leased after us. Idempotent. */
  close(): Promise<void>;
  stats(): SegmentStats;
  /**
   * Listen to the allocator's events (as the `onEvent` option does) from now on; returns the
   * function that stops listening. For exporters attached after creation (collectMetrics).
   * Events come only from slow paths: listening costs the hot path nothing.
   */
  onEvent(listener: (event: SegmentEvent) => void): () => void;
}
