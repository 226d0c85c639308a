/**
 * A registry's Prometheus text, the same text `registry.metrics()` writes, made several times
 * faster: `idlease serve` renders it on its one thread while clients wait. At 5,000 tags a
 * prom-client render is ~8.7 MB and 60 ms of a quiet core (200–330 ms on a loaded one), most of
 * it spent making objects — a labels object and a value object per line, a WeakMap entry per
 * line for the shared labels it lacks, and the garbage collections they cause (27 % of a
 * profile); 16 anonymous clients flooding /metrics took an operator's scrape from 59 to 264 ms.
 *
 * Two ways, both giving prom-client's text byte for byte (test/unit/metrics-render.test.ts):
 * - A family that knows how to write itself (a table row, ./table.ts) is asked through
 *   `renderers`: its lines come straight from the allocators' stats(), each read once per
 *   render for all of its table's rows (prom-client's collect() reads them once per row).
 * - Any other family is read through prom-client's public `getForPromString()`/`get()` and
 *   written here, its label texts kept per labels object (a histogram's per-tag labels live as
 *   long as the series), with none of prom-client's per-line objects beyond its own values.
 *
 * Only the Prometheus text format without default labels is written here: a registry set to
 * OpenMetrics, or with default labels, is rendered by prom-client itself.
 */
import type { Histogram, Registry } from 'prom-client';

/**
 * What a fast family writes: its whole text (no trailing newline) as a string or as bytes in
 * pieces, or undefined to be rendered by prom-client. `memo` lives for one render (what several
 * families read alike is read once).
 */
export type FamilyRenderer = (memo: Map<unknown, unknown>) => string | readonly Buffer[] | undefined;

/** Families that write themselves, keyed by the prom-client metric object registered for them. */
const renderers = new WeakMap<object, FamilyRenderer>();

/** Let `renderMetrics` write `metric` with `render` (the text must equal prom-client's for the same state). */
export function renderWith(metric: object, render: FamilyRenderer): void {
  renderers.set(metric, render);
}

interface PromValue {
  readonly value: number;
  readonly labels?: Readonly<Record<string, string | number>>;
  readonly sharedLabels?: Readonly<Record<string, string | number>>;
  readonly metricName?: string;
}

interface PromMetric {
  readonly name: string;
  get(): Promise<{ name: string; help: string; type: string; values?: readonly PromValue[] }>;
  getForPromString?(): Promise<{ name: string; help: string; type: string; values?: readonly PromValue[] }>;
}

export function escapeText(s: string): string {
  return s.indexOf('\\') < 0 && s.indexOf('\n') < 0 ? s : s.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');
}

