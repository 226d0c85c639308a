/**
 * Issue 16: a database migrated by idlease 0.1 (everything in public) upgraded to the schema of
 * idlease's own: no row lost, no ID handed out twice, nothing re-run, nothing left in public,
 * and the result equal to a fresh install. Allocators pointed at a database not yet moved fail
 * with NOT_MIGRATED and create nothing; two migrators at once move it once.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Knex } from 'knex';
import { randomBytes } from 'node:crypto';
import { createTestDb, type TestDb, type TestFlavor } from '../helpers/db.js';
import { connect } from '../../src/connect.js';
import { schemaSnapshot } from '../helpers/schema-snapshot.js';
import { waitFor } from '../helpers/wait.js';
import { installLegacyV1, LEGACY_V1_OPTIONS } from '../fixtures/legacy-public-v1.js';
import { migrate, unlockMigrations } from '../../src/migrations/migrate.js';
import { addTag, createSegmentAllocator, createSnowflakeAllocator, createTicketAllocator, isIdleaseError } from '../../src/index.js';
import { createKnexWorkerIdStore, newHolder } from '../../src/snowflake/worker-store.js';
import { up as segmentsFileUp, down as segmentsFileDown } from '../../migrations/20261122000001_segments.js';

const MOVED = [
  'idlease_migrations',
  'idlease_migrations_lock',
  'idlease_segments',
  'idlease_ticket_schemes',
  'idlease_tickets_default',
  'idlease_workers',
];

/** What migrate applies to a 0.1 install of every object: the versions added since. */
const UPGRADE = [
  'segments:idlease_segments:v2',
  'segments:idlease_segments:v3',
  'install:idlease_install',
  'tickets:default:v2',
  'workers:idlease_workers:v2',
];

async function rows(knex: Knex, sql: string, bindings: readonly Knex.RawBinding[] = []): Promise<Array<Record<string, unknown>>> {
  return ((await knex.raw(sql, bindings)) as { rows: Array<Record<string, unknown>> }).rows;
}

/** Relations of `schema` whose name starts with idlease (tables, sequences, indexes). */
async function idleaseRelations(knex: Knex, schema: string): Promise<string[]> {
  const r = await rows(
    knex,
    `SELECT c.relname::text AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = ? AND c.relname LIKE 'idlease%' ORDER BY 1`,
    [schema],
  );
  return r.map((x) => String(x.name));
}

async function segmentRows(knex: Knex, schema: string): Promise<Array<Record<string, unknown>>> {
  return rows(knex, `SELECT tag, max_id::text AS max_id, step FROM "${schema}".idlease_segments ORDER BY tag`);
}

/** Every tag is in schema idlease with its max_id and step exactly as they were in public. */
async function expectRowsKept(knex: Knex, maxIds: ReadonlyMap<string, bigint>): Promise<void> {
  expect(await segmentRows(knex, 'idlease')).toEqual(
    [...maxIds].map(([tag, max]) => ({ tag, max_id: String(max), step: tag === 'order' ? 100 : 1000 })),
  );
}

/** An 0.1 install that has been used: two tags leased, tickets drawn, a worker id held. */
async function usedLegacyInstall(knex: Knex): Promise<{ maxIds: Map<string, bigint>; lastTicket: bigint; holderToken: string }> {
  await installLegacyV1(knex);
  // The statements 0.1 ran against its unqualified tables (today's code needs the failover columns,
  // which the upgrade adds): two tags, 250 IDs leased from each, five tickets drawn.
  await knex.raw(`INSERT INTO public.idlease_segments (tag, max_id, step) VALUES ('order', 0, 100), ('user', 4999999999, 1000)`);
  await knex.raw(`UPDATE public.idlease_segments SET max_id = max_id + 250`);
  let lastTicket = 0n;
  for (let i = 0; i < 5; i++) {
    lastTicket = BigInt(String((await rows(knex, `SELECT nextval('public.idlease_tickets_default')::text AS id`))[0]!.id));
  }
  // A worker id claimed as 0.1 did (its table has no instance marker, which today's claim reads).
  const holder = newHolder();
  await knex.raw(
    `INSERT INTO public.idlease_workers (worker_group, worker_id, holder_token, lease_expires_at) VALUES ('g', 0, ?, now() + interval '600 seconds')`,
    [holder.token],
  );
  const maxIds = new Map((await segmentRows(knex, 'public')).map((r) => [String(r.tag), BigInt(String(r.max_id))]));
  return { maxIds, lastTicket, holderToken: holder.token };
}

