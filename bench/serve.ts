/**
 * `npm run bench -- serve`: `idlease serve` under autocannon (keep-alive, 64 connections)
 * against a bare node:http server returning an in-memory counter, both as separate OS
 * processes on this machine, measured alternately in the same run. `idlease serve` is the
 * built package (bin/idlease.js, built first: build.ts), as `npx idlease serve` runs it — not
 * src/ through tsx, whose per-closure naming helper cost the hot route ~3 % of its CPU.
 * Store: a temporary embedded PGlite database (set IDLEASE_BENCH_URL to a server URL to lease
 * from it).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import autocannon from 'autocannon';
import { build, PACKAGE_BIN as BIN, ROOT } from './build.js';
import { median, pairOnce } from './pairs.js';

const TSX = pathToFileURL(path.join(ROOT, 'node_modules/tsx/dist/loader.mjs')).href;
const SECONDS = Number(process.env.IDLEASE_BENCH_SECONDS ?? 4);
// Pairs, order alternating, ratio = median of the pairs' ratios: on a shared 2-core VM one
// sequential best-of-2 gave 1.44× and 0.51× in two runs minutes apart.
const ROUNDS = Number(process.env.IDLEASE_BENCH_ROUNDS ?? 6);

/** Start a server process; `args` name a .js file, or a .ts one with ['--import', TSX] first. */
function start(args: string[]): Promise<{ url: string; child: ChildProcess }> {
  const child = spawn(process.execPath, args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      if (out.includes('\n')) resolve({ url: out.split('\n')[0]!.trim(), child });
    });
    child.once('exit', (code) => reject(new Error(`server exited ${code} before listening`)));
  });
}

async function load(url: string, seconds = SECONDS): Promise<autocannon.Result> {
  return autocannon({ url, connections: 64, pipelining: 1, duration: seconds });
}

function stop(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
  });
}

export default async function run(): Promise<void> {
  build();
  const dir = mkdtempSync(path.join(tmpdir(), 'idlease-bench-serve-'));
  const url = process.env.IDLEASE_BENCH_URL ?? `pglite:${path.join(dir, 'db')}`;
  try {
    const cli = (args: string[]) => spawnSync(process.execPath, [BIN, '--url', url, ...args], { cwd: ROOT, stdio: 'inherit' });
    cli(['migrate']);
    cli(['tag', 'add', 'bench', '--step', '1000']);
    const base = await start(['--import', TSX, path.join(ROOT, 'bench/serve-baseline.ts')]);
    const ours = await start([BIN, '--url', url, 'serve', '--port', '0']);
    const idPath = `${ours.url}/api/segment/get/bench`;
    await load(base.url, 2); // warm-up: JIT and the first leases, out of the timed runs
    await load(idPath, 2);
    const pairs: Array<[autocannon.Result, autocannon.Result]> = [];
    for (let r = 0; r < ROUNDS; r++)
      pairs.push(
        await pairOnce(
          r,
          () => load(base.url),
          () => load(idPath),
        ),
      );
    const ratios = pairs.map(([rb, ro]) => ro.requests.average / rb.requests.average);
    const ratio = median(ratios);
    // The pair whose ratio is the median: its figures are the ones shown.
    const [b, o] = pairs[ratios.indexOf(ratio)]!;
    const sorted = [...ratios].sort((x, y) => x - y);
    const errorsAll = pairs.reduce((n, [, ro]) => n + ro.non2xx + ro.errors, 0);
    const batch = await load(`${ours.url}/v1/segment/bench/ids?n=1000`);
    await Promise.all([stop(base.child), stop(ours.child)]);
    const errors = errorsAll + batch.non2xx + batch.errors;
    console.log(
      `store: ${url.startsWith('pglite') ? 'embedded PGlite' : url.replace(/\/\/[^@]*@/, '//')}; Node ${process.version}; autocannon, 64 keep-alive connections, ${ROUNDS} pairs of ${SECONDS} s runs (order alternating), server and load generator on the same 2 cores; the median pair shown\n`,
    );
    console.log('| measure | idlease serve | bare node:http counter (same run) | ratio: median (range) of pairs |');
    console.log('|---|---|---|---|');
    console.log(
      `| \`GET /api/segment/get/{tag}\` requests/s | ${Math.round(o.requests.average).toLocaleString('en')} | ${Math.round(b.requests.average).toLocaleString('en')} | ${ratio.toFixed(2)}× (${sorted[0]!.toFixed(2)}–${sorted[sorted.length - 1]!.toFixed(2)}) |`,
    );
    console.log(`| latency p50 / p99 | ${o.latency.p50} / ${o.latency.p99} ms | ${b.latency.p50} / ${b.latency.p99} ms | |`);
    console.log(`| \`GET /v1/segment/{tag}/ids?n=1000\` IDs/s | ${Math.round(batch.requests.average * 1000).toLocaleString('en')} | | |`);
    console.log(`| non-2xx + errors | ${errors} | | |`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
