/**
 * `GET /status`: what `idlease serve` holds, as one HTML page an operator opens in a browser —
 * per tag the ranges in memory, IDs left, step, rate, runway, last lease and failover jumps; the
 * Redis windows and the snowflake worker id; the server's own bounds. Leaf shows its `/cache`;
 * before this page an operator had 8.8 MB of Prometheus text at 5,000 tags.
 *
 * - **No script, no external asset.** The page refreshes by `<meta http-equiv=refresh>` and
 *   filters with a GET form, so its Content-Security-Policy forbids every script (`default-src
 *   'none'`, no `script-src`): were an escape ever missed, nothing injected could run. Its one
 *   inline stylesheet is allowed by its hash, no style attribute is written.
 * - **Paged and filtered here.** The rows of every tag are read into a snapshot at most once a
 *   second, shared by every viewer (metrics/cache.ts, as /metrics is); a request filters the
 *   snapshot (`?q=`, tag or description, any case) and writes one page of it (`?page=`, 100 rows),
 *   so a page at 5,000 tags costs the 100 rows it shows, not 5,000.
 * - **Every dynamic string escaped** (escapeHtml): tag names and descriptions are whatever the
 *   table holds, `<script>` and `onerror=` included.
 * - **Sources, not bookkeeping.** Allocators' stats() (what /metrics reads), the registry's
 *   `idlease_serve_*` families (a new serve metric shows here too), the guard's connection
 *   states and the batch queue.
 */
import { createHash } from 'node:crypto';
import type { Registry } from 'prom-client';
import { singleFlightCache } from '../metrics/cache.js';
import type { RedisSequenceStats } from '../redis-sequence/types.js';
import type { SegmentStats } from '../segment/types.js';
import type { SnowflakeStats } from '../snowflake/types.js';
import type { ServeAllocators } from './allocators.js';

/** Rows per page of the tag table. */
export const STATUS_PAGE_ROWS = 100;
/** Seconds between two reloads unless `?refresh=` says otherwise (0: never). */
const DEFAULT_REFRESH_S = 10;
/** Longest filter read from the query (a tag is at most 128 characters, a description 256). */
const MAX_FILTER = 256;

export interface StatusSources {
  readonly allocators: ServeAllocators;
  readonly registry: Registry;
  /** Open connections by state (guard.ts). */
  connections(): Readonly<Record<string, number>>;
  /** IDs of batch requests waiting their turn (batch-queue.ts). */
  queuedIds(): number;
  /** The listen URL, shown in the heading. */
  name(): string;
}

export interface StatusPage {
  /** The page for a raw query string (`q=ord&page=2`), and how long this request took to make it. */
  render(query: string): Promise<{ body: Buffer; ms: number }>;
}

interface TagRow {
  readonly tag: string;
  readonly description: string;
  /** tag + description, lower case: what `?q=` is looked for in. */
  readonly search: string;
  readonly stats: SegmentStats;
}

interface Snapshot {
  readonly at: number;
  readonly tags: readonly TagRow[];
  readonly redis: readonly RedisSequenceStats[];
  readonly snowflake: SnowflakeStats | undefined;
  /** serve's families: name without the prefix, then each series as `label value` (or the bare value). */
  readonly server: ReadonlyArray<readonly [name: string, series: string]>;
  readonly connections: Readonly<Record<string, number>>;
  readonly queuedIds: number;
}

const STYLE = [
  'body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1a1a1a;background:#fff}',
  'h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.15em;margin:1.4em 0 .4em}',
  'table{border-collapse:collapse;font-variant-numeric:tabular-nums}',
  'th,td{padding:.25em .6em;border-bottom:1px solid #ddd;text-align:right;vertical-align:top}',
  'th{background:#f3f3f3;position:sticky;top:0}th:first-child,td:first-child{text-align:left}',
  'td.d{color:#555;font-size:.9em;max-width:28em;overflow-wrap:anywhere}.d,.l{text-align:left}',
  '.bad{color:#b00020;font-weight:600}.muted{color:#777}',
  'form{margin:.4em 0}input{font:inherit;padding:.2em .4em;width:20em}',
  'nav a{margin-right:1em}dl{display:grid;grid-template-columns:max-content auto;gap:.1em 1em}dt{color:#555}dd{margin:0}',
].join('');

