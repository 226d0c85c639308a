/**
 * `idlease serve` against probers, scrapers, guessers and rebinders (issue 35 items 2–6, issue
 * 38 item 9), one test each: /readyz cached and off the lease pool, /metrics behind the token
 * and rendered at most once a second at 5,000 tags, a create quota, token hygiene (length
 * beyond loopback, guesses limited, the scheme in any case), the Host allow-list on by default,
 * the right classes (a statement timeout is 503, a long tag 400) and no URL in any body.
 */
import http from 'node:http';
import { pino } from 'pino';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { runCli } from '../helpers/cli.js';
import { createTestDb, ownTable, type TestDb } from '../helpers/db.js';
import { startServe } from '../helpers/serve-process.js';
import { migrate } from '../../src/migrations/migrate.js';
import { addTag } from '../../src/segment/index.js';
import { startServer, type IdServer } from '../../src/serve/server.js';

const TOKEN = 'guard-test-token-0123456789';
const auth = { authorization: `Bearer ${TOKEN}` };
let db: TestDb;
let guarded: IdServer; // token, --allow-create, --max-tags 1003
let open: IdServer; // no token, loopback
const logLines: string[] = [];

beforeAll(async () => {
  db = await createTestDb('postgres', 'serve_guard');
  await migrate(db.knex);
  await addTag(db.knex, { tag: 'order' });
  for (let i = 0; i < 5_000; i += 250) await Promise.all(Array.from({ length: 250 }, (_, k) => addTag(db.knex, { tag: `t${i + k}` })));
  const logger = pino({ level: 'info' }, { write: (line: string) => void logLines.push(line) });
  guarded = await startServer({ knex: db.knex, host: '127.0.0.1', port: 0, logger, token: TOKEN, allowCreate: true, maxTags: 5_003 });
  open = await startServer({ knex: db.knex, host: '127.0.0.1', port: 0, logger, tags: ['order'] });
}, 120_000);

afterAll(async () => {
  await guarded?.close();
  await open?.close();
  await db?.drop();
});

it('/readyz flooded by 256 anonymous connections: never 503 while the database is up, and not one statement on the lease pool', async () => {
  let poolStatements = 0;
  const count = () => poolStatements++;
  db.knex.on('query', count);
  // 256 connections over 8 source addresses: 32 each, under the per-address cap (128).
  const agents = Array.from(
    { length: 8 },
    (_, i) => new http.Agent({ keepAlive: true, maxSockets: 32, localAddress: `127.0.0.${10 + i}` }),
  );
  const statuses = new Map<number, number>();
  const until = Date.now() + 3_000;
  await Promise.all(
    Array.from({ length: 256 }, async (_, n) => {
      const agent = agents[n % 8];
      while (Date.now() < until) {
        const status = await new Promise<number>((resolve) =>
          http
            .get(`${guarded.url}/readyz`, { agent }, (res) => {
              res.resume();
              res.on('end', () => resolve(res.statusCode ?? 0));
            })
            .on('error', () => resolve(0)),
        );
        statuses.set(status, (statuses.get(status) ?? 0) + 1);
      }
    }),
  );
  for (const a of agents) a.destroy();
  db.knex.off('query', count);
  console.log(`/readyz flood: ${JSON.stringify([...statuses])}; statements on the lease pool ${poolStatements}`);
  expect([...statuses.keys()]).toEqual([200]);
  expect(statuses.get(200)).toBeGreaterThan(256);
  expect(poolStatements).toBe(0);
  // Leases still go through the pool.
  expect((await fetch(`${guarded.url}/v1/segment/order/lease?step=5`, { method: 'POST', headers: auth })).status).toBe(200);
}, 30_000);

it('/metrics at 5,000 tags: anonymous refused when a token is set; 16 scrapers share at most one render a second', async () => {
  expect((await fetch(`${guarded.url}/metrics`)).status).toBe(401);
  const renders = async () => {
    const text = await (await fetch(`${guarded.url}/metrics`, { headers: auth })).text();
    return Number(/^idlease_serve_metrics_renders_total (\d+)/m.exec(text)![1]);
  };
  const before = await renders();
  const t0 = Date.now();
  let scrapes = 0;
  let healthWorst = 0;
  await Promise.all([
    ...Array.from({ length: 16 }, async () => {
      while (Date.now() - t0 < 3_000) {
        const r = await fetch(`${guarded.url}/metrics`, { headers: auth });
        expect(r.status).toBe(200);
        expect((await r.text()).length).toBeGreaterThan(1_000_000);
        scrapes++;
      }
    }),
    (async () => {
      while (Date.now() - t0 < 3_000) {
        const h0 = performance.now();
        expect((await fetch(`${guarded.url}/healthz`)).status).toBe(200);
        healthWorst = Math.max(healthWorst, performance.now() - h0);
        await new Promise((r) => setTimeout(r, 50));
      }
    })(),
  ]);
  const made = (await renders()) - before;
  const seconds = (Date.now() - t0) / 1000;
  console.log(`/metrics: ${scrapes} scrapes, ${made} renders in ${seconds.toFixed(1)} s; /healthz worst ${Math.round(healthWorst)} ms`);
  expect(scrapes).toBeGreaterThanOrEqual(16);
  expect(made).toBeLessThanOrEqual(Math.ceil(seconds) + 2);
}, 60_000);

