/**
 * next_id() benchmark on a PostgreSQL server: every number is a ratio against bigserial
 * measured in the same run, rounds interleaved, medians reported.
 *
 *   npx tsx bench/run.ts next-id
 *   IDLEASE_BENCH_PG_URL=postgres://postgres@127.0.0.1:5432/test npx tsx bench/run.ts next-id
 *
 * Contenders, each as `id … PRIMARY KEY DEFAULT …` (the shape next_id() is meant for):
 *   bigserial                  the baseline
 *   idlease attach             what `next-id attach` writes: next_id()'s fast path as the DEFAULT
 *                              expression itself (default layout 41/10/12, shard 5)
 *   idlease next_id()          the function, as a DEFAULT written by hand
 *   PL/pgSQL RETURN nextval()  a one-line PL/pgSQL function: the floor for any PL/pgSQL DEFAULT
 *   Instagram PL/pgSQL         the published function, verbatim but for the schema name
 *   Instagram SQL port         the same arithmetic as a plain SQL function (inlined, fast, and wrong)
 *   gen_random_uuid()          uuid PRIMARY KEY
 * The SQL port's duplicates are counted on a table without a primary key (with one, its
 * insert simply fails on the first duplicate). Then bigserial, attach and next_id() again on
 * tables with no index at all (the DEFAULT's own cost, not the index's), and single-row
 * inserts as named prepared statements (planned once) beside the unnamed ones above (parsed
 * and planned every time, which is where a bigger DEFAULT expression would cost).
 *
 * Method: this shared 2-core VM's speed drifts by tens of percent over seconds, so every
 * contender is measured right next to a bigserial run (pair order alternating by round) and its
 * ratio is the median of those paired ratios: bulk ROUNDS pairs, single-row SINGLE_ROUNDS pairs
 * of SINGLE_SECONDS each.
 *
 * The competitors' DDL lives here, not in src/dialects: it is the thing measured against,
 * never part of the library.
 */
import { randomBytes } from 'node:crypto';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import type { Knex } from 'knex';
import { connect } from '../src/connect.js';
import { scratchDatabase } from './scratch-db.js';
import { migrate } from '../src/migrations/migrate.js';
import { attachNextId } from '../src/next-id/attach.js';
import pg from 'pg';
import { decodeId, DEFAULT_LAYOUT } from '../src/layout/index.js';
import { toBigInt } from '../src/ids.js';
import { NEXT_ID_SLOW_FUNCTION } from '../src/dialects/next-id.js';
import { lagUnderLoad } from './next-id-lag.js';
import { median, pairOnce } from './pairs.js';

const BULK_ROWS = Number(process.env.IDLEASE_BENCH_ROWS ?? 1_000_000);
const ROUNDS = Number(process.env.IDLEASE_BENCH_ROUNDS ?? 5);
const SINGLE_ROUNDS = Number(process.env.IDLEASE_BENCH_SINGLE_ROUNDS ?? 12);
const CONNECTIONS = 4;
const SINGLE_SECONDS = Number(process.env.IDLEASE_BENCH_SECONDS ?? 1.5);
// Each autocommit insert would otherwise wait for its own WAL fsync, and on a shared disk that
// wait (and its noise) swamps what is being compared: the cost of the DEFAULT. Say
// IDLEASE_BENCH_SYNC_COMMIT=on to measure with durable commits anyway.
const SYNC_COMMIT = process.env.IDLEASE_BENCH_SYNC_COMMIT === 'on' ? 'on' : 'off';

export const OURS = 'bench_ours';

export interface Contender {
  readonly name: string;
  readonly column: string;
  /** The table is then given its DEFAULT by `attachNextId` (schema OURS). */
  readonly attach?: boolean;
}

