/**
 * The exported store conformance suite (idlease/testing) against every store idlease ships,
 * each on a real database with the pool configured the way users leave it: a default mysql2
 * pool (BIGINT as rounded numbers), pg with `setTypeParser(20, parseInt)`, postgres.js with
 * camelCase column transforms. Then allocators sharing a tag through each raw pool.
 */
import mysql from 'mysql2';
import mysqlPromise from 'mysql2/promise';
import pg from 'pg';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDb, ownTable, type TestDb, type TestFlavor } from '../helpers/db.js';
import { migrate } from '../../src/migrations/migrate.js';
import {
  addTag,
  createKnexSegmentStore,
  createPoolSegmentStore,
  createSegmentAllocator,
  listTags,
  type SegmentStore,
} from '../../src/segment/index.js';
import { segmentStoreConformance, type SegmentStoreHarness } from '../../src/testing/index.js';
import { MemoryStore } from '../unit/segment-memory-store.js';

// Long enough for 32 leases queued on one pg.Client on a loaded machine: the deadline counts the wait for a connection.
const TIMEOUT_MS = 1_000;
const MISSING = 'idlease_no_such_segments';

/** Another session holds the tag's row lock (PGlite: holds its only connection) until released. */
async function stallWith(db: TestDb, tag: string): Promise<() => Promise<void>> {
  const trx = await db.knex.transaction();
  await trx.raw(`SELECT tag FROM ${ownTable(db.flavor, 'idlease_segments')} WHERE tag = ? FOR UPDATE`, [tag]);
  return async () => {
    await trx.commit();
  };
}

interface Case {
  readonly name: string;
  readonly flavor: TestFlavor | 'memory';
  /** The pool (or store) under test on the test database, and how to end it. */
  open(db: TestDb | undefined): Promise<{
    store: (table?: string) => SegmentStore;
    stall?: (tag: string) => Promise<() => Promise<void>>;
    pool?: unknown;
    end(): Promise<void>;
  }>;
}

const sqlOptions = (table?: string) => ({ statementTimeoutMs: TIMEOUT_MS, ...(table ? { table } : {}) });

const CASES: Case[] = [
  ...(['mysql', 'postgres', 'pglite'] as const).map((flavor): Case => ({
    name: `knex (${flavor})`,
    flavor,
    async open(db) {
      return { store: (table) => createKnexSegmentStore(db!.knex, sqlOptions(table)), end: async () => {} };
    },
  })),
  {
    name: 'pg.Pool (PostgreSQL)',
    flavor: 'postgres',
    async open(db) {
      const pool = new pg.Pool({ connectionString: db!.url, max: 6 });
      return { pool, store: (table) => createPoolSegmentStore(pool, sqlOptions(table)), end: () => pool.end() };
    },
  },
  {
    name: 'pg.Pool with pg.types.setTypeParser(20, parseInt) (PostgreSQL)',
    flavor: 'postgres',
    async open(db) {
      // Process-wide, as users install it; put back at the end so other cases see pg's default.
      const previous = pg.types.getTypeParser(20, 'text');
      pg.types.setTypeParser(20, parseInt);
      const pool = new pg.Pool({ connectionString: db!.url, max: 6 });
      const rounded = await pool.query<{ v: number }>('SELECT 9007199254740993::int8 AS v');
      expect(rounded.rows[0]!.v).toBe(9007199254740992); // the parser is really in force
      return {
        pool,
        store: (table) => createPoolSegmentStore(pool, sqlOptions(table)),
        async end() {
          await pool.end();
          pg.types.setTypeParser(20, previous);
        },
      };
    },
  },
  {
    name: 'pg.Client (PostgreSQL)',
    flavor: 'postgres',
    async open(db) {
      const client = new pg.Client({ connectionString: db!.url });
      await client.connect();
      return { pool: client, store: (table) => createPoolSegmentStore(client, sqlOptions(table)), end: () => client.end() };
    },
  },
  {
    name: 'mysql2 pool, default options (MariaDB)',
    flavor: 'mysql',
    async open(db) {
      const pool = mysql.createPool({ uri: db!.url, connectionLimit: 6 });
      const [rows] = await pool.promise().query<mysql.RowDataPacket[]>('SELECT CAST(9007199254740993 AS SIGNED) AS v');
      expect(rows[0]!.v).toBe(9007199254740992); // a default pool really rounds BIGINT
      return {
        pool,
        store: (table) => createPoolSegmentStore(pool, sqlOptions(table)),
        end: () => new Promise<void>((r) => pool.end(() => r())),
      };
    },
  },
  {
    name: 'mysql2/promise pool, default options (MariaDB)',
    flavor: 'mysql',
    async open(db) {
      const pool = mysqlPromise.createPool({ uri: db!.url, connectionLimit: 6, namedPlaceholders: true, rowsAsArray: false });
      return { pool, store: (table) => createPoolSegmentStore(pool, sqlOptions(table)), end: () => pool.end() };
    },
  },
  {
    name: 'postgres.js with camelCase transforms (PostgreSQL)',
    flavor: 'postgres',
    async open(db) {
      const sql = postgres(db!.url, { max: 6, transform: postgres.camel, onnotice: () => {} });
      return { pool: sql, store: (table) => createPoolSegmentStore(sql, sqlOptions(table)), end: () => sql.end() };
    },
  },
  {
    name: 'in-memory store (test/unit)',
    flavor: 'memory',
    async open() {
      const store = new MemoryStore();
      store.statementTimeoutMs = TIMEOUT_MS;
      const missing = new MemoryStore();
      missing.notMigrated = true;
      return { store: (table) => (table ? missing : store), stall: async (tag) => store.stall(tag), end: async () => {} };
    },
  },
];

