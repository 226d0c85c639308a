/**
 * Segment allocator benchmark: every number is a ratio against a baseline measured in the
 * same run. Store: embedded PGlite (in memory) by default; set IDLEASE_BENCH_URL to a
 * mysql:// or postgres:// URL to lease from a server instead. Then the stores side by side
 * (knex, pg.Pool, postgres.js on PostgreSQL; knex, mysql2 pool and promise pool on MySQL/MariaDB),
 * each in a private database created on IDLEASE_BENCH_PG_URL / IDLEASE_BENCH_MYSQL_URL
 * (default: the local servers) and dropped afterwards.
 *
 *   npx tsx bench/run.ts segment
 */
import { randomBytes } from 'node:crypto';
import type { Knex } from 'knex';
import mysql from 'mysql2';
import mysqlPromise from 'mysql2/promise';
import pg from 'pg';
import postgres from 'postgres';
import { connect } from '../src/connect.js';
import { migrate } from '../src/migrations/migrate.js';
import { Registry } from 'prom-client';
import { collectMetrics } from '../src/metrics/index.js';
import {
  addTag,
  createKnexSegmentStore,
  createPoolSegmentStore,
  createSegmentAllocator,
  type SegmentAllocator,
  type SegmentStore,
} from '../src/segment/index.js';

const N = 10_000_000;
const ROUNDS = 3;

function fmt(n: number): string {
  return n >= 1e6 ? `${(n / 1e6).toFixed(2)}M` : n >= 1e3 ? `${(n / 1e3).toFixed(1)}k` : n.toFixed(n < 10 ? 2 : 0);
}

/** The ceiling for next(): a bare in-memory async bigint counter. */
function bareCounter(): { next(): Promise<bigint> } {
  let c = 0n;
  return {
    async next() {
      return ++c;
    },
  };
}

async function awaitLoop(gen: { next(): Promise<bigint> }, n: number): Promise<number> {
  let last = 0n;
  const t0 = performance.now();
  for (let i = 0; i < n; i++) last = await gen.next();
  const ms = performance.now() - t0;
  if (last === -1n) console.log('unreachable');
  return (n / ms) * 1000;
}

function syncBatchLoop(n: number, size: number): number {
  let c = 0n;
  let sink = 0;
  const t0 = performance.now();
  for (let done = 0; done < n; done += size) {
    const out = new Array<bigint>(size);
    for (let i = 0; i < size; i++) out[i] = ++c;
    sink += out.length;
  }
  const ms = performance.now() - t0;
  return (sink / ms) * 1000;
}

async function batchLoop(a: SegmentAllocator, n: number, size: number): Promise<number> {
  let sink = 0;
  const t0 = performance.now();
  for (let done = 0; done < n; done += size) sink += (await a.nextBatch(size)).length;
  const ms = performance.now() - t0;
  return (sink / ms) * 1000;
}

/** next() at a steady `perSecond`: bursts every millisecond, yielding to the event loop between them (as a server does). */
async function paced(
  gen: { next(): Promise<bigint> },
  perSecond: number,
  seconds: number,
): Promise<{ p50: number; p99: number; p999: number; max: number }> {
  const perTick = Math.round(perSecond / 1000);
  const samples = new Float64Array(perSecond * seconds);
  let k = 0;
  const start = performance.now();
  for (let tick = 0; tick < seconds * 1000; tick++) {
    for (let i = 0; i < perTick; i++) {
      const t = performance.now();
      await gen.next();
      samples[k++] = performance.now() - t;
    }
    const due = start + tick + 1;
    const wait = due - performance.now();
    await new Promise((r) => (wait > 0.5 ? setTimeout(r, Math.floor(wait)) : setImmediate(r)));
  }
  const s = samples.subarray(0, k).sort();
  const q = (p: number) => s[Math.min(k - 1, Math.floor(p * k))]! * 1000; // µs
  return { p50: q(0.5), p99: q(0.99), p999: q(0.999), max: s[k - 1]! * 1000 };
}

