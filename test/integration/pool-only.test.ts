/**
 * A service that has only a pool (pg, mysql2 callback or promise, postgres.js) and no knex:
 * snowflake allocators lease their worker ids through it, tag admin and the next_id() bump run
 * on it. knex appears here only to create and migrate each test database (migrate() is knex's).
 * Pools are left configured as users leave them: default mysql2 (BIGINT as numbers), named
 * placeholders and row objects on the promise pool, camelCase transforms on postgres.js.
 */
import mysql from 'mysql2';
import mysqlPromise from 'mysql2/promise';
import pg from 'pg';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { migrate } from '../../src/migrations/migrate.js';
import { bumpNextId } from '../../src/next-id/admin.js';
import { addTag, bumpTag, listTags, setStep } from '../../src/segment/index.js';
import { createPoolWorkerIdStore, createSnowflakeAllocator, type SnowflakeAllocator } from '../../src/snowflake/index.js';
import { decodeId, layoutPreset, resolveLayout } from '../../src/layout/index.js';
import { isIdleaseError } from '../../src/errors.js';

type Flavor = 'mysql' | 'postgres';

interface PoolCase {
  readonly name: string;
  readonly flavor: Flavor;
  open(url: string, max: number): { pool: object; end(): Promise<void> };
}

const CASES: PoolCase[] = [
  {
    name: 'pg.Pool',
    flavor: 'postgres',
    open: (url, max) => {
      const p = new pg.Pool({ connectionString: url, max });
      return { pool: p, end: () => p.end() };
    },
  },
  {
    name: 'mysql2 pool',
    flavor: 'mysql',
    open: (url, max) => {
      const p = mysql.createPool({ uri: url, connectionLimit: max });
      return { pool: p, end: () => new Promise<void>((r) => p.end(() => r())) };
    },
  },
  {
    name: 'mysql2/promise pool',
    flavor: 'mysql',
    open: (url, max) => {
      const p = mysqlPromise.createPool({ uri: url, connectionLimit: max, namedPlaceholders: true, rowsAsArray: false });
      return { pool: p, end: () => p.end() };
    },
  },
  {
    name: 'postgres.js',
    flavor: 'postgres',
    open: (url, max) => {
      const sql = postgres(url, { max, transform: postgres.camel, onnotice: () => {} });
      return { pool: sql, end: () => sql.end() };
    },
  },
];

const dbs = new Map<Flavor, TestDb>();
beforeAll(async () => {
  for (const flavor of ['mysql', 'postgres'] as const) {
    const db = await createTestDb(flavor, 'pool_only');
    await migrate(db.knex, { workers: true, ...(flavor === 'postgres' ? { nextId: { schema: 'po', sequenceBits: 10 } } : {}) });
    dbs.set(flavor, db);
  }
});
afterAll(async () => {
  for (const db of dbs.values()) await db.drop();
});

describe.each(CASES)('a $name alone', (c) => {
  let pools: Array<{ pool: object; end(): Promise<void> }>;
  beforeAll(() => {
    const db = dbs.get(c.flavor)!;
    pools = [c.open(db.url, 3), c.open(db.url, 3)];
  });
  afterAll(async () => {
    await Promise.all(pools.map((p) => p.end()));
  });

  it('runs snowflake allocators: each leases its own worker id, no ID twice, ids given back on close', async () => {
    const group = `g_${c.name.replace(/\W/g, '_')}`;
    const allocators: SnowflakeAllocator[] = Array.from({ length: 5 }, (_, i) =>
      createSnowflakeAllocator({ pool: pools[i % 2]!.pool, group, layout: 'idlease', leaseTtlMs: 5_000 }),
    );
    const ids = (await Promise.all(allocators.map(async (a) => [await a.next(), ...(await a.nextBatch(20_000)), await a.next()]))).flat();
    const workerIds = allocators.map((a) => a.workerId);
    expect(new Set(workerIds).size).toBe(5);
    expect(workerIds.every((w) => typeof w === 'number')).toBe(true);
    expect(new Set(ids).size).toBe(ids.length);
    // Each ID carries the worker id of the allocator that made it (the layout's middle field).
    const layout = layoutPreset('idlease');
    expect(new Set(ids.map((id) => decodeId(id, layout).shard)).size).toBe(5);

    const store = createPoolWorkerIdStore(pools[0]!.pool, { schema: undefined, table: 'idlease_workers' });
    const live = await store.list(group);
    expect(
      live
        .filter((r) => r.alive)
        .map((r) => r.workerId)
        .sort(),
    ).toEqual([...workerIds].sort());
    expect(live.every((r) => r.pid === process.pid && r.startedAt instanceof Date && r.leaseExpiresAt.getTime() > Date.now())).toBe(true);

    await Promise.all(allocators.map((a) => a.close()));
    const after = await store.list(group);
    expect(after.filter((r) => r.alive)).toEqual([]);
    // Released rows keep the highest time each holder used, so the next holder starts above it.
    expect(after.every((r) => r.maxTimeMs > 0n)).toBe(true);
    const next = createSnowflakeAllocator({ pool: pools[1]!.pool, group });
    const later = await next.next();
    await next.close();
    const sameWorker = ids.filter((id) => decodeId(id, layout).shard === decodeId(later, layout).shard);
    expect(sameWorker.length).toBeGreaterThan(0);
    expect(sameWorker.every((id) => later > id)).toBe(true);
  });

  it('runs tag admin: add, list, set-step, bump', async () => {
    const pool = pools[0]!.pool;
    const tag = `t_${c.name.replace(/\W/g, '_')}`;
    const start = 2n ** 53n + 7n;
    const added = await addTag(pool, { tag, start, step: 50, description: 'via a pool' });
    expect(added.created).toBe(true);
    expect(added.row).toMatchObject({ tag, maxId: start - 1n, step: 50, description: 'via a pool' });
    expect((await addTag(pool, { tag })).created).toBe(false);
    expect((await listTags(pool)).find((r) => r.tag === tag)?.maxId).toBe(start - 1n);
    expect((await setStep(pool, tag, 75)).step).toBe(75);
    expect(await bumpTag(pool, { tag, by: 1000n })).toEqual([{ tag, before: start - 1n, after: start + 999n }]);
    await expect(setStep(pool, 'no_such_tag', 5)).rejects.toMatchObject({ code: 'UNKNOWN_TAG' });
  });
});

