/**
 * `npm run bench -- next-id-uuidv7`: the DEFAULT `next-id attach` writes against PostgreSQL 18's
 * `uuidv7()`, beside bigserial, on a private PostgreSQL 18 from the pinned binaries of the version
 * matrix (scripts/ensure-pg-versions.mjs; `IDLEASE_BENCH_PG_URL` for a server of your own, 18 or
 * later). Each contender is a primary key with its DEFAULT:
 *   bigserial            id bigserial PRIMARY KEY
 *   idlease attach       id bigint PRIMARY KEY, DEFAULT written by attachNextId (layout 41/10/12, shard 5)
 *   uuidv7()             id uuid PRIMARY KEY DEFAULT uuidv7()
 * and a `x bigint` payload column.
 *
 * Measured, each as a ratio against bigserial in the same run (this VM's speed drifts by tens of
 * percent within seconds: every contender runs right next to a bigserial run, pair order
 * alternating, medians of the pairs, bench/pairs.ts):
 *   - bulk: `INSERT … SELECT` of BULK_ROWS rows into an empty table, ROUNDS pairs;
 *   - single rows: autocommit INSERTs from 4 pg clients as unnamed statements (what most drivers
 *     send), `synchronous_commit = off` as in bench/next-id.ts, SINGLE_ROUNDS pairs of SINGLE_SECONDS;
 *   - size: SIZE_ROWS rows loaded once per contender (timed too), then the table (heap) and its
 *     index on disk after a VACUUM.
 *
 *   IDLEASE_BENCH_SIZE_ROWS (default 10,000,000), IDLEASE_BENCH_ROWS (1,000,000),
 *   IDLEASE_BENCH_ROUNDS (3), IDLEASE_BENCH_SINGLE_ROUNDS (6), IDLEASE_BENCH_SECONDS (1.5)
 *
 * The uuidv7() DDL lives here, not in src/dialects: it is the thing measured against.
 */
import { loadavg } from 'node:os';
import type { Knex } from 'knex';
import pg from 'pg';
import { connect } from '../src/connect.js';
import { scratchDatabase } from './scratch-db.js';
import { migrate } from '../src/migrations/migrate.js';
import { attachNextId } from '../src/next-id/attach.js';
import { ensurePgVersions } from '../scripts/ensure-pg-versions.mjs';
import { startPostgres, type PostgresInstance } from '../test/helpers/servers.js';
import { median, pairOnce } from './pairs.js';

const SIZE_ROWS = Number(process.env.IDLEASE_BENCH_SIZE_ROWS ?? 10_000_000);
const BULK_ROWS = Number(process.env.IDLEASE_BENCH_ROWS ?? 1_000_000);
const ROUNDS = Number(process.env.IDLEASE_BENCH_ROUNDS ?? 3);
const SINGLE_ROUNDS = Number(process.env.IDLEASE_BENCH_SINGLE_ROUNDS ?? 6);
const SINGLE_SECONDS = Number(process.env.IDLEASE_BENCH_SECONDS ?? 1.5);
const CONNECTIONS = 4;
const OURS = 'bench_ours';

const CONTENDERS = [
  { name: 'bigserial', table: 'uv_bigserial', column: 'id bigserial PRIMARY KEY' },
  { name: 'idlease `next-id attach`', table: 'uv_attach', column: 'id bigint PRIMARY KEY', attach: true },
  { name: '`uuidv7()`', table: 'uv_uuidv7', column: 'id uuid PRIMARY KEY DEFAULT uuidv7()' },
] as const;

async function bulkOnce(knex: Knex, table: string, rows: number): Promise<number> {
  await knex.raw(`TRUNCATE ${table}`);
  await knex.raw('CHECKPOINT');
  const t0 = performance.now();
  await knex.raw(`INSERT INTO ${table} (x) SELECT g FROM generate_series(1, ?) g`, [rows]);
  return performance.now() - t0;
}

async function singleRows(url: string, table: string): Promise<number> {
  const clients = Array.from({ length: CONNECTIONS }, () => new pg.Client({ connectionString: url }));
  try {
    await Promise.all(clients.map((c) => c.connect()));
    await Promise.all(clients.map((c) => c.query('SET synchronous_commit = off')));
    const text = `INSERT INTO ${table} (x) VALUES ($1)`;
    const stopAt = performance.now() + SINGLE_SECONDS * 1000;
    const counts = await Promise.all(
      clients.map(async (c, k) => {
        let n = 0;
        for (; performance.now() < stopAt; n++) await c.query({ text, values: [k * 10_000_000 + n] });
        return n;
      }),
    );
    return counts.reduce((a, b) => a + b, 0) / SINGLE_SECONDS;
  } finally {
    await Promise.all(clients.map((c) => c.end().catch(() => undefined)));
  }
}

