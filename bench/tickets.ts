/**
 * Ticket allocator throughput, as ratios against baselines measured in the same run on
 * private MariaDB instances this bench starts (and stops):
 *   1. allocator vs a raw mysql2 loop running the same statement at the same concurrency
 *      on the same server (target ≥ 0.9×), for MyISAM and InnoDB;
 *   2. 2 servers vs 1 through the allocator (target close to 2×);
 *   3. InnoDB vs MyISAM, 1 and 8 connections (the figures the README quotes).
 * Run: npx tsx bench/run.ts tickets   (IDLEASE_BENCH_SECONDS=1.5 per measurement, IDLEASE_BENCH_ROUNDS=3)
 */
import mysql from 'mysql2';
import type { Knex } from 'knex';
import { connect } from '../src/connect.js';
import { migrate } from '../src/migrations/migrate.js';
import { createTicketAllocator } from '../src/ticket/allocator.js';
import { mysqlDrawSql, readScheme } from '../src/dialects/tickets.js';
import { knexExecutor } from '../src/drivers/knex.js';
import { alternatingPairs, median } from './pairs.js';
import { startMariadb, type ServerInstance } from '../test/helpers/servers.js';

const SECONDS = Number(process.env.IDLEASE_BENCH_SECONDS ?? 1.5);
const CONCURRENCY = 8;
const ROUNDS = Number(process.env.IDLEASE_BENCH_ROUNDS ?? 3);

async function timed(concurrency: number, draw: () => Promise<unknown>): Promise<number> {
  const end = Date.now() + SECONDS * 1000;
  let n = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (Date.now() < end) {
        await draw();
        n++;
      }
    }),
  );
  return n / SECONDS;
}

/** The allocator's own statement, on plain mysql2 connections: the baseline. */
async function rawLoop(
  url: string,
  sequence: string,
  concurrency: number,
  pair: { increment: number; offset: number },
  generation: bigint,
): Promise<number> {
  const u = new URL(url);
  const conns = Array.from({ length: concurrency }, () =>
    mysql.createConnection({
      host: u.hostname,
      port: Number(u.port),
      user: 'root',
      database: 'test',
      supportBigNumbers: true,
      bigNumberStrings: true,
    }),
  );
  const query = (c: mysql.Connection, sql: string, values: unknown[]) =>
    new Promise<unknown>((resolve, reject) => c.query(sql, values, (err, res) => (err ? reject(err) : resolve(res))));
  await Promise.all(
    conns.map((c) => query(c, 'SET SESSION auto_increment_increment = ?, auto_increment_offset = ?', [pair.increment, pair.offset])),
  );
  const sql = mysqlDrawSql({ schema: undefined, sequence });
  let i = 0;
  const perConn = async (c: mysql.Connection) => {
    for (;;) {
      try {
        return BigInt(((await query(c, sql, [sequence, generation.toString()])) as { insertId: string }).insertId);
      } catch (err) {
        if (![1213, 1205, 1467].includes((err as { errno?: number }).errno ?? 0)) throw err;
      }
    }
  };
  try {
    return await timed(concurrency, () => perConn(conns[i++ % concurrency]!));
  } finally {
    conns.forEach((c) => c.destroy());
  }
}

async function allocLoop(
  servers: Array<{ knex: Knex; offset: number }>,
  sequence: string,
  concurrency: number,
  increment?: number,
): Promise<number> {
  const alloc = createTicketAllocator({ servers, sequence, increment, connectionsPerServer: concurrency, timeoutMs: 30_000 });
  try {
    // Open every connection outside the clock, as the raw loop does.
    await Promise.all(Array.from({ length: concurrency * 2 }, () => alloc.next()));
    return await timed(concurrency, () => alloc.next());
  } finally {
    await alloc.close();
  }
}

function fmt(n: number): string {
  return Math.round(n).toLocaleString('en-US');
}