const dbs = new Map<string, Promise<TestDb>>();
/** One database per flavor for the whole file, shared by the cases on it (each check uses its own tags). */
function dbFor(flavor: TestFlavor): Promise<TestDb> {
  let db = dbs.get(flavor);
  if (!db) {
    db = createTestDb(flavor, 'conformance').then(async (d) => {
      await migrate(d.knex);
      return d;
    });
    dbs.set(flavor, db);
  }
  return db;
}
afterAll(async () => {
  for (const db of dbs.values()) await (await db).drop();
});

describe.each(CASES.map((c) => [c.name, c] as const))('store conformance: %s', (_name, c) => {
  let harness: SegmentStoreHarness;
  let opened: Awaited<ReturnType<Case['open']>>;
  beforeAll(async () => {
    const db = c.flavor === 'memory' ? undefined : await dbFor(c.flavor);
    opened = await c.open(db);
    harness = {
      store: opened.store(),
      missingTable: opened.store(MISSING),
      statementTimeoutMs: TIMEOUT_MS,
      stall: opened.stall ?? ((tag) => stallWith(db!, tag)),
    };
  });
  afterAll(async () => {
    await opened?.end();
  });

  for (const check of segmentStoreConformance(() => harness)) it(check.name, check.run);
});

describe('the conformance suite fails a store that breaks a guarantee', () => {
  it('a store that reads max_id through a rounding number fails the 2^53 check, one that never answers fails the deadline check', async () => {
    const good = new MemoryStore();
    good.statementTimeoutMs = 100;
    const rounding: SegmentStore = {
      read: async (tag) => {
        const r = await good.read(tag);
        return r && { ...r, maxId: BigInt(Number(r.maxId)) };
      },
      lease: (tag, step) => good.lease(tag, step),
      giveBack: (tag, e, m) => good.giveBack(tag, e, m),
      create: (tag, m, s) => good.create(tag, m, s),
    };
    const missing = new MemoryStore();
    missing.notMigrated = true;
    const checks = segmentStoreConformance(() => ({
      store: rounding,
      missingTable: missing,
      statementTimeoutMs: 100,
      stall: async () => async () => {},
    }));
    const byName = new Map(checks.map((ch) => [ch.name, ch]));
    await expect(byName.get('IDs past 2^53 are exact in every operation')!.run()).rejects.toThrow(
      /read\(\) past 2\^53: expected "9007199254740997n", got "9007199254740996n"/,
    );
    await expect(
      byName.get('a statement that does not answer fails at the deadline with an error the allocator retries')!.run(),
    ).rejects.toThrow(/stall\(\) must keep the store from answering/);
    await expect(byName.get('a missing table fails every call with NOT_MIGRATED')!.run()).resolves.toBeUndefined();
  });
});

