/**
 * `GET /status` of `idlease serve` (issue 45 item 1) against PostgreSQL: the token as HTTP Basic's
 * password (a browser's prompt) or a bearer, a wrong one counted and limited as on /api, Basic
 * opening nothing else; the headers that keep the page from being cached, framed or scripted;
 * hostile tag names and descriptions written as text; filter and pages at 5,000 tags, with the
 * server's time per page; an anonymous flood refused ahead of the router, as /metrics is.
 * The page in a real browser (CSP violations as console errors): serve-status-chromium.test.ts.
 */
import http from 'node:http';
import { loadavg } from 'node:os';
import { pino } from 'pino';
import { createClient } from 'redis';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { startRedis } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';
import { migrate } from '../../src/migrations/migrate.js';
import { addTag } from '../../src/segment/index.js';
import { startServer, type IdServer } from '../../src/serve/server.js';

const TOKEN = 'status-test-token-0123456789';
const bearer = { authorization: `Bearer ${TOKEN}` };
const basic = (password: string, user = 'ops') => ({ authorization: `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}` });
const HOSTILE = `<script>alert("x")</script> it's "quoted" <img src=x onerror=alert(1)>`;
const HOSTILE_TAG = `q<i>"'&`;
const TAGS = 5_000;
let db: TestDb;
let big: IdServer; // every tag: 5,000 + 2
let small: IdServer; // two tags: its /metrics renders fast enough to read a counter
const logger = pino({ level: 'silent' });

beforeAll(async () => {
  db = await createTestDb('postgres', 'serve_status');
  await migrate(db.knex);
  await addTag(db.knex, { tag: 'order', description: HOSTILE });
  await addTag(db.knex, { tag: HOSTILE_TAG, description: 'a tag name to be escaped' });
  for (let i = 0; i < TAGS; i += 250)
    await Promise.all(Array.from({ length: 250 }, (_, k) => addTag(db.knex, { tag: `t${i + k}`, description: `tag number ${i + k}` })));
  big = await startServer({ knex: db.knex, host: '127.0.0.1', port: 0, logger, token: TOKEN });
  small = await startServer({ knex: db.knex, host: '127.0.0.1', port: 0, logger, token: TOKEN, tags: ['order', HOSTILE_TAG] });
}, 180_000);

afterAll(async () => {
  await big?.close();
  await small?.close();
  await db?.drop();
});

/** The number of rows in the tbody of the table with this id. */
function rowsOf(html: string, id: string): number {
  const start = html.indexOf(`<table id="${id}">`);
  if (start < 0) return 0;
  const body = html.slice(html.indexOf('<tbody>', start), html.indexOf('</tbody>', start));
  return body.split('<tr>').length - 1;
}

async function authFailures(s: IdServer): Promise<number> {
  const text = await (await fetch(`${s.url}/metrics`, { headers: bearer })).text();
  return Number(/^idlease_serve_auth_failures_total\{result="unauthorized"\} (\d+)/m.exec(text)?.[1] ?? NaN);
}

it('auth: none → 401 with a Basic challenge; a wrong password → 401, counted; the token as Basic password or bearer → 200; Basic opens nothing else', async () => {
  const none = await fetch(`${small.url}/status?q=x`);
  expect(none.status).toBe(401);
  expect(none.headers.get('www-authenticate')).toBe('Basic realm="idlease", charset="UTF-8"');

  const before = await authFailures(small);
  const wrong = await fetch(`${small.url}/status`, { headers: basic('not-the-token') });
  expect(wrong.status).toBe(401);
  expect(wrong.headers.get('www-authenticate')).toMatch(/^Basic realm="idlease"/);
  // /metrics is rendered at most once a second: wait for a render that has the failure.
  await waitFor(async () => (await authFailures(small)) === before + 1, {
    what: 'the wrong password counted in idlease_serve_auth_failures_total',
  });

  for (const headers of [basic(TOKEN), basic(TOKEN, ''), bearer])
    expect((await fetch(`${small.url}/status`, { headers })).status).toBe(200);

  // The token as Basic is for the page only: a browser attaches cached Basic credentials to any request for the origin.
  expect((await fetch(`${small.url}/api/segment/get/order`, { headers: basic(TOKEN) })).status).toBe(401);
  expect((await fetch(`${small.url}/metrics`, { headers: basic(TOKEN) })).status).toBe(401);
  const post = await fetch(`${small.url}/v1/segment/order/lease?step=5`, { method: 'POST', headers: basic(TOKEN) });
  expect(post.status).toBe(403); // a cross-site form post carries them too: not a header a script had to set
});