export default async function run(): Promise<void> {
  const instances: ServerInstance[] = [];
  const handles: Knex[] = [];
  try {
    const [s1, s2] = await Promise.all([startMariadb(), startMariadb()]);
    instances.push(s1!, s2!);
    const k1 = connect(s1!.url);
    const k2 = connect(s2!.url);
    handles.push(k1, k2);
    // Per engine: a one-server sequence and a two-server sequence on each instance.
    for (const engine of ['MyISAM', 'InnoDB'] as const) {
      const one = `one_${engine.toLowerCase()}`;
      const two = `two_${engine.toLowerCase()}`;
      await migrate(k1, { segments: false, tickets: { sequences: [one], engine } });
      await migrate(k1, { segments: false, tickets: { sequences: [two], engine, increment: 2, offset: 1 } });
      await migrate(k2, { segments: false, tickets: { sequences: [two], engine, increment: 2, offset: 2 } });
    }
    const rows: string[] = [];
    rows.push('| engine | measurement | baseline (tickets/s) | idlease (tickets/s) | ratio | target |', '|---|---|---|---|---|---|');
    const engines: Record<string, { c1: number; c8: number }> = {};
    for (const engine of ['MyISAM', 'InnoDB'] as const) {
      const one = `one_${engine.toLowerCase()}`;
      const two = `two_${engine.toLowerCase()}`;
      const gen = (await readScheme(knexExecutor(k1), { schema: undefined, sequence: one })).generation;
      // The ratio is the median of the per-pair ratios.
      const rawRun = () => rawLoop(s1!.url, one, CONCURRENCY, { increment: 1, offset: 1 }, gen);
      const ourRun = () => allocLoop([{ knex: k1, offset: 1 }], one, CONCURRENCY);
      const pairs = await alternatingPairs(ROUNDS, rawRun, ourRun);
      if (process.env.IDLEASE_BENCH_VERBOSE)
        console.log(engine, 'raw/idlease pairs', pairs.map((p) => p.map(Math.round).join('/')).join(' '));
      const raw = median(pairs.map((p) => p[0]));
      const ours = median(pairs.map((p) => p[1]));
      rows.push(
        `| ${engine} | allocator vs raw mysql2 loop, same statement, ${CONCURRENCY} conns, 1 server | ${fmt(raw)} | ${fmt(ours)} | ${median(pairs.map((p) => p[1] / p[0])).toFixed(2)}× | ≥ 0.9× |`,
      );
      const oneRun = () => allocLoop([{ knex: k1, offset: 1 }], two, CONCURRENCY, 2);
      const twoRun = () =>
        allocLoop(
          [
            { knex: k1, offset: 1 },
            { knex: k2, offset: 2 },
          ],
          two,
          CONCURRENCY * 2,
        );
      const growth = await alternatingPairs(ROUNDS, oneRun, twoRun);
      rows.push(
        `| ${engine} | 2 servers (${CONCURRENCY * 2} callers) vs 1 server (${CONCURRENCY}), allocator | ${fmt(median(growth.map((g) => g[0])))} | ${fmt(median(growth.map((g) => g[1])))} | ${median(growth.map((g) => g[1] / g[0])).toFixed(2)}× | ≈ 2× |`,
      );
      engines[engine] = { c1: await allocLoop([{ knex: k1, offset: 1 }], one, 1), c8: ours };
    }
    rows.push(
      `| — | InnoDB vs MyISAM, 1 conn, allocator | ${fmt(engines.MyISAM!.c1)} | ${fmt(engines.InnoDB!.c1)} | ${(engines.InnoDB!.c1 / engines.MyISAM!.c1).toFixed(2)}× | (figure) |`,
      `| — | InnoDB vs MyISAM, ${CONCURRENCY} conns, allocator | ${fmt(engines.MyISAM!.c8)} | ${fmt(engines.InnoDB!.c8)} | ${(engines.InnoDB!.c8 / engines.MyISAM!.c8).toFixed(2)}× | (figure) |`,
    );
    console.log(rows.join('\n'));
    console.log(
      `\n${SECONDS} s per measurement, ${ROUNDS} alternating rounds, medians; private mariadbd 10.11 instances with default (durable) settings, started by the bench.`,
    );
  } finally {
    await Promise.all(handles.map((h) => h.destroy()));
    await Promise.all(instances.map((i) => i.destroy()));
  }
}
