/**
 * Snowflake allocator benchmark: ratios against baselines measured in the same run, and three
 * clock-only snowflake packages driven the same way (3M IDs each, flat out, one process), with
 * duplicates and thrown errors counted. Store: embedded PGlite (in memory) by default; set
 * IDLEASE_BENCH_URL to a mysql:// or postgres:// URL to lease worker ids from a server instead.
 *
 *   npx tsx bench/run.ts snowflake
 */
import { Snowflake as SapphireSnowflake } from '@sapphire/snowflake';
import FlakeId from 'flake-idgen';
import { Snowflake as NodejsSnowflake } from 'nodejs-snowflake';
import { connect } from '../src/connect.js';
import { migrate } from '../src/migrations/migrate.js';
import { createSnowflakeAllocator } from '../src/snowflake/index.js';

const N = 3_000_000;
const ROUNDS = 3;

function fmt(n: number): string {
  return n >= 1e6 ? `${(n / 1e6).toFixed(2)}M` : n >= 1e3 ? `${(n / 1e3).toFixed(1)}k` : n.toFixed(n < 10 ? 2 : 0);
}

interface Run {
  perSecond: number;
  duplicates: number;
  errors: number;
}

/** Duplicates among the IDs kept: sort and count equal neighbours (outside the timed part). */
function duplicates(ids: BigUint64Array, n: number): number {
  const s = ids.subarray(0, n).sort();
  let d = 0;
  for (let i = 1; i < n; i++) if (s[i] === s[i - 1]) d++;
  return d;
}

/** Calls `make` until N IDs came back, keeping each; a throw is counted and the loop goes on (as a caller retrying would). */
function syncRun(make: () => bigint): Run {
  const ids = new BigUint64Array(N);
  let errors = 0;
  let k = 0;
  const t0 = performance.now();
  while (k < N) {
    try {
      ids[k] = make();
      k++;
    } catch {
      errors++;
    }
  }
  const ms = performance.now() - t0;
  return { perSecond: (N / ms) * 1000, duplicates: duplicates(ids, N), errors };
}

async function asyncRun(next: () => Promise<bigint>): Promise<Run> {
  const ids = new BigUint64Array(N);
  let errors = 0;
  let k = 0;
  const t0 = performance.now();
  while (k < N) {
    try {
      ids[k] = await next();
      k++;
    } catch {
      errors++;
    }
  }
  const ms = performance.now() - t0;
  return { perSecond: (N / ms) * 1000, duplicates: duplicates(ids, N), errors };
}

async function batchRun(nextBatch: (n: number) => Promise<bigint[]> | bigint[]): Promise<Run> {
  const ids = new BigUint64Array(N);
  let k = 0;
  const t0 = performance.now();
  while (k < N) {
    const got = await nextBatch(1000);
    for (const id of got) ids[k++] = id;
  }
  const ms = performance.now() - t0;
  return { perSecond: (N / ms) * 1000, duplicates: duplicates(ids, N), errors: 0 };
}

const best = (runs: Run[]): Run => runs.reduce((a, b) => (b.perSecond > a.perSecond ? b : a));
const worst = (runs: Run[], key: 'duplicates' | 'errors') => Math.max(...runs.map((r) => r[key]));

