/**
 * `idlease serve`'s token check as an attacker on the same host or behind the same NAT meets it
 * (issue 43 items 1–4): the right token answered whatever a neighbour on the same address sends;
 * wrong tokens limited per client key (a trusted proxy's X-Forwarded-For only where the operator
 * names the proxy) under one budget for all keys; the open routes no oracle; the tag quota held
 * by concurrent creates; --allow-create without a token refused.
 */
import http from 'node:http';
import { pino } from 'pino';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { runCli } from '../helpers/cli.js';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { migrate } from '../../src/migrations/migrate.js';
import { addTag, listTags } from '../../src/segment/index.js';
import { startServer, type IdServer } from '../../src/serve/server.js';

const TOKEN = 'auth-test-token-0123456789abcdef';
let db: TestDb;
let quotaDb: TestDb;
const servers: IdServer[] = [];
const logger = pino({ level: 'silent' });

beforeAll(async () => {
  [db, quotaDb] = await Promise.all([createTestDb('postgres', 'serve_auth'), createTestDb('postgres', 'serve_auth_quota')]);
  await Promise.all([migrate(db.knex), migrate(quotaDb.knex)]);
  await addTag(db.knex, { tag: 'order' });
}, 120_000);

afterAll(async () => {
  await Promise.all(servers.map((s) => s.close()));
  await db?.drop();
  await quotaDb?.drop();
});

async function serve(extra: Partial<Parameters<typeof startServer>[0]> = {}): Promise<IdServer> {
  const s = await startServer({ knex: db.knex, host: '127.0.0.1', port: 0, logger, token: TOKEN, ...extra });
  servers.push(s);
  return s;
}

interface Answer {
  status: number;
  body: string;
  retryAfter?: string;
}

/** One request from a chosen source address (127/8 gives as many as a test needs), on a keep-alive agent when given. */
function get(
  url: string,
  o: { from?: string; token?: string; agent?: http.Agent; headers?: Record<string, string> } = {},
): Promise<Answer> {
  return new Promise((resolve, reject) =>
    http
      .get(
        url,
        {
          agent: o.agent,
          localAddress: o.agent ? undefined : o.from,
          headers: { ...(o.token === undefined ? {} : { authorization: `Bearer ${o.token}` }), ...o.headers },
        },
        (res) => {
          let body = '';
          res.on('data', (d: Buffer) => (body += d.toString()));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body, retryAfter: res.headers['retry-after'] }));
        },
      )
      .on('error', reject),
  );
}

const tally = (answers: Answer[]) => answers.reduce<Record<number, number>>((t, a) => ({ ...t, [a.status]: (t[a.status] ?? 0) + 1 }), {});

async function failures(s: IdServer): Promise<{ unauthorized: number; limited: number }> {
  // /metrics is cached for a second: wait one out so the counter read is current.
  await new Promise((r) => setTimeout(r, 1_100));
  const text = (await get(`${s.url}/metrics`, { token: TOKEN })).body;
  const read = (result: string) =>
    Number(new RegExp(`^idlease_serve_auth_failures_total\\{result="${result}"\\} (\\d+)`, 'm').exec(text)?.[1] ?? NaN);
  return { unauthorized: read('unauthorized'), limited: read('limited') };
}