/** The page's Content-Security-Policy: no script at all, the one stylesheet by its hash. */
export const STATUS_CSP = [
  "default-src 'none'",
  `style-src 'sha256-${createHash('sha256').update(STYLE).digest('base64')}'`,
  // The icon link below is `data:,`: without it a browser asks for /favicon.ico, a request this page does not need.
  'img-src data:',
  "form-action 'self'",
  "frame-ancestors 'none'",
  "base-uri 'none'",
].join('; ');

/** The headers of every page: not cached (IDs and bounds are of this second), not framed, not sniffed, no referrer. */
export const STATUS_HEADERS: Readonly<Record<string, string>> = {
  'content-type': 'text/html; charset=utf-8',
  'content-security-policy': STATUS_CSP,
  'cache-control': 'no-store',
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
};

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

/** Text for HTML content and double-quoted attributes. */
export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ESCAPES[c]!);
}

const grouped = (n: number | bigint): string => n.toLocaleString('en-US');

/** A duration for people: 850 ms, 42 s, 17 min, 5.2 h, 12 d. */
export function duration(ms: number): string {
  if (!Number.isFinite(ms)) return '∞';
  if (ms < 1_000) return `${Math.round(ms)} ms`;
  if (ms < 120_000) return `${Math.round(ms / 1_000)} s`;
  if (ms < 7_200_000) return `${Math.round(ms / 60_000)} min`;
  if (ms < 172_800_000) return `${(ms / 3_600_000).toFixed(1)} h`;
  return `${grouped(Math.round(ms / 86_400_000))} d`;
}

function rate(perSecond: number | undefined): string {
  if (perSecond === undefined) return '<span class="muted">—</span>';
  return perSecond >= 100 ? grouped(Math.round(perSecond)) : perSecond.toFixed(perSecond >= 1 ? 1 : 3);
}

/** How long `left` IDs last at `perSecond`; ∞ before a rate is measured. */
function runway(left: number, perSecond: number | undefined): string {
  if (!perSecond) return '<span class="muted">∞</span>';
  const ms = (left / perSecond) * 1000;
  return ms < 60_000 ? `<span class="bad">${duration(ms)}</span>` : duration(ms);
}

function errorCode(err: unknown): string {
  if (err === undefined) return '';
  const code = (err as { code?: unknown } | null)?.code;
  return `<span class="bad">${escapeHtml(typeof code === 'string' || typeof code === 'number' ? String(code) : 'ERROR')}</span>`;
}

interface Column<R> {
  readonly head: string;
  /** What the column means, shown as the header's tooltip (docs/serve.md says the same). */
  readonly title: string;
  cell(row: R, now: number): string;
}

/** The tag table, one row per column: a new column is one line here. */
const TAG_COLUMNS: ReadonlyArray<Column<TagRow>> = [
  { head: 'Tag', title: 'The tag (segment row) served', cell: (r) => escapeHtml(r.tag) },
  { head: 'Description', title: 'The description of the tag’s row', cell: (r) => escapeHtml(r.description) },
  {
    head: 'Current range',
    title: 'The segment IDs come from now: its first and last ID; next: the ID it gives next',
    cell: ({ stats: { current: c } }) =>
      c === undefined
        ? '<span class="muted">none yet</span>'
        : `${c.start}–${c.end}<br><span class="muted">${c.cursor > c.end ? 'used up' : `next ${c.cursor}`}</span>`,
  },
  {
    head: 'Next range',
    title: 'The segment preloaded behind the current one',
    cell: ({ stats: s }) =>
      s.preloaded !== undefined
        ? `${s.preloaded.start}–${s.preloaded.end}`
        : `<span class="muted">${s.leaseInFlight ? 'leasing…' : 'none'}</span>`,
  },
  { head: 'IDs left', title: 'IDs in memory: the rest of the current range and the next range', cell: (r) => grouped(r.stats.remaining) },
  {
    head: 'Step',
    title: 'Size of the last lease (the row’s step when it differs)',
    cell: ({ stats: s }) =>
      grouped(s.currentStep) +
      (s.rowStep !== undefined && s.rowStep !== s.currentStep ? ` <span class="muted">(row ${grouped(s.rowStep)})</span>` : ''),
  },
  { head: 'Rate /s', title: 'IDs per second, as measured over the last leases', cell: (r) => rate(r.stats.ratePerSecond) },
  {
    head: 'Runway',
    title: 'How long the IDs left last at that rate (red under a minute)',
    cell: ({ stats: s }) => runway(Number(s.remaining), s.ratePerSecond),
  },
  {
    head: 'Last lease',
    title: 'How long ago the last lease statement succeeded, and how long it took',
    cell: ({ stats: s }, now) =>
      s.lastLeaseAt === undefined
        ? '<span class="muted">never</span>'
        : `${duration(now - s.lastLeaseAt)} ago<br><span class="muted">took ${s.lastLeaseMs === undefined ? '?' : duration(s.lastLeaseMs)}</span>`,
  },
  {
    head: 'Failover jumps',
    title: 'Leases that were the first on a new database instance and jumped the row by its failover gap',
    cell: (r) => grouped(r.stats.failoverJumps),
  },
  { head: 'Last error', title: 'The code of the last failed lease, until one succeeds', cell: (r) => errorCode(r.stats.lastError) },
];