it('a wrong password on /status is limited after 10 from one client (429), as a wrong token on /api', async () => {
  const statuses: number[] = [];
  for (let i = 0; i < 12; i++)
    statuses.push(
      await new Promise<number>((resolve, reject) =>
        http
          .get(`${small.url}/status`, { localAddress: '127.0.0.77', headers: basic(`guess-${i}`) }, (res) => {
            res.resume();
            resolve(res.statusCode ?? 0);
          })
          .on('error', reject),
      ),
    );
  expect(statuses).toEqual([...Array<number>(10).fill(401), 429, 429]);
});

it('headers: a CSP with no script, not cached, not framed, not sniffed, no referrer', async () => {
  const r = await fetch(`${small.url}/status`, { headers: bearer });
  expect(r.headers.get('content-type')).toBe('text/html; charset=utf-8');
  const csp = r.headers.get('content-security-policy') ?? '';
  expect(csp).toContain("default-src 'none'");
  expect(csp).toContain("frame-ancestors 'none'");
  expect(csp).toMatch(/style-src 'sha256-[A-Za-z0-9+/]+=*'/);
  expect(csp).not.toContain('script-src');
  expect(csp).not.toContain('unsafe-inline');
  expect(r.headers.get('cache-control')).toBe('no-store');
  expect(r.headers.get('x-content-type-options')).toBe('nosniff');
  expect(r.headers.get('x-frame-options')).toBe('DENY');
  expect(r.headers.get('referrer-policy')).toBe('no-referrer');
  expect(r.headers.get('server-timing')).toMatch(/^render;dur=\d+(\.\d)?$/);
  // It reloads itself every 10 s unless told otherwise, with no script.
  expect(await r.text()).toContain('<meta http-equiv="refresh" content="10">');
  const still = await (await fetch(`${small.url}/status?refresh=0`, { headers: bearer })).text();
  expect(still).not.toContain('http-equiv="refresh"');
  expect(still).toContain('does not reload');
});

it('without a token the page is open, as /metrics is', async () => {
  const open = await startServer({ knex: db.knex, host: '127.0.0.1', port: 0, logger, tags: ['order'] });
  try {
    expect((await fetch(`${open.url}/metrics`)).status).toBe(200);
    const r = await fetch(`${open.url}/status`);
    expect(r.status).toBe(200);
    expect(rowsOf(await r.text(), 'tag-rows')).toBe(1);
  } finally {
    await open.close();
  }
});

it('a description with <script>, quotes and onerror=, and a tag name with markup, render as text', async () => {
  await fetch(`${small.url}/api/segment/get/order`, { headers: bearer }); // a lease: the row has ranges
  const html = await (await fetch(`${small.url}/status`, { headers: bearer })).text();
  expect(html).toContain(
    '&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; it&#39;s &quot;quoted&quot; &lt;img src=x onerror=alert(1)&gt;',
  );
  expect(html).toContain('q&lt;i&gt;&quot;&#39;&amp;');
  expect(html).not.toMatch(/<script|<img|<i>/i);
  // The filter echoed back into the form is escaped too.
  const echoed = await (await fetch(`${small.url}/status?q=${encodeURIComponent('"><script>x</script>')}`, { headers: bearer })).text();
  expect(echoed).toContain('value="&quot;&gt;&lt;script&gt;x&lt;/script&gt;"');
  expect(echoed).not.toContain('<script');
});

