/**
 * next_id() on MariaDB against an AUTO_INCREMENT primary key, in the same run: ratios of the
 * server process's CPU time (utime + stime from /proc, the pid from @@pid_file; the server must
 * run on this machine), paired rounds (order alternating), medians reported. CPU, not wall
 * time, because this shared 2-core VM's wall times swing by 3x with the load of other processes.
 *
 *   npm run bench -- next-id            (after the PostgreSQL part)
 *   npx tsx bench/run.ts next-id-mariadb
 *
 * A private mariadbd (event scheduler on, ROW binary log) is started unless
 * IDLEASE_BENCH_MARIADB_URL names a server whose event scheduler is on. Contenders, each
 * `id bigint PRIMARY KEY`: AUTO_INCREMENT (the baseline) and next_id() attached
 * (`next-id attach`: the expression DEFAULT). Loads: IDLEASE_BENCH_ROWS rows (default 1M) in
 * 1,000-row INSERTs on one connection; the same in one INSERT … SELECT; IDLEASE_BENCH_SINGLE_INSERTS
 * (default 10,000) single-row autocommit INSERTs on one connection.
 */
import { readFileSync } from 'node:fs';
import mysql from 'mysql2/promise';
import { connect } from '../src/connect.js';
import { migrate } from '../src/migrations/migrate.js';
import { attachNextId } from '../src/next-id/attach.js';
import { startMariadb, type ServerInstance } from '../test/helpers/servers.js';
import { median, pairOnce } from './pairs.js';

const ROWS = Number(process.env.IDLEASE_BENCH_ROWS ?? 1_000_000);
const ROUNDS = Number(process.env.IDLEASE_BENCH_MARIADB_ROUNDS ?? 3);
const SINGLE_INSERTS = Number(process.env.IDLEASE_BENCH_SINGLE_INSERTS ?? 10_000);
const SINGLE_ROUNDS = Number(process.env.IDLEASE_BENCH_SINGLE_ROUNDS ?? 6);

type Kind = 'auto' | 'ours';

export default async function run(): Promise<void> {
  let server: ServerInstance | undefined;
  let url = process.env.IDLEASE_BENCH_MARIADB_URL;
  if (!url) {
    server = await startMariadb([
      '--event-scheduler=ON',
      '--log-bin=mariadb-bin',
      '--binlog-format=ROW',
      '--innodb-flush-log-at-trx-commit=2',
    ]);
    url = server.url;
  }
  const u = new URL(url);
  const conn = await mysql.createConnection({
    host: u.hostname,
    port: Number(u.port || 3306),
    user: decodeURIComponent(u.username),
    password: decodeURIComponent(u.password),
    database: u.pathname.slice(1),
    multipleStatements: false,
  });
  const knex = connect(url);
  try {
    await migrate(knex, { segments: false, nextId: { shard: 5 } });
    const fresh = async (kind: Kind) => {
      const table = `bench_${kind}`;
      await conn.query(`DROP TABLE IF EXISTS ${table}`);
      await conn.query(
        `CREATE TABLE ${table} (id bigint NOT NULL ${kind === 'auto' ? 'AUTO_INCREMENT ' : ''}PRIMARY KEY, v int NOT NULL) ENGINE=InnoDB`,
      );
      if (kind === 'ours') await attachNextId(knex, { table });
      return table;
    };
    // The whole server process (its pid file says which): the connection's thread, InnoDB's
    // background threads its rows cause, and for next_id() the ticker — all of its cost.
    const [[pidRow]] = (await conn.query('SELECT @@pid_file AS f')) as unknown as [[{ f: string }]];
    const pid = readFileSync(pidRow.f, 'utf8').trim();
    const cpuMs = () => {
      const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
      return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100; // utime + stime, in 100 Hz ticks
    };
    const timed = async (fn: () => Promise<unknown>) => {
      const t0 = cpuMs();
      await fn();
      return cpuMs() - t0;
    };
    const batch = Array.from({ length: 1_000 }, (_, i) => `(${i})`).join(',');
    const batches = async (kind: Kind) => {
      const table = await fresh(kind);
      return timed(async () => {
        for (let n = 0; n < ROWS; n += 1_000) await conn.query(`INSERT INTO ${table} (v) VALUES ${batch}`);
      });
    };
    const insertSelect = async (kind: Kind) => {
      const table = await fresh(kind);
      return timed(() => conn.query(`INSERT INTO ${table} (v) SELECT seq FROM seq_1_to_${ROWS}`));
    };
    const single = async (kind: Kind) => {
      const table = await fresh(kind);
      return timed(async () => {
        for (let n = 0; n < SINGLE_INSERTS; n++) await conn.query(`INSERT INTO ${table} (v) VALUES (1)`);
      });
    };
    const ratios = { batches: [] as number[], insertSelect: [] as number[], single: [] as number[] };
    for (let r = 0; r < ROUNDS; r++) {
      const [a, o] = await pairOnce(
        r,
        () => batches('auto'),
        () => batches('ours'),
      );
      ratios.batches.push(o / a);
      const [a2, o2] = await pairOnce(
        r,
        () => insertSelect('auto'),
        () => insertSelect('ours'),
      );
      ratios.insertSelect.push(o2 / a2);
    }
    for (let r = 0; r < SINGLE_ROUNDS; r++) {
      const [a, o] = await pairOnce(
        r,
        () => single('auto'),
        () => single('ours'),
      );
      ratios.single.push(o / a);
    }
    const fmt = (xs: number[]) => `${median(xs).toFixed(2)}× (${xs.map((x) => x.toFixed(2)).join(', ')})`;
    console.log(`\nnext_id() on MariaDB vs AUTO_INCREMENT primary key (${ROWS.toLocaleString('en')} rows; medians of paired rounds)\n`);
    console.log('| load | next_id() / AUTO_INCREMENT server CPU | target | met |');
    console.log('|---|---:|---:|---|');
    console.log(`| 1,000-row INSERTs | ${fmt(ratios.batches)} | ≤ 1.5× | ${median(ratios.batches) <= 1.5 ? 'yes' : 'no'} |`);
    console.log(`| one INSERT … SELECT | ${fmt(ratios.insertSelect)} | ≤ 1.5× | ${median(ratios.insertSelect) <= 1.5 ? 'yes' : 'no'} |`);
    console.log(`| single-row INSERTs | ${fmt(ratios.single)} | ≤ 1.2× | ${median(ratios.single) <= 1.2 ? 'yes' : 'no'} |`);
    await conn.query('DROP TABLE IF EXISTS bench_auto');
    await conn.query('DROP TABLE IF EXISTS bench_ours');
  } finally {
    await conn.end();
    await knex.destroy();
    await server?.destroy();
  }
}