export default async function run(): Promise<void> {
  const url = process.env.IDLEASE_BENCH_URL ?? 'pglite:memory';
  const knex = connect(url);
  try {
    await migrate(knex);
    const tag = `bench_${Date.now()}`;
    for (const t of [tag, tag + '_b', tag + '_p', tag + '_m']) await addTag(knex, { tag: t, step: 1000 });

    // 1. await next() vs a bare async counter (best of ROUNDS each, interleaved).
    // The same with collectMetrics attached (prom-client registry, scraped once a second).
    const alloc = createSegmentAllocator({ knex, tag });
    const metered = createSegmentAllocator({ knex, tag: tag + '_m' });
    const registry = new Registry();
    collectMetrics(registry, metered);
    const scrape = setInterval(() => void registry.metrics(), 1000);
    await alloc.nextBatch(1000); // first lease out of the timed loop
    await metered.nextBatch(1000);
    let base = 0;
    let ours = 0;
    let withMetrics = 0;
    for (let r = 0; r < ROUNDS; r++) {
      base = Math.max(base, await awaitLoop(bareCounter(), N));
      ours = Math.max(ours, await awaitLoop(alloc, N));
      withMetrics = Math.max(withMetrics, await awaitLoop(metered, N));
    }
    clearInterval(scrape);
    const s1 = alloc.stats();
    await alloc.close();
    await metered.close();

    // 2. nextBatch(1000) vs a sync bigint loop filling arrays of 1000.
    const batch = createSegmentAllocator({ knex, tag: tag + '_b' });
    await batch.nextBatch(1000);
    let bBase = 0;
    let bOurs = 0;
    for (let r = 0; r < ROUNDS; r++) {
      bBase = Math.max(bBase, syncBatchLoop(N, 1000));
      bOurs = Math.max(bOurs, await batchLoop(batch, N, 1000));
    }
    await batch.close();

    // 3. latency at a steady 1M IDs/s with small segments (maxStep 20,000: ~50 switches a second).
    const rate = 1_000_000;
    const seconds = 3;
    const pacedAlloc = createSegmentAllocator({ knex, tag: tag + '_p', maxStep: 20_000 });
    await pacedAlloc.nextBatch(1000);
    const lb = await paced(bareCounter(), rate, seconds);
    const before = pacedAlloc.stats();
    const la = await paced(pacedAlloc, rate, seconds);
    const after = pacedAlloc.stats();
    await pacedAlloc.close();

    // 4. leases per 1M IDs with the default policy at a steady 1M/s (the ramp from the row's step 1000 included).
    const dflt = createSegmentAllocator({ knex, tag: tag + '_p' });
    await paced(dflt, rate, seconds);
    const sd = dflt.stats();
    await dflt.close();

    const rows = [
      ['`await next()` IDs/s', fmt(ours), `bare async bigint counter ${fmt(base)}`, (ours / base).toFixed(2) + '×'],
      [
        '`await next()` IDs/s with collectMetrics on',
        fmt(withMetrics),
        `without metrics ${fmt(ours)}`,
        (withMetrics / ours).toFixed(2) + '×',
      ],
      ['`nextBatch(1000)` IDs/s', fmt(bOurs), `sync bigint loop ${fmt(bBase)}`, (bOurs / bBase).toFixed(2) + '×'],
      [
        `next() p99.9 at ${fmt(rate)}/s, maxStep 20k (${after.leases - before.leases} switches, ${after.waits - before.waits} waits)`,
        `${la.p999.toFixed(1)} µs`,
        `bare counter ${lb.p999.toFixed(1)} µs`,
        (la.p999 / lb.p999).toFixed(2) + '×',
      ],
      [
        'next() p99 / max at 1M/s, maxStep 20k',
        `${la.p99.toFixed(1)} / ${la.max.toFixed(0)} µs`,
        `${lb.p99.toFixed(1)} / ${lb.max.toFixed(0)} µs`,
        (la.p99 / lb.p99).toFixed(2) + '×',
      ],
      [
        'DB leases per 1M IDs, default policy, steady 1M/s',
        (sd.leases / (sd.served / 1e6)).toFixed(2),
        `(step reached ${fmt(sd.currentStep)}; ${sd.leases} leases)`,
        '',
      ],
      [
        'DB leases per 1M IDs, flat-out `await next()` run',
        (s1.leases / (s1.served / 1e6)).toFixed(2),
        `(step reached ${fmt(s1.currentStep)})`,
        '',
      ],
    ];
    console.log(
      `store: ${url.startsWith('pglite') ? 'PGlite (in-memory)' : url.replace(/\/\/[^@]*@/, '//')}; Node ${process.version}; ${N.toLocaleString('en')} IDs per throughput round, best of ${ROUNDS}\n`,
    );
    console.log('| measure | idlease | baseline (same run) | ratio |');
    console.log('|---|---|---|---|');
    for (const r of rows) console.log(`| ${r.join(' | ')} |`);
  } finally {
    await knex.destroy();
  }
  await storesSideBySide();
}

