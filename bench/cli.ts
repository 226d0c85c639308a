/**
 * `npm run bench -- cli`: what `idlease next order -n 5` costs as a user runs it — `node
 * bin/idlease.js` from the built package (this bench runs `npm run build`'s tsc first; set
 * IDLEASE_BENCH_NO_BUILD=1 to use dist/ as it is) — on the embedded default (PGlite in
 * ./.idlease/ of a temp directory), warm (the directory exists) and on a first run (a fresh
 * directory), next to a bare PGlite process (bench/cli-bare-pglite.mjs: open, one writing
 * statement, close) on the same kind of directory, and to the same command on PostgreSQL
 * (IDLEASE_BENCH_PG_URL, default postgres://postgres@127.0.0.1:5432, in a temporary database).
 *
 * Every process is measured the same way: wall time from spawn to exit in this process; peak
 * RSS and CPU time (user + system) from GNU time's %M %U %S (the kernel's rusage of the child,
 * read at wait4). CPU time is shown because wall time on a loaded machine mostly measures the load. Each round runs
 * every variant once, in an order that rotates per round, and a ratio is the median of the
 * rounds' ratios: on a shared 2-core VM the speed drifts within seconds, so a variant is only
 * compared with its neighbours of the same round.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { EMBEDDED_SHARED_BUFFERS } from '../src/embedded/open.js';
import { build, PACKAGE_BIN as BIN, ROOT } from './build.js';
import { median } from './pairs.js';

const BARE = path.join(ROOT, 'bench/cli-bare-pglite.mjs');
const TIME = '/usr/bin/time';
const ROUNDS = Number(process.env.IDLEASE_BENCH_ROUNDS ?? 7);
const PG_URL = process.env.IDLEASE_BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432';

interface Sample {
  readonly wallMs: number;
  /** user + system CPU time: what the process itself costs, less swayed than wall time by other load on the machine. */
  readonly cpuMs: number;
  readonly rssKb: number;
}

type Variant = 'bareWarm' | 'bareWarmTiered' | 'bareFirst' | 'cliWarm' | 'cliFirst' | 'cliFirstInitdb' | 'cliPg';
const VARIANTS: readonly Variant[] = ['bareWarm', 'bareWarmTiered', 'cliWarm', 'bareFirst', 'cliFirst', 'cliFirstInitdb', 'cliPg'];
/**
 * The CLI's short commands run PGlite on V8's baseline WebAssembly code only (src/cli/bin.ts): the
 * bare process does too, so that a ratio is idlease's own cost; bareWarmTiered is the bare process
 * with V8's default tiers (what a library user's process runs, and the CLI before).
 */
const BASELINE_ONLY = '--liftoff-only';

