/**
 * The Grafana dashboard (`idlease dashboard`, src/metrics/dashboard.ts) against a live Prometheus
 * (Debian `prometheus`): it scrapes an `idlease serve` (with its token) and a library app running
 * every kind of allocator (segments, tickets, snowflake and the Redis sequence on PostgreSQL and a
 * private Redis), with the alert rules of docs/serve.md loaded; while both hand out IDs, every
 * panel's query is run through Prometheus's HTTP API as Grafana would run it, and each must return
 * data. A panel whose metric name or labels drifted from what the package exports fails here.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Registry } from 'prom-client';
import { createClient } from 'redis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect } from '../../src/connect.js';
import { collectMetrics } from '../../src/metrics/index.js';
import { dashboardQueries, grafanaDashboard } from '../../src/metrics/dashboard.js';
import { migrate } from '../../src/migrations/migrate.js';
import { createRedisSequence } from '../../src/redis-sequence/index.js';
import { addTag, createSegmentAllocator } from '../../src/segment/index.js';
import { createSnowflakeAllocator } from '../../src/snowflake/index.js';
import { createTicketAllocator } from '../../src/ticket/index.js';
import { extractBlocks } from '../docs/extract.js';
import { openPage } from '../helpers/chromium.js';
import { dashboardPictureHtml, type GridPos, type PictureItem } from '../helpers/dashboard-picture.js';
import { REPO_ROOT, runCli } from '../helpers/cli.js';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { startRedis, type RedisServer } from '../helpers/redis.js';
import { startServe, type ServeProcess } from '../helpers/serve-process.js';
import { freePort, waitForPort } from '../helpers/servers.js';
import { sleep } from '../helpers/wait.js';

const PROMETHEUS = '/usr/bin/prometheus';
const TOKEN = 'dashboard-test-token-0123456789abcdef';

describe('the Grafana dashboard against a live Prometheus', () => {
  let db: TestDb;
  let redisServer: RedisServer;
  let serve: ServeProcess;
  let app: http.Server;
  let prometheus: ChildProcess;
  let promErr = '';
  let promUrl = '';
  let dir = '';
  let stopping = false;
  const closers: Array<() => Promise<unknown>> = [];
  let traffic: Promise<void> = Promise.resolve();

  beforeAll(async () => {
    if (!existsSync(PROMETHEUS)) {
      throw new Error(`${PROMETHEUS} not found: this test starts a Prometheus. Install it: npm run db:up (Debian package prometheus).`);
    }
    dir = mkdtempSync(path.join(tmpdir(), 'idlease-dashboard-'));
    db = await createTestDb('postgres', 'dashboard');
    await migrate(db.knex, { tickets: { increment: 1, offset: 1 }, workers: true });
    await addTag(db.knex, { tag: 'order', step: 100 });
    await addTag(db.knex, { tag: 'invoice', step: 100 });
    redisServer = await startRedis('none');
    const redis = createClient({ url: `redis://127.0.0.1:${redisServer.port}` });
    await redis.connect();
    closers.push(() => redis.close());

    // The library app: every kind of allocator, exported on an HTTP port of its own.
    const registry = new Registry();
    const segment = createSegmentAllocator({ knex: db.knex, tag: 'order' });
    const tickets = createTicketAllocator({ servers: [{ knex: db.knex, offset: 1 }], increment: 1 });
    const snowflake = createSnowflakeAllocator({ knex: db.knex, group: 'api' });
    const sequence = createRedisSequence({ redis, knex: db.knex, tag: 'invoice' });
    // And one whose database is away, so the errors-by-code panel has errors to show.
    const dead = connect('postgres://postgres@127.0.0.1:1/test', { poolMax: 1 });
    const failing = createSegmentAllocator({ knex: dead, tag: 'order', waitTimeoutMs: 200 });
    collectMetrics(registry, segment, tickets, snowflake, sequence, failing);
    closers.push(() => Promise.all([segment.close(), tickets.close(), snowflake.close(), sequence.close(), failing.close()]));
    closers.push(() => dead.destroy());
    app = http.createServer((_req, res) => {
      void registry.metrics().then((text) => res.writeHead(200, { 'content-type': registry.contentType }).end(text));
    });
    await new Promise<void>((r) => app.listen(0, '127.0.0.1', r));
    const appPort = (app.address() as { port: number }).port;

    // idlease serve, its /metrics behind the token as an operator runs it.
    serve = await startServe(db.url, ['--token', TOKEN]);
    const serveTarget = new URL(serve.url).host;

    // Both hand out IDs until the end, so every rate() has something to measure.
    traffic = (async () => {
      while (!stopping) {
        await Promise.all([
          segment.nextBatch(50),
          tickets.next(),
          snowflake.next(),
          sequence.nextBatch(20),
          fetch(`${serve.url}/api/segment/get/order`, { headers: { authorization: `Bearer ${TOKEN}` } }).then((r) => r.text()),
          failing.next().catch(() => undefined),
        ]);
        await sleep(20);
      }
    })();

    // The alert rules of docs/serve.md, verbatim, so the alerts panel reads what they evaluate.
    const rules = extractBlocks('docs/serve.md', readFileSync(path.join(REPO_ROOT, 'docs/serve.md'), 'utf8')).find(
      (b) => b.lang === 'yaml' && /^groups:/m.test(b.code),
    )!.code;
    writeFileSync(path.join(dir, 'rules.yml'), rules);
    writeFileSync(path.join(dir, 'token'), TOKEN);
    writeFileSync(
      path.join(dir, 'prometheus.yml'),
      [
        'global: { scrape_interval: 1s, evaluation_interval: 1s }',
        'rule_files: [rules.yml]',
        'scrape_configs:',
        `  - { job_name: idlease-app, static_configs: [{ targets: ['127.0.0.1:${appPort}'] }] }`,
        `  - job_name: idlease-serve`,
        `    authorization: { type: Bearer, credentials_file: ${path.join(dir, 'token')} }`,
        `    static_configs: [{ targets: ['${serveTarget}'] }]`,
        '',
      ].join('\n'),
    );
    const port = await freePort();
    promUrl = `http://127.0.0.1:${port}`;
    prometheus = spawn(
      PROMETHEUS,
      [
        `--config.file=${path.join(dir, 'prometheus.yml')}`,
        `--storage.tsdb.path=${path.join(dir, 'data')}`,
        `--web.listen-address=127.0.0.1:${port}`,
      ],
      { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] },
    );
    prometheus.stderr!.on('data', (b: Buffer) => (promErr = (promErr + b.toString()).slice(-4000)));
    await waitForPort(port, 30_000).catch((e: unknown) => {
      throw new Error(`prometheus did not listen: ${String(e)}\n${promErr}`);
    });
  }, 120_000);

  afterAll(async () => {
    stopping = true;
    await traffic.catch(() => undefined);
    prometheus?.kill('SIGTERM');
    await serve?.stop();
    await new Promise((r) => (app ? app.close(r) : r(undefined)));
    for (const close of closers) await close().catch(() => undefined);
    await redisServer?.destroy();
    await db?.drop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const query = async (expr: string): Promise<unknown[]> => {
    const res = await fetch(`${promUrl}/api/v1/query?query=${encodeURIComponent(expr)}`);
    const body = (await res.json()) as { status: string; error?: string; data?: { result: unknown[] } };
    if (body.status !== 'success') throw new Error(`${expr}: ${body.error}`);
    return body.data!.result;
  };

  it('scrapes both targets, and every panel’s query returns data', async () => {
    // Both targets up, then enough scrapes for a rate over Grafana's shortest $__rate_interval.
    for (const until = Date.now() + 30_000; ;) {
      const up = (await query('up == 1').catch(() => [])) as unknown[];
      if (up.length === 2) break;
      if (Date.now() > until) throw new Error(`targets not up within 30 s: ${JSON.stringify(await query('up'))}\n${promErr}`);
      await sleep(500);
    }
    await sleep(12_000);
    const queries = dashboardQueries();
    expect(queries.length).toBeGreaterThanOrEqual(20);
    const empty: string[] = [];
    for (const q of queries) {
      // Grafana puts at least four scrape intervals here; the test scrapes every second.
      const result = await query(q.expr.replaceAll('$__rate_interval', '10s'));
      if (result.length === 0) empty.push(`${q.title}: ${q.expr}`);
    }
    expect(empty, `panels with no data:\n${empty.join('\n')}`).toEqual([]);
  }, 90_000);

  it('a picture of the dashboard: each panel of its JSON drawn from what Prometheus answers to its query over time', async () => {
    const end = Math.floor(Date.now() / 1000);
    const start = end - 45;
    const range = async (expr: string) => {
      const url = `${promUrl}/api/v1/query_range?query=${encodeURIComponent(expr)}&start=${start}&end=${end}&step=1`;
      const body = (await (await fetch(url)).json()) as {
        status: string;
        error?: string;
        data?: { result: Array<{ metric: Record<string, string>; values: Array<[number, string]> }> };
      };
      if (body.status !== 'success') throw new Error(`${expr}: ${body.error}`);
      return body.data!.result;
    };
    interface Panel {
      type: string;
      title: string;
      gridPos: GridPos;
      fieldConfig?: { defaults: { unit: string } };
      targets?: Array<{ expr: string; legendFormat: string }>;
    }
    const items: PictureItem[] = [];
    for (const p of grafanaDashboard().panels as Panel[]) {
      if (p.type === 'row') {
        items.push({ type: 'row', title: p.title, gridPos: p.gridPos });
        continue;
      }
      const { expr, legendFormat } = p.targets![0]!;
      const result = await range(expr.replaceAll('$__rate_interval', '10s'));
      items.push({
        type: 'panel',
        title: p.title,
        unit: p.fieldConfig!.defaults.unit,
        gridPos: p.gridPos,
        series: result.map((r) => ({
          legend: legendFormat.replace(/\{\{\s*(\w+)\s*\}\}/g, (_m, label: string) => r.metric[label] ?? ''),
          points: r.values.map(([t, v]) => [t, Number(v)] as const),
        })),
      });
    }
    const html = dashboardPictureHtml(
      'idlease — Grafana dashboard (idlease dashboard), drawn from Prometheus',
      'Every panel of the dashboard JSON at its place, its lines from Prometheus query_range over 45 s of this test (a serve and a library app scraped every second): a drawing of the same queries, not a Grafana screenshot.',
      items,
    );
    // Every panel drew something: lines, or the note that all its series are +Inf (a runway before a rate is known).
    expect(html.match(/class="panel"/g)?.length).toBe(dashboardQueries().length);
    expect(html).not.toContain('>no data<');
    mkdirSync('test-results', { recursive: true });
    writeFileSync('test-results/dashboard.html', html);
    // The picture in the docs is made on request (a browser, which CI's dashboard job need not have): IDLEASE_UPDATE_SCREENSHOT=1.
    if (process.env.IDLEASE_UPDATE_SCREENSHOT === '1') {
      const bottom = Math.max(...items.map((i) => i.gridPos.y + i.gridPos.h));
      const page = await openPage({ width: 1460, height: bottom * 30 + 80 });
      try {
        await page.goto(`file://${path.resolve('test-results/dashboard.html')}`);
        writeFileSync('docs/images/dashboard.png', await page.screenshot());
      } finally {
        await page.close();
      }
    }
  }, 60_000);

  it('`idlease dashboard` prints the same dashboard, importable: every panel names the Prometheus data source input', async () => {
    const res = await runCli(['dashboard']);
    expect(res.code, res.stderr).toBe(0);
    const printed = JSON.parse(res.stdout) as ReturnType<typeof grafanaDashboard>;
    expect(printed).toEqual(JSON.parse(JSON.stringify(grafanaDashboard())));
    const panels = (printed.panels as Array<{ type: string; targets?: Array<{ expr: string }>; datasource?: { uid: string } }>).filter(
      (p) => p.type !== 'row',
    );
    expect(panels.map((p) => p.targets![0]!.expr)).toEqual(dashboardQueries().map((q) => q.expr));
    expect(panels.every((p) => p.datasource?.uid === '${DS_PROMETHEUS}')).toBe(true);
  });
});