it('two clients on one address: the one with the right token is answered 200 every time while the other sends wrong tokens', async () => {
  const s = await serve();
  const from = '127.0.0.7';
  const guesser = new http.Agent({ keepAlive: true, maxSockets: 1, localAddress: from });
  const good = new http.Agent({ keepAlive: true, maxSockets: 1, localAddress: from });
  const wrong: Answer[] = [];
  const right: Answer[] = [];
  // The neighbour retries an old token 200 times; the good client asks 100 times among them, on
  // the hot route, a batch route and /readyz.
  await Promise.all([
    (async () => {
      for (let i = 0; i < 200; i++) wrong.push(await get(`${s.url}/api/segment/get/order`, { agent: guesser, token: 'an-old-token' }));
    })(),
    (async () => {
      for (let i = 0; i < 100; i++) {
        const path = ['/api/segment/get/order', '/v1/segment/order/ids?n=2', '/readyz'][i % 3]!;
        right.push(await get(`${s.url}${path}`, { agent: good, token: TOKEN }));
      }
    })(),
  ]);
  guesser.destroy();
  good.destroy();
  console.log(`shared address: right token ${JSON.stringify(tally(right))}, wrong token ${JSON.stringify(tally(wrong))}`);
  expect(tally(right)).toEqual({ 200: 100 });
  expect(right.filter((_, i) => i % 3 === 2).every((a) => a.body.includes('"database"'))).toBe(true);
  // The neighbour: 10 refusals 401, then 429 with the time left.
  expect(wrong.slice(0, 10).map((a) => a.status)).toEqual(Array(10).fill(401));
  expect(new Set(wrong.slice(10).map((a) => a.status))).toEqual(new Set([429]));
  expect(Number(wrong.at(-1)!.retryAfter)).toBeGreaterThan(0);
  expect(await failures(s)).toEqual({ unauthorized: 10, limited: 190 });
});

it('5,000 wrong tokens on /readyz are refused, counted and limited after 10 as on /api; /healthz answers every token alike', async () => {
  const s = await serve();
  const agent = new http.Agent({ keepAlive: true, maxSockets: 8, localAddress: '127.0.0.8' });
  const plain = (await get(`${s.url}/readyz`)).body;
  const full = (await get(`${s.url}/readyz`, { token: TOKEN })).body;
  expect(JSON.parse(plain)).toEqual({ ready: true });
  expect(full).not.toBe(plain);
  const guesses: Answer[] = [];
  for (let i = 0; i < 5_000; i += 50)
    guesses.push(...(await Promise.all(Array.from({ length: 50 }, (_, k) => get(`${s.url}/readyz`, { agent, token: `guess-${i + k}` })))));
  console.log(`/readyz guesses: ${JSON.stringify(tally(guesses))}`);
  // A wrong token on /readyz is what it is on /api: 401, and past 10 from one client 429.
  expect(tally(guesses)).toEqual({ 401: 10, 429: 4_990 });
  expect(await failures(s)).toEqual({ unauthorized: 10, limited: 4_990 });
  // /healthz: one answer for no token, a wrong one and the right one.
  const health = await Promise.all([undefined, 'guess', TOKEN].map((token) => get(`${s.url}/healthz`, { agent, token })));
  expect(new Set(health.map((a) => `${a.status} ${a.body}`)).size).toBe(1);
  agent.destroy();
}, 60_000);

it('wrong tokens from 1,100 addresses: past the budget for all (1,000 a minute) every wrong token is 429; the right one is still answered', async () => {
  const s = await serve();
  const answers: Answer[] = [];
  for (let i = 0; i < 1_100; i += 100)
    answers.push(
      ...(await Promise.all(
        Array.from({ length: 100 }, (_, k) =>
          get(`${s.url}/api/segment/get/order`, { from: `127.1.${(i + k) >> 8}.${(i + k) & 255}`, token: 'rotating' }),
        ),
      )),
    );
  expect(tally(answers)).toEqual({ 401: 1_000, 429: 100 });
  expect((await get(`${s.url}/api/segment/get/order`, { from: '127.1.200.1', token: TOKEN })).status).toBe(200);
  expect((await get(`${s.url}/api/segment/get/order`, { from: '127.1.200.1', token: 'fresh-address' })).status).toBe(429);
}, 60_000);