const REDIS_COLUMNS: ReadonlyArray<Column<RedisSequenceStats>> = [
  { head: 'Tag', title: 'The tag whose Redis sequence this is', cell: (s) => escapeHtml(s.tag) },
  { head: 'Key', title: 'The Redis key', cell: (s) => escapeHtml(s.key) },
  { head: 'IDs left', title: 'IDs left in the key (current and prefetched window) at the last call', cell: (s) => grouped(s.left) },
  { head: 'Window', title: 'Size of the last window leased from the database', cell: (s) => grouped(s.windowSize) },
  { head: 'Windows', title: 'Windows this server leased and installed', cell: (s) => grouped(s.windows) },
  { head: 'Rate /s', title: 'IDs per second the key issued (all processes)', cell: (s) => rate(s.ratePerSecond) },
  { head: 'Runway', title: 'How long the IDs left in the key last at that rate', cell: (s) => runway(s.left, s.ratePerSecond) },
  { head: 'Reseeds', title: 'Keys found written by another Redis incarnation, or missing, and re-seeded', cell: (s) => grouped(s.reseeds) },
  { head: 'Last error', title: 'The code of the last failure', cell: (s) => errorCode(s.lastError) },
];

const SNOWFLAKE_ROWS: ReadonlyArray<readonly [string, (s: SnowflakeStats) => string]> = [
  ['Group', (s) => escapeHtml(s.group)],
  ['Worker id', (s) => (s.workerId === undefined ? '<span class="bad">none held</span>' : String(s.workerId))],
  ['Lease', (s) => (s.fenced ? 'valid' : '<span class="bad">not valid: next() waits</span>')],
  ['Lease ends in', (s) => (s.leaseLeftMs > 0 ? `${duration(s.leaseLeftMs)} without a renewal` : '<span class="muted">—</span>')],
  ['IDs issued', (s) => grouped(s.issued)],
  ['Renewals', (s) => grouped(s.renewals)],
  ['Time field ahead of the clock', (s) => duration(s.leadMs)],
  ['Failover wait left', (s) => (s.failoverWaitLeftMs > 0 ? duration(s.failoverWaitLeftMs) : '<span class="muted">none</span>')],
];

function table<R>(
  id: string,
  columns: ReadonlyArray<Column<R>>,
  rows: readonly R[],
  now: number,
  cellClass: (i: number) => string = () => '',
): string {
  const head = columns.map((c, i) => `<th${cellClass(i)} title="${escapeHtml(c.title)}">${escapeHtml(c.head)}</th>`).join('');
  const body = rows.map((r) => `<tr>${columns.map((c, i) => `<td${cellClass(i)}>${c.cell(r, now)}</td>`).join('')}</tr>`).join('\n');
  return `<table id="${id}"><thead><tr>${head}</tr></thead><tbody>\n${body}\n</tbody></table>`;
}

interface Query {
  readonly q: string;
  readonly page: number;
  readonly refresh: number;
}