describe.each(['postgres', 'pglite'] as TestFlavor[])('upgrading an idlease 0.1 install on %s', (flavor) => {
  let old: TestDb;
  let fresh: TestDb;
  beforeAll(async () => {
    [old, fresh] = await Promise.all([createTestDb(flavor, 'schema_up_old'), createTestDb(flavor, 'schema_up_new')]);
  });
  afterAll(async () => {
    await Promise.all([old?.drop(), fresh?.drop()]);
  });

  it(
    'moves every row into schema idlease, reissues nothing, re-runs nothing, leaves public clean, equals a fresh install',
    { timeout: 60_000 },
    async () => {
      const before = await usedLegacyInstall(old.knex);
      const recorded = (await rows(old.knex, 'SELECT name FROM public.idlease_migrations ORDER BY id')).map((r) => r.name);
      const workersBefore = await rows(
        old.knex,
        'SELECT worker_group, worker_id, holder_token, max_time_ms::text AS m FROM public.idlease_workers',
      );
      expect(before.maxIds.get('order')).toBe(250n);

      // New code on a database not yet moved: loud, and creates nothing (even asked to create the tag).
      const early = createSegmentAllocator({ knex: old.knex, tag: 'order', create: true, waitTimeoutMs: 2_000 });
      const err = await early.next().catch((e: unknown) => e);
      await early.close();
      expect(isIdleaseError(err, 'NOT_MIGRATED'), String(err)).toBe(true);
      expect((err as Error).message).toMatch(/idlease migrate/);
      expect((err as Error).message).toMatch(/schema: 'public'/);
      const tickets = createTicketAllocator({ servers: [{ knex: old.knex, offset: 1 }] });
      const ticketErr = await tickets.next().catch((e: unknown) => e);
      await tickets.close();
      expect(isIdleaseError(ticketErr, 'NOT_MIGRATED'), String(ticketErr)).toBe(true);
      const workers = createSnowflakeAllocator({ knex: old.knex, group: 'g', leaseTtlMs: 2_000 });
      const workerErr = await workers.next().catch((e: unknown) => e);
      await workers.close();
      expect(isIdleaseError(workerErr, 'NOT_MIGRATED'), String(workerErr)).toBe(true);
      expect(await idleaseRelations(old.knex, 'idlease')).toEqual([]);

      // The knex migration files cannot move it (knex reads its bookkeeping first): they refuse.
      const refused = await segmentsFileUp(old.knex).catch((e: unknown) => e);
      expect(isIdleaseError(refused, 'MIGRATION_FAILED'), String(refused)).toBe(true);
      expect((refused as Error).message).toMatch(/public\.idlease_segments.*idlease migrate/);
      expect(await idleaseRelations(old.knex, 'idlease')).toEqual([]);

      const result = await migrate(old.knex, LEGACY_V1_OPTIONS);
      expect(result.applied).toEqual(UPGRADE);
      expect(result.moved.map((m) => m.to)).toEqual(MOVED.map((n) => `idlease.${n}`));
      expect(result.moved.map((m) => m.from)).toEqual(MOVED.map((n) => `public.${n}`));

      // Rows: same tags, same max_id; the bookkeeping and the worker lease came along.
      await expectRowsKept(old.knex, before.maxIds);
      expect((await rows(old.knex, 'SELECT name FROM idlease.idlease_migrations ORDER BY id')).map((r) => r.name)).toEqual([
        ...recorded,
        ...UPGRADE,
      ]);
      expect(
        await rows(old.knex, 'SELECT worker_group, worker_id, holder_token, max_time_ms::text AS m FROM idlease.idlease_workers'),
      ).toEqual(workersBefore);
      // Nothing of idlease's is left in public but next_id()'s sequence, which stays where the user put it.
      expect(await idleaseRelations(old.knex, 'public')).toEqual(['idlease_next_id_seq']);

      // No ID handed out twice: every tag continues above its old max_id.
      for (const [tag, max] of before.maxIds) {
        const a = createSegmentAllocator({ knex: old.knex, tag });
        const ids = await a.nextBatch(10);
        await a.close();
        expect(ids[0]).toBe(max + 1n);
      }
      const t = createTicketAllocator({ servers: [{ knex: old.knex, offset: 1 }] });
      expect(await t.next()).toBe(before.lastTicket + 1n);
      await t.close();
      // The worker id claimed before the move is still held: a new allocator takes the next one.
      // The upgraded table has no instance marker yet, so on PostgreSQL that first claim waits out
      // one lease (leaseTtlMs + maxLeadMs) and then marks it (docs/failover.md); PGlite never waits.
      const s = createSnowflakeAllocator({ knex: old.knex, group: 'g', leaseTtlMs: 1_000, maxLeadMs: 0, waitTimeoutMs: 5_000 });
      await s.next();
      expect(s.workerId).toBe(1);
      expect(s.stats().failoverWaits).toBe(flavor === 'pglite' ? 0 : 1);
      await s.close();
      // The old holder, still pointed at public, fails loudly instead of working on a stale table.
      const stale = await createKnexWorkerIdStore(old.knex, { schema: 'public', table: 'idlease_workers' })
        .renew('g', 0, before.holderToken, 600_000, 0n)
        .catch((e: unknown) => e);
      expect(isIdleaseError(stale, 'NOT_MIGRATED'), String(stale)).toBe(true);

      // Idempotent, and the knex files now find their tables where they belong.
      expect(await migrate(old.knex, LEGACY_V1_OPTIONS)).toEqual({ applied: [], moved: [], direction: 'up' });
      await segmentsFileUp(old.knex);

      // The structure equals a fresh install with the same options (catalog snapshot).
      await migrate(fresh.knex, LEGACY_V1_OPTIONS);
      const upgraded = await schemaSnapshot(old.knex, flavor);
      // The comparison must see the moved objects themselves, or equality would prove nothing.
      const seen = JSON.stringify(upgraded);
      for (const name of [...MOVED, 'idlease_migrations_id_seq', 'next_id', 'idlease_workers_instance']) expect(seen).toContain(name);
      expect(upgraded).toEqual(await schemaSnapshot(fresh.knex, flavor));
    },
  );
});

