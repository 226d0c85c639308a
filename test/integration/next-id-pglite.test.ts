/** The same next_id() on PGlite (Postgres in WASM, one in-process connection). */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { auditNextIdTable } from '../helpers/next-id-audit.js';
import { migrate } from '../../src/migrations/migrate.js';
import { decodeId, resolveLayout } from '../../src/layout/index.js';
import { toBigInt } from '../../src/ids.js';
import { isIdleaseError } from '../../src/errors.js';

let db: TestDb;
beforeAll(async () => {
  db = await createTestDb('pglite', 'next_id');
});
afterAll(async () => {
  await db.drop();
});

const audit = (name: string) => auditNextIdTable(db.knex, name, 'byX');

describe('next_id() on PGlite', () => {
  const layout = resolveLayout({});

  it(
    'installs two shards and serves as a column DEFAULT: unique, increasing, shard exact, time of the insert',
    { timeout: 120_000 },
    async () => {
      const result = await migrate(db.knex, {
        segments: false,
        nextId: [
          { schema: 'pg_a', shard: 7 },
          { schema: 'pg_b', shard: 8 },
        ],
      });
      expect(result.applied).toEqual(['next_id:pg_a', 'next_id:pg_a:v2', 'next_id:pg_b', 'next_id:pg_b:v2']);
      await db.knex.raw('CREATE TABLE ta (id bigint NOT NULL DEFAULT pg_a.next_id(), x int NOT NULL)');
      await db.knex.raw('CREATE TABLE tb (id bigint NOT NULL DEFAULT pg_b.next_id(), x int NOT NULL)');
      const before = Date.now();
      await db.knex.raw('INSERT INTO ta (x) SELECT g FROM generate_series(1, 100000) g');
      await db.knex.raw('INSERT INTO tb (x) SELECT g FROM generate_series(1, 20000) g');
      const after = Date.now();
      expect(await audit('ta')).toEqual({ rows: 100_000, distinct: 100_000, notIncreasing: 0 });
      expect(await audit('tb')).toEqual({ rows: 20_000, distinct: 20_000, notIncreasing: 0 });
      const overlap = await db.knex.raw('SELECT count(*)::int AS n FROM ta JOIN tb USING (id)');
      expect(overlap.rows[0].n).toBe(0);
      const res = await db.knex.raw('SELECT min(id) AS lo, max(id) AS hi, pg_a.id_shard(min(id)) AS shard FROM ta');
      const lo = decodeId(toBigInt(res.rows[0].lo), layout);
      const hi = decodeId(toBigInt(res.rows[0].hi), layout);
      expect(lo.shard).toBe(7);
      expect(res.rows[0].shard).toBe(7);
      expect(lo.unixMs).toBeGreaterThanOrEqual(before - 5);
      expect(hi.unixMs).toBeLessThanOrEqual(after + 5);
    },
  );

  it('returns IDs past 2^53 exactly and agrees with the SQL companions', async () => {
    const res = await db.knex.raw(
      `INSERT INTO ta (x) VALUES (0) RETURNING id, pg_a.id_shard(id) AS shard, pg_a.id_sequence(id) AS seq,
              (extract(epoch from pg_a.id_timestamp(id)) * 1000)::int8 AS ms`,
    );
    const row = res.rows[0];
    const id = toBigInt(row.id);
    expect(id > 2n ** 53n).toBe(true);
    const d = decodeId(id, layout);
    expect(row.shard).toBe(d.shard);
    expect(row.seq).toBe(d.sequence);
    expect(toBigInt(row.ms)).toBe(BigInt(d.unixMs));
  });

  it('borrows milliseconds in a burst and keeps rising when the clock is behind', async () => {
    await migrate(db.knex, { segments: false, nextId: { schema: 'pg_tiny', shard: 1, sequenceBits: 1 } });
    await db.knex.raw('CREATE TABLE tt (id bigint NOT NULL DEFAULT pg_tiny.next_id(), x int NOT NULL)');
    await db.knex.raw('INSERT INTO tt (x) SELECT g FROM generate_series(1, 30000) g');
    await db.knex.raw('INSERT INTO tt (x) SELECT 30000 + g FROM generate_series(1, 100) g');
    expect(await audit('tt')).toEqual({ rows: 30_100, distinct: 30_100, notIncreasing: 0 });
    const hi = decodeId(toBigInt((await db.knex.raw('SELECT max(id) AS hi FROM tt')).rows[0].hi), resolveLayout({ sequenceBits: 1 }));
    expect(hi.unixMs).toBeGreaterThan(Date.now() + 10_000); // 30,100 IDs at 2 per ms ran ~15 s ahead
  });

  it('the down migration refuses while a DEFAULT uses it, then drops cleanly when told to', async () => {
    let caught: unknown;
    try {
      await migrate(db.knex, { segments: false, nextId: { schema: 'pg_b', shard: 8 }, direction: 'down' });
    } catch (err) {
      caught = err;
    }
    expect(isIdleaseError(caught, 'MIGRATION_FAILED')).toBe(true);
    expect((caught as Error).message).toContain('tb.id');
    const result = await migrate(db.knex, {
      segments: false,
      nextId: { schema: 'pg_b', shard: 8, dropDependentDefaults: true },
      direction: 'down',
    });
    expect(result.applied).toEqual(['next_id:pg_b:v2', 'next_id:pg_b']);
    await expect(db.knex.raw('SELECT pg_b.next_id()')).rejects.toThrow(/does not exist/);
    expect((await db.knex.raw('SELECT count(*)::int AS n FROM tb')).rows[0].n).toBe(20_000);
  });
});
