/**
 * The shape of an allocator kind's metrics (./segment.ts, ./ticket.ts, ./snowflake.ts,
 * ./redis.ts) and the one place that turns a table into prom-client instruments. A family is a
 * row `[name, help, read]`: a counter when its name ends in `_total` (a running total kept in
 * stats()), else a gauge. Values are read from stats() when the registry is scraped, so metrics
 * cost `next()` nothing.
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import { escapeLabelValue, escapeText, familyHeader, renderWith, valueText } from './render.js';

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

/** A table's series as one render reads them: each series, the index of its label value, and that value's label text. */
interface TableSeries {
  readonly series: never[];
  readonly group: number[];
  readonly labels: string[];
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
  // For renderMetrics (./render.ts): the table's series read once per render, shared by its rows,
  // with the label text of each distinct label value (allocators sharing one add up into it).
  const seriesKey = {};
  const seriesOnce = (memo: Map<unknown, unknown>): TableSeries => {
    let all = memo.get(seriesKey) as TableSeries | undefined;
    if (all !== undefined) return all;
    all = { series: [], group: [], labels: [] };
    const groupOf = new Map<string, number>();
    for (const a of members)
      for (const [value, series] of t.series(a)) {
        const key = t.label === undefined ? '' : value;
        let g = groupOf.get(key);
        if (g === undefined) {
          g = all.labels.length;
          groupOf.set(key, g);
          all.labels.push(t.label === undefined ? ' ' : `{${t.label}="${escapeLabelValue(value)}"} `);
        }
        all.series.push(series);
        all.group.push(g);
      }
    memo.set(seriesKey, all);
    return all;
  };
  for (const [name, help, read, combine] of t.rows) {
    const counter = name.endsWith('_total');
    const config = { name, help, labelNames, registers: [registry] };
    const addUp = (m: { reset(): void; inc(labels: Record<string, string>, value: number): void }) => {
      m.reset();
      each((labels, s) => m.inc(labels, read(s)));
    };
    const metric = counter
      ? new Counter({
          ...config,
          collect() {
            addUp(this);
          },
        })
      : new Gauge({
          ...config,
          collect() {
            if (combine !== 'highest') return addUp(this);
            this.reset();
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
    // The same lines collect() above makes prom-client write, straight from the series. A value
    // prom-client would refuse or treat apart (a counter going down, not a finite number) is left
    // to prom-client, so what it does then stays what it does.
    const header = familyHeader(name, help, counter ? 'counter' : 'gauge');
    const escapedName = escapeText(name);
    renderWith(metric, (memo) => {
      const { series, group, labels } = seriesOnce(memo);
      const values: Array<number | undefined> = Array.from({ length: labels.length });
      for (let i = 0; i < series.length; i++) {
        const v = read(series[i]!);
        if (typeof v !== 'number' || (counter && !(Number.isFinite(v) && v >= 0))) return undefined;
        const g = group[i]!;
        const seen = values[g];
        values[g] = seen === undefined ? v : combine === 'highest' ? (v > seen ? v : seen) : seen + v;
      }
      // Joined once (a flat string), not grown with += (a rope the render's join walks line by line).
      const lines = [header];
      for (let g = 0; g < labels.length; g++) lines.push(`${escapedName}${labels[g]}${valueText(values[g]!)}`);
      if (t.label === undefined && labels.length === 0) lines.push(`${escapedName} 0`);
      return lines.join('\n');
    });
  }
}