describe('two migrators at once on an idlease 0.1 install (PostgreSQL)', () => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb('postgres', 'schema_up_race');
  });
  afterAll(async () => {
    await db?.drop();
  });

  it('one moves, the others wait and find nothing to do; no row lost', { timeout: 60_000 }, async () => {
    const before = await usedLegacyInstall(db.knex);
    const others = [db.another(), db.another(), db.another()];
    const results = await Promise.all([db.knex, ...others].map((k) => migrate(k, LEGACY_V1_OPTIONS)));
    const moved = results.filter((r) => r.moved.length > 0);
    expect(moved).toHaveLength(1);
    expect(moved[0]!.moved.map((m) => m.to)).toEqual(MOVED.map((n) => `idlease.${n}`));
    expect(results.flatMap((r) => r.applied)).toEqual(UPGRADE);
    await expectRowsKept(db.knex, before.maxIds);
    expect(await idleaseRelations(db.knex, 'public')).toEqual(['idlease_next_id_seq']);
  });
});

describe('a 0.1 process leasing during the move (PostgreSQL)', () => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb('postgres', 'schema_up_queue');
  });
  afterAll(async () => {
    await db?.drop();
  });

  /** Sessions of this test's database waiting on a lock (pg_locks is the whole server's: other files' sessions wait too). */
  async function waiting(): Promise<number> {
    const sql =
      'SELECT count(*)::int AS n FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE NOT l.granted AND a.datname = current_database()';
    return Number((await rows(db.knex, sql))[0]!.n);
  }

  it(
    'a lease queued behind the move fails with NOT_MIGRATED instead of writing anywhere; the move keeps every row',
    { timeout: 60_000 },
    async () => {
      const before = await usedLegacyInstall(db.knex);
      // A transaction on the old table holds the move at its ALTER TABLE…
      const blocker = await db.another().transaction();
      await blocker.raw('SELECT max_id FROM public.idlease_segments WHERE tag = ? FOR UPDATE', ['order']);
      const moving = migrate(db.another(), LEGACY_V1_OPTIONS);
      await waitFor(async () => (await waiting()) === 1, { what: 'the move to wait on the blocking transaction' });
      // …and a lease as 0.1 issues it (unqualified, found in public) queues behind the move.
      const old = createSegmentAllocator({
        knex: db.another(),
        tag: 'order',
        schema: 'public',
        waitTimeoutMs: 10_000,
        statementTimeoutMs: 10_000,
      });
      const lease = old.next().then(
        () => undefined,
        (e: unknown) => e,
      );
      await waitFor(async () => (await waiting()) === 2, { what: 'the 0.1 lease to queue behind the move' });
      await blocker.commit();
      expect((await moving).moved.length).toBe(MOVED.length);
      const err = await lease;
      await old.close();
      expect(isIdleaseError(err, 'NOT_MIGRATED'), String(err)).toBe(true);
      await expectRowsKept(db.knex, before.maxIds);
    },
  );
});

