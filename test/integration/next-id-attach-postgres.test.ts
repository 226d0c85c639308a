/**
 * The DEFAULT `next-id attach` writes on PostgreSQL and PGlite: next_id()'s fast path as a plain
 * expression (no PL/pgSQL call per row). It must keep every guarantee of next_id() itself:
 * unique and increasing per session under concurrency and racing catch-ups, stale reservations
 * skipped, a jump in progress waited for, bursts borrowing from the next milliseconds, no
 * wrap at the end of the time field, the caller's privileges, and no lock left behind.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Knex } from 'knex';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { auditNextIdTable } from '../helpers/next-id-audit.js';
import { migrate } from '../../src/migrations/migrate.js';
import { attachNextId, detachNextId, nextIdStatus } from '../../src/next-id/attach.js';
import { decodeId, resolveLayout } from '../../src/layout/index.js';
import { toBigInt } from '../../src/ids.js';
import { isIdleaseError } from '../../src/errors.js';
import { connect } from '../../src/connect.js';
import { NEXT_ID_LOCK_CLASS, NEXT_ID_SLACK_MS, nextIdLockKey } from '../../src/dialects/next-id.js';
import { sleep } from '../helpers/wait.js';

const layout = resolveLayout({});

const audit = (knex: Knex, name: string) => auditNextIdTable(knex, name);

/** A table without a primary key (a duplicate must show in the count, not abort the insert), attached. */
async function attachedTable(knex: Knex, name: string, schema: string): Promise<void> {
  await knex.raw(`CREATE TABLE ${name} (id bigint NOT NULL, s int NOT NULL DEFAULT 0, x bigint NOT NULL)`);
  const a = await attachNextId(knex, { table: name, schema });
  // The point of attach: the ID expression itself, not a call of next_id().
  expect(a.expression).not.toMatch(/next_id\(\)/);
}

async function insertOne(knex: Knex, name: string, x: number): Promise<bigint> {
  const res = await knex.raw(`INSERT INTO ${name} (x) VALUES (?) RETURNING id::text AS id`, [x]);
  return toBigInt(res.rows[0].id);
}