export default async function run(): Promise<void> {
  const url = process.env.IDLEASE_BENCH_URL ?? 'pglite:memory';
  const knex = connect(url);
  try {
    await migrate(knex, { segments: false, workers: true });
    const group = `bench_${Date.now()}`;
    // maxLeadMs 5 s: a flat-out run at more than 4,096 IDs/ms borrows ahead of the clock instead
    // of waiting for it, for a run as long as this one. (Default 1 s would make the loop wait.)
    const alloc = createSnowflakeAllocator({ knex, group, maxLeadMs: 5_000 });
    await alloc.next(); // the claim, out of the timed loops
    const layoutCeiling = 2 ** alloc.layout.sequenceBits * (1000 / alloc.layout.timeUnitMs);

    const sapphire = new SapphireSnowflake(Date.UTC(2024, 0, 1));
    const nodejs = new NodejsSnowflake({ custom_epoch: Date.UTC(2024, 0, 1), instance_id: 1 });
    const flake = new FlakeId({ id: 1 });

    const r: Record<string, Run[]> = { bare: [], next: [], sync: [], batch: [], sapphire: [], nodejs: [], flake: [] };
    for (let round = 0; round < ROUNDS; round++) {
      let c = 0n;
      r.bare!.push(await asyncRun(async () => ++c));
      r.next!.push(await asyncRun(() => alloc.next()));
      let s = 0n;
      r.sync!.push(
        await batchRun((n) => {
          const out = new Array<bigint>(n);
          for (let i = 0; i < n; i++) out[i] = ++s;
          return out;
        }),
      );
      r.batch!.push(await batchRun((n) => alloc.nextBatch(n)));
      r.sapphire!.push(syncRun(() => sapphire.generate()));
      r.nodejs!.push(syncRun(() => nodejs.getUniqueID() as bigint));
      r.flake!.push(syncRun(() => (flake.next() as Buffer).readBigUInt64BE(0)));
    }
    const stats = alloc.stats();
    await alloc.close();

    const b = best(r.bare!);
    const row = (label: string, key: string, base: Run, baseLabel: string) => {
      const x = best(r[key]!);
      return [
        label,
        fmt(x.perSecond),
        `${baseLabel} ${fmt(base.perSecond)}`,
        (x.perSecond / base.perSecond).toFixed(2) + '×',
        String(worst(r[key]!, 'duplicates')),
        String(worst(r[key]!, 'errors')),
      ];
    };
    // Issue 14's targets: 0.8× the baseline "up to the layout's limit". Past 2^sequenceBits IDs
    // per unit a snowflake can only borrow ahead of the clock (bounded by maxLeadMs), so a run
    // faster than the ceiling is a burst, and 0.8× the ceiling is all a sustained load can ask.
    const target = (x: Run, base: Run) => {
      const want = 0.8 * Math.min(base.perSecond, layoutCeiling);
      return `≥ ${fmt(want)}: ${x.perSecond >= want ? 'met' : 'missed'}`;
    };
    const rows = [
      [...row('idlease `await next()`', 'next', b, 'bare async bigint counter'), target(best(r.next!), b)],
      [...row('idlease `nextBatch(1000)`', 'batch', best(r.sync!), 'sync bigint loop'), target(best(r.batch!), best(r.sync!))],
      row('@sapphire/snowflake `generate()`', 'sapphire', b, 'bare async bigint counter'),
      row('nodejs-snowflake `getUniqueID()`', 'nodejs', b, 'bare async bigint counter'),
      row('flake-idgen `next()`', 'flake', b, 'bare async bigint counter'),
    ];
    console.log(
      `store: ${url.startsWith('pglite') ? 'PGlite (in-memory)' : url.replace(/\/\/[^@]*@/, '//')}; Node ${process.version}; ${N.toLocaleString('en')} IDs per run, best of ${ROUNDS} (duplicates, errors: worst run)`,
    );
    console.log(
      `layout ceiling: ${fmt(layoutCeiling)} IDs/s per worker id (${alloc.layout.sequenceBits} sequence bits per ${alloc.layout.timeUnitMs} ms) — faster runs borrow ahead of the clock; lead at the end ${stats.leadMs} ms\n`,
    );
    console.log(
      '| measure | IDs/s | baseline (same run) | ratio | duplicates | thrown errors | target: 0.8 × min(baseline, layout ceiling) |',
    );
    console.log('|---|---|---|---|---|---|---|');
    for (const x of rows) console.log(`| ${x.join(' | ')}${x.length < 7 ? ' | ' : ''} |`);
  } finally {
    await knex.destroy();
  }
}