/** Run `node args` in `cwd` under GNU time; its stdout must match `expect`. */
function measure(args: string[], cwd: string, expect: RegExp, scratch: string, extraEnv: NodeJS.ProcessEnv = {}): Promise<Sample> {
  const rssFile = path.join(scratch, 'rss');
  const env: NodeJS.ProcessEnv = { ...process.env, ...extraEnv };
  delete env.IDLEASE_URL;
  delete env.DATABASE_URL;
  return new Promise((resolve, reject) => {
    const started = process.hrtime.bigint();
    const child = spawn(TIME, ['-f', '%M %U %S', '-o', rssFile, process.execPath, ...args], {
      cwd,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    child.once('error', reject);
    child.once('close', (code) => {
      const wallMs = Number(process.hrtime.bigint() - started) / 1e6;
      if (code !== 0 || !expect.test(out)) {
        reject(new Error(`node ${args.join(' ')} in ${cwd}: exit ${code}, stdout ${JSON.stringify(out)}, stderr ${JSON.stringify(err)}`));
        return;
      }
      const [rssKb, user, system] = readFileSync(rssFile, 'utf8').trim().split('\n').at(-1)!.split(' ').map(Number) as [
        number,
        number,
        number,
      ];
      resolve({ wallMs, cpuMs: (user + system) * 1000, rssKb });
    });
  });
}

const FIVE_IDS = /^(\d+\n){5}$/;
const ONE_NUMBER = /^\d+\n$/;

export default async function run(): Promise<void> {
  if (!existsSync(TIME)) throw new Error(`${TIME} (GNU time) is needed to read each process's peak RSS: apt-get install time`);
  build();
  const scratch = mkdtempSync(path.join(tmpdir(), 'idlease-bench-cli-'));
  const database = `idlease_bench_cli_${process.pid}`;
  const admin = new pg.Client({ connectionString: `${PG_URL}/postgres` });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${database}`);
  const dbUrl = `${PG_URL}/${database}`;
  let fresh = 0;
  const freshDir = () => {
    const dir = path.join(scratch, `fresh-${++fresh}`);
    mkdirSync(dir);
    return dir;
  };
  try {
    const warmCli = path.join(scratch, 'warm-cli');
    const warmBare = path.join(scratch, 'warm-bare');
    mkdirSync(warmCli);
    const next = ['next', 'order', '-n', '5'];
    const runs: Record<Variant, () => Promise<Sample>> = {
      bareWarm: () => measure([BASELINE_ONLY, BARE, warmBare, EMBEDDED_SHARED_BUFFERS], scratch, ONE_NUMBER, scratch),
      bareWarmTiered: () => measure([BARE, warmBare, EMBEDDED_SHARED_BUFFERS], scratch, ONE_NUMBER, scratch),
      bareFirst: () => {
        const dir = freshDir();
        return measure([BASELINE_ONLY, BARE, path.join(dir, 'pglite'), EMBEDDED_SHARED_BUFFERS], dir, ONE_NUMBER, scratch);
      },
      cliWarm: () => measure([BIN, ...next], warmCli, FIVE_IDS, scratch),
      cliFirst: () => measure([BIN, ...next], freshDir(), FIVE_IDS, scratch),
      // The template turned off: PGlite's initdb makes the directory, as it did for every first run before the template.
      cliFirstInitdb: () => measure([BIN, ...next], freshDir(), FIVE_IDS, scratch, { IDLEASE_PGLITE_TEMPLATE: 'off' }),
      cliPg: () => measure([BIN, '--url', dbUrl, ...next], scratch, FIVE_IDS, scratch),
    };
    // Create the warm directories and the server's tag; load every file into the page cache once.
    await measure([BIN, '--url', dbUrl, 'migrate'], scratch, /./, scratch);
    await measure([BIN, '--url', dbUrl, 'tag', 'add', 'order'], scratch, /./, scratch);
    for (const v of VARIANTS) await runs[v]();
    const load = loadavg()[0]!;
    const samples = Object.fromEntries(VARIANTS.map((v) => [v, [] as Sample[]])) as Record<Variant, Sample[]>;
    for (let r = 0; r < ROUNDS; r++) {
      const order = VARIANTS.map((_, i) => VARIANTS[(i + r) % VARIANTS.length]!);
      for (const v of order) samples[v].push(await runs[v]());
      process.stderr.write(`round ${r + 1}/${ROUNDS}\r`);
    }
    const loadAfter = loadavg()[0]!;
    report(samples, load, loadAfter);
  } finally {
    await admin.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`).catch(() => {});
    await admin.end();
    rmSync(scratch, { recursive: true, force: true });
  }
}

