/**
 * What the ticket allocator needs from one server: a draw and a few reads. The allocator never
 * sees SQL or a driver (sql-source.ts puts the dialect's statements behind this; tests plug in
 * an in-memory source). Every call may be slow or hang: the allocator bounds each one.
 */
import type { TicketCounterFacts, TicketScheme } from '../dialects/tickets.js';

export type { TicketScheme };

/** What `status()` shows about a server, as the server itself sees it. */
export interface ServerFacts extends TicketCounterFacts {
  readonly scheme: TicketScheme;
}

export interface TicketSource {
  /**
   * One ticket, drawn under `scheme` (its generation and pair, as readScheme answered): the new
   * ID, or undefined when the server's scheme is no longer that generation (fenced by a reshard).
   */
  draw(scheme: TicketScheme): Promise<bigint | undefined>;
  /** The scheme the server serves now; NOT_MIGRATED when it has none. */
  readScheme(): Promise<TicketScheme>;
  facts(): Promise<ServerFacts>;
  /** A cheap liveness check: resolves when the server answers. */
  probe(): Promise<void>;
  /**
   * After a failover (the scheme's instance is not the one the read ran on): move the counter past
   * the failover gap and mark the instance, once, whoever comes first. True when this call jumped.
   * A source without it never reports an instance (in-memory sources).
   */
  fenceFailover?(): Promise<boolean>;
  /** Server settings that would break the pair (Galera's auto-increment control): BAD_CONFIG naming the fix. */
  checkServer?(name: string): Promise<void>;
  close(): Promise<void>;
}