const mb = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(0)} MB`;
const x = (r: number) => `${r.toFixed(2)}×`;
const range = (rs: number[]) => `${Math.min(...rs).toFixed(2)}–${Math.max(...rs).toFixed(2)}`;

export default async function run(): Promise<void> {
  let server: PostgresInstance | undefined;
  let serverUrl = process.env.IDLEASE_BENCH_PG_URL;
  if (!serverUrl) {
    process.env.IDLEASE_TEST_PG_BIN = ensurePgVersions([18])[18];
    // fsync on, as a real server runs (the test servers' default is off).
    server = await startPostgres({ settings: { fsync: 'on' } });
    serverUrl = server.url;
  }
  const scratch = await scratchDatabase(serverUrl, `idlease_bench_uuidv7_${process.pid}`);
  const url = scratch.url;
  const knex = connect(url, { poolMax: 1 });
  try {
    const version = (await knex.raw('SHOW server_version')).rows[0].server_version as string;
    if (Number((await knex.raw('SHOW server_version_num')).rows[0].server_version_num) < 180000)
      throw new Error(`uuidv7() needs PostgreSQL 18 or later; ${serverUrl} runs ${version}`);
    await migrate(knex, { segments: false, nextId: { schema: OURS, shard: 5 } });
    for (const c of CONTENDERS) {
      await knex.raw(`CREATE TABLE ${c.table} (${c.column}, x bigint NOT NULL)`);
      if ('attach' in c) await attachNextId(knex, { table: c.table, schema: OURS });
    }
    console.log(
      `PostgreSQL ${version}; load average at start ${loadavg()
        .map((l) => l.toFixed(1))
        .join(' ')}. Bulk: ${BULK_ROWS.toLocaleString('en')}-row INSERT … SELECT, ${ROUNDS} pairs; single rows: ${CONNECTIONS} clients, ` +
        `unnamed statements, synchronous_commit=off, ${SINGLE_ROUNDS} pairs of ${SINGLE_SECONDS} s; size: ${SIZE_ROWS.toLocaleString('en')} rows loaded once each.\n`,
    );

    const [base, ...others] = CONTENDERS;
    const bulkRatios = others.map(() => [] as number[]);
    const bulkMs = CONTENDERS.map(() => [] as number[]);
    const singleRatios = others.map(() => [] as number[]);
    const singleRates = CONTENDERS.map(() => [] as number[]);
    for (let r = 0; r < ROUNDS; r++)
      for (const [i, c] of others.entries()) {
        const [b, o] = await pairOnce(
          r,
          () => bulkOnce(knex, base.table, BULK_ROWS),
          () => bulkOnce(knex, c.table, BULK_ROWS),
        );
        bulkMs[0]!.push(b);
        bulkMs[i + 1]!.push(o);
        bulkRatios[i]!.push(o / b);
      }
    for (let r = 0; r < SINGLE_ROUNDS; r++)
      for (const [i, c] of others.entries()) {
        await knex.raw(`TRUNCATE ${base.table}, ${c.table}`);
        const [b, o] = await pairOnce(
          r,
          () => singleRows(url, base.table),
          () => singleRows(url, c.table),
        );
        singleRates[0]!.push(b);
        singleRates[i + 1]!.push(o);
        singleRatios[i]!.push(o / b);
      }

    // Sizes: each table loaded with SIZE_ROWS rows, one after another (timed: one run each), vacuumed, measured.
    const load: number[] = [];
    const sizes: Array<{ heap: number; index: number }> = [];
    for (const c of CONTENDERS) {
      load.push(await bulkOnce(knex, c.table, SIZE_ROWS));
      await knex.raw(`VACUUM ANALYZE ${c.table}`);
      const s = (await knex.raw(`SELECT pg_table_size(?::regclass) AS heap, pg_indexes_size(?::regclass) AS index`, [c.table, c.table]))
        .rows[0];
      sizes.push({ heap: Number(s.heap), index: Number(s.index) });
      // Keep only one big table at a time: the next load's checkpoints should not flush this one.
      await knex.raw(`TRUNCATE ${c.table}`);
    }

    const rows = CONTENDERS.map((c, i) => {
      const bulk = i === 0 ? '1' : `**${x(median(bulkRatios[i - 1]!))}** (${range(bulkRatios[i - 1]!)})`;
      const single = i === 0 ? '1' : `**${x(median(singleRatios[i - 1]!))}** (${range(singleRatios[i - 1]!)})`;
      const total = sizes[i]!.heap + sizes[i]!.index;
      return [
        c.name,
        `${(median(bulkMs[i]!) / 1000).toFixed(2)} s`,
        bulk,
        Math.round(median(singleRates[i]!)).toLocaleString('en'),
        single,
        `${(load[i]! / 1000).toFixed(1)} s (${x(load[i]! / load[0]!)})`,
        mb(sizes[i]!.heap),
        mb(sizes[i]!.index),
        `${mb(total)} (${x(total / (sizes[0]!.heap + sizes[0]!.index))})`,
      ];
    });
    const sizeLabel = `${(SIZE_ROWS / 1e6).toLocaleString('en')}M`;
    console.log(
      `| contender | bulk ${(BULK_ROWS / 1e6).toLocaleString('en')}M rows | × bigserial time (range) | single-row rows/s | × bigserial rate (range) | ${sizeLabel}-row load | table after ${sizeLabel} | index | table + index (× bigserial) |`,
    );
    console.log('|---|---:|---:|---:|---:|---:|---:|---:|---:|');
    for (const row of rows) console.log(`| ${row.join(' | ')} |`);
    console.log(
      `\nload average at the end ${loadavg()
        .map((l) => l.toFixed(1))
        .join(' ')}`,
    );
  } finally {
    await knex.destroy();
    await scratch.drop();
    await server?.destroy();
  }
}