function report(s: Record<Variant, Sample[]>, loadBefore: number, loadAfter: number): void {
  /** Median and range of per-round ratios a/b of one measure. */
  const ratio = (a: Variant, b: Variant, of: keyof Sample) => {
    const rs = s[a].map((x, i) => x[of] / s[b][i]![of]);
    const sorted = [...rs].sort((x, y) => x - y);
    return { m: median(rs), lo: sorted[0]!, hi: sorted[sorted.length - 1]! };
  };
  const fmtRatio = (a: Variant, b: Variant, of: keyof Sample) => {
    const r = ratio(a, b, of);
    return `**${r.m.toFixed(2)}×** (${r.lo.toFixed(2)}–${r.hi.toFixed(2)})`;
  };
  const wall = (v: Variant) => `${(median(s[v].map((x) => x.wallMs)) / 1000).toFixed(2)} s`;
  const rss = (v: Variant) => `${Math.round(median(s[v].map((x) => x.rssKb)) / 1024)} MB`;
  const cpu = (v: Variant) => `${(median(s[v].map((x) => x.cpuMs)) / 1000).toFixed(2)} s`;
  const target = (a: Variant, b: Variant, of: keyof Sample, limit: number) => (ratio(a, b, of).m <= limit ? 'met' : 'missed');
  console.log(
    `Node ${process.version}; ${ROUNDS} rounds, each process once per round in a rotating order; medians; ratios are ` +
      `medians (range) of per-round ratios; load average ${loadBefore.toFixed(1)} before, ${loadAfter.toFixed(1)} after\n`,
  );
  console.log('| process | wall | CPU | peak RSS | wall ratio | CPU ratio | RSS ratio |');
  console.log('|---|---:|---:|---:|---:|---:|---:|');
  console.log(
    `| bare PGlite open + one write + close, warm, baseline WebAssembly code only (baseline) | ${wall('bareWarm')} | ${cpu('bareWarm')} | ${rss('bareWarm')} | 1 | 1 | 1 |`,
  );
  console.log(
    `| bare PGlite, warm, V8's default tiers (baseline, then optimized) | ${wall('bareWarmTiered')} | ${cpu('bareWarmTiered')} | ${rss('bareWarmTiered')} | ${fmtRatio('bareWarmTiered', 'bareWarm', 'wallMs')} | ${fmtRatio('bareWarmTiered', 'bareWarm', 'cpuMs')} | ${fmtRatio('bareWarmTiered', 'bareWarm', 'rssKb')} |`,
  );
  console.log(
    `| \`idlease next order -n 5\`, embedded, warm | ${wall('cliWarm')} | ${cpu('cliWarm')} | ${rss('cliWarm')} | ${fmtRatio('cliWarm', 'bareWarm', 'wallMs')} | ${fmtRatio('cliWarm', 'bareWarm', 'cpuMs')} | ${fmtRatio('cliWarm', 'bareWarm', 'rssKb')} |`,
  );
  console.log(
    `| bare PGlite, first run (fresh directory) | ${wall('bareFirst')} | ${cpu('bareFirst')} | ${rss('bareFirst')} | ${fmtRatio('bareFirst', 'bareWarm', 'wallMs')} | ${fmtRatio('bareFirst', 'bareWarm', 'cpuMs')} | ${fmtRatio('bareFirst', 'bareWarm', 'rssKb')} |`,
  );
  console.log(
    `| \`idlease next order -n 5\`, embedded, first run (the shipped template) | ${wall('cliFirst')} | ${cpu('cliFirst')} | ${rss('cliFirst')} | ${fmtRatio('cliFirst', 'bareWarm', 'wallMs')} | ${fmtRatio('cliFirst', 'bareWarm', 'cpuMs')} | ${fmtRatio('cliFirst', 'bareWarm', 'rssKb')} |`,
  );
  console.log(
    `| \`idlease next order -n 5\`, embedded, first run, \`IDLEASE_PGLITE_TEMPLATE=off\` (initdb) | ${wall('cliFirstInitdb')} | ${cpu('cliFirstInitdb')} | ${rss('cliFirstInitdb')} | ${fmtRatio('cliFirstInitdb', 'bareWarm', 'wallMs')} | ${fmtRatio('cliFirstInitdb', 'bareWarm', 'cpuMs')} | ${fmtRatio('cliFirstInitdb', 'bareWarm', 'rssKb')} |`,
  );
  console.log(
    `| \`idlease next order -n 5\`, PostgreSQL | ${wall('cliPg')} | ${cpu('cliPg')} | ${rss('cliPg')} | ${fmtRatio('cliPg', 'bareWarm', 'wallMs')} | ${fmtRatio('cliPg', 'bareWarm', 'cpuMs')} | ${fmtRatio('cliPg', 'bareWarm', 'rssKb')} |`,
  );
  console.log('');
  console.log(
    `Targets: embedded warm wall ≤ 1.15× bare — ${target('cliWarm', 'bareWarm', 'wallMs', 1.15)} (CPU ${fmtRatio('cliWarm', 'bareWarm', 'cpuMs')}); RSS ≤ 1.1× — ${target('cliWarm', 'bareWarm', 'rssKb', 1.1)}; ` +
      `first run ≤ 400 MB peak RSS — ${median(s.cliFirst.map((x) => x.rssKb)) / 1024 <= 400 ? 'met' : 'missed'}; ` +
      `first run ≤ 2× warm — ${target('cliFirst', 'cliWarm', 'wallMs', 2)} (${fmtRatio('cliFirst', 'cliWarm', 'wallMs')} wall, ${fmtRatio('cliFirst', 'cliWarm', 'cpuMs')} CPU; ` +
      `against a bare first run ${fmtRatio('cliFirst', 'bareFirst', 'wallMs')} wall, ${fmtRatio('cliFirst', 'bareFirst', 'rssKb')} RSS).`,
  );
}