/** The query, leniently: a page out of range is the nearest one, a filter is cut at MAX_FILTER. */
function readQuery(raw: string): Query {
  const p = new URLSearchParams(raw);
  const int = (name: string, fallback: number, max: number): number => {
    const v = p.get(name);
    return v !== null && /^\d{1,9}$/.test(v) ? Math.min(Number(v), max) : fallback;
  };
  return {
    q: (p.get('q') ?? '').trim().slice(0, MAX_FILTER),
    page: Math.max(1, int('page', 1, 1e9)),
    refresh: int('refresh', DEFAULT_REFRESH_S, 3_600),
  };
}

function href(q: Query, page: number): string {
  const p = new URLSearchParams();
  if (q.q !== '') p.set('q', q.q);
  if (page !== 1) p.set('page', String(page));
  if (q.refresh !== DEFAULT_REFRESH_S) p.set('refresh', String(q.refresh));
  const s = p.toString();
  return escapeHtml(`/status${s === '' ? '' : `?${s}`}`);
}

export function createStatusPage(src: StatusSources): StatusPage {
  // One snapshot a second at most, whatever the number of viewers (a page's cost is then its 100 rows).
  const snapshots = singleFlightCache(() => snapshot(src));

  return {
    async render(query) {
      const t0 = performance.now();
      const s = await snapshots.get();
      const q = readQuery(query);
      const needle = q.q.toLowerCase();
      const matching = needle === '' ? s.tags : s.tags.filter((r) => r.search.includes(needle));
      const pages = Math.max(1, Math.ceil(matching.length / STATUS_PAGE_ROWS));
      const page = Math.min(q.page, pages);
      const rows = matching.slice((page - 1) * STATUS_PAGE_ROWS, page * STATUS_PAGE_ROWS);
      const redis = needle === '' ? s.redis : s.redis.filter((r) => `${r.tag}\n${r.key}`.toLowerCase().includes(needle));
      const html = pageHtml(src.name(), s, q, { matching: matching.length, rows, page, pages, redis });
      return { body: Buffer.from(html), ms: performance.now() - t0 };
    },
  };
}

/** What a prom-client Counter or Gauge gives (getMetricsAsArray's type leaves get() out). */
interface ServeMetric {
  readonly name: string;
  get(): Promise<{ values: ReadonlyArray<{ value: number; labels: Readonly<Record<string, string | number>> }> }>;
}

async function snapshot(src: StatusSources): Promise<Snapshot> {
  const { tags } = src.allocators;
  const rows: TagRow[] = [];
  for (const [tag, a] of tags.allocators) {
    const description = tags.descriptions.get(tag) ?? '';
    rows.push({ tag, description, search: `${tag}\n${description}`.toLowerCase(), stats: a.stats() });
  }
  rows.sort((a, b) => (a.tag < b.tag ? -1 : a.tag > b.tag ? 1 : 0));
  const redis = [...src.allocators.sequences.values()].map((r) => r.stats()).sort((a, b) => (a.tag < b.tag ? -1 : 1));
  // serve's own families, read from the registry /metrics renders: a serve metric added later shows here too.
  const server: Array<[string, string]> = [];
  for (const metric of src.registry.getMetricsAsArray() as unknown as ServeMetric[]) {
    const name = metric.name;
    if (!name.startsWith('idlease_serve_')) continue;
    const series = (await metric.get()).values.map((v) => {
      const labels = Object.values(v.labels).map(String).join(' ');
      return `${labels === '' ? '' : `${labels} `}${grouped(v.value)}`;
    });
    server.push([name.slice('idlease_serve_'.length), series.join(' · ')]);
  }
  return {
    at: Date.now(),
    tags: rows,
    redis,
    snowflake: src.allocators.snowflakeAllocator?.stats(),
    server,
    connections: src.connections(),
    queuedIds: src.queuedIds(),
  };
}

interface Shown {
  readonly matching: number;
  readonly rows: readonly TagRow[];
  readonly page: number;
  readonly pages: number;
  readonly redis: readonly RedisSequenceStats[];
}

