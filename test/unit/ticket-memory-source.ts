/**
 * An in-memory ticket server that behaves like one auto_increment counter with a scheme row,
 * and the knobs an adversary wants: down (connection refused), hanging (never answers), lock
 * conflicts, not migrated, a counter that ignores the pair (Galera), and a reshard. Several
 * allocators draw from one server through sources of their own, as processes do.
 */
import type { TicketScheme, TicketSource } from '../../src/ticket/index.js';
import { IdleaseError } from '../../src/errors.js';

export class MemoryTicketServer {
  scheme: TicketScheme;
  /** The counter: the last value it issued (0 before the first). */
  last = 0n;
  /** Every ID the counter issued, whether or not the caller heard the answer. */
  readonly issued: bigint[] = [];
  down = false;
  /** Calls hang until `answer()` (or forever). */
  hanging = false;
  /** The next this many draws fail with a deadlock (1213), as InnoDB under contention. */
  conflicts = 0;
  notMigrated = false;
  /** A pair the counter follows instead of the scheme's (Galera's wsrep_auto_increment_control). */
  counterPair: { increment: number; offset: number } | undefined;
  draws = 0;
  probes = 0;
  /** Closing a source hangs (a connection that never finishes closing). */
  closeHangs = false;
  private waiting: Array<() => void> = [];

  constructor(increment: number, offset: number) {
    this.scheme = { generation: 1n, increment, offset, open: true };
  }

  /** Let hanging calls go on. */
  answer(): void {
    this.hanging = false;
    for (const go of this.waiting.splice(0)) go();
  }

  private async reach(): Promise<void> {
    await new Promise((r) => setImmediate(r));
    if (this.hanging) await new Promise<void>((r) => this.waiting.push(r));
    if (this.notMigrated) throw new IdleaseError('NOT_MIGRATED', 'The ticket objects for sequence "default" are missing on this server.');
    if (this.down) throw Object.assign(new Error('connect ECONNREFUSED (memory ticket server is down)'), { code: 'ECONNREFUSED' });
  }

  /** What auto_increment does: the next value in the class the counter follows. */
  private issue(): bigint {
    const { increment, offset } = this.counterPair ?? this.scheme;
    this.last = nextInClass(this.last, increment, offset);
    this.issued.push(this.last);
    return this.last;
  }

  /** Reshard step 1: close the scheme under a new generation (draws in flight are atomic here). */
  fence(): void {
    this.scheme = { ...this.scheme, generation: this.scheme.generation + 1n, open: false };
  }

  /** Reshard step 3: the new pair, the counter just below `first`, open under a new generation. */
  reopen(increment: number, offset: number, first: bigint): void {
    if (first - 1n > this.last) this.last = first - 1n;
    this.scheme = { generation: this.scheme.generation + 1n, increment, offset, open: true };
  }

  source(): TicketSource {
    let closed = false;
    const live = async () => {
      if (closed) throw new IdleaseError('CLOSED', 'memory source closed');
      await this.reach();
    };
    return {
      draw: async (scheme) => {
        this.draws++;
        await live();
        if (this.conflicts > 0) {
          this.conflicts--;
          throw Object.assign(new Error('Deadlock found when trying to get lock'), { errno: 1213, code: 'ER_LOCK_DEADLOCK' });
        }
        if (scheme.generation !== this.scheme.generation || !this.scheme.open) return undefined;
        return this.issue();
      },
      readScheme: async () => {
        await live();
        return { ...this.scheme };
      },
      facts: async () => {
        await live();
        return { scheme: { ...this.scheme }, engine: 'memory', lastId: this.issued.length > 0 ? this.last : undefined };
      },
      probe: async () => {
        this.probes++;
        await live();
      },
      close: async () => {
        closed = true;
        if (this.closeHangs) await new Promise(() => undefined);
      },
    };
  }
}

/** reshardTickets on memory servers: fence all, start every kept server above the global maximum in its new class. */
export function reshardMemory(
  servers: ReadonlyArray<{ server: MemoryTicketServer; offset: number }>,
  increment: number,
  retired: readonly MemoryTicketServer[] = [],
): bigint {
  const all = [...servers.map((s) => s.server), ...retired];
  for (const s of all) s.fence();
  const max = all.reduce((m, s) => (s.last > m ? s.last : m), 0n);
  for (const { server, offset } of servers) server.reopen(increment, offset, nextInClass(max, increment, offset));
  return max;
}

/** The smallest value above `floor` that is ≡ offset (mod increment); written here again so the test does not trust the code it tests. */
function nextInClass(floor: bigint, increment: number, offset: number): bigint {
  const inc = BigInt(increment);
  const off = BigInt(offset);
  return floor < off ? off : off + ((floor - off) / inc + 1n) * inc;
}
