/**
 * A tag row inserted by hand, as Leaf documents adding a tag (`INSERT INTO … (biz_tag, max_id, step)
 * VALUES (…)`), or by an app's own migration: the database it is inserted on marks it (the
 * `instance` column's DEFAULT is the lease's instance expression), so its first lease there starts
 * at max_id + 1 instead of jumping by the failover gap (2 × 10^10 above where it was put). The
 * version-3 migration adds that default to existing tables, through the knex file and migrate(),
 * and its down takes it away again. The promoted-standby half is test/ha/hand-row-standby.test.ts.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ALL_FLAVORS, createTestDb, ownTable, type TestDb } from '../helpers/db.js';
import { migrate } from '../../src/migrations/migrate.js';
import { createSegmentAllocator, listTags } from '../../src/segment/index.js';
import { up as v3Up, down as v3Down } from '../../migrations/20261127000001_segments_v3.js';

/** The first lease of a row at max_id 0 that names no instance: past the next-but-one multiple of the default gap. */
const JUMPED = 20_000_000_001n;

describe.each(ALL_FLAVORS)('rows made by hand on %s', (flavor) => {
  let db: TestDb;
  const segments = () => ownTable(flavor, 'idlease_segments');
  const insert = (tag: string, maxId: number, step = 1000) =>
    db.knex.raw(`INSERT INTO ${segments()} (tag, max_id, step) VALUES (?, ?, ?)`, [tag, maxId, step]);
  const first = async (tag: string): Promise<bigint> => {
    const a = createSegmentAllocator({ knex: db.knex, tag, minStep: 10, maxStep: 10 });
    try {
      return await a.next();
    } finally {
      await a.close();
    }
  };
  beforeAll(async () => {
    db = await createTestDb(flavor, 'handrows');
    await migrate(db.knex);
  });
  afterAll(async () => {
    await db?.drop();
  });

  it('a Leaf-style insert (tag, max_id, step) starts at max_id + 1, marked with the instance it was inserted on', async () => {
    await insert('leaf', 0);
    await insert('leaf100', 100, 10);
    expect(await first('leaf')).toBe(1n);
    expect(await first('leaf100')).toBe(101n);
    const rows = await listTags(db.knex);
    for (const tag of ['leaf', 'leaf100']) {
      const row = rows.find((r) => r.tag === tag)!;
      expect(row.jumps).toBe(0);
      expect(row.instance).toMatch(flavor === 'mysql' ? /^mariadb:\d+$/ : /^pg:tl[0-9A-F]{8}$/);
    }
  });

  it('a row that names no instance still jumps once (its history is unknown)', async () => {
    await db.knex.raw(`INSERT INTO ${segments()} (tag, max_id, step, instance) VALUES (?, 0, 1000, NULL)`, ['unknown']);
    expect(await first('unknown')).toBe(JUMPED);
  });

  it('version 3 adds the default to an existing table and its down drops it: knex file and migrate()', async () => {
    // The table as idlease 0.2 left it: no default on `instance`.
    await v3Down(db.knex);
    await insert('old', 0);
    expect(await first('old')).toBe(JUMPED);
    // The knex file's up.
    await v3Up(db.knex);
    await insert('file', 0);
    expect(await first('file')).toBe(1n);
    // migrate() (what `idlease migrate` runs) applies version 3 to a table that lacks it.
    await v3Down(db.knex);
    await db.knex.raw(`DELETE FROM ${ownTable(flavor, 'idlease_migrations')} WHERE name = ?`, ['segments:idlease_segments:v3']);
    expect((await migrate(db.knex)).applied).toEqual(['segments:idlease_segments:v3']);
    await insert('migrated', 0);
    expect(await first('migrated')).toBe(1n);
    // Rows are kept by either direction.
    expect((await listTags(db.knex)).map((r) => r.tag)).toEqual(
      expect.arrayContaining(['leaf', 'leaf100', 'unknown', 'old', 'file', 'migrated']),
    );
  });
});
