/**
 * `npm run bench -- serve-metrics`: an operator's `/metrics` scrape of `idlease serve` at 5,000
 * tags, quiet and while 16 anonymous clients flood `/metrics` (each refused 401), the flood in
 * a process of its own. Target: p50 ≤ 100 ms under the flood. Every scrape finds the last render
 * expired (they are spaced past its cache), so each one is a fresh render: what Prometheus sees.
 * Store: a temporary embedded PGlite database (IDLEASE_BENCH_URL: a server URL, whose tags t0…t4999 are added).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { connect } from '../src/connect.js';
import { migrate } from '../src/migrations/migrate.js';
import { addTag } from '../src/segment/index.js';
import { median } from './pairs.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const TSX = pathToFileURL(path.join(ROOT, 'node_modules/tsx/dist/loader.mjs')).href;
const BIN = path.join(ROOT, 'src/cli/bin.ts');
const TAGS = 5_000;
const SCRAPES = Number(process.env.IDLEASE_BENCH_ROUNDS ?? 9);
const TOKEN = 'bench-token-0123456789abcdef';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export default async function run(): Promise<void> {
  const dir = mkdtempSync(path.join(tmpdir(), 'idlease-bench-metrics-'));
  const url = process.env.IDLEASE_BENCH_URL ?? `pglite:${path.join(dir, 'db')}`;
  let serve: ChildProcess | undefined;
  let flooder: ChildProcess | undefined;
  try {
    const knex = connect(url);
    await migrate(knex);
    for (let i = 0; i < TAGS; i++) await addTag(knex, { tag: `t${i}` });
    await knex.destroy();
    serve = spawn(process.execPath, ['--import', TSX, BIN, '--url', url, 'serve', '--port', '0'], {
      cwd: ROOT,
      env: { ...process.env, IDLEASE_TOKEN: TOKEN },
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    const base = await new Promise<string>((resolve) => serve!.stdout!.once('data', (d: Buffer) => resolve(d.toString().trim())));
    const metrics = `${base}/metrics`;
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const scrape = () =>
      new Promise<number>((resolve, reject) => {
        const t0 = performance.now();
        http
          .get(metrics, { agent, headers: { authorization: `Bearer ${TOKEN}` } }, (res) => {
            res.resume();
            res.on('end', () => resolve(performance.now() - t0));
          })
          .on('error', reject);
      });
    // Spaced past the render cache (1 s, and at least 4× a render's time): each scrape renders.
    const scrapes = async (n: number) => {
      const out: number[] = [];
      for (let i = 0; i < n; i++) {
        await sleep(Math.max(1_100, 5 * (out.at(-1) ?? 0)));
        out.push(await scrape());
      }
      return out;
    };
    await scrapes(2); // warm-up
    const quiet = await scrapes(SCRAPES);
    flooder = spawn(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `import http from 'node:http';
         let refused = 0;
         process.on('SIGTERM', () => { process.stdout.write(String(refused)); process.exit(0); });
         for (let i = 0; i < 16; i++) {
           const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
           const again = () => http.get(${JSON.stringify(metrics)}, { agent }, (res) => {
             if (res.statusCode === 401) refused++;
             res.resume();
             res.on('end', again);
           }).on('error', again);
           again();
         }`,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let refused = '';
    flooder.stdout!.on('data', (d: Buffer) => (refused += d.toString()));
    const flooderExited = new Promise((r) => flooder!.once('exit', r));
    await sleep(500);
    const t0 = Date.now();
    const flooded = await scrapes(SCRAPES);
    const seconds = (Date.now() - t0) / 1000 + 0.5;
    flooder.kill('SIGTERM');
    await flooderExited;
    agent.destroy();
    const show = (xs: number[]) => `${Math.round(median(xs))} ms (${xs.map((x) => Math.round(x)).join(' ')})`;
    console.log(
      `store: ${url.startsWith('pglite') ? 'embedded PGlite' : url.replace(/\/\/[^@]*@/, '//')}; Node ${process.version}; ${TAGS} tags; ${SCRAPES} scrapes each way, each a fresh render; the flood: 16 keep-alive clients in a process of their own, server and clients on the same cores\n`,
    );
    console.log('| operator `GET /metrics` p50 | quiet | beside 16 anonymous flooders | flood refusals/s | target |');
    console.log('|---|---|---|---|---|');
    console.log(
      `| with the token | ${show(quiet)} | ${show(flooded)} | ${Math.round(Number(refused) / seconds).toLocaleString('en')} | ≤ 100 ms under the flood: ${median(flooded) <= 100 ? 'met' : 'missed'} |`,
    );
  } finally {
    flooder?.kill('SIGTERM');
    serve?.kill('SIGTERM');
    await sleep(500);
    rmSync(dir, { recursive: true, force: true });
  }
}
