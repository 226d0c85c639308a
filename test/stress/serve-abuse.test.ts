/**
 * `idlease serve` under a client that sends and never reads: 3 sockets, each with 300
 * pipelined requests for the largest batch (the default --max-batch) written at once and then
 * never read from, for 10 s.
 * Before the connection limiter, one such socket took the server from 87 MB to 901 MB and
 * /healthz to 11 s. Now a connection runs one request at a time and waits for its socket to
 * drain: RSS may grow at most 150 MB and /healthz answers within 500 ms throughout (the bound
 * the issue sets; generous next to the few ms it takes on an idle machine).
 */
import { readFileSync } from 'node:fs';
import net from 'node:net';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { startServe, type ServeProcess } from '../helpers/serve-process.js';
import { migrate } from '../../src/migrations/migrate.js';
import { addTag } from '../../src/segment/index.js';

/**
 * serve's default --max-batch. A 100,000-ID batch costs ~110 ms of one core to make and write
 * (100k bigints, 2.2 MB of JSON), during which nothing else on the event loop runs: with 3
 * abusive sockets on a loaded machine /healthz took 1.1 s. That measurement is why the default
 * is 10,000 (~11 ms).
 */
const MAX_BATCH = 10_000;
let db: TestDb;
let server: ServeProcess;

beforeAll(async () => {
  db = await createTestDb('postgres', 'serve_abuse');
  await migrate(db.knex);
  await addTag(db.knex, { tag: 'order' });
  // --max-pipelined above 300: the requests stay queued, so what bounds memory here is the
  // backpressure (one response per connection until the socket drains), not the cap.
  server = await startServe(db.url, ['--max-batch', String(MAX_BATCH), '--max-pipelined', '400']);
});

afterAll(async () => {
  await server?.stop();
  await db?.drop();
});

function rssMb(pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8')
    .split('\n')
    .find((l) => l.startsWith('VmRSS:'))!;
  return Number(/(\d+)/.exec(line)![1]) / 1024;
}

it('3 sockets × 300 pipelined max batches never read: RSS grows ≤ 150 MB, /healthz within 500 ms throughout', async () => {
  const { hostname: host, port } = new URL(server.url);
  // Warm up: the first batch leases, JIT compiles; measure growth from there.
  expect((await fetch(`${server.url}/v1/segment/order/ids?n=${MAX_BATCH}`)).status).toBe(200);
  const before = rssMb(server.child.pid!);
  const t00 = performance.now();
  await (await fetch(`${server.url}/healthz`)).text();
  const idleHealthMs = Math.round(performance.now() - t00);
  const request = `GET /v1/segment/order/ids?n=${MAX_BATCH} HTTP/1.1\r\nHost: ${host}:${port}\r\n\r\n`;
  const sockets = await Promise.all(
    [0, 1, 2].map(
      () =>
        new Promise<net.Socket>((resolve, reject) => {
          const s = net.connect(Number(port), host, () => {
            s.pause(); // never read
            s.write(request.repeat(300));
            resolve(s);
          });
          s.on('error', reject);
          s.on('close', () => undefined);
        }),
    ),
  );
  let worstHealthMs = 0;
  const latencies: number[] = [];
  let peak = before;
  const until = Date.now() + 10_000;
  while (Date.now() < until) {
    const t0 = performance.now();
    const res = await fetch(`${server.url}/healthz`, { signal: AbortSignal.timeout(5_000) });
    expect(res.status).toBe(200);
    await res.text();
    latencies.push(Math.round(performance.now() - t0));
    worstHealthMs = Math.max(worstHealthMs, latencies.at(-1)!);
    peak = Math.max(peak, rssMb(server.child.pid!));
    await new Promise((r) => setTimeout(r, 200));
  }
  // The server kept the abusers' connections open (they were held, not dropped).
  expect(sockets.map((s) => s.destroyed)).toEqual([false, false, false]);
  for (const s of sockets) s.destroy();
  console.log(
    `serve RSS ${before.toFixed(0)} MB → peak ${peak.toFixed(0)} MB; worst /healthz ${worstHealthMs.toFixed(0)} ms (idle ${idleHealthMs} ms; ${latencies.join(' ')})`,
  );
  expect(peak - before).toBeLessThanOrEqual(150);
  expect(worstHealthMs).toBeLessThan(500);
  // The server still serves after the abusers are gone.
  expect((await fetch(`${server.url}/api/segment/get/order`)).status).toBe(200);
});
