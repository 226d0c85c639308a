/**
 * next_id() on the shared PostgreSQL 15: uniqueness at bulk speed and under concurrency,
 * monotonic per shard, clock stepping back, time-field exhaustion, decode round trips,
 * N shards, the knex schema builder, and the down migration.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Knex } from 'knex';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { auditNextIdTable } from '../helpers/next-id-audit.js';
import { migrate } from '../../src/migrations/migrate.js';
import { decodeId, resolveLayout, type IdLayout } from '../../src/layout/index.js';
import { toBigInt } from '../../src/ids.js';
import { isIdleaseError } from '../../src/errors.js';
import { connect } from '../../src/connect.js';
import { NEXT_ID_CACHE, NEXT_ID_LOCK_CLASS, NEXT_ID_SLACK_MS } from '../../src/dialects/next-id.js';
import { sleep } from '../helpers/wait.js';

let db: TestDb;
beforeAll(async () => {
  db = await createTestDb('postgres', 'next_id');
});
afterAll(async () => {
  await db.drop();
});

async function install(knex: Knex, nextId: object): Promise<void> {
  await migrate(knex, { segments: false, nextId });
}

async function table(knex: Knex, name: string, schema: string): Promise<void> {
  // No primary key on purpose: a duplicate must show up in the count, not abort the insert.
  await knex.raw(`CREATE TABLE ${name} (id bigint NOT NULL DEFAULT ${schema}.next_id(), s int NOT NULL DEFAULT 0, x bigint NOT NULL)`);
}

const audit = (knex: Knex, name: string) => auditNextIdTable(knex, name);

/** idlease next_id() advisory locks held in this test's database (pg_locks spans the cluster). */
async function heldNextIdLocks(): Promise<number> {
  const res = await db.knex.raw(
    `SELECT count(*)::int AS n FROM pg_locks
      WHERE locktype = 'advisory' AND classid = ${NEXT_ID_LOCK_CLASS}
        AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
  );
  return res.rows[0].n;
}

/** n sessions, one connection each (IDs strictly increase within a PostgreSQL session); all closed afterwards, any fn adds included. */
async function withSessions(n: number, fn: (sessions: Knex[]) => Promise<unknown>): Promise<void> {
  const sessions = Array.from({ length: n }, () => connect(db.url, { poolMax: 1 }));
  try {
    await fn(sessions);
  } finally {
    await Promise.all(sessions.map((k) => k.destroy()));
  }
}

async function one(knex: Knex, sql: string, bindings: readonly Knex.RawBinding[] = []): Promise<Record<string, unknown>> {
  const res = await knex.raw(sql, bindings);
  return res.rows[0];
}

describe('next_id() on PostgreSQL', () => {
  const layout = resolveLayout({});

  it('installs a VOLATILE, PARALLEL UNSAFE, non-SECURITY DEFINER function whose every call is schema-qualified; migrating twice is a no-op', async () => {
    await install(db.knex, { schema: 'nid', shard: 5 });
    await install(db.knex, { schema: 'nid', shard: 5 });
    const res = await db.knex.raw(
      `SELECT p.proname, p.provolatile, p.proparallel, p.prosecdef, p.prosrc, l.lanname
         FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace JOIN pg_language l ON l.oid = p.prolang
        WHERE n.nspname = 'nid' ORDER BY p.proname`,
    );
    const byName = Object.fromEntries(res.rows.map((r: { proname: string }) => [r.proname, r]));
    expect(Object.keys(byName).sort()).toEqual(['id_sequence', 'id_shard', 'id_timestamp', 'idlease_next_id_slow', 'next_id']);
    for (const name of ['next_id', 'idlease_next_id_slow']) {
      const p = byName[name];
      expect(p.lanname).toBe('plpgsql');
      expect(p.provolatile).toBe('v');
      expect(p.proparallel).toBe('u');
      expect(p.prosecdef).toBe(false);
      // Every function call in the body names its schema: no search_path lookups.
      const code = (p.prosrc as string).replace(/'(?:[^']|'')*'/g, "''").replace(/--[^\n]*/g, '');
      const calls = [...code.matchAll(/([a-z_."]*?)\b([a-z_]+)\(/g)].filter((m) => !/^(IF|NOT|AND|OR|RAISE|EXCEPTION)$/i.test(m[2]!));
      expect(calls.length).toBeGreaterThanOrEqual(3);
      for (const m of calls) expect(m[1], `${m[0]} in ${name}`).toMatch(/\.$/);
    }
    const applied = await db.knex.raw(`SELECT name FROM idlease.idlease_migrations WHERE name = 'next_id:nid'`);
    expect(applied.rows).toHaveLength(1);
  });

  it(
    'gives 2,000,000 unique, strictly increasing IDs in one INSERT … SELECT, all carrying shard 5 and the insert time',
    { timeout: 240_000 },
    async () => {
      await table(db.knex, 'bulk', 'nid');
      const before = Date.now();
      await db.knex.raw('INSERT INTO bulk (x) SELECT g FROM generate_series(1, 2000000) g');
      const after = Date.now();
      expect(await audit(db.knex, 'bulk')).toEqual({ rows: 2_000_000, distinct: 2_000_000, notIncreasing: 0 });
      const r = await one(
        db.knex,
        `SELECT min(id) AS lo, max(id) AS hi, count(*) FILTER (WHERE nid.id_shard(id) <> 5)::int AS wrong_shard FROM bulk`,
      );
      expect(r.wrong_shard).toBe(0);
      const lo = decodeId(toBigInt(r.lo), layout);
      const hi = decodeId(toBigInt(r.hi), layout);
      expect(lo.unixMs).toBeGreaterThanOrEqual(before - 5);
      // 4,096 IDs per ms is far above this machine's insert rate, so the time field never ran ahead.
      expect(hi.unixMs).toBeLessThanOrEqual(after + 5);
    },
  );

  it(
    'borrows the next milliseconds when a burst exhausts one (2 sequence bits: 4 IDs per ms), stays unique and increasing, and never steps back afterwards',
    { timeout: 120_000 },
    async () => {
      const tiny = { schema: 'nid_tiny', shard: 1, sequenceBits: 2 };
      await install(db.knex, tiny);
      const tinyLayout = resolveLayout({ sequenceBits: 2 });
      await table(db.knex, 'burst', 'nid_tiny');
      const before = Date.now();
      await db.knex.raw('INSERT INTO burst (x) SELECT g FROM generate_series(1, 200000) g');
      const after = Date.now();
      expect(await audit(db.knex, 'burst')).toEqual({ rows: 200_000, distinct: 200_000, notIncreasing: 0 });
      const r = await one(db.knex, 'SELECT max(id) AS hi FROM burst');
      const hi = decodeId(toBigInt(r.hi), tinyLayout);
      // 200,000 IDs at 4 per ms need 50 s of ID time: the time field ran ahead of the clock.
      expect(hi.unixMs).toBeGreaterThanOrEqual(before + 200_000 / 4 - 1);
      expect(hi.unixMs).toBeGreaterThan(after + 10_000);
      // The clock is now behind the sequence (as after a clock step back): the next IDs continue upward.
      const next = await db.knex.raw('INSERT INTO burst (x) SELECT 200000 + g FROM generate_series(1, 1000) g RETURNING id');
      const ids = next.rows.map((row: { id: string }) => toBigInt(row.id));
      expect(ids.every((id: bigint) => id > toBigInt(r.hi))).toBe(true);
      expect(await audit(db.knex, 'burst')).toEqual({ rows: 201_000, distinct: 201_000, notIncreasing: 0 });
    },
  );

  it('ignores a clock that steps back: with the sequence an hour ahead, IDs keep rising from there', async () => {
    await install(db.knex, { schema: 'nid_back', shard: 2 });
    await table(db.knex, 'back', 'nid_back');
    await db.knex.raw('INSERT INTO back (x) SELECT g FROM generate_series(1, 100) g');
    // An hour ahead of the clock is what the sequence looks like after the clock steps back an hour.
    const aheadMs = BigInt(Date.now() - layout.epochMs + 3_600_000);
    await db.knex.raw(`SELECT setval('nid_back.idlease_next_id_seq', ?)`, [(aheadMs << 12n).toString()]);
    const res = await db.knex.raw('INSERT INTO back (x) SELECT 100 + g FROM generate_series(1, 5000) g RETURNING id');
    // A session may still serve the few values it reserved before the setval (at most CACHE - 1).
    const behind = res.rows.filter((row: { id: string }) => decodeId(toBigInt(row.id), layout).unixMs < Date.now() + 3_500_000);
    expect(behind.length).toBeLessThan(NEXT_ID_CACHE);
    expect(await audit(db.knex, 'back')).toEqual({ rows: 5100, distinct: 5100, notIncreasing: 0 });
  });

  it(
    'stays unique with 4 sessions inserting at once (bulk and single rows, a roomy and a 1-bit-sequence shard)',
    { timeout: 180_000 },
    async () => {
      await install(db.knex, [
        { schema: 'nid_c', shard: 10 },
        { schema: 'nid_c1', shard: 11, sequenceBits: 1 },
      ]);
      await table(db.knex, 'conc', 'nid_c');
      await table(db.knex, 'conc1', 'nid_c1');
      await withSessions(4, (sessions) =>
        Promise.all(
          sessions.map(async (k, s) => {
            for (let round = 0; round < 3; round++) {
              const base = round * 1_000_000;
              // A bulk insert per table in one transaction, then single-row autocommit inserts
              // (those are what jump the sequence up to the clock, while others hold the shared lock).
              await k.transaction(async (trx) => {
                await trx.raw(`INSERT INTO conc (s, x) SELECT ?, ? + g FROM generate_series(1, 60000) g`, [s, base]);
                await trx.raw(`INSERT INTO conc1 (s, x) SELECT ?, ? + g FROM generate_series(1, 20000) g`, [s, base]);
              });
              for (let i = 1; i <= 150; i++) {
                await k.raw(`INSERT INTO conc (s, x) VALUES (?, ?)`, [s, base + 500_000 + i]);
                await k.raw(`INSERT INTO conc1 (s, x) VALUES (?, ?)`, [s, base + 500_000 + i]);
                if (i % 50 === 0) await sleep(3);
              }
            }
          }),
        ),
      );
      expect(await audit(db.knex, 'conc')).toEqual({ rows: 4 * 3 * 60_150, distinct: 4 * 3 * 60_150, notIncreasing: 0 });
      expect(await audit(db.knex, 'conc1')).toEqual({ rows: 4 * 3 * 20_150, distinct: 4 * 3 * 20_150, notIncreasing: 0 });
      const r = await one(db.knex, `SELECT count(*) FILTER (WHERE nid_c.id_shard(id) <> 10)::int AS bad FROM conc`);
      expect(r.bad).toBe(0);
    },
  );

  it('skips its own stale reservations, and another open transaction that called next_id() does not hold back the catch-up', async () => {
    await install(db.knex, { schema: 'nid_stale', shard: 3 });
    const a = connect(db.url, { poolMax: 1 });
    const b = connect(db.url, { poolMax: 1 });
    const draw = async (k: Knex) => toBigInt((await one(k, 'SELECT nid_stale.next_id() AS id')).id);
    try {
      const first = await draw(a); // a now holds NEXT_ID_CACHE - 1 reserved values
      await sleep(50);
      let second = 0n;
      let third = 0n;
      let thirdAt = 0;
      await b.transaction(async (trx) => {
        // b draws, then keeps its transaction open (the first version held its lock till here).
        await trx.raw('SELECT nid_stale.next_id()');
        const before = Date.now();
        second = await draw(a);
        // a's reservations are 50 ms old: served, they would carry a stale time. They are skipped.
        expect(decodeId(second, layout).unixMs).toBeGreaterThanOrEqual(before - NEXT_ID_SLACK_MS - 2);
        // The sequence falls behind while nobody draws; a's next draw catches it up regardless of b.
        await sleep(60);
        thirdAt = Date.now();
        third = await draw(a);
      });
      expect(second).toBeGreaterThan(first);
      expect(third).toBeGreaterThan(second);
      expect(decodeId(third, layout).unixMs).toBeGreaterThanOrEqual(thirdAt - NEXT_ID_SLACK_MS - 2);
    } finally {
      await Promise.all([a.destroy(), b.destroy()]);
    }
  });

  it(
    'stays unique when 8 sessions find the counter stale at the same moment, round after round (racing catch-ups)',
    { timeout: 120_000 },
    async () => {
      await install(db.knex, { schema: 'nid_race', shard: 8 });
      await table(db.knex, 'race', 'nid_race');
      const rounds = 150;
      await withSessions(8, async (sessions) => {
        for (let round = 0; round < rounds; round++) {
          // Everyone idle past the slack, then all at once: each insert takes the slow path, and
          // the jumps race (one jumps while others, having seen the counter stale, are about to).
          await sleep(NEXT_ID_SLACK_MS + 1);
          await Promise.all(sessions.map((k, s) => k.raw('INSERT INTO race (s, x) VALUES (?, ?)', [s, round])));
        }
      });
      expect(await audit(db.knex, 'race')).toEqual({ rows: 8 * rounds, distinct: 8 * rounds, notIncreasing: 0 });
    },
  );

  it(
    'never leaves its jump lock held: statements cancelled at random while 4 sessions insert leave no idlease lock behind, and IDs stay unique',
    { timeout: 120_000 },
    async () => {
      await install(db.knex, { schema: 'nid_cancel', shard: 6 });
      await table(db.knex, 'cancelled', 'nid_cancel');
      let cancelled = 0;
      await withSessions(4, async (sessions) => {
        await Promise.all(
          sessions.map(async (k, s) => {
            // A timeout that fires as a statement ends cancels the next one ("due to user request"):
            // every statement here may be cancelled, so each is retried until it has run or counted.
            const run = async (sql: string, bindings: readonly Knex.RawBinding[] = []): Promise<void> => {
              for (let attempt = 1; ; attempt++) {
                try {
                  await k.raw(sql, bindings);
                  return;
                } catch (err) {
                  if (!/canceling statement/.test((err as Error).message) || attempt === 5) throw err;
                  cancelled++;
                  if (sql.startsWith('INSERT')) return;
                }
              }
            };
            for (let i = 0; i < 60; i++) {
              // Timeouts of 1-4 ms end statements at arbitrary points, the slow path's block included.
              await run(`SET statement_timeout = ${1 + ((i * 7 + s) % 4)}`);
              await run('INSERT INTO cancelled (s, x) SELECT ?, ? + g FROM generate_series(1, 2000) g', [s, i * 10_000]);
              await run('SET statement_timeout = 0');
              await run('INSERT INTO cancelled (s, x) VALUES (?, ?)', [s, i * 10_000 + 5_000]);
              if (i % 10 === 0) await sleep(5);
            }
          }),
        );
        expect(cancelled).toBeGreaterThan(0);
        expect(await heldNextIdLocks()).toBe(0);
        const r = await one(db.knex, 'SELECT count(*)::int AS rows, count(DISTINCT id)::int AS ids FROM cancelled');
        expect(r.ids).toBe(r.rows);
        // The catch-up still works: a new session's draw carries the current time.
        const fresh = connect(db.url, { poolMax: 1 });
        sessions.push(fresh);
        const before = Date.now();
        const id = toBigInt((await one(fresh, 'SELECT nid_cancel.next_id() AS id')).id);
        expect(decodeId(id, layout).unixMs).toBeGreaterThanOrEqual(before - NEXT_ID_SLACK_MS - 2);
      });
    },
  );

  it("runs with the caller's privileges: USAGE and UPDATE on the sequence are enough, and without UPDATE the catch-up says so", async () => {
    await install(db.knex, { schema: 'nid_priv', shard: 4 });
    const role = `idl_app_${Math.random().toString(36).slice(2, 8)}`;
    await db.knex.raw(`CREATE ROLE ${role} LOGIN`);
    const u = new URL(db.url);
    u.username = role;
    const app = connect(u.toString(), { poolMax: 1 });
    try {
      await db.knex.raw(`GRANT USAGE ON SCHEMA nid_priv TO ${role}`);
      await db.knex.raw(`GRANT USAGE ON SEQUENCE nid_priv.idlease_next_id_seq TO ${role}`);
      // USAGE alone draws, but the first catch-up (the sequence is behind the clock) needs setval.
      await expect(app.raw('SELECT nid_priv.next_id()')).rejects.toThrow(/permission denied for sequence idlease_next_id_seq/);
      await db.knex.raw(`GRANT UPDATE ON SEQUENCE nid_priv.idlease_next_id_seq TO ${role}`);
      const before = Date.now();
      const id = toBigInt((await one(app, 'SELECT nid_priv.next_id() AS id')).id);
      expect(decodeId(id, layout).shard).toBe(4);
      expect(decodeId(id, layout).unixMs).toBeGreaterThanOrEqual(before - NEXT_ID_SLACK_MS - 2);
      // The failed catch-up left no lock behind.
      expect(await heldNextIdLocks()).toBe(0);
    } finally {
      await app.destroy();
      await db.knex.raw(`DROP OWNED BY ${role}`);
      await db.knex.raw(`DROP ROLE ${role}`);
    }
  });

  it('round-trips through decodeId and the SQL companions: time within a few ms of the insert, shard exact', async () => {
    await table(db.knex, 'rt', 'nid');
    for (let i = 0; i < 20; i++) {
      const before = Date.now();
      const res = await db.knex.raw(
        `INSERT INTO rt (x) VALUES (?) RETURNING id, nid.id_shard(id) AS shard, nid.id_sequence(id) AS seq,
                (extract(epoch from nid.id_timestamp(id)) * 1000)::int8 AS ms`,
        [i],
      );
      const after = Date.now();
      const row = res.rows[0];
      const d = decodeId(toBigInt(row.id), layout);
      expect(d.shard).toBe(5);
      expect(row.shard).toBe(5);
      expect(row.seq).toBe(d.sequence);
      expect(toBigInt(row.ms)).toBe(BigInt(d.unixMs));
      // A draw may trail the clock by the slack before it is caught up; never more here.
      expect(d.unixMs).toBeGreaterThanOrEqual(before - NEXT_ID_SLACK_MS - 2);
      expect(d.unixMs).toBeLessThanOrEqual(after + 2);
      if (i % 5 === 0) await sleep(7);
    }
  });

  it('installs N shards in one call, one schema each, with distinct shard ids and disjoint IDs', async () => {
    const result = await migrate(db.knex, { segments: false, nextId: { schema: 'insta', shard: 3, shards: 4 } });
    expect(result.applied).toEqual([
      'next_id:insta_3',
      'next_id:insta_3:v2',
      'next_id:insta_4',
      'next_id:insta_4:v2',
      'next_id:insta_5',
      'next_id:insta_5:v2',
      'next_id:insta_6',
      'next_id:insta_6:v2',
    ]);
    const seen = new Set<bigint>();
    for (let shard = 3; shard <= 6; shard++) {
      await table(db.knex, `sh_${shard}`, `insta_${shard}`);
      const res = await db.knex.raw(
        `INSERT INTO sh_${shard} (x) SELECT g FROM generate_series(1, 3000) g RETURNING id, insta_${shard}.id_shard(id) AS sql_shard`,
      );
      for (const row of res.rows) {
        const id = toBigInt(row.id);
        expect(decodeId(id, layout).shard).toBe(shard);
        expect(row.sql_shard).toBe(shard);
        expect(seen.has(id)).toBe(false);
        seen.add(id);
      }
    }
    expect(seen.size).toBe(12_000);
  });

  it('works as a DEFAULT from the knex schema builder', async () => {
    await db.knex.schema.createTable('orders', (t) => {
      t.bigInteger('id').primary().defaultTo(db.knex.raw('nid.next_id()'));
      t.text('item').notNullable();
    });
    const rows = await db
      .knex('orders')
      .insert([{ item: 'a' }, { item: 'b' }, { item: 'c' }])
      .returning('id');
    const ids = rows.map((r: { id: string }) => toBigInt(r.id));
    expect(ids[0]! < ids[1]! && ids[1]! < ids[2]!).toBe(true);
    expect(decodeId(ids[0]!, layout).shard).toBe(5);
  });

  it(
    'refuses to wrap: the sequence stops at the last counter the time field holds, and the clock running out raises from next_id()',
    { timeout: 30_000 },
    async () => {
      await install(db.knex, { schema: 'nid_full', shard: 0 });
      const maxCounter = (1n << 53n) - 1n; // 41 time + 12 sequence bits
      await db.knex.raw(`SELECT setval('nid_full.idlease_next_id_seq', ?)`, [(maxCounter - 1n).toString()]);
      const last = toBigInt((await one(db.knex, 'SELECT nid_full.next_id() AS id')).id);
      expect(decodeId(last, layout).timeMs).toBe((1n << 41n) - 1n);
      for (let i = 0; i < 2; i++) await expect(db.knex.raw('SELECT nid_full.next_id()')).rejects.toThrow(/maximum value/);

      // A layout whose time field runs out 4 s from now: after that, next_id() raises instead of
      // wrapping. (4 s, not less: the install and the first draw must come before it on a loaded machine.)
      const timeBits = 30;
      const runsOutAt = Date.now() + 4_000;
      const epoch = runsOutAt - Number((1n << 30n) - 1n);
      await install(db.knex, { schema: 'nid_clock', shard: 0, timeBits, epoch });
      const clockLayout: IdLayout = resolveLayout({ timeBits, epoch });
      const ok = toBigInt((await one(db.knex, 'SELECT nid_clock.next_id() AS id')).id);
      expect(decodeId(ok, clockLayout).timeMs).toBeLessThanOrEqual((1n << 30n) - 1n);
      await sleep(Math.max(0, runsOutAt - Date.now()) + 500);
      await expect(db.knex.raw('SELECT nid_clock.next_id()')).rejects.toThrow(/time field of nid_clock.next_id\(\) is exhausted/);
    },
  );

  it('down migration names the table defaults that still use next_id(), and with dropDependentDefaults removes everything but the data', async () => {
    let caught: unknown;
    try {
      await migrate(db.knex, { segments: false, nextId: { schema: 'nid' }, direction: 'down' });
    } catch (err) {
      caught = err;
    }
    expect(isIdleaseError(caught, 'MIGRATION_FAILED')).toBe(true);
    for (const col of ['bulk.id', 'rt.id', 'orders.id']) expect((caught as Error).message).toContain(col);
    // Still installed and working after the refusal.
    await db.knex.raw('SELECT nid.next_id()');

    const result = await migrate(db.knex, { segments: false, nextId: { schema: 'nid', dropDependentDefaults: true }, direction: 'down' });
    expect(result.applied).toEqual(['next_id:nid:v2', 'next_id:nid']);
    const left = await db.knex.raw(
      `SELECT count(*)::int AS n FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'nid'`,
    );
    expect(left.rows[0].n).toBe(0);
    const seq = await db.knex.raw(`SELECT to_regclass('nid.idlease_next_id_seq') AS r`);
    expect(seq.rows[0].r).toBeNull();
    expect((await one(db.knex, 'SELECT count(*)::int AS n FROM orders')).n).toBe(3);
    // Without its default the column now needs a value.
    await expect(db.knex('orders').insert({ item: 'd' })).rejects.toThrow(/null value/);
    // A schema without dependents goes down cleanly.
    expect((await migrate(db.knex, { segments: false, nextId: { schema: 'nid_full' }, direction: 'down' })).applied).toEqual([
      'next_id:nid_full:v2',
      'next_id:nid_full',
    ]);
  });
});
