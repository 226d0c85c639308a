import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Knex } from 'knex';
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { REPO_ROOT } from '../helpers/cli.js';
import { ALL_FLAVORS, createTestDb, type TestDb, type TestFlavor } from '../helpers/db.js';
import { schemaSnapshot } from '../helpers/schema-snapshot.js';
import { migrate, type MigrateOptions } from '../../src/migrations/migrate.js';
import { IdleaseError } from '../../src/errors.js';

/** Every object idlease can install on this flavor, so the fresh-vs-reinstalled comparison covers them all. */
function everything(flavor: TestFlavor): MigrateOptions {
  return flavor === 'mysql'
    ? { segments: true, workers: true, tickets: { sequences: ['default', 'orders'], engine: 'MyISAM', increment: 2, offset: 2 } }
    : {
        segments: true,
        workers: true,
        schema: 'ids',
        tickets: { sequences: ['default', 'orders'] },
        nextId: [
          { schema: 'ids_a', shard: 1 },
          { schema: 'ids_b', shard: 2 },
        ],
      };
}

async function hasTable(knex: Knex, name: string, schema?: string): Promise<boolean> {
  return schema ? knex.schema.withSchema(schema).hasTable(name) : knex.schema.hasTable(name);
}

describe.each(ALL_FLAVORS)('migrate() on %s', (flavor) => {
  let db: TestDb;
  let fresh: TestDb;
  beforeAll(async () => {
    [db, fresh] = await Promise.all([createTestDb(flavor, 'migrate'), createTestDb(flavor, 'migrate_fresh')]);
  });
  afterAll(async () => {
    await Promise.all([db?.drop(), fresh?.drop()]);
  });

  it('installs into its own migrations table and is a no-op the second time', async () => {
    const first = await migrate(db.knex);
    expect(first.applied).toEqual([
      'segments:idlease_segments',
      'segments:idlease_segments:v2',
      'segments:idlease_segments:v3',
      // MySQL/MariaDB: the tag column NO PAD binary (issue 38, item 5).
      ...(flavor === 'mysql' ? ['segments:idlease_segments:v3-nopad'] : []),
      'install:idlease_install',
    ]);
    // PostgreSQL: a schema of its own, nothing in the connection's schema; MySQL: the connection's database.
    const own = flavor === 'mysql' ? undefined : 'idlease';
    expect(await hasTable(db.knex, 'idlease_segments', own)).toBe(true);
    expect(await hasTable(db.knex, 'idlease_migrations', own)).toBe(true);
    expect(await hasTable(db.knex, 'idlease_migrations_lock', own)).toBe(true);
    if (own) {
      expect(await hasTable(db.knex, 'idlease_segments')).toBe(false);
      expect(await hasTable(db.knex, 'idlease_migrations')).toBe(false);
    }
    expect(await hasTable(db.knex, 'knex_migrations')).toBe(false);
    const second = await migrate(db.knex);
    expect(second.applied).toEqual([]);
  });

  it('coexists with the app’s own knex migrations: neither side sees the other as missing', async () => {
    const appMigration = {
      getMigrations: async () => ['001_app'],
      getMigrationName: (m: string) => m,
      getMigration: async () => ({
        up: (k: Knex) => k.schema.createTable('app_things', (t) => t.increments('id')),
        down: (k: Knex) => k.schema.dropTable('app_things'),
      }),
    };
    await db.knex.migrate.latest({ migrationSource: appMigration });
    expect((await migrate(db.knex)).applied).toEqual([]);
    // knex's validation would throw "migration directory is corrupt" if it saw our rows.
    const [, pending] = await db.knex.migrate.list({ migrationSource: appMigration });
    expect(pending).toEqual([]);
    await db.knex.migrate.rollback({ migrationSource: appMigration }, true);
  });

  it('down then up gives the same schema as a fresh install', async () => {
    const opts = everything(flavor);
    await migrate(db.knex, opts);
    const down = await migrate(db.knex, { ...opts, direction: 'down' });
    expect(down.applied.length).toBeGreaterThan(0);
    expect(await hasTable(db.knex, 'idlease_segments', opts.schema)).toBe(false);
    expect(await hasTable(db.knex, 'idlease_ticket_schemes', opts.schema)).toBe(false);
    expect((await migrate(db.knex, { ...opts, direction: 'down' })).applied).toEqual([]);
    await migrate(db.knex, opts);
    await migrate(fresh.knex, { segments: false });
    await migrate(fresh.knex, opts);
    // The app table from the test above is the one intended difference; drop it first.
    await db.knex.schema.dropTableIfExists('app_things');
    await db.knex.schema.dropTableIfExists('knex_migrations');
    await db.knex.schema.dropTableIfExists('knex_migrations_lock');
    if (opts.schema) {
      // Both databases also hold the default install in the connection's schema.
      await migrate(fresh.knex);
    }
    const reinstalled = await schemaSnapshot(db.knex, flavor);
    // The comparison must see the objects themselves, or equality would prove nothing.
    const seen = JSON.stringify(reinstalled);
    for (const name of [
      'idlease_segments',
      'idlease_tickets_orders',
      'idlease_ticket_schemes',
      'idlease_workers_instance',
      ...(flavor === 'mysql' ? ['MyISAM'] : ['next_id', 'ids_b']),
    ]) {
      expect(seen).toContain(name);
    }
    expect(reinstalled).toEqual(await schemaSnapshot(fresh.knex, flavor));
  });

  it("the knex files' default directory installs what migrate() installs, where it installs it, and nothing else", async () => {
    const [viaFiles, viaMigrate] = await Promise.all([createTestDb(flavor, 'knexroute_files'), createTestDb(flavor, 'knexroute_api')]);
    try {
      // The default directory as knex reads it: its own files, in name order (the opt-in directories are not in it).
      const dir = path.join(REPO_ROOT, 'migrations');
      const files = readdirSync(dir)
        .filter((f) => f.endsWith('.ts'))
        .sort();
      expect(files.length).toBeGreaterThan(0);
      for (const f of files) await ((await import(path.join(dir, f))) as { up: (k: Knex) => Promise<void> }).up(viaFiles.knex);
      await migrate(viaMigrate.knex);
      // Bookkeeping differs by design (knex's table where the knexfile says); every object else must match.
      const objects = async (k: Knex) =>
        Object.fromEntries(
          Object.entries(await schemaSnapshot(k, flavor)).map(([kind, rows]) => [
            kind,
            rows.filter((r) => !JSON.stringify(r).includes('idlease_migrations')),
          ]),
        );
      const installed = await objects(viaFiles.knex);
      expect(JSON.stringify(installed)).toContain('idlease_segments');
      expect(installed).toEqual(await objects(viaMigrate.knex));
    } finally {
      await Promise.all([viaFiles.drop(), viaMigrate.drop()]);
    }
  });

  it('two concurrent migrate calls both succeed and install once', async () => {
    const other = flavor === 'pglite' ? db.knex : db.another();
    const opts: MigrateOptions = { segments: { table: 'concurrent_segments' } };
    const results = await Promise.all([migrate(db.knex, opts), migrate(other, opts), migrate(db.knex, opts), migrate(other, opts)]);
    expect(results.flatMap((r) => r.applied)).toEqual([
      'segments:concurrent_segments',
      'segments:concurrent_segments:v2',
      'segments:concurrent_segments:v3',
      ...(flavor === 'mysql' ? ['segments:concurrent_segments:v3-nopad'] : []),
    ]);
  });

  it('wraps a database error in MIGRATION_FAILED with the cause', async () => {
    const err = await migrate(db.knex, { segments: { table: 'pg_class_not_ours' }, migrationsTable: 'x'.repeat(63) }).then(
      () => undefined,
      (e: unknown) => e,
    );
    // A 63-character migrations table name plus knex's "_lock" suffix is too long for both servers.
    expect(err).toBeInstanceOf(IdleaseError);
    expect((err as IdleaseError).code).toBe('MIGRATION_FAILED');
    expect((err as IdleaseError).cause).toBeDefined();
  });
});
