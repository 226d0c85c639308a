/**
 * next_id() benchmark on a PostgreSQL server: every number is a ratio against bigserial
 * measured in the same run, rounds interleaved, medians reported.
 *
 *   npx tsx bench/run.ts next-id
 *   IDLEASE_BENCH_PG_URL=postgres://postgres@127.0.0.1:5432/test npx tsx bench/run.ts next-id
 *
 * Contenders, each as `id … PRIMARY KEY DEFAULT …` (the shape next_id() is meant for):
 *   bigserial                  the baseline
 *   idlease next_id()          this library (default layout 41/10/12, shard 5)
 *   PL/pgSQL RETURN nextval()  a one-line PL/pgSQL function: the floor for any PL/pgSQL DEFAULT
 *   Instagram PL/pgSQL         the published function, verbatim but for the schema name
 *   Instagram SQL port         the same arithmetic as a plain SQL function (inlined, fast, and wrong)
 *   gen_random_uuid()          uuid PRIMARY KEY
 * The SQL port's duplicates are counted on a table without a primary key (with one, its
 * insert simply fails on the first duplicate).
 *
 * The competitors' DDL lives here, not in src/dialects: it is the thing measured against,
 * never part of the library.
 */
import { randomBytes } from 'node:crypto';
import type { Knex } from 'knex';
import { connect } from '../src/connect.js';
import { migrate } from '../src/migrations/migrate.js';
import { decodeId, DEFAULT_LAYOUT } from '../src/layout/index.js';
import { toBigInt } from '../src/ids.js';

const BULK_ROWS = Number(process.env.IDLEASE_BENCH_ROWS ?? 1_000_000);
const ROUNDS = Number(process.env.IDLEASE_BENCH_ROUNDS ?? 5);
const CONNECTIONS = 4;
const SINGLE_SECONDS = Number(process.env.IDLEASE_BENCH_SECONDS ?? 3);

interface Contender {
  readonly name: string;
  readonly column: string;
}