describe('the attached DEFAULT on PostgreSQL', () => {
  let db: TestDb;
  const sessions: Knex[] = [];
  const session = () => {
    const k = connect(db.url, { poolMax: 1 });
    sessions.push(k);
    return k;
  };
  beforeAll(async () => {
    db = await createTestDb('postgres', 'nid_attach');
  });
  afterAll(async () => {
    await Promise.all(sessions.map((k) => k.destroy()));
    await db?.drop();
  });

  async function heldLocks(): Promise<number> {
    const res = await db.knex.raw(
      `SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND classid = ${NEXT_ID_LOCK_CLASS}
          AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
    );
    return res.rows[0].n;
  }

  it(
    'bulk and single-row inserts from 4 sessions at once, a roomy and a 1-bit-sequence shard: unique, increasing per session, shard exact, no lock left',
    { timeout: 180_000 },
    async () => {
      await migrate(db.knex, {
        segments: false,
        nextId: [
          { schema: 'na', shard: 10 },
          { schema: 'na1', shard: 11, sequenceBits: 1 },
        ],
      });
      await attachedTable(db.knex, 'conc', 'na');
      await attachedTable(db.knex, 'conc1', 'na1');
      const before = Date.now();
      await Promise.all(
        [0, 1, 2, 3].map(async (s) => {
          const k = session();
          for (let round = 0; round < 3; round++) {
            const base = round * 1_000_000;
            await k.transaction(async (trx) => {
              await trx.raw('INSERT INTO conc (s, x) SELECT ?, ? + g FROM generate_series(1, 60000) g', [s, base]);
              await trx.raw('INSERT INTO conc1 (s, x) SELECT ?, ? + g FROM generate_series(1, 20000) g', [s, base]);
            });
            for (let i = 1; i <= 150; i++) {
              await k.raw('INSERT INTO conc (s, x) VALUES (?, ?)', [s, base + 500_000 + i]);
              await k.raw('INSERT INTO conc1 (s, x) VALUES (?, ?)', [s, base + 500_000 + i]);
              if (i % 50 === 0) await sleep(3);
            }
          }
        }),
      );
      const after = Date.now();
      expect(await audit(db.knex, 'conc')).toEqual({ rows: 4 * 3 * 60_150, distinct: 4 * 3 * 60_150, notIncreasing: 0 });
      expect(await audit(db.knex, 'conc1')).toEqual({ rows: 4 * 3 * 20_150, distinct: 4 * 3 * 20_150, notIncreasing: 0 });
      const r = (
        await db.knex.raw('SELECT min(id) AS lo, max(id) AS hi, count(*) FILTER (WHERE na.id_shard(id) <> 10)::int AS bad FROM conc')
      ).rows[0];
      expect(r.bad).toBe(0);
      expect(decodeId(toBigInt(r.lo), layout).unixMs).toBeGreaterThanOrEqual(before - 5);
      expect(decodeId(toBigInt(r.hi), layout).unixMs).toBeLessThanOrEqual(after + 5);
      expect(await heldLocks()).toBe(0);
    },
  );

  it(
    'borrows the next milliseconds in a burst (2 sequence bits: 4 IDs per ms) and keeps rising when the clock is behind',
    { timeout: 120_000 },
    async () => {
      await migrate(db.knex, { segments: false, nextId: { schema: 'na_tiny', shard: 1, sequenceBits: 2 } });
      const tiny = resolveLayout({ sequenceBits: 2 });
      await attachedTable(db.knex, 'burst', 'na_tiny');
      const after0 = Date.now();
      await db.knex.raw('INSERT INTO burst (x) SELECT g FROM generate_series(1, 100000) g');
      const after = Date.now();
      const hi = toBigInt((await db.knex.raw('SELECT max(id) AS hi FROM burst')).rows[0].hi);
      // 100,000 IDs at 4 per ms need 25 s of ID time: the time field ran ahead of the clock.
      expect(decodeId(hi, tiny).unixMs).toBeGreaterThanOrEqual(after0 + 100_000 / 4 - 1);
      expect(decodeId(hi, tiny).unixMs).toBeGreaterThan(after + 5_000);
      const next = await db.knex.raw('INSERT INTO burst (x) SELECT 100000 + g FROM generate_series(1, 1000) g RETURNING id');
      expect(next.rows.every((row: { id: string }) => toBigInt(row.id) > hi)).toBe(true);
      expect(await audit(db.knex, 'burst')).toEqual({ rows: 101_000, distinct: 101_000, notIncreasing: 0 });
    },
  );

  it('skips a session’s stale reservations: an insert after an idle spell carries the time of the insert', async () => {
    await migrate(db.knex, { segments: false, nextId: { schema: 'na_stale', shard: 3 } });
    await attachedTable(db.knex, 'stale', 'na_stale');
    const a = session();
    const first = await insertOne(a, 'stale', 1); // a now holds reserved values (the sequence's CACHE)
    for (const idle of [50, 120]) {
      await sleep(idle);
      const before = Date.now();
      const id = await insertOne(a, 'stale', idle);
      expect(id).toBeGreaterThan(first);
      expect(decodeId(id, layout).unixMs).toBeGreaterThanOrEqual(before - NEXT_ID_SLACK_MS - 2);
    }
  });

  it('waits for a jump in progress (the lock held exclusively) instead of drawing past it, and leaves no lock behind', async () => {
    await migrate(db.knex, { segments: false, nextId: { schema: 'na_jump', shard: 2 } });
    await attachedTable(db.knex, 'jump', 'na_jump');
    const holder = session();
    const writer = session();
    await insertOne(writer, 'jump', 0);
    await holder.raw('SELECT pg_advisory_lock(?, ?)', [NEXT_ID_LOCK_CLASS, nextIdLockKey('na_jump')]);
    const started = Date.now();
    const pending = insertOne(writer, 'jump', 1);
    await sleep(300);
    await holder.raw('SELECT pg_advisory_unlock(?, ?)', [NEXT_ID_LOCK_CLASS, nextIdLockKey('na_jump')]);
    const id = await pending;
    expect(Date.now() - started).toBeGreaterThanOrEqual(290);
    expect(decodeId(id, layout).unixMs).toBeGreaterThanOrEqual(started + 290 - NEXT_ID_SLACK_MS - 2);
    expect(await heldLocks()).toBe(0);
  });

  it(
    'stays unique when 8 sessions find the counter stale at the same moment, round after round (racing catch-ups)',
    { timeout: 120_000 },
    async () => {
      await migrate(db.knex, { segments: false, nextId: { schema: 'na_race', shard: 8 } });
      await attachedTable(db.knex, 'race', 'na_race');
      const eight = Array.from({ length: 8 }, () => session());
      for (let round = 0; round < 150; round++) {
        await sleep(NEXT_ID_SLACK_MS + 1);
        await Promise.all(eight.map((k, s) => k.raw('INSERT INTO race (s, x) VALUES (?, ?)', [s, round])));
      }
      expect(await audit(db.knex, 'race')).toEqual({ rows: 8 * 150, distinct: 8 * 150, notIncreasing: 0 });
    },
  );

  it("runs with the caller's privileges: USAGE and UPDATE on the sequence are enough", async () => {
    await migrate(db.knex, { segments: false, nextId: { schema: 'na_priv', shard: 4 } });
    await attachedTable(db.knex, 'priv', 'na_priv');
    const role = `idl_app_${Math.random().toString(36).slice(2, 8)}`;
    await db.knex.raw(`CREATE ROLE ${role} LOGIN`);
    const u = new URL(db.url);
    u.username = role;
    const app = connect(u.toString(), { poolMax: 1 });
    try {
      await db.knex.raw(`GRANT USAGE ON SCHEMA na_priv TO ${role}`);
      await db.knex.raw(`GRANT INSERT, SELECT ON priv TO ${role}`);
      await db.knex.raw(`GRANT USAGE, UPDATE ON SEQUENCE na_priv.idlease_next_id_seq TO ${role}`);
      const before = Date.now();
      const id = await insertOne(app, 'priv', 1);
      expect(decodeId(id, layout).shard).toBe(4);
      expect(decodeId(id, layout).unixMs).toBeGreaterThanOrEqual(before - NEXT_ID_SLACK_MS - 2);
      await sleep(NEXT_ID_SLACK_MS + 2);
      expect(await insertOne(app, 'priv', 2)).toBeGreaterThan(id);
    } finally {
      await app.destroy();
      await db.knex.raw(`DROP OWNED BY ${role}`);
      await db.knex.raw(`DROP ROLE ${role}`);
    }
  });

  it('refuses to wrap: at the last counter the time field holds, inserts fail', async () => {
    await migrate(db.knex, { segments: false, nextId: { schema: 'na_full', shard: 0 } });
    await attachedTable(db.knex, 'at_end', 'na_full');
    const maxCounter = (1n << 53n) - 1n; // 41 time + 12 sequence bits
    await db.knex.raw(`SELECT setval('na_full.idlease_next_id_seq', ?)`, [(maxCounter - 1n).toString()]);
    const k = session(); // a new session: no reservations from before the setval
    const last = await insertOne(k, 'at_end', 1);
    expect(decodeId(last, layout).timeMs).toBe((1n << 41n) - 1n);
    // As with next_id(): nextval refuses past MAXVALUE (and this session keeps its shared lock
    // until it ends, docs/next-id.md; nothing can be drawn here any more anyway).
    await expect(insertOne(k, 'at_end', 2)).rejects.toThrow(/maximum value/);
  });

  it('status lists the column; down is refused naming it; detach returns the expression it dropped; a column on the old DEFAULT next_id() is rewritten by attach', async () => {
    await migrate(db.knex, { segments: false, nextId: { schema: 'na_admin', shard: 9 } });
    await attachedTable(db.knex, 'adm', 'na_admin');
    await db.knex.raw('CREATE TABLE legacy (id bigint NOT NULL DEFAULT na_admin.next_id(), x int)');
    expect((await nextIdStatus(db.knex, { schema: 'na_admin' })).attached).toEqual([
      { table: 'adm', column: 'id' },
      { table: 'legacy', column: 'id' },
    ]);
    let caught: unknown;
    try {
      await migrate(db.knex, { segments: false, nextId: { schema: 'na_admin' }, direction: 'down' });
    } catch (err) {
      caught = err;
    }
    expect(isIdleaseError(caught, 'MIGRATION_FAILED')).toBe(true);
    expect((caught as Error).message).toContain('adm.id');
    const again = await attachNextId(db.knex, { table: 'legacy', schema: 'na_admin' });
    const def = (await db.knex.raw(`SELECT pg_get_expr(adbin, adrelid) AS d FROM pg_attrdef WHERE adrelid = 'legacy'::regclass`)).rows[0].d;
    expect(def).not.toMatch(/next_id\(\)/);
    expect(def).toContain('idlease_next_id_slow');
    const dropped = await detachNextId(db.knex, { table: 'adm', schema: 'na_admin' });
    expect(dropped.expression).toContain('idlease_next_id_slow');
    expect(again.expression).toContain('currval');
    expect((await nextIdStatus(db.knex, { schema: 'na_admin' })).attached).toEqual([{ table: 'legacy', column: 'id' }]);
    // form 'call': the function as the DEFAULT (cheaper to plan for unprepared single rows).
    const call = await attachNextId(db.knex, { table: 'legacy', schema: 'na_admin', form: 'call' });
    expect(call.expression).toBe('"na_admin".next_id()');
    const called = (await db.knex.raw(`SELECT pg_get_expr(adbin, adrelid) AS d FROM pg_attrdef WHERE adrelid = 'legacy'::regclass`)).rows[0]
      .d;
    expect(called).toBe('na_admin.next_id()');
    expect((await nextIdStatus(db.knex, { schema: 'na_admin' })).attached).toEqual([{ table: 'legacy', column: 'id' }]);
    await expect(attachNextId(db.knex, { table: 'legacy', schema: 'na_admin', form: 'inline' as 'call' })).rejects.toMatchObject({
      code: 'BAD_ARGUMENT',
    });
  });
});

describe('attach on a column that has a DEFAULT of its own (PostgreSQL)', () => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb('postgres', 'nid_replace');
    await migrate(db.knex, { segments: false, nextId: { schema: 'nr' } });
  });
  afterAll(async () => {
    await db?.drop();
  });
  const defaultOf = async (table: string): Promise<string | null> =>
    (await db.knex.raw(`SELECT pg_get_expr(adbin, adrelid) AS d FROM pg_attrdef WHERE adrelid = ?::regclass`, [table])).rows[0]?.d ?? null;

  it("a bigserial's nextval() is not replaced unless asked; with replace, detach puts it back and inserts go on", async () => {
    await db.knex.raw('CREATE TABLE serial_orders (id bigserial PRIMARY KEY, x int)');
    await db.knex.raw('INSERT INTO serial_orders (x) VALUES (1), (2)');
    const before = await defaultOf('serial_orders');
    expect(before).toMatch(/^nextval\('serial_orders_id_seq'/);
    await expect(attachNextId(db.knex, { table: 'serial_orders', schema: 'nr' })).rejects.toMatchObject({
      code: 'BAD_ARGUMENT',
      message: expect.stringMatching(/already has DEFAULT nextval\('serial_orders_id_seq'.*replace: true \(CLI: --replace\)/),
    });
    expect(await defaultOf('serial_orders')).toBe(before);
    await expect(
      attachNextId(db.knex, { table: 'serial_orders', schema: 'nr', replace: 'yes' as unknown as boolean }),
    ).rejects.toMatchObject({
      code: 'BAD_ARGUMENT',
    });
    const a = await attachNextId(db.knex, { table: 'serial_orders', schema: 'nr', replace: true });
    expect(a.previous).toBe(before);
    // Attach again (a layout change, a rehome): the replaced DEFAULT stays the one to put back.
    expect((await attachNextId(db.knex, { table: 'serial_orders', schema: 'nr' })).previous).toBeUndefined();
    const big = toBigInt((await db.knex.raw('INSERT INTO serial_orders (x) VALUES (3) RETURNING id::text AS id')).rows[0].id);
    expect(big).toBeGreaterThan(2n ** 40n);
    const d = await detachNextId(db.knex, { table: 'serial_orders', schema: 'nr' });
    expect(d.previous).toBe(before);
    expect(await defaultOf('serial_orders')).toBe(before);
    const small = toBigInt((await db.knex.raw('INSERT INTO serial_orders (x) VALUES (4) RETURNING id::text AS id')).rows[0].id);
    expect(small).toBe(3n);
    // Detached once, nothing more to put back: a second attach and detach leave no DEFAULT.
    await db.knex.raw('ALTER TABLE serial_orders ALTER COLUMN id DROP DEFAULT');
    await attachNextId(db.knex, { table: 'serial_orders', schema: 'nr' });
    expect((await detachNextId(db.knex, { table: 'serial_orders', schema: 'nr' })).previous).toBeUndefined();
    expect(await defaultOf('serial_orders')).toBeNull();
  });

  it("a mixed-case table and column (Prisma's model Order) are taken as written, quoted", async () => {
    await db.knex.raw('CREATE SCHEMA "App"');
    await db.knex.raw('CREATE TABLE "App"."Order" ("orderId" bigint NOT NULL, x int)');
    const a = await attachNextId(db.knex, { table: 'App.Order', column: 'orderId', schema: 'nr' });
    expect(a.table).toBe('App.Order');
    await db.knex.raw('INSERT INTO "App"."Order" (x) VALUES (1)');
    expect((await nextIdStatus(db.knex, { schema: 'nr' })).attached).toContainEqual({ table: '"App"."Order"', column: 'orderId' });
    await detachNextId(db.knex, { table: 'App.Order', column: 'orderId', schema: 'nr' });
    for (const bad of ['Order"; DROP TABLE x; --', 'a b', '1abc', 'a.b.c']) {
      await expect(attachNextId(db.knex, { table: bad, schema: 'nr' }), bad).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
    }
  });

  it('a table that does not exist is named as missing', async () => {
    await expect(attachNextId(db.knex, { table: 'nonexist', schema: 'nr' })).rejects.toThrow(/There is no table nonexist/);
  });
});

describe('the attached DEFAULT on PGlite', () => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb('pglite', 'nid_attach');
  });
  afterAll(async () => {
    await db?.drop();
  });

  it('serves a bulk insert and single rows: unique, increasing, shard exact, time of the insert', { timeout: 120_000 }, async () => {
    await migrate(db.knex, { segments: false, nextId: { schema: 'pa', shard: 7 } });
    await attachedTable(db.knex, 'ta', 'pa');
    const before = Date.now();
    await db.knex.raw('INSERT INTO ta (x) SELECT g FROM generate_series(1, 50000) g');
    for (let i = 1; i <= 20; i++) {
      await db.knex.raw('INSERT INTO ta (x) VALUES (?)', [50_000 + i]);
      if (i % 5 === 0) await sleep(NEXT_ID_SLACK_MS + 2);
    }
    const after = Date.now();
    expect(await audit(db.knex, 'ta')).toEqual({ rows: 50_020, distinct: 50_020, notIncreasing: 0 });
    const r = (await db.knex.raw('SELECT min(id) AS lo, max(id) AS hi FROM ta')).rows[0];
    expect(decodeId(toBigInt(r.lo), layout).shard).toBe(7);
    expect(decodeId(toBigInt(r.lo), layout).unixMs).toBeGreaterThanOrEqual(before - 5);
    expect(decodeId(toBigInt(r.hi), layout).unixMs).toBeLessThanOrEqual(after + 5);
  });
});
