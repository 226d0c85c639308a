/**
 * Issue 12: an install made by next_id() version 1, migrated, equals a fresh install
 * (functions, sequence, comments: the schema snapshot), and then keeps the time field fresh
 * while an open transaction that called it sits idle (version 1's defect).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { schemaSnapshot } from '../helpers/schema-snapshot.js';
import { migrate } from '../../src/migrations/migrate.js';
import { resolveLayout } from '../../src/layout/index.js';
import { connect } from '../../src/connect.js';
import { nextIdDdl as v1Ddl } from '../fixtures/next-id-v1.js';

let old: TestDb;
let fresh: TestDb;
beforeAll(async () => {
  [old, fresh] = await Promise.all([createTestDb('postgres', 'nid_upgrade_old'), createTestDb('postgres', 'nid_upgrade_new')]);
});
afterAll(async () => {
  await Promise.all([old?.drop(), fresh?.drop()]);
});

describe('next_id() upgrade from version 1', () => {
  it('a migrated version-1 install equals a fresh install and no longer waits for open transactions', { timeout: 60_000 }, async () => {
    const opts = { segments: false, nextId: { schema: 'nu', shard: 2 } } as const;
    // A version-1 install: what version 1's migrate() left (its bodies, only its entry recorded).
    await migrate(old.knex, opts);
    for (const sql of v1Ddl({ schema: 'nu', shard: 2, layout: resolveLayout({}) }).up) await old.knex.raw(sql);
    await old.knex.raw(`DELETE FROM idlease.idlease_migrations WHERE name = 'next_id:nu:v2'`);
    await migrate(fresh.knex, opts);
    expect(await schemaSnapshot(old.knex, 'postgres')).not.toEqual(await schemaSnapshot(fresh.knex, 'postgres'));
    expect((await migrate(old.knex, opts)).applied).toEqual(['next_id:nu:v2']);
    expect(await schemaSnapshot(old.knex, 'postgres')).toEqual(await schemaSnapshot(fresh.knex, 'postgres'));

    const idle = connect(old.url, { poolMax: 1 });
    try {
      await idle.raw('BEGIN');
      await idle.raw('SELECT nu.next_id()');
      await new Promise((r) => setTimeout(r, 300));
      const res = await old.knex.raw(
        `SELECT extract(epoch FROM pg_catalog.clock_timestamp() - nu.id_timestamp(id)) * 1000 AS lag FROM (SELECT nu.next_id() AS id OFFSET 0) q`,
      );
      expect(Math.abs(Number(res.rows[0].lag))).toBeLessThanOrEqual(50);
      await idle.raw('ROLLBACK');
    } finally {
      await idle.destroy();
    }
  });
});