export const CONTENDERS: readonly Contender[] = [
  { name: 'bigserial', column: 'id bigserial PRIMARY KEY' },
  { name: 'idlease attach (the DEFAULT `next-id attach` writes)', column: 'id bigint PRIMARY KEY', attach: true },
  { name: 'idlease next_id() (the function as DEFAULT)', column: `id bigint PRIMARY KEY DEFAULT ${OURS}.next_id()` },
  { name: 'PL/pgSQL RETURN nextval() (floor for any PL/pgSQL DEFAULT)', column: 'id bigint PRIMARY KEY DEFAULT insta5.plain_nextval()' },
  { name: 'Instagram PL/pgSQL', column: 'id bigint PRIMARY KEY DEFAULT insta5.next_id()' },
  { name: 'Instagram SQL port', column: 'id bigint PRIMARY KEY DEFAULT insta5.next_id_sql()' },
  { name: 'gen_random_uuid()', column: 'id uuid PRIMARY KEY DEFAULT gen_random_uuid()' },
];

const INSTAGRAM = [
  'CREATE SCHEMA insta5',
  'CREATE SEQUENCE insta5.table_id_seq',
  // From "Sharding & IDs at Instagram" (2012), with the blog's Python-escaped %% as %.
  `CREATE OR REPLACE FUNCTION insta5.next_id(OUT result bigint) AS $$
DECLARE
    our_epoch bigint := 1314220021721;
    seq_id bigint;
    now_millis bigint;
    shard_id int := 5;
BEGIN
    SELECT nextval('insta5.table_id_seq') % 1024 INTO seq_id;
    SELECT FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000) INTO now_millis;
    result := (now_millis - our_epoch) << 23;
    result := result | (shard_id << 10);
    result := result | (seq_id);
END;
$$ LANGUAGE PLPGSQL`,
  // The least a PL/pgSQL DEFAULT can do: what calling any PL/pgSQL function per row costs.
  `CREATE OR REPLACE FUNCTION insta5.plain_nextval() RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
  RETURN nextval('insta5.plain_seq');
END
$$`,
  'CREATE SEQUENCE insta5.plain_seq',
  `CREATE OR REPLACE FUNCTION insta5.next_id_sql() RETURNS bigint LANGUAGE sql AS $$
SELECT ((FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint - 1314220021721) << 23) | (5 << 10) | (nextval('insta5.table_id_seq') % 1024)
$$`,
];

export function tableOf(i: number): string {
  return `bench_t${i}`;
}

/** next_id() in schema OURS (shard 5), the competitors, and one table per contender: tableOf(i). */
export async function installContenders(knex: Knex): Promise<void> {
  await migrate(knex, { segments: false, nextId: { schema: OURS, shard: 5 } });
  for (const sql of INSTAGRAM) await knex.raw(sql);
  for (const [i, c] of CONTENDERS.entries()) {
    await knex.raw(`CREATE TABLE ${tableOf(i)} (${c.column}, x bigint NOT NULL)`);
    if (c.attach) await attachNextId(knex, { table: tableOf(i), schema: OURS });
  }
  for (const [i, c] of NO_INDEX.entries()) {
    await knex.raw(`CREATE TABLE ${noIndexTable(i)} (${c.column}, x bigint NOT NULL)`);
    if (c.attach) await attachNextId(knex, { table: noIndexTable(i), schema: OURS });
  }
}

/** The same DEFAULTs on tables with no index: bigserial first, the baseline. */
export const NO_INDEX: readonly Contender[] = [
  { name: 'bigserial', column: 'id bigserial NOT NULL' },
  { name: 'idlease attach', column: 'id bigint NOT NULL', attach: true },
  { name: 'idlease next_id()', column: `id bigint NOT NULL DEFAULT ${OURS}.next_id()` },
];

export function noIndexTable(i: number): string {
  return `bench_n${i}`;
}

/**
 * Catch-ups so far in this database: calls of next_id()'s slow path (counted for sessions with
 * track_functions = pl, reported when a backend ends).
 */
export async function catchUpCount(knex: Knex): Promise<number> {
  await knex.raw('SELECT pg_stat_clear_snapshot()');
  const r = await knex.raw('SELECT coalesce(sum(calls), 0)::int AS n FROM pg_stat_user_functions WHERE schemaname = ? AND funcname = ?', [
    OURS,
    NEXT_ID_SLOW_FUNCTION,
  ]);
  return r.rows[0].n as number;
}