const STORE_N = 3_000_000;
const LEASES = 2_000;

interface BenchStore {
  readonly name: string;
  readonly options: { knex: Knex } | { pool: unknown };
  readonly store: SegmentStore;
  end(): Promise<void>;
}

/** A private database on a server, dropped at the end: the bench never touches a user's tables. */
async function privateDb(serverUrl: string): Promise<{ url: string; knex: Knex; drop(): Promise<void> }> {
  const mysqlFlavor = serverUrl.startsWith('mysql') || serverUrl.startsWith('mariadb');
  const name = `idlease_bench_stores_${randomBytes(3).toString('hex')}`;
  const ddl = (verb: string) => (mysqlFlavor ? `${verb} DATABASE \`${name}\`` : `${verb} DATABASE "${name}"`);
  const admin = connect(serverUrl, { poolMax: 1 });
  await admin.raw(ddl('CREATE'));
  await admin.destroy();
  const u = new URL(serverUrl);
  u.pathname = '/' + name;
  const url = u.toString();
  const knex = connect(url);
  await migrate(knex);
  return {
    url,
    knex,
    async drop() {
      await knex.destroy();
      const a = connect(serverUrl, { poolMax: 1 });
      await a.raw(ddl('DROP')).finally(() => a.destroy());
    },
  };
}

function storesOn(flavor: 'postgres' | 'mysql', url: string, knex: Knex): BenchStore[] {
  const knexStore: BenchStore = {
    name: `knex (${flavor === 'mysql' ? 'mysql2' : 'pg'})`,
    options: { knex },
    store: createKnexSegmentStore(knex),
    end: async () => {},
  };
  if (flavor === 'mysql') {
    const cb = mysql.createPool({ uri: url, connectionLimit: 4 });
    const pr = mysqlPromise.createPool({ uri: url, connectionLimit: 4 });
    return [
      knexStore,
      {
        name: 'mysql2 pool',
        options: { pool: cb },
        store: createPoolSegmentStore(cb),
        end: () => new Promise<void>((r) => cb.end(() => r())),
      },
      { name: 'mysql2/promise pool', options: { pool: pr }, store: createPoolSegmentStore(pr), end: () => pr.end() },
    ];
  }
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  const sql = postgres(url, { max: 4, onnotice: () => {} });
  return [
    knexStore,
    { name: 'pg.Pool', options: { pool }, store: createPoolSegmentStore(pool), end: () => pool.end() },
    { name: 'postgres.js', options: { pool: sql }, store: createPoolSegmentStore(sql), end: () => sql.end() },
  ];
}

/** One lease statement at a time, as the allocator sends them: p50 / p99 in ms. */
async function leaseLatency(store: SegmentStore, tag: string): Promise<{ p50: number; p99: number }> {
  const ms = new Float64Array(LEASES);
  for (let i = 0; i < LEASES; i++) {
    const t = performance.now();
    const res = await store.lease(tag, 1000);
    ms[i] = performance.now() - t;
    if (res.kind !== 'leased') throw new Error(`lease answered ${res.kind}`);
  }
  ms.sort();
  return { p50: ms[Math.floor(LEASES * 0.5)]!, p99: ms[Math.floor(LEASES * 0.99)]! };
}

/**
 * The failover fence's cost: the fenced lease (the store's statement, which reads the instance and
 * compares it with the row's) against 0.2's unfenced statement on the same knex, table and row, in
 * alternating blocks so that drift on a shared machine falls on both. The baseline text is 0.2's
 * lease as it was, kept here only as the thing to measure against.
 */
