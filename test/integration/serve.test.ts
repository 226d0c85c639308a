/**
 * Issue 15: `idlease serve` as a real OS process on a real database: endpoints and their
 * errors, tokens, concurrent clients, remote leases beside in-process allocators, metrics
 * against what was served, and SIGTERM under load.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ALL_FLAVORS, createTestDb, type TestDb } from '../helpers/db.js';
import { runCli } from '../helpers/cli.js';
import { startServe, type ServeProcess } from '../helpers/serve-process.js';
import { migrate } from '../../src/migrations/migrate.js';
import { addTag, createSegmentAllocator, listTags } from '../../src/segment/index.js';
import { waitFor } from '../helpers/wait.js';

const TOKEN = 's3cret-token';

/** /metrics with the token, once the render it caches (at most one a second) is older than what the test did. */
async function scrape(base: string): Promise<string> {
  await new Promise((r) => setTimeout(r, 1_100));
  return (await fetch(`${base}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } })).text();
}

async function get(
  url: string,
  init: RequestInit = {},
): Promise<{ status: number; text: string; json: () => unknown; cacheControl: string | null }> {
  const r = await fetch(url, {
    ...init,
    headers: { authorization: `Bearer ${TOKEN}`, ...(init.headers as Record<string, string> | undefined) },
  });
  const text = await r.text();
  return { status: r.status, text, json: () => JSON.parse(text), cacheControl: r.headers.get('cache-control') };
}

/** Fetch a counter's value from Prometheus text. */
function metric(text: string, name: string, labels: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${name}{${labels}}`));
  const value = line?.split(' ').at(-1);
  return value === undefined ? NaN : value === '+Inf' ? Infinity : Number(value);
}