export function escapeLabelValue(v: string | number): string {
  if (typeof v !== 'string') return `${v}`;
  const s = escapeText(v);
  return s.indexOf('"') < 0 ? s : s.replace(/"/g, '\\"');
}

/** A sample's value as prom-client writes it. */
export function valueText(v: number): string {
  if (Number.isNaN(v)) return 'Nan';
  if (!Number.isFinite(v)) return v < 0 ? '-Inf' : '+Inf';
  return `${v}`;
}

/** The two header lines of a family. */
export function familyHeader(name: string, help: string, type: string): string {
  const n = escapeText(name);
  return `# HELP ${n} ${escapeText(help)}\n# TYPE ${n} ${type}`;
}

// Label texts of labels objects that live across renders (histogram series, event-fed counters).
const labelTexts = new WeakMap<object, string>();

function labelsText(labels: Readonly<Record<string, string | number>>, exclude?: Readonly<Record<string, unknown>>): string {
  let out = '';
  for (const k in labels) {
    if (!Object.prototype.hasOwnProperty.call(labels, k)) continue;
    if (exclude !== undefined && Object.prototype.hasOwnProperty.call(exclude, k)) continue;
    out += `${out === '' ? '' : ','}${k}="${escapeLabelValue(labels[k]!)}"`;
  }
  return out;
}

function sharedText(labels: Readonly<Record<string, string | number>>): string {
  let t = labelTexts.get(labels);
  if (t === undefined) {
    t = labelsText(labels);
    labelTexts.set(labels, t);
  }
  return t;
}

/** prom-client's Registry.getMetricsAsString for the Prometheus format, without its per-line objects. */
async function genericText(metric: PromMetric): Promise<string> {
  const m = typeof metric.getForPromString === 'function' ? await metric.getForPromString() : await metric.get();
  const name = escapeText(m.name);
  const parts = [familyHeader(m.name, m.help, m.type)];
  for (const v of m.values ?? []) {
    const own = v.labels === undefined ? '' : labelsText(v.labels, v.sharedLabels);
    const shared = v.sharedLabels === undefined ? '' : sharedText(v.sharedLabels);
    const labels = own === '' ? shared : shared === '' ? own : `${own},${shared}`;
    parts.push(`${v.metricName ?? name}${labels === '' ? '' : `{${labels}}`} ${valueText(v.value)}`);
  }
  return parts.join('\n');
}

const BETWEEN_FAMILIES = Buffer.from('\n\n');
const END = Buffer.from('\n');

/**
 * The registry's text, as `registry.metrics()` would write it, as bytes: the pieces are copied
 * once into the answer (a string of 8.7 MB would be joined, then encoded: two more copies).
 */
export async function renderMetrics(registry: Registry): Promise<Buffer> {
  const defaults = (registry as unknown as { _defaultLabels?: Record<string, unknown> })._defaultLabels;
  if (registry.contentType !== 'text/plain; version=0.0.4; charset=utf-8' || defaults === undefined || Object.keys(defaults).length > 0)
    return Buffer.from(await registry.metrics());
  const memo = new Map<unknown, unknown>();
  const texts: Array<string | readonly Buffer[] | Promise<string>> = [];
  for (const metric of registry.getMetricsAsArray() as unknown as PromMetric[]) {
    const own = renderers.get(metric)?.(memo);
    texts.push(own ?? genericText(metric));
  }
  const chunks: Buffer[] = [];
  for (const text of await Promise.all(texts)) {
    if (chunks.length > 0) chunks.push(BETWEEN_FAMILIES);
    if (typeof text === 'string') chunks.push(Buffer.from(text));
    else for (const piece of text) chunks.push(piece);
  }
  chunks.push(END);
  return Buffer.concat(chunks);
}

/** One series of a prom-client Histogram as it keeps it (lib/histogram.js: createBaseValues). */
interface HistogramSeries {
  readonly labels: Readonly<Record<string, string | number>>;
  readonly bucketValues: Readonly<Record<number, number>>;
  readonly sum: number;
  readonly count: number;
}

/**
 * Let renderMetrics write a histogram with many series (the segment lease latency: 16 lines per
 * tag, 5.5 of 8.7 MB at 5,000 tags) from the series prom-client keeps, each series' text made
 * again only when its count or sum moved: most tags lease seldom, so most of the text is reused.
 * prom-client's own export builds two objects per line (80,000 a render) before any text is
 * written. Its series store is not public API: when it is not what is read here (another
 * prom-client), the family is rendered by prom-client, as any other.
 */
export function renderHistogramFast(histogram: Histogram<string>): void {
  const h = histogram as unknown as {
    name: string;
    help: string;
    hashMap?: Record<string, HistogramSeries>;
    upperBounds?: readonly number[];
  };
  const texts = new WeakMap<HistogramSeries, { count: number; sum: number; bytes: Buffer }>();
  renderWith(histogram, () => {
    const { hashMap, upperBounds } = h;
    if (typeof hashMap !== 'object' || hashMap === null || !Array.isArray(upperBounds)) return undefined;
    const bucket = `${h.name}_bucket`;
    const parts: Buffer[] = [Buffer.from(familyHeader(h.name, h.help, 'histogram'))];
    for (const series of Object.values(hashMap)) {
      if (typeof series?.count !== 'number' || typeof series.sum !== 'number' || typeof series.bucketValues !== 'object') return undefined;
      const seen = texts.get(series);
      if (seen !== undefined && seen.count === series.count && Object.is(seen.sum, series.sum)) {
        parts.push(seen.bytes);
        continue;
      }
      const shared = typeof series.labels === 'object' && series.labels !== null ? labelsText(series.labels) : '';
      const tail = shared === '' ? '' : `,${shared}`;
      const lines = [''];
      let acc = 0;
      for (const bound of upperBounds) {
        acc += series.bucketValues[bound]!;
        lines.push(`${bucket}{le="${bound}"${tail}} ${valueText(acc)}`);
      }
      const own = shared === '' ? '' : `{${shared}}`;
      lines.push(
        `${bucket}{le="+Inf"${tail}} ${valueText(series.count)}`,
        `${h.name}_sum${own} ${valueText(series.sum)}`,
        `${h.name}_count${own} ${valueText(series.count)}`,
      );
      const bytes = Buffer.from(lines.join('\n'));
      texts.set(series, { count: series.count, sum: series.sum, bytes });
      parts.push(bytes);
    }
    return parts;
  });
}