async function fenceCost(flavor: 'postgres' | 'mysql', knex: Knex): Promise<string[]> {
  const tag = 'bench_fence';
  await addTag(knex, { tag, step: 1000 });
  const store = createKnexSegmentStore(knex);
  const table = flavor === 'mysql' ? '`idlease_segments`' : '"idlease"."idlease_segments"';
  const limit = '9223372036854775807';
  const unfenced =
    flavor === 'mysql'
      ? `UPDATE ${table} SET max_id = LAST_INSERT_ID(max_id + ?) WHERE tag = ? AND max_id <= ${limit} - ?`
      : `UPDATE ${table} SET max_id = max_id + ?, updated_at = now() WHERE tag = ? AND max_id <= ${limit} - ? RETURNING max_id::text AS max_id`;
  const fenced: number[] = [];
  const plain: number[] = [];
  await store.lease(tag, 1000); // marks the row on this instance: the timed leases never jump
  for (let block = 0; block < 20; block++) {
    for (const [out, run] of [
      [fenced, () => store.lease(tag, 1000)],
      [plain, () => knex.raw(unfenced, [1000, tag, 1000])],
    ] as const) {
      for (let i = 0; i < LEASES / 20; i++) {
        const t = performance.now();
        await run();
        out.push(performance.now() - t);
      }
    }
  }
  const q = (a: number[], p: number) => [...a].sort((x, y) => x - y)[Math.floor(a.length * p)]!;
  return [
    `${flavor === 'mysql' ? 'MariaDB' : 'PostgreSQL'}, knex`,
    `${q(fenced, 0.5).toFixed(3)} / ${q(fenced, 0.99).toFixed(2)} ms`,
    `${q(plain, 0.5).toFixed(3)} / ${q(plain, 0.99).toFixed(2)} ms`,
    `**${(q(fenced, 0.5) / q(plain, 0.5)).toFixed(2)}× / ${(q(fenced, 0.99) / q(plain, 0.99)).toFixed(2)}×**`,
  ];
}

async function storesSideBySide(): Promise<void> {
  const servers = [
    ['postgres', process.env.IDLEASE_BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test'],
    ['mysql', process.env.IDLEASE_BENCH_MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test'],
  ] as const;
  const rows: string[][] = [];
  const fence: string[][] = [];
  for (const [flavor, serverUrl] of servers) {
    const db = await privateDb(serverUrl);
    const stores = storesOn(flavor, db.url, db.knex);
    try {
      fence.push(await fenceCost(flavor, db.knex));
      for (const s of stores) {
        const tag = `bench_${s.name.replace(/\W+/g, '_')}`;
        await addTag(db.knex, { tag, step: 1000 });
        const alloc = createSegmentAllocator({ ...s.options, tag });
        await alloc.nextBatch(1000); // first lease out of the timed loop
        let base = 0;
        let ours = 0;
        for (let r = 0; r < ROUNDS; r++) {
          base = Math.max(base, await awaitLoop(bareCounter(), STORE_N));
          ours = Math.max(ours, await awaitLoop(alloc, STORE_N));
        }
        await alloc.close();
        const lat = await leaseLatency(s.store, tag);
        rows.push([
          `${flavor === 'mysql' ? 'MariaDB' : 'PostgreSQL'}, ${s.name}`,
          fmt(ours),
          fmt(base),
          `**${(ours / base).toFixed(2)}×**`,
          `${lat.p50.toFixed(2)} / ${lat.p99.toFixed(2)} ms`,
        ]);
      }
    } finally {
      for (const s of stores) await s.end();
      await db.drop();
    }
  }
  console.log(
    `\nstores side by side: ${STORE_N.toLocaleString('en')} IDs per \`await next()\` round, best of ${ROUNDS}, each against a bare async counter measured just before it; ${LEASES.toLocaleString('en')} sequential leases of 1,000 for latency\n`,
  );
  console.log('| store | `await next()` IDs/s | bare async counter | ratio | lease p50 / p99 |');
  console.log('|---|---|---|---|---|');
  for (const r of rows) console.log(`| ${r.join(' | ')} |`);
  console.log(
    `\nthe failover fence in the lease: ${LEASES.toLocaleString('en')} leases of 1,000 each way, alternating blocks of ${LEASES / 20}, same knex, table and row\n`,
  );
  console.log('| server | fenced lease p50 / p99 | 0.2 unfenced lease p50 / p99 | ratio p50 / p99 |');
  console.log('|---|---|---|---|');
  for (const r of fence) console.log(`| ${r.join(' | ')} |`);
}