/** The catch-up count once it has moved past `before` (backends report theirs as they exit), or after ~1 s. */
export async function catchUpCountAfter(knex: Knex, before: number): Promise<number> {
  let after = before;
  for (let t = 0; t < 10 && after === before; t++) {
    await new Promise((r) => setTimeout(r, 100));
    after = await catchUpCount(knex);
  }
  return after;
}

type StartCount = () => Promise<() => Promise<number>>;

/**
 * Instructions executed, counted by `perf stat` (linux-perf) for one backend (`-p pid`) or the
 * whole machine (`-a`): unlike seconds, a count this VM's neighbours cannot move. Null when
 * perf cannot watch (not installed, or the server is on another machine).
 */
function perfCounter(target: string[]): StartCount | null {
  // perf runs on VMs without hardware counters too, and then says "<not supported>".
  const probe = spawnSync('perf', ['stat', '-x,', '-e', 'instructions', 'true'], { encoding: 'utf8' });
  if (probe.status !== 0 || !/^\d+,/m.test(probe.stderr ?? '')) return null;
  return async () => {
    const p = spawn('perf', ['stat', '-x,', '-e', 'instructions', ...target], { stdio: ['ignore', 'ignore', 'pipe'] });
    let out = '';
    p.stderr.on('data', (d: Buffer) => (out += d.toString()));
    await new Promise((r) => setTimeout(r, 200)); // perf attaches asynchronously
    return async () => {
      const closed = new Promise((r) => p.on('close', r));
      p.kill('SIGINT');
      await closed;
      const line = out.split('\n').find((l) => l.includes('instructions'));
      return line ? Number(line.split(',')[0]) : Number.NaN;
    };
  };
}

interface BulkRun {
  readonly ms: number;
  readonly instructions: number;
}

async function bulkOnce(knex: Knex, i: number, watch: StartCount | null, table = tableOf(i)): Promise<BulkRun | 'duplicate key'> {
  await knex.raw(`TRUNCATE ${table}`);
  await knex.raw('CHECKPOINT').catch(() => undefined);
  const stop = watch ? await watch() : null;
  const t0 = performance.now();
  try {
    await knex.raw(`INSERT INTO ${table} (x) SELECT g FROM generate_series(1, ?) g`, [BULK_ROWS]);
  } catch (err) {
    if (stop) await stop();
    if (/duplicate key/.test((err as Error).message)) return 'duplicate key';
    throw err;
  }
  const ms = performance.now() - t0;
  return { ms, instructions: stop ? await stop() : Number.NaN };
}

interface SingleRun {
  readonly rate: number;
  /** Whole-machine instructions per insert (client included). */
  readonly perInsert: number;
}

async function singleRows(url: string, i: number, seconds: number, watch: StartCount | null): Promise<SingleRun> {
  const pools = Array.from({ length: CONNECTIONS }, () => connect(url, { poolMax: 1 }));
  try {
    await Promise.all(pools.map((k) => k.raw(`SET synchronous_commit = ${SYNC_COMMIT}`)));
    // Counts calls of next_id()'s slow path (the catch-ups); a superuser setting, so best effort.
    await Promise.all(pools.map((k) => k.raw(`SET track_functions = 'pl'`).catch(() => undefined)));
    const stop = watch ? await watch() : null;
    const stopAt = performance.now() + seconds * 1000;
    const counts = await Promise.all(
      pools.map(async (k, c) => {
        let n = 0;
        while (performance.now() < stopAt) {
          await k.raw(`INSERT INTO ${tableOf(i)} (x) VALUES (?)`, [c * 10_000_000 + n]);
          n++;
        }
        return n;
      }),
    );
    const total = counts.reduce((a, b) => a + b, 0);
    return { rate: total / seconds, perInsert: stop ? (await stop()) / total : Number.NaN };
  } finally {
    await Promise.all(pools.map((k) => k.destroy()));
  }
}

/**
 * Single-row autocommit inserts on plain pg clients, CONNECTIONS at once: `prepared` sends a
 * named statement (parsed and planned once per connection), otherwise an unnamed one (parsed
 * and planned on every insert: what most drivers and ORMs send).
 */