describe('an idlease 0.1 install and a same-named table already in schema idlease (PGlite)', () => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb('pglite', 'schema_up_clash');
  });
  afterAll(async () => {
    await db?.drop();
  });

  it('the move refuses, names the table, and changes nothing', { timeout: 60_000 }, async () => {
    await installLegacyV1(db.knex);
    await db.knex.raw('CREATE SCHEMA idlease');
    await db.knex.raw('CREATE TABLE idlease.idlease_segments (tag text)');
    const publicBefore = await idleaseRelations(db.knex, 'public');
    const err = await migrate(db.knex, LEGACY_V1_OPTIONS).catch((e: unknown) => e);
    expect(isIdleaseError(err, 'MIGRATION_FAILED'), String(err)).toBe(true);
    expect((err as Error).message).toMatch(/idlease\.idlease_segments already exist.*Nothing was changed.*schema: 'public'/);
    expect(await idleaseRelations(db.knex, 'public')).toEqual(publicBefore);
    expect(await idleaseRelations(db.knex, 'idlease')).toEqual(['idlease_segments']);
  });
});

describe("schema: 'public' keeps an idlease 0.1 install where it is (PostgreSQL)", () => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb('postgres', 'schema_keep');
  });
  afterAll(async () => {
    await db?.drop();
  });

  it('moves nothing, re-runs nothing, and allocators with the same option go on above the old max', { timeout: 60_000 }, async () => {
    const before = await usedLegacyInstall(db.knex);
    expect(await migrate(db.knex, { ...LEGACY_V1_OPTIONS, schema: 'public' })).toEqual({
      applied: UPGRADE,
      moved: [],
      direction: 'up',
    });
    expect(await idleaseRelations(db.knex, 'idlease')).toEqual([]);
    const a = createSegmentAllocator({ knex: db.knex, tag: 'order', schema: 'public' });
    expect(await a.next()).toBe(before.maxIds.get('order')! + 1n);
    await a.close();
  });
});