it('tags created over HTTP stop at --max-tags with 403 TAG_QUOTA', async () => {
  const make = (tag: string) => fetch(`${guarded.url}/v1/segment/${tag}/ids?n=1&create=1`, { headers: auth });
  expect((await make('new_a')).status).toBe(200);
  expect((await make('new_b')).status).toBe(200);
  const over = await make('new_c');
  expect(over.status).toBe(403);
  const body = (await over.json()) as { code: string; message: string };
  expect(body.code).toBe('TAG_QUOTA');
  expect(body.message).toContain('--max-tags 5003');
});

it('auth: the scheme in any case; wrong tokens counted, logged and limited per client (429 + Retry-After)', async () => {
  expect((await fetch(`${guarded.url}/api/segment/get/order`, { headers: { authorization: `bearer ${TOKEN}` } })).status).toBe(200);
  expect((await fetch(`${guarded.url}/api/segment/get/order`, { headers: { authorization: `BEARER ${TOKEN}` } })).status).toBe(200);
  // The guesser on an address of its own.
  const guess = (token: string) =>
    new Promise<{ status: number; retryAfter?: string }>((resolve) =>
      http.get(
        `${guarded.url}/api/segment/get/order`,
        { localAddress: '127.0.0.5', headers: { authorization: `Bearer ${token}` } },
        (res) => {
          res.resume();
          resolve({ status: res.statusCode ?? 0, retryAfter: res.headers['retry-after'] });
        },
      ),
    );
  const statuses: number[] = [];
  for (let i = 0; i < 14; i++) statuses.push((await guess(`guess-${i}`)).status);
  expect(statuses.slice(0, 10)).toEqual(Array(10).fill(401));
  expect(statuses.slice(10)).toEqual(Array(4).fill(429));
  const limited = await guess('guess-14');
  expect(limited.status).toBe(429);
  expect(Number(limited.retryAfter)).toBeGreaterThan(0);
  // The right token is checked first: answered from the limited address too (serve-auth.test.ts).
  expect((await guess(TOKEN)).status).toBe(200);
  // Another address is not affected.
  expect((await fetch(`${guarded.url}/api/segment/get/order`, { headers: auth })).status).toBe(200);
  // (The counter, idlease_serve_auth_failures_total, is in /metrics; its render here is cached for seconds at 5,000 tags.)
  expect(logLines.some((l) => l.includes('"event":"auth-failed"'))).toBe(true);
  expect(logLines.filter((l) => l.includes('"event":"auth-failed"')).length).toBeLessThanOrEqual(2);
});

it('a no-token loopback server answers only its own Host names: DNS rebinding gets 421', async () => {
  const rebind = { host: 'attacker.example', 'x-idlease': '1' };
  const lease = await new Promise<number>((resolve) =>
    http
      .request(`${open.url}/v1/segment/order/lease?step=10000000`, { method: 'POST', headers: rebind }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      })
      .end(),
  );
  expect(lease).toBe(421);
  const ready = await new Promise<number>((resolve) =>
    http.get(`${open.url}/readyz`, { headers: rebind }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    }),
  );
  expect(ready).toBe(421);
  for (const host of ['localhost', '127.0.0.1'])
    expect(
      await new Promise<number>((resolve) =>
        http.get(`${open.url}/api/segment/get/order`, { headers: { host: `${host}:1` } }, (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        }),
      ),
    ).toBe(200);
});

it('classes: a remote lease whose statement times out is 503 DB_UNAVAILABLE; a tag over 128 characters is 400 with no error line', async () => {
  const long = await fetch(`${guarded.url}/api/segment/get/${'x'.repeat(129)}`, { headers: auth });
  expect(long.status).toBe(400);
  expect(((await long.json()) as { code: string }).code).toBe('BAD_ARGUMENT');
  expect(logLines.some((l) => l.includes('"level":50'))).toBe(false);
  // Another connection holds the row locked past the lease's 5 s statement bound.
  const other = db.another();
  const trx = await other.transaction();
  try {
    await trx.raw(`SELECT 1 FROM ${ownTable('postgres', 'idlease_segments')} WHERE tag = ? FOR UPDATE`, ['order']);
    const r = await fetch(`${guarded.url}/v1/segment/order/lease?step=5`, { method: 'POST', headers: auth });
    expect(r.status).toBe(503);
    expect(((await r.json()) as { code: string }).code).toBe('DB_UNAVAILABLE');
  } finally {
    await trx.rollback();
  }
}, 30_000);

it('CLI: a short token beyond loopback and --protect-metrics without a token are refused at start; no HTTP body carries the URL', async () => {
  const short = await runCli(['--url', db.url, 'serve', '--host', '0.0.0.0', '--port', '0', '--token', 'short-token']);
  expect(short.code).toBe(2);
  expect(short.stderr).toContain('at least 16');
  const bare = await runCli(['--url', db.url, 'serve', '--port', '0', '--protect-metrics']);
  expect(bare.code).toBe(2);
  expect(bare.stderr).toContain('--protect-metrics needs a token');
  const serve = await startServe(db.url, ['--tags', 'order,nope']).catch((e: Error) => e);
  expect(serve).toBeInstanceOf(Error); // --tags naming a missing tag ends the start
  const s = await startServe(db.url);
  try {
    const r = await fetch(`${s.url}/api/segment/get/nope`);
    expect(r.status).toBe(404);
    const body = await r.text();
    const u = new URL(db.url);
    expect(body).toContain('idlease tag add nope');
    expect(body).toContain('with the --url this server was started with');
    for (const part of [u.host, u.port, u.pathname.slice(1), 'postgres://']) expect(body).not.toContain(part);
  } finally {
    await s.stop();
  }
}, 60_000);