const CONTENDERS: Contender[] = [
  { name: 'bigserial', column: 'id bigserial PRIMARY KEY' },
  { name: 'idlease next_id()', column: 'id bigint PRIMARY KEY DEFAULT bench_ours.next_id()' },
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

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

function tableOf(i: number): string {
  return `bench_t${i}`;
}

async function bulkOnce(knex: Knex, i: number): Promise<number | 'duplicate key'> {
  await knex.raw(`TRUNCATE ${tableOf(i)}`);
  await knex.raw('CHECKPOINT').catch(() => undefined);
  const t0 = performance.now();
  try {
    await knex.raw(`INSERT INTO ${tableOf(i)} (x) SELECT g FROM generate_series(1, ?) g`, [BULK_ROWS]);
  } catch (err) {
    if (/duplicate key/.test((err as Error).message)) return 'duplicate key';
    throw err;
  }
  return performance.now() - t0;
}

async function singleRows(url: string, i: number, seconds: number): Promise<number> {
  const pools = Array.from({ length: CONNECTIONS }, () => connect(url, { poolMax: 1 }));
  try {
    // Each autocommit insert would otherwise wait for its own WAL fsync, and on a shared disk that
    // wait (and its noise) swamps what is being compared: the cost of the DEFAULT. Say
    // IDLEASE_BENCH_SYNC_COMMIT=on to measure with durable commits anyway.
    const syncCommit = process.env.IDLEASE_BENCH_SYNC_COMMIT === 'on' ? 'on' : 'off';
    await Promise.all(pools.map((k) => k.raw(`SET synchronous_commit = ${syncCommit}`)));
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
    return counts.reduce((a, b) => a + b, 0) / seconds;
  } finally {
    await Promise.all(pools.map((k) => k.destroy()));
  }
}

export default async function run(): Promise<void> {
  const serverUrl = process.env.IDLEASE_BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
  const dbName = `idlease_bench_nextid_${randomBytes(3).toString('hex')}`;
  const admin = connect(serverUrl, { poolMax: 1 });
  await admin.raw(`CREATE DATABASE "${dbName}"`);
  const u = new URL(serverUrl);
  u.pathname = '/' + dbName;
  const url = u.toString();
  const knex = connect(url, { poolMax: 2 });
  try {
    await migrate(knex, { segments: false, nextId: { schema: 'bench_ours', shard: 5 } });
    for (const sql of INSTAGRAM) await knex.raw(sql);
    for (const [i, c] of CONTENDERS.entries()) await knex.raw(`CREATE TABLE ${tableOf(i)} (${c.column}, x bigint NOT NULL)`);
    await knex.raw('CREATE TABLE bench_dups (id bigint NOT NULL, x bigint NOT NULL)');

    console.log(`PostgreSQL ${(await knex.raw('SHOW server_version')).rows[0].server_version}; ${BULK_ROWS.toLocaleString('en')}-row INSERT … SELECT × ${ROUNDS} rounds (interleaved); single-row inserts from ${CONNECTIONS} connections, ${SINGLE_SECONDS} s × ${ROUNDS} rounds.\n`);

    const bulk: Array<Array<number | 'duplicate key'>> = CONTENDERS.map(() => []);
    // Each round runs every contender once, in an order rotated per round, so load from
    // elsewhere on the machine falls on all of them alike; ratios are paired within a round.
    const order = (r: number) => CONTENDERS.map((_, i) => (i + r) % CONTENDERS.length);
    for (let r = 0; r < ROUNDS; r++) for (const i of order(r)) bulk[i]!.push(await bulkOnce(knex, i));

    // Duplicates: each generator once into a table without a key, counted afterwards.
    const dups: string[] = [];
    for (const [fn, label] of [['insta5.next_id_sql()', 'SQL port'], ['insta5.next_id()', 'PL/pgSQL'], ['bench_ours.next_id()', 'next_id()']] as const) {
      await knex.raw('TRUNCATE bench_dups');
      await knex.raw(`INSERT INTO bench_dups (id, x) SELECT ${fn}, g FROM generate_series(1, ?) g`, [BULK_ROWS]);
      const d = (await knex.raw('SELECT (count(*) - count(DISTINCT id))::int AS d FROM bench_dups')).rows[0].d as number;
      dups.push(`${label}: ${d}`);
    }

    const single: number[][] = CONTENDERS.map(() => []);
    const lags: number[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      for (const i of order(r)) {
        await knex.raw(`TRUNCATE ${tableOf(i)}`);
        single[i]!.push(await singleRows(url, i, SINGLE_SECONDS));
        if (i === 1) {
          // How far the newest ID's time field trails the clock: a jump up to the clock is skipped
          // while another open transaction holds the shared lock (the ID stays unique, just older).
          const end = Date.now();
          const hi = (await knex.raw(`SELECT max(id) AS hi FROM ${tableOf(1)}`)).rows[0].hi;
          lags.push(end - decodeId(toBigInt(hi), DEFAULT_LAYOUT).unixMs);
        }
      }
    }

    const pairedBulk = (i: number) => median(bulk[i]!.flatMap((x, r) => (typeof x === 'number' ? [x / (bulk[0]![r] as number)] : [])));
    const pairedSingle = (i: number) => median(single[i]!.map((x, r) => x / single[0]![r]!));
    console.log('| contender | bulk 1M rows: median s | × bigserial time (median of per-round ratios) | single-row: median rows/s | × bigserial rate (median of per-round ratios) |');
    console.log('|---|---:|---:|---:|---:|');
    for (const [i, c] of CONTENDERS.entries()) {
      const times = bulk[i]!.filter((x): x is number => typeof x === 'number');
      const failed = bulk[i]!.length - times.length;
      const b = times.length > 0 ? median(times) : Number.NaN;
      const bulkCell = times.length > 0 ? `${(b / 1000).toFixed(2)}${failed > 0 ? ` (${failed}/${ROUNDS} rounds failed: duplicate key)` : ''}` : `failed: duplicate key (${failed}/${ROUNDS})`;
      const s = median(single[i]!);
      console.log(`| ${c.name} | ${bulkCell} | ${times.length > 0 ? pairedBulk(i).toFixed(2) : '—'} | ${s.toFixed(0)} | ${pairedSingle(i).toFixed(2)} |`);
    }
    console.log(`\nDuplicate IDs in one ${BULK_ROWS.toLocaleString('en')}-row INSERT … SELECT (no key): ${dups.join(', ')}`);
    console.log(`next_id(): newest single-row ID's time field vs the clock at the end of each round (ms behind): ${lags.join(', ')}`);
    console.log(`Raw bulk times (ms): ${CONTENDERS.map((c, i) => `${c.name}=[${bulk[i]!.map((x) => (typeof x === 'number' ? x.toFixed(0) : x)).join(', ')}]`).join('; ')}`);
    console.log(`Raw single-row rates (rows/s): ${CONTENDERS.map((c, i) => `${c.name}=[${single[i]!.map((x) => x.toFixed(0)).join(', ')}]`).join('; ')}`);
  } finally {
    await knex.destroy();
    await admin.raw(`DROP DATABASE IF EXISTS "${dbName}" WITH (FORCE)`);
    await admin.destroy();
  }
}