describe('a role that may not create schemas (PostgreSQL)', () => {
  let db: TestDb;
  const role = `idl_noschema_${randomBytes(4).toString('hex')}`;
  beforeAll(async () => {
    db = await createTestDb('postgres', 'schema_role');
  });
  afterAll(async () => {
    await db?.knex.raw(`DROP OWNED BY ${role}`).catch(() => undefined);
    await db?.drop();
    const admin = connect(new URL('/postgres', db.url).toString(), { poolMax: 1 });
    await admin.raw(`DROP ROLE IF EXISTS ${role}`).finally(() => admin.destroy());
  });

  it('migrates into the idlease schema a DBA created for it', { timeout: 30_000 }, async () => {
    await db.knex.raw(`CREATE ROLE ${role} LOGIN`);
    await db.knex.raw(`REVOKE CREATE ON DATABASE "${new URL(db.url).pathname.slice(1)}" FROM PUBLIC`);
    const url = new URL(db.url);
    url.username = role;
    const app = connect(url.toString(), { poolMax: 2 });
    try {
      const refused = await migrate(app).catch((e: unknown) => e);
      expect(isIdleaseError(refused, 'MIGRATION_FAILED'), String(refused)).toBe(true);
      expect(String((refused as Error).message)).toMatch(/permission denied/);
      await db.knex.raw(`CREATE SCHEMA idlease AUTHORIZATION ${role}`);
      expect((await migrate(app)).applied).toEqual([
        'segments:idlease_segments',
        'segments:idlease_segments:v2',
        'segments:idlease_segments:v3',
        'install:idlease_install',
      ]);
    } finally {
      await app.destroy();
    }
  });
});

describe('the knex CLI and a crashed 0.1 migration meet the move (PostgreSQL)', () => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb('postgres', 'schema_up_knex');
  });
  afterAll(async () => {
    await db?.drop();
  });

  it(
    'knex files refuse beside 0.1 and leave empty bookkeeping; a held 0.1 lock stops the move until --unlock; then it moves',
    { timeout: 60_000 },
    async () => {
      const before = await usedLegacyInstall(db.knex);
      // A knexfile with schemaName: 'idlease' (schema created by hand, as knex needs): knex makes
      // its empty bookkeeping there, then the first file refuses.
      await db.knex.raw('CREATE SCHEMA idlease');
      const source = {
        getMigrations: () => Promise.resolve(['20261122000001_segments.ts']),
        getMigrationName: (n: string) => n,
        getMigration: () => Promise.resolve({ up: segmentsFileUp, down: segmentsFileDown }),
      };
      const refused = await db.knex.migrate
        .latest({ tableName: 'idlease_migrations', schemaName: 'idlease', migrationSource: source, disableMigrationsListValidation: true })
        .catch((e: unknown) => e);
      expect(String((refused as Error)?.message)).toMatch(/idlease migrate/);
      expect(await idleaseRelations(db.knex, 'idlease')).toContain('idlease_migrations');
      expect(await idleaseRelations(db.knex, 'idlease')).not.toContain('idlease_segments');

      // A 0.1 migration that crashed holding its lock: the move waits, then gives up naming --unlock.
      await db.knex.raw('UPDATE public.idlease_migrations_lock SET is_locked = 1');
      const stuck = await migrate(db.knex, { ...LEGACY_V1_OPTIONS, lockTimeoutMs: 300 }).catch((e: unknown) => e);
      expect(isIdleaseError(stuck, 'MIGRATION_FAILED'), String(stuck)).toBe(true);
      expect((stuck as Error).message).toMatch(/--unlock/);
      expect(await idleaseRelations(db.knex, 'public')).toContain('idlease_segments');

      await unlockMigrations(db.knex);
      const result = await migrate(db.knex, LEGACY_V1_OPTIONS);
      expect(result.moved.map((m) => m.to)).toEqual(MOVED.map((n) => `idlease.${n}`));
      expect(result.applied).toEqual(UPGRADE);
      await expectRowsKept(db.knex, before.maxIds);
      // The knex CLI now finds the tables where it installs them.
      await db.knex.migrate.latest({
        tableName: 'idlease_migrations',
        schemaName: 'idlease',
        migrationSource: source,
        disableMigrationsListValidation: true,
      });
      expect(await segmentRows(db.knex, 'idlease')).toHaveLength(2);
    },
  );
});

