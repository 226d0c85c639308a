/** The ticket allocator's public types: options, events, stats, status. */
import type { ConnectionProblem } from '../dialects/connection-errors.js';
import type { KnexLike } from '../drivers/index.js';
import type { Clock } from '../runtime/clock.js';
import type { ServerFacts, TicketSource } from './source.js';

export interface TicketServerOptions {
  /** The server, as a Knex instance (mysql2, pg or PGlite). Exactly one of `knex`, `pool` or `source`. */
  readonly knex?: KnexLike;
  /**
   * The server, as a pool the app already has (mysql2 pool, promise pool or connection; pg.Pool or
   * pg.Client; postgres.js). PostgreSQL draws run on it (nextval holds no session state). MySQL
   * draws never do: the ticket pair is session state that must not reach the app's own inserts,
   * so idlease opens sessions of its own with the pool's settings (up to connectionsPerServer),
   * closed by close(). The pool itself is the app's to end.
   */
  readonly pool?: unknown;
  /** A source of your own (an in-memory one in tests): draws from one server. */
  readonly source?: TicketSource;
  /** This server's residue: it issues IDs ≡ offset (mod increment). 1..increment. */
  readonly offset: number;
  /** Label for status() and errors. Default `server<offset>`. */
  readonly name?: string;
}

export interface TicketAllocatorOptions {
  readonly servers: readonly TicketServerOptions[];
  /** Default: the number of servers. Larger leaves room to add servers without a reshard of offsets. */
  readonly increment?: number;
  /** Which tickets table / sequence. Default 'default'. */
  readonly sequence?: string;
  /** PostgreSQL schema of the sequence and scheme table. Default `idlease`, where migrate installs them. */
  readonly schema?: string;
  /**
   * Bound on one statement on one server before it counts as failed. Default 2000 ms.
   * MySQL sessions get innodb_lock_wait_timeout = max(1 s, half of it), so lock waits end
   * as retryable errors first.
   */
  readonly statementTimeoutMs?: number;
  /** Bound on a whole next(): past it, DB_UNAVAILABLE. Default 5000 ms. */
  readonly timeoutMs?: number;
  /** Deadlock / lock-wait retries on one server before the call moves on. Default 10. */
  readonly lockRetries?: number;
  /** Backoff for a failed server before it is probed again. Default 100 ms doubling to 5000 ms. */
  readonly backoffInitialMs?: number;
  readonly backoffMaxMs?: number;
  /** MySQL: sessions idlease opens per server (its own, never the app's pool). Default 8. */
  readonly connectionsPerServer?: number;
  /** How long close() waits for the servers' connections to close. Default 5000 ms. */
  readonly closeTimeoutMs?: number;
  /** Called when a server goes down, comes back or is refused, and when a call times out (metrics, logs). Must not throw. */
  readonly onEvent?: (event: TicketEvent) => void;
  /** Time for bounds, backoff and timestamps. Default: the system clock; tests drive one by hand. */
  readonly clock?: Clock;
}

export type TicketEvent =
  | {
      readonly type: 'server-down';
      readonly server: string;
      readonly health: 'down' | 'refused';
      readonly error: unknown;
      readonly problem: ConnectionProblem | undefined;
    }
  | { readonly type: 'server-up'; readonly server: string }
  | { readonly type: 'timeout'; readonly error: unknown };

export type TicketServerHealth = 'up' | 'down' | 'refused';

/** A cheap frozen snapshot for metrics: no database round trip (status() asks the servers). */
export interface TicketStats {
  /** Which allocator made this snapshot: metrics/ picks the allocator's table by it. */
  readonly kind: 'ticket';
  /** IDs handed out by this allocator. */
  readonly served: number;
  /** Calls that failed with DB_UNAVAILABLE after timeoutMs. */
  readonly timeouts: number;
  readonly closed: boolean;
  readonly servers: ReadonlyArray<{
    readonly name: string;
    readonly offset: number;
    readonly increment: number;
    readonly health: TicketServerHealth;
    readonly served: number;
    readonly failures: number;
    readonly lockConflicts: number;
    /** Failovers this allocator fenced on the server: the first draw on a new instance jumped its counter. */
    readonly failoverJumps: number;
    readonly lastIssued: bigint | undefined;
    readonly lastError: string | undefined;
    /** Epoch ms of the last failure on this server. */
    readonly lastErrorAt: number | undefined;
  }>;
}

export interface TicketServerStatus {
  readonly name: string;
  readonly offset: number;
  readonly increment: number;
  readonly health: TicketServerHealth;
  /** Last ID this allocator handed out from the server. */
  readonly lastIssued: bigint | undefined;
  readonly failures: number;
  /** Deadlocks / lock-wait timeouts met and retried (never shown to callers). */
  readonly lockConflicts: number;
  readonly failoverJumps: number;
  readonly lastError: string | undefined;
  /** Read from the server now (undefined when it did not answer). */
  readonly server: ServerFacts | undefined;
}

export interface TicketAllocator {
  next(): Promise<bigint>;
  /** Check every server's scheme now; throws BAD_CONFIG if one disagrees with the options. */
  ready(): Promise<void>;
  status(): Promise<TicketServerStatus[]>;
  stats(): TicketStats;
  /** Listen to events from now on; returns the function that stops listening. */
  onEvent(listener: (event: TicketEvent) => void): () => void;
  close(): Promise<void>;
}