it(`${TAGS.toLocaleString('en-US')} tags: 100 rows a page, the filter and the pages count right, and the server's time per page`, async () => {
  const get = async (query: string) => {
    const r = await fetch(`${big.url}/status${query}`, { headers: bearer });
    expect(r.status).toBe(200);
    const ms = Number(/dur=([\d.]+)/.exec(r.headers.get('server-timing') ?? '')![1]);
    return { html: await r.text(), ms };
  };
  const total = TAGS + 2;
  const first = await get(''); // this one reads every tag's stats (the snapshot)
  expect(rowsOf(first.html, 'tag-rows')).toBe(100);
  expect(first.html).toContain(`Tags 1–100 of ${total.toLocaleString('en-US')}.`);
  expect(first.html).toContain('page 1 of 51');
  const last = await get('?page=51');
  expect(rowsOf(last.html, 'tag-rows')).toBe(total - 5_000);
  expect((await get('?page=999')).html).toContain('page 51 of 51'); // past the end: the last page
  const one = await get('?q=t4242');
  expect(rowsOf(one.html, 'tag-rows')).toBe(1);
  expect(one.html).toContain('<td>t4242</td>');
  // t42, t420–t429, t4200–t4299: 111, in two pages; the description matches too, in any case.
  expect((await get('?q=T42')).html).toContain('Tags 1–100 of 111 matching');
  expect(rowsOf((await get('?q=t42&page=2')).html, 'tag-rows')).toBe(11);
  expect(rowsOf((await get('?q=tag+number+4242')).html, 'tag-rows')).toBe(1);
  expect((await get('?q=nothing-like-this')).html).toContain('No tag matches.');

  // The server's time: a page from a fresh snapshot (5,000 stats() read, sorted) and from a cached one.
  const fresh: number[] = [];
  const cached: number[] = [];
  for (let i = 0; i < 5; i++) {
    await new Promise((r) => setTimeout(r, 1_100)); // past the snapshot's second: the next page reads every tag again
    fresh.push((await get('?page=7')).ms);
    cached.push((await get('?page=8')).ms);
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  console.log(
    `/status at ${total} tags: server time per page, fresh snapshot median ${median(fresh).toFixed(1)} ms (${fresh.map((m) => m.toFixed(1)).join(', ')}), ` +
      `cached snapshot median ${median(cached).toFixed(1)} ms; load average ${loadavg()
        .map((l) => l.toFixed(2))
        .join(' ')}`,
  );
  expect(median(fresh)).toBeLessThan(250);
  expect(median(cached)).toBeLessThan(50);
}, 60_000);

it('a flood of anonymous /status is refused ahead of the router, as /metrics is; the right token is still answered', async () => {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 16, localAddress: '127.0.0.90' });
  const statuses = new Map<number, number>();
  const one = (path: string) =>
    new Promise<void>((resolve, reject) =>
      http
        .get(`${big.url}${path}`, { agent }, (res) => {
          res.resume();
          res.on('end', () => {
            statuses.set(res.statusCode ?? 0, (statuses.get(res.statusCode ?? 0) ?? 0) + 1);
            resolve();
          });
        })
        .on('error', reject),
    );
  const t0 = performance.now();
  for (let i = 0; i < 4_000; i += 200) await Promise.all(Array.from({ length: 200 }, (_, k) => one(k % 2 ? '/status' : `/status?q=t${k}`)));
  const ms = performance.now() - t0;
  agent.destroy();
  console.log(`4,000 anonymous /status: ${JSON.stringify([...statuses])} in ${Math.round(ms)} ms`);
  // Each is the same 401 + challenge, never a page, never counted as a guess (it carries no credentials).
  expect([...statuses]).toEqual([[401, 4_000]]);
  const r = await fetch(`${big.url}/status?q=order`, { headers: basic(TOKEN) });
  expect(r.status).toBe(200);
  expect(rowsOf(await r.text(), 'tag-rows')).toBe(1);
}, 60_000);

it('with --redis-url: a Redis section, one row per sequence asked for, its tag escaped, filtered with the tags', async () => {
  const redisServer = await startRedis('none');
  const redis = createClient({ url: `redis://127.0.0.1:${redisServer.port}` });
  await redis.connect();
  const s = await startServer({ knex: db.knex, host: '127.0.0.1', port: 0, logger, token: TOKEN, tags: ['order', HOSTILE_TAG], redis });
  try {
    expect(await (await fetch(`${s.url}/status`, { headers: bearer })).text()).not.toContain('id="redis-rows"'); // none asked for yet
    for (const tag of ['order', HOSTILE_TAG])
      expect((await fetch(`${s.url}/v1/redis/${encodeURIComponent(tag)}/ids?n=5`, { headers: bearer })).status).toBe(200);
    // The snapshot is read at most once a second: wait for one that has both sequences.
    const html = await waitFor(
      async () => {
        const page = await (await fetch(`${s.url}/status`, { headers: bearer })).text();
        return rowsOf(page, 'redis-rows') === 2 ? page : undefined;
      },
      { what: 'the two Redis sequences on the page' },
    );
    expect(html).toContain('<td>q&lt;i&gt;&quot;&#39;&amp;</td>');
    expect(html).not.toContain('<i>');
    expect(rowsOf(await (await fetch(`${s.url}/status?q=order`, { headers: bearer })).text(), 'redis-rows')).toBe(1);
  } finally {
    await s.close();
    await redis.close();
    await redisServer.destroy();
  }
});