function pageHtml(name: string, s: Snapshot, q: Query, shown: Shown): string {
  const { matching, rows, page, pages } = shown;
  const first = matching === 0 ? 0 : (page - 1) * STATUS_PAGE_ROWS + 1;
  const nav =
    pages <= 1
      ? ''
      : `<nav>${page > 1 ? `<a href="${href(q, 1)}">« first</a><a rel="prev" href="${href(q, page - 1)}">‹ previous</a>` : ''}` +
        `<span>page ${page} of ${pages}</span> ` +
        `${page < pages ? `<a rel="next" href="${href(q, page + 1)}">next ›</a><a href="${href(q, pages)}">last »</a>` : ''}</nav>`;
  const connections = Object.entries(s.connections)
    .map(([state, n]) => `${escapeHtml(state)} ${grouped(n)}`)
    .join(', ');
  const server = s.server
    .map(([metric, series]) => `<tr><td>${escapeHtml(metric)}</td><td class="l">${escapeHtml(series)}</td></tr>`)
    .join('\n');
  const redisShown = shown.redis.slice(0, STATUS_PAGE_ROWS);
  const parts = [
    '<!doctype html><html lang="en"><head><meta charset="utf-8">',
    '<meta name="viewport" content="width=device-width,initial-scale=1">',
    q.refresh > 0 ? `<meta http-equiv="refresh" content="${q.refresh}">` : '',
    '<link rel="icon" href="data:,">',
    `<title>idlease serve — status</title><style>${STYLE}</style></head><body>`,
    `<h1>idlease serve <span class="muted">${escapeHtml(name)}</span></h1>`,
    `<p class="muted">As of ${escapeHtml(new Date(s.at).toISOString())} (read at most once a second); ` +
      (q.refresh > 0
        ? `reloads every ${q.refresh} s (<a href="${escapeHtml(`/status?${new URLSearchParams({ ...(q.q === '' ? {} : { q: q.q }), refresh: '0' }).toString()}`)}">stop</a>).`
        : 'does not reload.') +
      '</p>',
    '<h2 id="server">Server</h2>',
    `<dl><dt>Connections by state</dt><dd>${connections}</dd><dt>IDs queued for batches</dt><dd>${grouped(s.queuedIds)}</dd>` +
      `<dt>Tags served</dt><dd>${grouped(s.tags.length)}</dd></dl>`,
    `<table id="server-rows"><thead><tr><th>Metric (idlease_serve_…, as /metrics has it)</th><th class="l">Value (by label)</th></tr></thead><tbody>\n${server}\n</tbody></table>`,
    '<h2 id="tags">Segment tags</h2>',
    `<form method="get" action="/status"><input type="search" name="q" value="${escapeHtml(q.q)}" placeholder="tag or description" aria-label="Filter tags">` +
      (q.refresh !== DEFAULT_REFRESH_S ? `<input type="hidden" name="refresh" value="${q.refresh}">` : '') +
      ' <button type="submit">Filter</button></form>',
    `<p id="count">${matching === 0 ? 'No tag matches.' : `Tags ${grouped(first)}–${grouped(first + rows.length - 1)} of ${grouped(matching)}`}` +
      `${q.q === '' ? '' : ` matching “${escapeHtml(q.q)}” (of ${grouped(s.tags.length)})`}.</p>`,
    nav,
    table('tag-rows', TAG_COLUMNS, rows, s.at, (i) => (i === 1 ? ' class="d"' : '')),
    nav,
  ];
  if (s.redis.length > 0)
    parts.push(
      '<h2 id="redis">Redis sequences</h2>',
      table('redis-rows', REDIS_COLUMNS, redisShown, s.at),
      shown.redis.length > redisShown.length ? `<p>${grouped(shown.redis.length - redisShown.length)} more: filter to narrow.</p>` : '',
    );
  if (s.snowflake !== undefined) {
    const sf = s.snowflake;
    parts.push(
      '<h2 id="snowflake">Snowflake worker</h2>',
      `<dl>${SNOWFLAKE_ROWS.map(([label, cell]) => `<dt>${escapeHtml(label)}</dt><dd>${cell(sf)}</dd>`).join('')}</dl>`,
    );
  }
  parts.push('</body></html>\n');
  return parts.join('\n');
}