describe.each([
  ['pg.Pool', 'postgres'],
  ['mysql2 pool', 'mysql'],
  ['mysql2/promise pool', 'mysql'],
  ['postgres.js', 'postgres'],
] as const)('allocators sharing a tag through a %s', (kind, flavor) => {
  let db: TestDb;
  let pools: Array<{ pool: unknown; end(): Promise<void> }>;
  beforeAll(async () => {
    db = await dbFor(flavor);
    pools = [0, 1, 2].map(() => {
      if (kind === 'pg.Pool') {
        const p = new pg.Pool({ connectionString: db.url, max: 3 });
        return { pool: p, end: () => p.end() };
      }
      if (kind === 'mysql2 pool') {
        const p = mysql.createPool({ uri: db.url, connectionLimit: 3 });
        return { pool: p, end: () => new Promise<void>((r) => p.end(() => r())) };
      }
      if (kind === 'mysql2/promise pool') {
        const p = mysqlPromise.createPool({ uri: db.url, connectionLimit: 3 });
        return { pool: p, end: () => p.end() };
      }
      const sql = postgres(db.url, { max: 3, onnotice: () => {} });
      return { pool: sql, end: () => sql.end() };
    });
  });
  afterAll(async () => {
    await Promise.all(pools.map((p) => p.end()));
  });

  it('six allocators on three pools, mixed steps, IDs past 2^53: no duplicate, every ID exact, give-back on close', async () => {
    const tag = `shared_${kind.replace(/\W/g, '_')}`;
    const start = 2n ** 53n - 500n;
    await addTag(db.knex, { tag, start, step: 100 });
    const allocators = [1, 7, 100, 1000, 13, 250].map((step, i) =>
      createSegmentAllocator({ pool: pools[i % 3]!.pool, tag, minStep: step, maxStep: step, statementTimeoutMs: 2_000 }),
    );
    const got = await Promise.all(
      allocators.map(async (a, i) => {
        const ids: bigint[] = [];
        for (let k = 0; k < 60; k++) {
          if (k % 3 === 0) ids.push(...(await a.nextBatch(17 + i)));
          else ids.push(await a.next());
        }
        return ids;
      }),
    );
    await Promise.all(allocators.map((a) => a.close()));
    const all = got.flat();
    expect(new Set(all).size).toBe(all.length);
    for (const ids of got) for (let k = 1; k < ids.length; k++) expect(ids[k]! > ids[k - 1]!).toBe(true);
    expect(all.every((id) => id >= start)).toBe(true);
    expect(all.some((id) => id > 2n ** 53n)).toBe(true);
    // Nothing handed out is above the row: a restart can never hand an ID out twice.
    const row = (await listTags(db.knex)).find((r) => r.tag === tag)!;
    const max = all.reduce((a, b) => (a > b ? a : b));
    expect(row.maxId >= max).toBe(true);
  });

  it('UNKNOWN_TAG and NOT_MIGRATED arrive as they do through knex', async () => {
    const unknown = createSegmentAllocator({ pool: pools[0]!.pool, tag: 'no_such_tag' });
    await expect(unknown.next()).rejects.toMatchObject({ code: 'UNKNOWN_TAG' });
    await unknown.close();
    const missing = createSegmentAllocator({ pool: pools[0]!.pool, tag: 'x', table: MISSING });
    await expect(missing.next()).rejects.toMatchObject({ code: 'NOT_MIGRATED', message: expect.stringContaining('idlease migrate') });
    await missing.close();
  });
});

describe('pool option', () => {
  it('refuses what is not a pool, naming what is accepted; and needs exactly one of knex, pool, store', async () => {
    for (const bad of [{}, { query: () => {} }, 42, 'postgres://x']) {
      expect(() => createSegmentAllocator({ pool: bad, tag: 'a' })).toThrow(
        expect.objectContaining({ code: 'BAD_CONFIG', message: expect.stringMatching(/pg\.Pool.*mysql2.*postgres\.js/) }),
      );
    }
    const db = await dbFor('pglite');
    expect(() => createSegmentAllocator({ pool: db.knex, tag: 'a' })).toThrow(/pass it as `knex`/);
    expect(() => createSegmentAllocator({ pool: new MemoryStore(), knex: db.knex, tag: 'a' })).toThrow(/exactly one of `knex`/);
  });
});