/** An app's own knex migration in public, recorded in knex's default `knex_migrations`. */
const APP_SOURCE = {
  getMigrations: () => Promise.resolve(['20250101000000_create_users.js']),
  getMigrationName: (n: string) => n,
  getMigration: () =>
    Promise.resolve({
      up: (k: Knex) => k.raw('CREATE TABLE public.users (id bigint PRIMARY KEY)'),
      down: (k: Knex) => k.raw('DROP TABLE public.users'),
    }),
};

/** The README's knex CLI route from an installed package: idlease's files, bookkeeping where the knexfile puts it (public). */
const IDLEASE_FILES = {
  getMigrations: () => Promise.resolve(['20261122000001_segments.js']),
  getMigrationName: (n: string) => n,
  getMigration: () => Promise.resolve({ up: segmentsFileUp, down: segmentsFileDown }),
};

async function publicTables(knex: Knex): Promise<string[]> {
  const r = await rows(knex, `SELECT tablename::text AS name FROM pg_tables WHERE schemaname = 'public' ORDER BY 1`);
  return r.map((x) => String(x.name));
}

describe("knex's bookkeeping in public is never taken for an older install (PostgreSQL)", () => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb('postgres', 'schema_up_knexbook');
  });
  afterAll(async () => {
    await db?.drop();
  });

  it("the app's knex_migrations and the knex CLI route's idlease_migrations stay in public; neither knex run re-runs a step", async () => {
    await db.knex.migrate.latest({ migrationSource: APP_SOURCE });
    await db.knex.migrate.latest({
      tableName: 'idlease_migrations',
      migrationSource: IDLEASE_FILES,
      disableMigrationsListValidation: true,
    });
    const before = await publicTables(db.knex);
    expect(before).toEqual(['idlease_migrations', 'idlease_migrations_lock', 'knex_migrations', 'knex_migrations_lock', 'users']);
    expect(await idleaseRelations(db.knex, 'idlease')).toContain('idlease_segments');
    await addTag(db.knex, { tag: 'order' });

    for (const options of [{}, { migrationsTable: 'knex_migrations' }]) {
      const result = await migrate(db.knex, options);
      expect(result.moved, JSON.stringify(options)).toEqual([]);
      expect(await publicTables(db.knex)).toEqual(before);
    }
    // Both knex runs find their bookkeeping where they left it: nothing to do.
    expect(await db.knex.migrate.latest({ migrationSource: APP_SOURCE })).toEqual([expect.any(Number), []]);
    expect(
      await db.knex.migrate.latest({
        tableName: 'idlease_migrations',
        migrationSource: IDLEASE_FILES,
        disableMigrationsListValidation: true,
      }),
    ).toEqual([expect.any(Number), []]);
    expect(await segmentRows(db.knex, 'idlease')).toHaveLength(1);
  });

  it("an 0.1 install that shared the app's knex_migrations is refused with the way out, and nothing moves", async () => {
    const other = await createTestDb('postgres', 'schema_up_shared');
    try {
      await other.knex.migrate.latest({ migrationSource: APP_SOURCE });
      await installLegacyV1(other.knex, 'knex_migrations');
      const before = await publicTables(other.knex);
      const refused = await migrate(other.knex, { ...LEGACY_V1_OPTIONS, migrationsTable: 'knex_migrations' }).catch((e: unknown) => e);
      expect(isIdleaseError(refused, 'MIGRATION_FAILED'), String(refused)).toBe(true);
      expect((refused as Error).message).toMatch(/not idlease's \(20250101000000_create_users\.js\).*schema: 'public'/);
      expect(await publicTables(other.knex)).toEqual(before);
      expect(await idleaseRelations(other.knex, 'idlease')).toEqual([]);
      // The way out it names: keep the old location.
      expect((await migrate(other.knex, { ...LEGACY_V1_OPTIONS, migrationsTable: 'knex_migrations', schema: 'public' })).applied).toEqual(
        UPGRADE,
      );
    } finally {
      await other.drop();
    }
  });
});
