/**
 * Issue 37: next_id() on MariaDB through the CLI and the API — migrate --next-id, next-id
 * attach/detach/status, the server settings checked up front (event_scheduler, binlog_format),
 * a changed shard or layout refused (issue 38 item 3), a dump and restore that keeps IDs unique,
 * and attach/detach/status on PostgreSQL. A private mariadbd (the shared one runs with the event
 * scheduler off and no binary log, and is not ours to reconfigure).
 */
import { execFileSync } from 'node:child_process';
import mysql from 'mysql2/promise';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Knex } from 'knex';
import { connect } from '../../src/connect.js';
import { migrate } from '../../src/migrations/migrate.js';
import { attachNextId, detachNextId, nextIdStatus } from '../../src/next-id/attach.js';
import { decodeId, resolveLayout } from '../../src/layout/index.js';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { runMain } from '../helpers/in-process.js';
import { startMariadb, type ServerInstance } from '../helpers/servers.js';
import { sleep, waitFor } from '../helpers/wait.js';

let server: ServerInstance;
let knex: Knex;
let url: string;
const sql = (statement: string) => execFileSync('mariadb', ['-h127.0.0.1', `-P${server.port}`, '-uroot', '-N', '-e', statement]).toString();

beforeAll(async () => {
  server = await startMariadb(['--event-scheduler=ON', '--log-bin=mariadb-bin', '--binlog-format=ROW', '--server-id=11']);
  url = server.url;
  knex = connect(url);
});
afterAll(async () => {
  await knex?.destroy();
  await server?.destroy();
});

async function ids(table: string): Promise<bigint[]> {
  const [rows] = (await knex.raw(`SELECT CAST(id AS CHAR) AS id FROM ${table} ORDER BY id`)) as [Array<{ id: string }>];
  return rows.map((r) => BigInt(r.id));
}

