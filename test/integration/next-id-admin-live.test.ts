/**
 * next_id()'s admin commands run while sessions insert (issue 42 item 3): `next-id attach` again
 * (and in its other form), `bump`, `status`, `migrate` again, and a `detach` then `attach` — each
 * through the CLI, as an operator runs it, beside four sessions inserting into the attached
 * column on PostgreSQL and on MariaDB. No ID is given twice; the only failed inserts are those
 * between a detach and the attach after it (no DEFAULT: a NOT NULL refusal).
 */
import mysql from 'mysql2/promise';
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { runMain } from '../helpers/in-process.js';
import { startMariadb, type ServerInstance } from '../helpers/servers.js';

type Insert = () => Promise<bigint[]>;

/** `n` sessions inserting 20-row batches until stopped: every ID they were given, and every refusal. */
function sessions(n: number, open: (w: number) => Promise<{ insert: Insert; close: () => Promise<void> }>) {
  let stop = false;
  const given: bigint[] = [];
  const refusals: string[] = [];
  const done = Promise.all(
    Array.from({ length: n }, async (_, w) => {
      const s = await open(w);
      try {
        while (!stop) {
          try {
            given.push(...(await s.insert()));
          } catch (err) {
            refusals.push((err as Error).message);
          }
          await new Promise((r) => setTimeout(r, 2));
        }
      } finally {
        await s.close();
      }
    }),
  );
  return {
    given,
    refusals,
    async stop() {
      stop = true;
      await done;
    },
  };
}

async function admin(url: string, commands: string[][]): Promise<void> {
  for (const args of commands) {
    const r = await runMain(['--url', url, ...args]);
    expect(r.err, args.join(' ')).toBe('');
    expect(r.code, args.join(' ')).toBe(0);
    await new Promise((res) => setTimeout(res, 150));
  }
}

function expectUnique(label: string, given: bigint[], refusals: string[], refused: RegExp): void {
  const repeats = given.length - new Set(given).size;
  console.log(`${label}: ${given.length} IDs, ${repeats} repeats, ${refusals.length} inserts refused`);
  expect(repeats).toBe(0);
  expect(given.length).toBeGreaterThan(1_000);
  for (const m of refusals) expect(m).toMatch(refused);
}

let pgDb: TestDb;
let maria: ServerInstance;
beforeAll(async () => {
  pgDb = await createTestDb('postgres', 'nid_admin_live');
  maria = await startMariadb(['--event-scheduler=ON', '--log-bin=mariadb-bin', '--binlog-format=ROW', '--server-id=31']);
});
afterAll(async () => {
  await pgDb?.drop();
  await maria?.destroy();
});

it('PostgreSQL: attach (both forms), bump, status, migrate and detach+attach while four sessions insert: 0 repeats', async () => {
  await admin(pgDb.url, [['migrate', '--no-segments', '--next-id']]);
  await pgDb.knex.raw('CREATE TABLE live (id bigint NOT NULL, w int NOT NULL)');
  await admin(pgDb.url, [['next-id', 'attach', 'live']]);
  const load = sessions(4, async (w) => {
    const c = new pg.Client({ connectionString: pgDb.url });
    await c.connect();
    return {
      insert: async () =>
        (
          await c.query<{ id: string }>('INSERT INTO live (w) SELECT $1 FROM generate_series(1, 20) RETURNING id::text AS id', [w])
        ).rows.map((r) => BigInt(r.id)),
      close: () => c.end(),
    };
  });
  await admin(pgDb.url, [
    ['next-id', 'attach', 'live'],
    ['next-id', 'attach', 'live', '--call'],
    ['next-id', 'bump', '--ahead-ms', '500'],
    ['--json', 'next-id', 'status'],
    ['migrate', '--no-segments', '--next-id'],
    ['next-id', 'detach', 'live'],
    ['next-id', 'attach', 'live'],
    ['next-id', 'bump', '--ahead-ms', '0'],
  ]);
  await new Promise((r) => setTimeout(r, 300));
  await load.stop();
  expectUnique('PostgreSQL admin commands beside inserts', load.given, load.refusals, /null value in column "id"/);
});

it('MariaDB: attach, status, migrate and detach+attach while four sessions insert: 0 repeats', async () => {
  const url = maria.url;
  await admin(url, [['migrate', '--no-segments', '--next-id']]);
  const setup = await mysql.createConnection({ host: '127.0.0.1', port: maria.port, user: 'root', database: 'test' });
  await setup.query('CREATE TABLE live (id bigint NOT NULL, w int NOT NULL, KEY (id))');
  await setup.end();
  await admin(url, [['next-id', 'attach', 'live']]);
  const load = sessions(4, async (w) => {
    const c = await mysql.createConnection({ host: '127.0.0.1', port: maria.port, user: 'root', database: 'test' });
    const values = Array.from({ length: 20 }, () => `(${w})`).join(',');
    return {
      insert: async () => {
        const [rows] = (await c.query(`INSERT INTO live (w) VALUES ${values} RETURNING CAST(id AS CHAR) AS id`)) as unknown as [
          Array<{ id: string }>,
        ];
        return rows.map((r) => BigInt(r.id));
      },
      close: () => c.end(),
    };
  });
  await admin(url, [
    ['next-id', 'attach', 'live'],
    ['--json', 'next-id', 'status'],
    ['migrate', '--no-segments', '--next-id'],
    ['next-id', 'detach', 'live'],
    ['next-id', 'attach', 'live'],
  ]);
  await new Promise((r) => setTimeout(r, 300));
  await load.stop();
  expectUnique('MariaDB admin commands beside inserts', load.given, load.refusals, /doesn't have a default value/);
});