async function singleRowsPg(url: string, table: string, seconds: number, prepared: boolean): Promise<number> {
  const clients = Array.from({ length: CONNECTIONS }, () => new pg.Client({ connectionString: url }));
  try {
    await Promise.all(clients.map((c) => c.connect()));
    await Promise.all(clients.map((c) => c.query(`SET synchronous_commit = ${SYNC_COMMIT}`)));
    const text = `INSERT INTO ${table} (x) VALUES ($1)`;
    const stopAt = performance.now() + seconds * 1000;
    const counts = await Promise.all(
      clients.map(async (c, k) => {
        let n = 0;
        while (performance.now() < stopAt) {
          await c.query(prepared ? { name: `ins_${table}`, text, values: [k * 10_000_000 + n] } : { text, values: [k * 10_000_000 + n] });
          n++;
        }
        return n;
      }),
    );
    return counts.reduce((a, b) => a + b, 0) / seconds;
  } finally {
    await Promise.all(clients.map((c) => c.end().catch(() => undefined)));
  }
}

export default async function run(): Promise<void> {
  const serverUrl = process.env.IDLEASE_BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
  const scratch = await scratchDatabase(serverUrl, `idlease_bench_nextid_${randomBytes(3).toString('hex')}`);
  const url = scratch.url;
  // One connection, so the backend that perf watches is the one running every bulk insert.
  const knex = connect(url, { poolMax: 1 });
  try {
    await installContenders(knex);
    await knex.raw('CREATE TABLE bench_dups (id bigint NOT NULL, x bigint NOT NULL)');

    console.log(
      `PostgreSQL ${(await knex.raw('SHOW server_version')).rows[0].server_version}; ${BULK_ROWS.toLocaleString('en')}-row INSERT … SELECT, ${ROUNDS} pairs per contender; single-row autocommit inserts from ${CONNECTIONS} connections (synchronous_commit=${SYNC_COMMIT}), ${SINGLE_ROUNDS} pairs of ${SINGLE_SECONDS} s per contender. Each pair: the contender next to a bigserial run.\n`,
    );

    // Each contender right next to a bigserial run (pairOnce): ratios come from adjacent runs.
    const pid = (await knex.raw('SELECT pg_backend_pid() AS p')).rows[0].p as number;
    const watch = existsSync(`/proc/${pid}`) ? perfCounter(['-p', String(pid)]) : null;
    const watchAll = watch ? perfCounter(['-a']) : null;
    const bulk: Array<Array<number | 'duplicate key'>> = CONTENDERS.map(() => []);
    const bulkBase: number[][] = CONTENDERS.map(() => []);
    const instr: number[][] = CONTENDERS.map(() => []);
    for (let r = 0; r < ROUNDS; r++) {
      for (let i = 1; i < CONTENDERS.length; i++) {
        const [base, run] = await pairOnce(
          r,
          () => bulkOnce(knex, 0, watch),
          () => bulkOnce(knex, i, watch),
        );
        if (typeof base !== 'object') throw new Error('bigserial failed');
        bulkBase[i]!.push(base.ms);
        bulk[0]!.push(base.ms);
        bulk[i]!.push(typeof run === 'object' ? run.ms : run);
        if (typeof run === 'object') instr[i]!.push(run.instructions / base.instructions);
      }
    }

    // Duplicates: each generator once into a table without a key, counted afterwards.
    const dups: string[] = [];
    for (const [fn, label] of [
      ['insta5.next_id_sql()', 'SQL port'],
      ['insta5.next_id()', 'PL/pgSQL'],
      [`${OURS}.next_id()`, 'next_id()'],
    ] as const) {
      await knex.raw('TRUNCATE bench_dups');
      await knex.raw(`INSERT INTO bench_dups (id, x) SELECT ${fn}, g FROM generate_series(1, ?) g`, [BULK_ROWS]);
      const d = (await knex.raw('SELECT (count(*) - count(DISTINCT id))::int AS d, (count(*) - count(id))::int AS n FROM bench_dups'))
        .rows[0];
      dups.push(`${label}: ${d.d}${d.n > 0 ? ` (and ${d.n} NULL)` : ''}`);
    }

    const single: number[][] = CONTENDERS.map(() => []);
    const singleBase: number[][] = CONTENDERS.map(() => []);
    const singleInstr: number[][] = CONTENDERS.map(() => []);
    const lags: number[] = [];
    const catchUpRates: number[] = [];
    const singleOnce = async (j: number): Promise<SingleRun> => {
      await knex.raw(`TRUNCATE ${tableOf(j)}`);
      const before = j === 1 ? await catchUpCount(knex) : 0;
      const run = await singleRows(url, j, SINGLE_SECONDS, watchAll);
      if (j === 1) {
        // How far the newest ID's time field trails the clock when the run ends (read before the
        // catch-up count below, which waits for backends to report).
        const end = Date.now();
        const hi = (await knex.raw(`SELECT max(id) AS hi FROM ${tableOf(1)}`)).rows[0].hi;
        lags.push(end - decodeId(toBigInt(hi), DEFAULT_LAYOUT).unixMs);
        catchUpRates.push(((await catchUpCountAfter(knex, before)) - before) / (run.rate * SINGLE_SECONDS));
      }
      return run;
    };
    for (let r = 0; r < SINGLE_ROUNDS; r++) {
      for (let i = 1; i < CONTENDERS.length; i++) {
        const [base, run] = await pairOnce(
          r,
          () => singleOnce(0),
          () => singleOnce(i),
        );
        singleBase[i]!.push(base.rate);
        single[0]!.push(base.rate);
        single[i]!.push(run.rate);
        singleInstr[i]!.push(run.perInsert / base.perInsert);
      }
    }

    const bulkRatios = (i: number) => bulk[i]!.flatMap((x, r) => (typeof x === 'number' ? [x / bulkBase[i]![r]!] : []));
    const singleRatios = (i: number) => single[i]!.map((x, r) => x / singleBase[i]![r]!);
    const spread = (xs: number[]) => {
      const s = [...xs].sort((a, b) => a - b);
      return `${s[0]!.toFixed(2)}–${s[s.length - 1]!.toFixed(2)}`;
    };
    const counted = watch !== null;
    console.log(
      `| contender | bulk: median s | × bigserial's time: median (range) of ${ROUNDS} pairs | × bigserial's instructions (backend) | single-row: median rows/s | × bigserial's rate: median (range) of ${SINGLE_ROUNDS} pairs | × bigserial's instructions per insert (machine) |`,
    );
    console.log('|---|---:|---:|---:|---:|---:|---:|');
    for (const [i, c] of CONTENDERS.entries()) {
      const times = bulk[i]!.filter((x): x is number => typeof x === 'number');
      const failed = bulk[i]!.length - times.length;
      const bulkCell =
        times.length > 0
          ? `${(median(times) / 1000).toFixed(2)}${failed > 0 ? ` (${failed}/${bulk[i]!.length} runs failed: duplicate key)` : ''}`
          : `failed: duplicate key (${failed}/${bulk[i]!.length})`;
      const bulkRatio = i === 0 ? '1' : times.length > 0 ? `${median(bulkRatios(i)).toFixed(2)} (${spread(bulkRatios(i))})` : '—';
      const singleRatio = i === 0 ? '1' : `${median(singleRatios(i)).toFixed(2)} (${spread(singleRatios(i))})`;
      const instrCell = i === 0 ? '1' : counted && instr[i]!.length > 0 ? median(instr[i]!).toFixed(2) : '—';
      const singleInstrCell = i === 0 ? '1' : counted ? median(singleInstr[i]!).toFixed(2) : '—';
      console.log(
        `| ${c.name} | ${bulkCell} | ${bulkRatio} | ${instrCell} | ${median(single[i]!).toFixed(0)} | ${singleRatio} | ${singleInstrCell} |`,
      );
    }
    if (!counted)
      console.log(
        '\n(Instructions: not counted — needs the server on this machine and `perf` from linux-perf with hardware counters; `npm run bench -- next-id-cost` counts them under valgrind instead.)',
      );
    console.log(`\nDuplicate IDs in one ${BULK_ROWS.toLocaleString('en')}-row INSERT … SELECT (no key): ${dups.join(', ')}`);
    console.log(
      `next_id(): newest single-row ID's time field behind the clock at the end of each run, ms: median ${median(lags)}, max ${Math.max(...lags)}`,
    );
    console.log(
      `next_id(): catch-ups (slow-path calls) per 1,000 single-row inserts: median ${(median(catchUpRates) * 1000).toFixed(0)} (${catchUpRates.every((x) => x === 0) ? 'none counted: track_functions needs a superuser' : `range ${(Math.min(...catchUpRates) * 1000).toFixed(0)}–${(Math.max(...catchUpRates) * 1000).toFixed(0)}`}); what one costs: npm run bench -- next-id-cost`,
    );
    // The restated targets of issue 12 that seconds can judge; the instruction targets are
    // next-id-cost's (callgrind), and the time-field bound is the test's, its figures below.
    const floor = CONTENDERS.findIndex((c) => c.name.startsWith('PL/pgSQL RETURN nextval()'));
    const vsFloor = single[1]!.map((x, r) => x / singleBase[1]![r]! / (single[floor]![r]! / singleBase[floor]![r]!));
    const bulkOurs = median(bulkRatios(1));
    const singleFloor = median(vsFloor);
    console.log('\n| target (issue 12) | this run | met |');
    console.log('|---|---:|---|');
    console.log(
      `| single-row rate ≥ 0.97× the PL/pgSQL floor (median of per-round ratios) | ${singleFloor.toFixed(2)}× (${spread(vsFloor)}) | ${singleFloor >= 0.97 ? 'yes' : 'no'} |`,
    );
    console.log(`| bulk time ≤ 1.5× bigserial (median of pairs) | ${bulkOurs.toFixed(2)}× | ${bulkOurs <= 1.5 ? 'yes' : 'no'} |`);
    console.log('| instructions: single-row ≤ 1.20×, bulk ≤ 1.35× bigserial | npm run bench -- next-id-cost | |');

    // No index: what the DEFAULT itself costs. Each contender paired with bigserial, no index.
    const noIndexRatios: number[][] = NO_INDEX.map(() => []);
    for (let r = 0; r < ROUNDS; r++) {
      for (let i = 1; i < NO_INDEX.length; i++) {
        const [base, run] = await pairOnce(
          r,
          () => bulkOnce(knex, 0, null, noIndexTable(0)),
          () => bulkOnce(knex, i, null, noIndexTable(i)),
        );
        if (typeof base !== 'object' || typeof run !== 'object') throw new Error('a no-index bulk insert failed');
        noIndexRatios[i]!.push(run.ms / base.ms);
      }
    }
    // Single rows as named prepared statements, and unnamed again on the same plain clients:
    // attach and next_id() each paired with bigserial in the same mode.
    const ATTACH = CONTENDERS.findIndex((c) => c.attach);
    const FUNCTION = CONTENDERS.findIndex((c) => c.column.includes(`${OURS}.next_id()`));
    const modeRatios: Record<'prepared' | 'unnamed', Record<number, number[]>> = {
      prepared: { [ATTACH]: [], [FUNCTION]: [] },
      unnamed: { [ATTACH]: [], [FUNCTION]: [] },
    };
    for (let r = 0; r < SINGLE_ROUNDS; r++) {
      for (const mode of ['prepared', 'unnamed'] as const) {
        for (const i of [ATTACH, FUNCTION]) {
          const [base, run] = await pairOnce(
            r,
            async () => {
              await knex.raw(`TRUNCATE ${tableOf(0)}`);
              return singleRowsPg(url, tableOf(0), SINGLE_SECONDS, mode === 'prepared');
            },
            async () => {
              await knex.raw(`TRUNCATE ${tableOf(i)}`);
              return singleRowsPg(url, tableOf(i), SINGLE_SECONDS, mode === 'prepared');
            },
          );
          modeRatios[mode][i]!.push(run / base);
        }
      }
    }
    const cell = (xs: number[]) => `${median(xs).toFixed(2)} (${spread(xs)})`;
    console.log(
      `\nThe DEFAULT's own cost: ${BULK_ROWS.toLocaleString('en')}-row INSERT … SELECT into tables with no index, ${ROUNDS} pairs each:\n`,
    );
    console.log('| contender | × bigserial (no index)’s time: median (range) |');
    console.log('|---|---:|');
    for (let i = 1; i < NO_INDEX.length; i++) console.log(`| ${NO_INDEX[i]!.name} | ${cell(noIndexRatios[i]!)} |`);
    console.log(
      `\nSingle-row inserts on plain pg clients (${CONNECTIONS} at once, ${SINGLE_ROUNDS} pairs of ${SINGLE_SECONDS} s): rate × bigserial's in the same mode (below 1 is slower):\n`,
    );
    console.log('| contender | named prepared statement (planned once) | unnamed statement (parsed and planned each time) |');
    console.log('|---|---:|---:|');
    for (const i of [ATTACH, FUNCTION])
      console.log(`| ${CONTENDERS[i]!.name} | ${cell(modeRatios.prepared[i]!)} | ${cell(modeRatios.unnamed[i]!)} |`);
    const attachVsFunction = (mode: 'prepared' | 'unnamed') =>
      median(modeRatios[mode][ATTACH]!.map((x, r) => x / modeRatios[mode][FUNCTION]![r]!));
    const bulkNoIndex = median(noIndexRatios[1]!);
    const bulkPk = median(bulkRatios(ATTACH));
    const prep = attachVsFunction('prepared');
    const unnamed = attachVsFunction('unnamed');
    console.log('\n| target (issue 37, PostgreSQL) | this run | met |');
    console.log('|---|---:|---|');
    console.log(`| attach, bulk, no index ≤ 1.5× bigserial | ${bulkNoIndex.toFixed(2)}× | ${bulkNoIndex <= 1.5 ? 'yes' : 'no'} |`);
    console.log(`| attach, bulk, primary key ≤ 1.3× bigserial | ${bulkPk.toFixed(2)}× | ${bulkPk <= 1.3 ? 'yes' : 'no'} |`);
    console.log(
      `| attach, single row, prepared: rate not below next_id()'s (median of per-round ratios) | ${prep.toFixed(2)}× | ${prep >= 0.97 ? 'yes' : 'no'} |`,
    );
    console.log(
      `| attach, single row, unnamed (planning each time): rate not below next_id()'s | ${unnamed.toFixed(2)}× | ${unnamed >= 0.97 ? 'yes' : 'no'} |`,
    );

    const lag = await lagUnderLoad();
    const lagRow = (label: string, l: typeof lag.bulk) =>
      `| ${label} | ${l.rows.toLocaleString('en')} | ${l.p50.toFixed(2)} | ${l.p99.toFixed(2)} | ${l.max.toFixed(2)} | ${l.distinct === l.rows ? 0 : l.rows - l.distinct} |`;
    console.log(
      `\nnext_id() time-field lag under load (e): ${lag.description}; |time field − clock_timestamp()| per row, ms (bound: p99 ≤ 10, max ≤ 50):\n`,
    );
    console.log('| rows of | rows | p50 | p99 | max | duplicates |');
    console.log('|---|---:|---:|---:|---:|---:|');
    console.log(lagRow('the INSERT … SELECT', lag.bulk));
    console.log(lagRow('the single-row sessions', lag.single));
    console.log('');
    console.log(
      `Paired bulk ratios: ${CONTENDERS.slice(1)
        .map(
          (c, k) =>
            `${c.name}=[${bulkRatios(k + 1)
              .map((x) => x.toFixed(2))
              .join(', ')}]`,
        )
        .join('; ')}`,
    );
    console.log(
      `Paired single-row ratios: ${CONTENDERS.slice(1)
        .map(
          (c, k) =>
            `${c.name}=[${singleRatios(k + 1)
              .map((x) => x.toFixed(2))
              .join(', ')}]`,
        )
        .join('; ')}`,
    );
  } finally {
    await knex.destroy();
    await scratch.drop();
  }
  // The same run goes on with MariaDB (issue 37): next_id() as an expression DEFAULT vs AUTO_INCREMENT.
  if (process.env.IDLEASE_BENCH_SKIP_MARIADB !== '1') await (await import('./next-id-mariadb.js')).default();
}