it('X-Forwarded-For keys the limit only from a proxy the operator names (--trust-proxy); from anyone else it is ignored', async () => {
  const untrusted = await serve();
  const trusted = await serve({ trustProxy: ['127.0.0.9'] });
  const guess = (s: IdServer, client: string) =>
    get(`${s.url}/api/segment/get/order`, { from: '127.0.0.9', token: 'wrong', headers: { 'x-forwarded-for': `6.6.6.6, ${client}` } });
  const statuses = async (s: IdServer) => {
    const out: number[] = [];
    // Eleven clients behind one proxy, 5 wrong tokens each.
    for (let c = 0; c < 11; c++) for (let i = 0; i < 5; i++) out.push((await guess(s, `10.0.0.${c}`)).status);
    return out;
  };
  const behindTrusted = await statuses(trusted);
  expect(behindTrusted).toEqual(Array(55).fill(401));
  // The 6th wrong token of one client behind the proxy is limited; the client the proxy names is the key, not what came before it.
  for (let i = 0; i < 5; i++) expect((await guess(trusted, '10.0.0.0')).status).toBe(401);
  expect((await guess(trusted, '10.0.0.0')).status).toBe(429);
  expect((await guess(trusted, '10.0.0.1')).status).toBe(401);
  // Without --trust-proxy the header chooses nothing: 55 wrong tokens from one address, limited after 10.
  const direct = await statuses(untrusted);
  expect(tally(direct.map((status) => ({ status, body: '' })))).toEqual({ 401: 10, 429: 45 });
});

it('600 concurrent creates on --max-tags 5 make 5 tags; the others are 403 TAG_QUOTA', async () => {
  const s = await startServer({
    knex: quotaDb.knex,
    host: '127.0.0.1',
    port: 0,
    logger,
    token: TOKEN,
    allowCreate: true,
    maxTags: 5,
  });
  servers.push(s);
  const agent = new http.Agent({ keepAlive: true, maxSockets: 100 });
  const answers = await Promise.all(
    Array.from({ length: 600 }, (_, i) => get(`${s.url}/v1/segment/q${i}/ids?n=1&create=1`, { agent, token: TOKEN })),
  );
  agent.destroy();
  const tags = await listTags(quotaDb.knex);
  console.log(`600 creates on --max-tags 5: ${JSON.stringify(tally(answers))}; ${tags.length} tags`);
  expect(tags).toHaveLength(5);
  expect(tally(answers)).toEqual({ 200: 5, 403: 595 });
  expect(answers.filter((a) => a.status === 403).every((a) => a.body.includes('"TAG_QUOTA"'))).toBe(true);
  // The same tag asked for by many at once takes one slot (and already known ones none).
  const again = await Promise.all(
    Array.from({ length: 50 }, () => get(`${s.url}/v1/segment/${tags[0]!.tag}/ids?n=1&create=1`, { token: TOKEN })),
  );
  expect(tally(again)).toEqual({ 200: 50 });
}, 60_000);

it('--allow-create without a token is refused at start (BAD_CONFIG), in the library and the CLI', async () => {
  await expect(startServer({ knex: db.knex, host: '127.0.0.1', port: 0, logger, allowCreate: true })).rejects.toMatchObject({
    code: 'BAD_CONFIG',
    message: expect.stringContaining('--allow-create'),
  });
  const cli = await runCli(['--url', db.url, 'serve', '--port', '0', '--allow-create'], { env: { IDLEASE_TOKEN: undefined } });
  expect(cli.code).toBe(2);
  expect(cli.stderr).toMatch(/^idlease: BAD_CONFIG: --allow-create .*no token/);
});

it('--trust-proxy takes addresses only: a name or a typo is refused at start (BAD_CONFIG), not silently trusting nobody', async () => {
  for (const bad of ['proxy.internal', '10.0.0.256', ''])
    await expect(serve({ trustProxy: [bad] })).rejects.toMatchObject({
      code: 'BAD_CONFIG',
      message: expect.stringContaining('--trust-proxy'),
    });
  const cli = await runCli(['--url', db.url, 'serve', '--port', '0', '--trust-proxy', 'lb.example'], { env: { IDLEASE_TOKEN: TOKEN } });
  expect(cli.code).toBe(2);
  expect(cli.stderr).toMatch(/^idlease: BAD_CONFIG: --trust-proxy takes the IP addresses/);
});