describe('next_id() on MariaDB (private server: event scheduler on, ROW binary log)', () => {
  it('migrate --next-id, attach, insert (single rows, RETURNING, INSERT…SELECT), status --json, detach, down', async () => {
    const up = await runMain(['--url', url, '--json', 'migrate', '--no-segments', '--next-id', '--shard', '5']);
    expect(up.err).toBe('');
    expect(JSON.parse(up.out)).toMatchObject({ applied: ['next_id', 'next_id:v2'], direction: 'up' });
    await knex.raw('CREATE TABLE orders (id bigint NOT NULL PRIMARY KEY, item varchar(20) NOT NULL)');

    const attach = await runMain(['--url', url, 'next-id', 'attach', 'orders']);
    expect(attach.err).toBe('');
    expect(attach.out).toContain('orders.id takes next_id()');

    const [returned] = (await knex.raw("INSERT INTO orders (item) VALUES ('book'), ('pen') RETURNING CAST(id AS CHAR) AS id")) as [
      Array<{ id: string }>,
    ];
    // INSERT…SELECT into a NOT NULL column: the DEFAULT fills it in (a trigger would not: 1364).
    await knex.raw("INSERT INTO orders (item) SELECT 'bulk' FROM seq_1_to_20000");
    const all = await ids('orders');
    expect(all.length).toBe(20_002);
    expect(new Set(all).size).toBe(all.length);
    const layout = resolveLayout({});
    for (const id of [all[0]!, all.at(-1)!, BigInt(returned[0]!.id)]) {
      expect(id).toBeGreaterThan(0n);
      const d = decodeId(id, layout);
      expect(d.shard).toBe(5);
      // The time field is the clock's (the first ID too: migrate moved the sequence there).
      expect(Math.abs(d.unixMs - Date.now())).toBeLessThan(10_000);
    }

    const status = await runMain(['--url', url, '--json', 'next-id', 'status']);
    expect(status.err).toBe('');
    const s = JSON.parse(status.out);
    expect(s).toMatchObject({
      engine: 'mariadb',
      schema: 'test',
      shard: 5,
      layout: { timeBits: 41, shardBits: 10, sequenceBits: 12, epoch: '2024-01-01T00:00:00.000Z' },
      attached: [{ table: 'orders', column: 'id' }],
      homeServerId: 11,
      serverId: 11,
    });
    // The ticker keeps the time field on the clock while nothing is inserted.
    await new Promise((r) => setTimeout(r, 1_500));
    const idle = await nextIdStatus(knex);
    expect(idle.lagMs).toBeLessThan(1_000);
    expect(idle.leadMs).toBeLessThan(1_000);
    // The ticker stopped (the event scheduler off) for 5 s: the DEFAULT draws the counter as it
    // is, so the next ID's time field trails the clock, and status says by how much.
    sql('SET GLOBAL event_scheduler = OFF');
    try {
      // A run of the ticker already under way ticks on for up to a second after the scheduler
      // stops: wait until the time field stands still (the lag grows with the clock), then 5 s.
      await waitFor(
        async () => {
          const a = (await nextIdStatus(knex)).lagMs;
          await sleep(250);
          return (await nextIdStatus(knex)).lagMs - a >= 200;
        },
        { timeoutMs: 10_000, what: 'the ticker to stop once the event scheduler is off' },
      );
      await sleep(5_000); // the point: the ticker stopped for 5 s
      const stopped = await nextIdStatus(knex);
      expect(stopped.lagMs).toBeGreaterThanOrEqual(4_500);
      expect(stopped.leadMs).toBe(0);
    } finally {
      sql('SET GLOBAL event_scheduler = ON');
    }
    await waitFor(async () => (await nextIdStatus(knex)).lagMs < 1_000, { timeoutMs: 10_000, what: 'the ticker back on the clock' });

    const refusedDown = await runMain(['--url', url, 'migrate', '--no-segments', '--down', '--next-id']);
    expect(refusedDown.code).not.toBe(0);
    expect(refusedDown.err).toContain('MIGRATION_FAILED');
    expect(refusedDown.err).toContain('orders.id');

    const detach = await runMain(['--url', url, 'next-id', 'detach', 'orders']);
    expect(detach.err).toBe('');
    await expect(knex.raw("INSERT INTO orders (item) VALUES ('no default')")).rejects.toThrow(/doesn't have a default value/);
    const down = await runMain(['--url', url, '--json', 'migrate', '--no-segments', '--down', '--next-id']);
    expect(down.err).toBe('');
    expect(JSON.parse(down.out)).toMatchObject({ applied: ['next_id:v2', 'next_id'], direction: 'down' });
    await knex.raw('DROP TABLE orders');
  });

  it('a changed shard or layout is refused with commands that run; the same options are a no-op', async () => {
    await migrate(knex, { segments: false, nextId: { shard: 3 } });
    expect((await migrate(knex, { segments: false, nextId: { shard: 3 } })).applied).toEqual([]);
    const shard = await runMain(['--url', url, 'migrate', '--no-segments', '--next-id', '--shard', '4']);
    expect(shard.code).not.toBe(0);
    expect(shard.err).toContain('installed with shard 3');
    expect(shard.err).toContain(' migrate --no-segments --down --next-id --drop-dependent-defaults');
    const layout = await runMain(['--url', url, 'migrate', '--no-segments', '--next-id', '--shard', '3', '--sequence-bits', '10']);
    expect(layout.code).not.toBe(0);
    expect(layout.err).toContain('new IDs could equal old ones');
    // The hint's commands, as printed, do what they say.
    const keep = /`[^`]*? (migrate --no-segments --next-id --shard 3 [^`]*)`/.exec(layout.err)![1]!;
    const kept = await runMain(['--url', url, ...keep.split(' ')]);
    expect(kept.code).toBe(0);
    const reinstall = /`[^`]*? (migrate --no-segments --down [^`]*)` then `[^`]*? (migrate --no-segments --next-id [^`]*)`/.exec(
      shard.err,
    )!;
    expect((await runMain(['--url', url, ...reinstall[1]!.split(' ')])).code).toBe(0);
    expect((await runMain(['--url', url, ...reinstall[2]!.split(' ')])).code).toBe(0);
    expect((await nextIdStatus(knex)).shard).toBe(4);
    await migrate(knex, { segments: false, nextId: { shard: 4 }, direction: 'down' });
  });

  it('binlog_format = STATEMENT and event_scheduler = OFF are refused at attach and migrate, naming the setting', async () => {
    await migrate(knex, { segments: false, nextId: true });
    await knex.raw('CREATE TABLE t_stmt (id bigint NOT NULL PRIMARY KEY, v int)');
    try {
      sql("SET GLOBAL binlog_format = 'STATEMENT'");
      // A new connection sees the new global value; the check reads the global one anyway.
      const attach = await runMain(['--url', url, 'next-id', 'attach', 't_stmt']);
      expect(attach.code).not.toBe(0);
      expect(attach.err).toMatch(/BAD_CONFIG: binlog_format is STATEMENT/);
      await expect(attachNextId(knex, { table: 't_stmt' })).rejects.toMatchObject({ code: 'BAD_CONFIG' });
    } finally {
      sql("SET GLOBAL binlog_format = 'ROW'");
    }
    try {
      sql('SET GLOBAL event_scheduler = OFF');
      await expect(attachNextId(knex, { table: 't_stmt' })).rejects.toThrow(/event_scheduler is OFF/);
      const m = await runMain(['--url', url, 'migrate', '--no-segments', '--next-id']);
      expect(m.err).toMatch(/BAD_CONFIG: event_scheduler is OFF/);
    } finally {
      sql('SET GLOBAL event_scheduler = ON');
    }
    // Nothing was attached by the refused calls.
    expect((await nextIdStatus(knex)).attached).toEqual([]);
    await knex.raw('DROP TABLE t_stmt');
    await migrate(knex, { segments: false, nextId: true, direction: 'down' });
  });

  it('attach refuses what cannot take IDs: no such column, not bigint, AUTO_INCREMENT; schema flags', async () => {
    await migrate(knex, { segments: false, nextId: true });
    await knex.raw('CREATE TABLE t_bad (id int NOT NULL PRIMARY KEY, k bigint NOT NULL AUTO_INCREMENT UNIQUE)');
    await expect(attachNextId(knex, { table: 't_bad', column: 'nope' })).rejects.toThrow(/has no column nope/);
    await expect(attachNextId(knex, { table: 't_nonexist' })).rejects.toThrow(/There is no table t_nonexist/);
    await expect(attachNextId(knex, { table: 't_bad' })).rejects.toThrow(/is not a bigint/);
    await expect(attachNextId(knex, { table: 't_bad', column: 'k' })).rejects.toThrow(/AUTO_INCREMENT/);
    await expect(attachNextId(knex, { table: 't_bad', schema: 'x' })).rejects.toMatchObject({ code: 'BAD_CONFIG' });
    await expect(attachNextId(knex, { table: 't_bad', column: 'k', form: 'call' })).rejects.toThrow(/PostgreSQL only/);
    await expect(migrate(knex, { segments: false, nextId: { schema: 'x' } })).rejects.toMatchObject({ code: 'BAD_CONFIG' });
    await knex.raw('DROP TABLE t_bad');
    await migrate(knex, { segments: false, nextId: true, direction: 'down' });
  });

  it('a DEFAULT of its own is not replaced unless asked; with replace, detach puts it back', async () => {
    await migrate(knex, { segments: false, nextId: true });
    await knex.raw('CREATE TABLE t_def (id bigint NOT NULL DEFAULT 42, v int)');
    await expect(attachNextId(knex, { table: 't_def' })).rejects.toMatchObject({
      code: 'BAD_ARGUMENT',
      message: expect.stringMatching(/t_def\.id already has DEFAULT 42; .*--replace/),
    });
    const a = await attachNextId(knex, { table: 't_def', replace: true });
    expect(a.previous).toBe('42');
    expect((await attachNextId(knex, { table: 't_def' })).previous).toBeUndefined();
    await knex.raw('INSERT INTO t_def (v) VALUES (1)');
    const d = await detachNextId(knex, { table: 't_def' });
    expect(d.previous).toBe('42');
    await knex.raw('INSERT INTO t_def (v) VALUES (2)');
    const rows = (await knex.raw('SELECT CAST(id AS CHAR) AS id FROM t_def ORDER BY v'))[0] as Array<{ id: string }>;
    expect(BigInt(rows[0]!.id)).toBeGreaterThan(2n ** 40n);
    expect(rows[1]!.id).toBe('42');
    await knex.raw('DROP TABLE t_def');
    // A mixed-case table and column, as an ORM names them: taken as written, quoted.
    await knex.raw('CREATE TABLE `Order` (`orderId` bigint NOT NULL, v int)');
    await attachNextId(knex, { table: 'Order', column: 'orderId' });
    await knex.raw('INSERT INTO `Order` (v) VALUES (1)');
    expect((await nextIdStatus(knex)).attached).toEqual([{ table: 'Order', column: 'orderId' }]);
    await detachNextId(knex, { table: 'Order', column: 'orderId' });
    await knex.raw('DROP TABLE `Order`');
    await migrate(knex, { segments: false, nextId: true, direction: 'down' });
    expect(((await knex.raw("SHOW TABLES LIKE 'idlease_next_id_replaced'"))[0] as unknown[]).length).toBe(0);
  });

  it('mariadb-dump --skip-add-locks and a restore keep IDs unique (the restored sequence is past every ID)', async () => {
    await migrate(knex, { segments: false, nextId: true });
    await knex.raw('CREATE TABLE t_dump (id bigint NOT NULL PRIMARY KEY, v int)');
    await attachNextId(knex, { table: 't_dump' });
    await knex.raw('INSERT INTO t_dump (v) SELECT seq FROM seq_1_to_5000');
    const before = await ids('t_dump');
    const dir = mkdtempSync(path.join(tmpdir(), 'idlease-dump-'));
    try {
      const file = path.join(dir, 'test.sql');
      // As docs/next-id.md says: --skip-add-locks (a default dump's restore fails at the table
      // whose DEFAULT reads the sequence: ERROR 1100), --events for the ticker, --routines for
      // the procedure that makes a server home.
      writeFileSync(
        file,
        execFileSync('mariadb-dump', [
          '-h127.0.0.1',
          `-P${server.port}`,
          '-uroot',
          '--skip-add-locks',
          '--events',
          '--routines',
          '--databases',
          'test',
        ]),
      );
      sql('DROP DATABASE test');
      execFileSync('mariadb', ['-h127.0.0.1', `-P${server.port}`, '-uroot'], { input: readFileSync(file) });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    const fresh = connect(url);
    try {
      await fresh.raw('INSERT INTO t_dump (v) SELECT seq FROM seq_1_to_5000');
      const [rows] = (await fresh.raw('SELECT COUNT(*) AS n, COUNT(DISTINCT id) AS d, MIN(id) > 0 AS pos FROM t_dump')) as [
        Array<{ n: string | number; d: string | number; pos: number }>,
      ];
      expect(Number(rows[0]!.n)).toBe(10_000);
      expect(Number(rows[0]!.d)).toBe(10_000);
      const seen = new Set(before);
      const [all] = (await fresh.raw('SELECT CAST(id AS CHAR) AS id FROM t_dump')) as [Array<{ id: string }>];
      const added = all.map((r) => BigInt(r.id)).filter((id) => !seen.has(id));
      expect(added.length).toBe(5_000);
      expect(added.every((id) => id > before.at(-1)!)).toBe(true);
      expect((await nextIdStatus(fresh)).attached).toEqual([{ table: 't_dump', column: 'id' }]);
      await detachNextId(fresh, { table: 't_dump' });
      await fresh.raw('DROP TABLE t_dump');
      await migrate(fresh, { segments: false, nextId: true, direction: 'down' });
    } finally {
      await fresh.destroy();
    }
  });

  it('server_id changed on the live primary: no repeat, no jump, the time field on the clock on sessions opened before and after; a server that is not home refuses until made home, then jumps once', async () => {
    await migrate(knex, { segments: false, nextId: { shard: 2 } });
    await knex.raw('CREATE TABLE t_rename (id bigint NOT NULL PRIMARY KEY, w int NOT NULL)');
    await attachNextId(knex, { table: 't_rename' });
    const open = () => mysql.createConnection({ host: '127.0.0.1', port: server.port, user: 'root', database: 'test' });
    const given: Array<{ id: bigint; at: number }> = [];
    const refusals: string[] = [];
    /** Single-row inserts on one session until `until`: what it was given, and every refusal's message. */
    const write = async (c: mysql.Connection, w: number, until: () => boolean) => {
      while (!until()) {
        try {
          const [rows] = (await c.query(`INSERT INTO t_rename (w) VALUES (${w}) RETURNING CAST(id AS CHAR) AS id`)) as unknown as [
            Array<{ id: string }>,
          ];
          given.push({ id: BigInt(rows[0]!.id), at: Date.now() });
        } catch (err) {
          refusals.push((err as Error).message);
        }
        await new Promise((r) => setTimeout(r, 10));
      }
    };
    const before = await open();
    try {
      await write(before, 1, () => given.length >= 20);
      sql('SET GLOBAL server_id = 12');
      const after = await open();
      let stop = false;
      const writers = [write(before, 1, () => stop), write(after, 2, () => stop)];
      // Home follows the server within a tick: status says so, then both sessions write on.
      await waitFor(async () => (await nextIdStatus(knex)).homeServerId === 12, { timeoutMs: 5_000, what: 'server 12 to be home' });
      const homed = given.length;
      await waitFor(async () => given.length >= homed + 200, { timeoutMs: 10_000, what: '200 more IDs drawn' });
      stop = true;
      await Promise.all(writers);
      await after.end();
    } finally {
      await before.end();
    }
    console.log(
      `server_id changed live: ${given.length} IDs, ${refusals.length} inserts refused until the ticker made the server home again`,
    );
    expect(new Set(given.map((g) => g.id)).size, 'an ID was given twice').toBe(given.length);
    // At most the moment before the ticker made the server home again: ER 4084, naming the fence.
    for (const m of refusals) expect(m).toMatch(/idlease_next_id_not_home.*has run out/);
    const layout = resolveLayout({});
    const last = given.slice(-100);
    // No jump: the same server, the time field on the clock (a jump would put it 60 s ahead).
    for (const g of last) expect(Math.abs(decodeId(g.id, layout).unixMs - g.at)).toBeLessThan(1_000);
    const status = await nextIdStatus(knex);
    expect(status).toMatchObject({ homeServerId: 12, serverId: 12, ticker: 'ENABLED', tickerRuns: true });

    // Another server made home meanwhile (as replication brings it after a promotion elsewhere):
    // this one's heartbeat names itself, not that home, so it is not a rename: it refuses, then
    // the ticker makes it home with one jump of the gap past its copy.
    const [[top]] = (await knex.raw('SELECT CAST(MAX(id) AS CHAR) AS id FROM t_rename')) as [[{ id: string }]];
    await knex.raw('UPDATE idlease_next_id SET home_server_id = 99 WHERE id = 1');
    await waitFor(async () => (await nextIdStatus(knex)).homeServerId === 12, { timeoutMs: 5_000, what: 'server 12 to be home' });
    const [rows] = (await knex.raw('INSERT INTO t_rename (w) VALUES (3) RETURNING CAST(id AS CHAR) AS id')) as [Array<{ id: string }>];
    const jumped = decodeId(BigInt(rows[0]!.id), layout);
    expect(BigInt(rows[0]!.id)).toBeGreaterThan(BigInt(top.id));
    expect(jumped.unixMs - Date.now()).toBeGreaterThan(55_000);

    sql('SET GLOBAL server_id = 11');
    await waitFor(async () => (await nextIdStatus(knex)).homeServerId === 11, { timeoutMs: 5_000, what: 'server 11 to be home again' });
    await detachNextId(knex, { table: 't_rename' });
    await knex.raw('DROP TABLE t_rename');
    await migrate(knex, { segments: false, nextId: true, direction: 'down' });
  });
});

describe('next-id attach/detach/status on PostgreSQL', () => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb('postgres', 'next_id_attach');
  });
  afterAll(async () => {
    await db?.drop();
  });

  it('attach writes the DEFAULT, status lists it with the layout, detach drops it, down is refused while attached', async () => {
    await migrate(db.knex, { segments: false, nextId: { schema: 'shard_7', shard: 7 } });
    await db.knex.raw('CREATE TABLE orders (id bigint PRIMARY KEY, item text NOT NULL)');
    const a = await runMain(['--url', db.url, 'next-id', 'attach', 'orders', '--next-id-schema', 'shard_7']);
    expect(a.err).toBe('');
    const res = await db.knex.raw("INSERT INTO orders (item) VALUES ('book') RETURNING id::text AS id");
    expect(decodeId(BigInt(res.rows[0].id)).shard).toBe(7);
    const s = await runMain(['--url', db.url, '--json', 'next-id', 'status', '--next-id-schema', 'shard_7']);
    expect(JSON.parse(s.out)).toMatchObject({
      engine: 'postgres',
      schema: 'shard_7',
      shard: 7,
      attached: [{ table: 'orders', column: 'id' }],
    });
    expect(typeof JSON.parse(s.out).lagMs).toBe('number');
    const down = await runMain(['--url', db.url, 'migrate', '--no-segments', '--down', '--next-id-schema', 'shard_7']);
    expect(down.err).toContain('orders.id');
    const shard = await runMain(['--url', db.url, 'migrate', '--no-segments', '--next-id', '--next-id-schema', 'shard_7', '--shard', '8']);
    expect(shard.err).toContain('installed with shard 7');
    await detachNextId(db.knex, { table: 'orders', schema: 'shard_7' });
    expect((await nextIdStatus(db.knex, { schema: 'shard_7' })).attached).toEqual([]);
    await expect(detachNextId(db.knex, { table: 'orders', schema: 'shard_7' })).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
    await db.knex.raw('CREATE TABLE serials (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY)');
    await expect(attachNextId(db.knex, { table: 'serials', schema: 'shard_7' })).rejects.toThrow(/identity/);
    await expect(attachNextId(db.knex, { table: 'nonexist', schema: 'shard_7' })).rejects.toThrow(/There is no table nonexist/);
    await expect(attachNextId(db.knex, { table: 'serials', column: 'nope', schema: 'shard_7' })).rejects.toThrow(/has no column nope/);
  });
});
