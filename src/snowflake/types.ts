import type { IdLayout } from '../layout/index.js';

export type SnowflakeEvent =
  | { readonly type: 'claimed'; readonly workerId: number; readonly previousMaxTimeMs: bigint }
  | { readonly type: 'renewed'; readonly workerId: number; readonly latencyMs: number }
  /** The row no longer carries our token: someone took the id after our lease ran out. */
  | { readonly type: 'lost'; readonly workerId: number }
  | { readonly type: 'lease-error'; readonly error: unknown }
  /**
   * The claim ran on a database instance the worker table's marker does not name (a promoted
   * standby, a restored backup, a first start after upgrading): a live holder's last renewals may
   * have been lost there, so this allocator issues nothing for `waitMs` (leaseTtlMs + maxLeadMs).
   */
  | {
      readonly type: 'failover-wait';
      readonly workerId: number;
      readonly waitMs: number;
      readonly instance: string;
      readonly markedInstance: string | null;
    }
  /** The wait is over; the marker was written to name `instance` (a failed write is a `lease-error`: the next claimer waits too). */
  | { readonly type: 'failover-settled'; readonly workerId: number; readonly instance: string }
  | { readonly type: 'released'; readonly workerId: number };

export interface SnowflakeStats {
  /** Which allocator made this snapshot: metrics/ picks the allocator's table by it. */
  readonly kind: 'snowflake';
  readonly group: string;
  /** Current worker id, undefined while none is held. */
  readonly workerId: number | undefined;
  readonly issued: number;
  readonly claims: number;
  readonly renewals: number;
  readonly leaseErrors: number;
  readonly lost: number;
  /** Calls that waited because the wall clock was more than maxLeadMs behind the last issued time (clock stepped back, or a burst). */
  readonly clockWaits: number;
  /** Claims that waited out a lease because the database instance was not the one the worker table's marker names (after a failover). */
  readonly failoverWaits: number;
  /** How long the current failover wait still lasts, ms (0 when not waiting). */
  readonly failoverWaitLeftMs: number;
  /** Calls that gave up waiting (DB_UNAVAILABLE, NO_WORKER_ID or CLOCK_BACKWARDS). */
  readonly timeouts: number;
  /** Whether next() may issue right now without waiting (lease fenced and valid, no failover wait). */
  readonly fenced: boolean;
  /** How far the last issued time is ahead of the wall clock, ms (0 when not ahead). */
  readonly leadMs: number;
  /** How long the worker-id lease stays valid without another renewal, ms (0 with none held). */
  readonly leaseLeftMs: number;
}

export interface SnowflakeAllocator {
  readonly group: string;
  readonly layout: IdLayout;
  /** The worker id held now; undefined before the first claim and after a loss, until the next claim. */
  readonly workerId: number | undefined;
  next(): Promise<bigint>;
  nextBatch(n: number): Promise<bigint[]>;
  stats(): SnowflakeStats;
  onEvent(listener: (event: SnowflakeEvent) => void): () => void;
  close(): Promise<void>;
}