describe.each(ALL_FLAVORS)('idlease serve on %s', (flavor) => {
  let db: TestDb | undefined;
  let dbUrl: string;
  let dir: string | undefined;
  let server: ServeProcess;
  beforeAll(async () => {
    if (flavor === 'pglite') {
      // The server process owns the embedded database: tags are added before it starts.
      dir = mkdtempSync(path.join(tmpdir(), 'idlease-serve-'));
      dbUrl = `pglite:${dir}`;
      for (const tag of ['order', 'mixed', 'load'])
        expect((await runCli(['--url', dbUrl, 'tag', 'add', tag, '--step', '100'])).code).toBe(0);
    } else {
      db = await createTestDb(flavor, 'serve');
      dbUrl = db.url;
      await migrate(db.knex, { workers: true });
      for (const tag of ['order', 'mixed', 'load']) await addTag(db.knex, { tag, step: 100 });
    }
    server = await startServe(dbUrl, ['--token', TOKEN]);
  }, 120_000);
  afterAll(async () => {
    await server?.stop();
    await db?.drop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('a fresh server lists every tag at zero before any ID request; remote leases and the snowflake worker are counted', async () => {
    const fresh = await scrape(server.url);
    for (const tag of ['order', 'mixed', 'load']) {
      const l = `tag="${tag}"`;
      for (const name of [
        'idlease_segment_ids_served_total',
        'idlease_segment_leases_total',
        'idlease_segment_waits_total',
        'idlease_segment_timeouts_total',
        'idlease_segment_regressions_total',
        'idlease_segment_remaining_ids',
        'idlease_segment_remote_leases_total',
        'idlease_segment_remote_lease_ids_total',
        'idlease_segment_lease_duration_seconds_count',
      ]) {
        expect(metric(fresh, name, l), `${name}{${l}}`).toBe(0);
      }
      expect(metric(fresh, 'idlease_segment_runway_seconds', l)).toBe(Infinity);
    }
    const lease = await get(`${server.url}/v1/segment/order/lease?step=50`, { method: 'POST' });
    expect(lease.status).toBe(200);
    expect((await get(`${server.url}/v1/segment/order/lease?step=7`, { method: 'POST' })).status).toBe(200);
    expect((await get(`${server.url}/api/snowflake/get/k`)).status).toBe(200);
    const after = await scrape(server.url);
    expect(metric(after, 'idlease_segment_remote_leases_total', 'tag="order"')).toBe(2);
    expect(metric(after, 'idlease_segment_remote_lease_ids_total', 'tag="order"')).toBe(57);
    // Remote ranges are served by the client, not counted as served here.
    expect(metric(after, 'idlease_segment_ids_served_total', 'tag="order"')).toBe(0);
    // One ID asked for, one issued: the claim's first ID is the answer, not drawn and discarded.
    expect(metric(after, 'idlease_snowflake_ids_issued_total', 'group="serve"')).toBe(1);
    expect(metric(after, 'idlease_snowflake_worker_id', 'group="serve"')).toBe(0);
    expect(metric(after, 'idlease_snowflake_lease_valid', 'group="serve"')).toBe(1);
    expect(metric(after, 'idlease_snowflake_claims_total', 'group="serve"')).toBe(1);
    expect(metric(after, 'idlease_snowflake_renewals_total', 'group="serve"')).toBeGreaterThanOrEqual(1);
  });

  it.each(flavor === 'pglite' ? [] : ['--tags'])('%s limits the series to the tags served', async () => {
    const limited = await startServe(dbUrl, ['--tags', 'load']);
    try {
      const text = await scrape(limited.url);
      expect(metric(text, 'idlease_segment_ids_served_total', 'tag="load"')).toBe(0);
      expect(text).not.toContain('tag="order"');
    } finally {
      expect(await limited.stop()).toBe(0);
    }
  });

  it('serves IDs (Leaf path as text, batches as JSON strings, remote leases) and answers bad input with 4xx {code, message}, never 5xx', async () => {
    const a = await get(`${server.url}/api/segment/get/order`);
    expect(a.status).toBe(200);
    expect(a.text).toMatch(/^\d+$/);
    const b = await get(`${server.url}/v1/segment/order/ids?n=5`);
    expect(b.status).toBe(200);
    const ids = (b.json() as { ids: string[] }).ids;
    expect(ids.map(BigInt)).toEqual([1n, 2n, 3n, 4n, 5n].map((i) => BigInt(a.text) + i));
    const lease = await get(`${server.url}/v1/segment/order/lease?step=50`, { method: 'POST' });
    expect(lease.status).toBe(200);
    const r = lease.json() as { start: string; end: string };
    expect(BigInt(r.end) - BigInt(r.start)).toBe(49n);
    // Leaf's snowflake route: IDs from a worker id the server leased (the key is only validated).
    const s1 = await get(`${server.url}/api/snowflake/get/anykey`);
    const s2 = await get(`${server.url}/api/snowflake/get/other`);
    expect([s1.status, s2.status]).toEqual([200, 200]);
    expect(s1.text).toMatch(/^\d+$/);
    expect(BigInt(s2.text)).toBeGreaterThan(BigInt(s1.text));
    // No answer that carries IDs may be kept by a cache on the way (it would hand them out again).
    expect([a, b, lease, s1].map((x) => x.cacheControl)).toEqual(Array(4).fill('no-store'));
    // A path the hot route does not take as it is (escaped, or with a query) is the router's: the same tag, decoded.
    for (const p of ['/api/segment/get/ord%65r', '/api/segment/get/order?x=1']) {
      const r = await get(`${server.url}${p}`);
      expect([p, r.status, BigInt(r.text) > BigInt(a.text)]).toEqual([p, 200, true]);
    }
    const bad: Array<[string, RequestInit, number, string]> = [
      ['/api/segment/get/nope', {}, 404, 'UNKNOWN_TAG'],
      ['/api/snowflake/get/x', { headers: { authorization: 'Bearer wrong' } }, 401, 'UNAUTHORIZED'],
      ['/v1/segment/order/ids?n=0', {}, 400, 'BAD_ARGUMENT'],
      ['/v1/segment/order/ids?n=abc', {}, 400, 'BAD_ARGUMENT'],
      ['/v1/segment/order/ids?n=100001', {}, 400, 'BAD_ARGUMENT'],
      ['/v1/segment/order/lease?step=0', { method: 'POST' }, 400, 'BAD_ARGUMENT'],
      ['/v1/segment/order/lease?step=50', {}, 405, 'METHOD_NOT_ALLOWED'],
      ['/api/segment/get/%E0%A4%A', {}, 400, 'BAD_ARGUMENT'],
      ['/junk/../../etc/passwd', {}, 404, 'NOT_FOUND'],
      ['/v1/segment/order/lease?step=5', { method: 'POST', body: 'x'.repeat(5000) }, 413, 'PAYLOAD_TOO_LARGE'],
      ['/api/segment/get/order', { headers: { authorization: 'Bearer wrong' } }, 401, 'UNAUTHORIZED'],
      ['/v1/segment/order/ids?n=1', { headers: { authorization: '' } }, 401, 'UNAUTHORIZED'],
    ];
    for (const [p, init, status, code] of bad) {
      const res = await get(`${server.url}${p}`, init);
      expect([p, res.status]).toEqual([p, status]);
      expect(res.json()).toMatchObject({ code, message: expect.any(String) });
    }
    // Oversized headers: 431 from the server, which keeps serving.
    const big = await fetch(`${server.url}/healthz`, { headers: { 'x-big': 'a'.repeat(20_000) } });
    expect(big.status).toBe(431);
    // Health stays open; /metrics takes the token whenever one is set.
    expect((await fetch(`${server.url}/healthz`)).status).toBe(200);
    expect((await fetch(`${server.url}/readyz`)).status).toBe(200);
    expect((await fetch(`${server.url}/metrics`)).status).toBe(401);
    expect((await get(`${server.url}/metrics`)).status).toBe(200);
    expect((await get(`${server.url}/api/segment/get/order`)).status).toBe(200);
  });

  it('4 concurrent clients × 10k IDs: no duplicate, and /metrics counts exactly what was served', async () => {
    const before = metric(await scrape(server.url), 'idlease_segment_ids_served_total', 'tag="load"') || 0;
    const perClient = await Promise.all(
      Array.from({ length: 4 }, async () => {
        const got: bigint[] = [];
        for (let i = 0; i < 2_000; i++) got.push(BigInt((await get(`${server.url}/api/segment/get/load`)).text));
        for (let i = 0; i < 80; i++)
          got.push(...((await get(`${server.url}/v1/segment/load/ids?n=100`)).json() as { ids: string[] }).ids.map(BigInt));
        return got;
      }),
    );
    const all = perClient.flat();
    expect(all.length).toBe(40_000);
    expect(new Set(all).size).toBe(all.length);
    for (const ids of perClient) for (let i = 1; i < ids.length; i++) expect(ids[i]! > ids[i - 1]!).toBe(true);
    const text = await scrape(server.url);
    expect(metric(text, 'idlease_segment_ids_served_total', 'tag="load"') - before).toBe(40_000);
    expect(metric(text, 'idlease_segment_leases_total', 'tag="load"')).toBeGreaterThan(0);
    expect(text).toContain('idlease_segment_lease_duration_seconds_bucket{le="0.005",tag="load"}');
  }, 120_000);

  it.each(flavor === 'pglite' ? [] : ['in-process'])('remote leases mixed with %s allocators on the same tag never overlap', async () => {
    const local = createSegmentAllocator({ knex: db!.knex, tag: 'mixed', minStep: 7, maxStep: 7 });
    const ranges: Array<[bigint, bigint]> = [];
    const localIds: bigint[] = [];
    await Promise.all([
      (async () => {
        for (let i = 0; i < 60; i++) {
          const r = (await get(`${server.url}/v1/segment/mixed/lease?step=${1 + (i % 13)}`, { method: 'POST' })).json() as {
            start: string;
            end: string;
          };
          ranges.push([BigInt(r.start), BigInt(r.end)]);
        }
      })(),
      (async () => {
        for (let i = 0; i < 300; i++) localIds.push(await local.next());
      })(),
      (async () => {
        for (let i = 0; i < 200; i++) localIds.push(BigInt((await get(`${server.url}/api/segment/get/mixed`)).text));
      })(),
    ]);
    await local.close();
    for (const id of localIds)
      expect(
        ranges.some(([s, e]) => id >= s && id <= e),
        `ID ${id} inside a remote lease`,
      ).toBe(false);
    expect(new Set(localIds).size).toBe(localIds.length);
    const sorted = [...ranges].sort((x, y) => (x[0] < y[0] ? -1 : 1));
    for (let i = 1; i < sorted.length; i++) expect(sorted[i]![0] > sorted[i - 1]![1]).toBe(true);
  });

  it('SIGTERM under load: requests in flight are answered, the process exits 0 and gives the unused tail back', async () => {
    // A server of its own, so this test can stop it.
    const own = flavor === 'pglite' ? server : await startServe(dbUrl, ['--token', TOKEN]);
    const served: bigint[] = [];
    let stop = false;
    const clients = Array.from({ length: 4 }, async () => {
      while (!stop) {
        try {
          const r = await get(`${own.url}/api/segment/get/order`);
          if (r.status === 200) served.push(BigInt(r.text));
          else expect(r.json()).toMatchObject({ code: 'SHUTTING_DOWN' });
        } catch {
          // connection refused or closed once the server stopped accepting
          stop = true;
        }
      }
    });
    await waitFor(() => served.length >= 20, { what: 'the 4 clients to draw 20 IDs before the SIGTERM' });
    const code = await own.stop('SIGTERM');
    stop = true;
    await Promise.all(clients);
    expect(code).toBe(0);
    expect(own.stderr()).toMatch(/"event":"stop"/);
    expect(new Set(served).size).toBe(served.length);
    expect(served.length).toBeGreaterThan(0);
    if (flavor !== 'pglite') {
      // Given back: the row ends right after the highest ID served (no one else leased 'order' since).
      const row = (await listTags(db!.knex)).find((t) => t.tag === 'order')!;
      const highest = served.reduce((m, x) => (x > m ? x : m));
      expect(row.maxId).toBe(highest);
      expect(/"givenBack":"[1-9]/.test(own.stderr())).toBe(true);
    }
  }, 60_000);
});
