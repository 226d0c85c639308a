/**
 * The shape of an allocator kind's metrics (./segment.ts, ./ticket.ts, ./snowflake.ts,
 * ./redis.ts) and the one place that turns a table into prom-client instruments. A family is a
 * row `[name, help, read]`: a counter when its name ends in `_total` (a running total kept in
 * stats()), else a gauge. Values are read from stats() when the registry is scraped, so metrics
 * cost `next()` nothing.
 */
import { Counter, Gauge, type Registry } from 'prom-client';

/**
 * One metric family. Allocators sharing a label value (a tag, a server name, a group) add up,
 * or with `highest` the largest wins: a worker id or a lead summed over allocators means nothing.
 */
export type Row<P> = readonly [name: string, help: string, read: (series: P) => number, combine?: 'highest'];

/** Families that share a label and what one series reads. */
export interface Table<A, P> {
  /** The label, e.g. `tag`; none: one series per registry, every allocator adding up. */
  readonly label?: string;
  /** The series one allocator has: `[label value, what the rows read]` (a ticket allocator has one per server). */
  series(allocator: A): Iterable<readonly [string, P]>;
  readonly rows: ReadonlyArray<Row<P>>;
}

/** Everything metrics/ knows about one allocator kind, picked by the `kind` its stats() carry. */
export interface KindMetrics<A, X> {
  /** Instruments fed by events for one registry (histograms, counts by error code), and what else they keep. */
  instruments(registry: Registry): X;
  /** The kind's tables; they may read what `instruments` keeps (the segment's last error time). */
  tables(instruments: X): ReadonlyArray<Table<A, never>>;
  /** Follow one allocator's events into the instruments (its series made at zero); returns how to stop. */
  watch(allocator: A, instruments: X): () => void;
}

/** A table of any series shape, for a kind's list of tables (each table is typed where it is written). */
export function table<A, P>(t: Table<A, P>): Table<A, never> {
  return t as unknown as Table<A, never>;
}

/** Register every row of `t` on `registry`, reading the allocators in `members` at each scrape. */
export function registerTable<A>(registry: Registry, t: Table<A, never>, members: ReadonlySet<A>): void {
  const labelNames = t.label === undefined ? [] : [t.label];
  const labelsOf = (value: string): Record<string, string> => (t.label === undefined ? {} : { [t.label]: value });
  const each = (f: (labels: Record<string, string>, series: never) => void) => {
    for (const a of members) for (const [value, series] of t.series(a)) f(labelsOf(value), series);
  };
  for (const [name, help, read, combine] of t.rows) {
    if (name.endsWith('_total')) {
      new Counter({
        name,
        help,
        labelNames,
        registers: [registry],
        collect() {
          this.reset();
          each((labels, s) => this.inc(labels, read(s)));
        },
      });
      continue;
    }
    new Gauge({
      name,
      help,
      labelNames,
      registers: [registry],
      collect() {
        this.reset();
        if (combine !== 'highest') {
          each((labels, s) => this.inc(labels, read(s)));
          return;
        }
        const top = new Map<string, { labels: Record<string, string>; v: number }>();
        each((labels, s) => {
          const v = read(s);
          const key = JSON.stringify(labels);
          const seen = top.get(key);
          if (seen === undefined || v > seen.v) top.set(key, { labels, v });
        });
        for (const { labels, v } of top.values()) this.set(labels, v);
      },
    });
  }
}