describe('next_id() bump on a pool alone', () => {
  it('a pg.Pool of one connection bumps again and again (the transaction gives its connection back)', async () => {
    const db = dbs.get('postgres')!;
    const pool = new pg.Pool({ connectionString: db.url, max: 1 });
    try {
      const t0 = Date.now();
      const first = await bumpNextId(pool, { schema: 'po', aheadMs: 60_000 });
      const drawn = BigInt((await pool.query<{ id: string }>('SELECT po.next_id()::text AS id')).rows[0]!.id);
      expect(drawn > first.after).toBe(true);
      expect(decodeId(drawn, resolveLayout({ sequenceBits: 10 })).unixMs).toBeGreaterThanOrEqual(t0 + 59_000);
      const again = await bumpNextId(pool, { schema: 'po', aheadMs: 0 });
      expect(again.after).toBe(again.before);
      const missing = await bumpNextId(pool, { schema: 'nothing_here', aheadMs: 10 }).catch((e: unknown) => e);
      expect(isIdleaseError(missing, 'NOT_MIGRATED')).toBe(true);
      // After a failed bump the pool's one connection is usable again.
      expect((await bumpNextId(pool, { schema: 'po', aheadMs: 0 })).after).toBeGreaterThanOrEqual(again.after);
    } finally {
      await pool.end();
    }
  });

  it('postgres.js bumps too; a mysql2 pool is refused: next_id() is PostgreSQL-only', async () => {
    const sql = postgres(dbs.get('postgres')!.url, { max: 1, onnotice: () => {} });
    const mysqlPool = mysql.createPool({ uri: dbs.get('mysql')!.url, connectionLimit: 1 });
    try {
      const r = await bumpNextId(sql, { schema: 'po', aheadMs: 1 });
      expect(r.after).toBeGreaterThan(0n);
      await expect(bumpNextId(mysqlPool, { schema: 'po', aheadMs: 1 })).rejects.toMatchObject({
        code: 'BAD_CONFIG',
        message: expect.stringMatching(/PostgreSQL/),
      });
    } finally {
      await sql.end();
      await new Promise<void>((r) => mysqlPool.end(() => r()));
    }
  });
});

describe('knex | pool | store options', () => {
  it('createSnowflakeAllocator takes exactly one of knex, pool or store, and refuses what is not a pool', async () => {
    const db = dbs.get('postgres')!;
    const pool = new pg.Pool({ connectionString: db.url, max: 1 });
    try {
      expect(() => createSnowflakeAllocator({ knex: db.knex, pool })).toThrow(
        expect.objectContaining({ code: 'BAD_CONFIG', message: expect.stringMatching(/exactly one of `knex`.*`pool`.*`store`; got 2/) }),
      );
      expect(() => createSnowflakeAllocator({})).toThrow(/got 0/);
      for (const bad of [{}, 42, 'postgres://x']) {
        expect(() => createSnowflakeAllocator({ pool: bad })).toThrow(
          expect.objectContaining({ code: 'BAD_CONFIG', message: expect.stringMatching(/pg\.Pool.*mysql2.*postgres\.js/) }),
        );
      }
      expect(() => createSnowflakeAllocator({ pool: db.knex })).toThrow(/pass it as `knex`/);
      // Admin calls take either, and name both when given neither.
      await expect(listTags({} as never)).rejects.toMatchObject({
        code: 'BAD_CONFIG',
        message: expect.stringMatching(/Knex instance.*pg\.Pool/),
      });
    } finally {
      await pool.end();
    }
  });
});
