/**
 * Issue 38, item 5: a tag names the same row on every engine. Tags that only look alike (trailing
 * or leading whitespace, other whitespace, invisible characters, NFD spellings, letters of two
 * scripts mixed as look-alikes are) are refused the
 * same way on MariaDB, PostgreSQL and PGlite, by the library's admin calls and allocators alike;
 * and on MariaDB the tag column is NO PAD binary, so the database itself no longer reads
 * 'order ' as 'order' (utf8mb4_bin pads spaces).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IdleaseError } from '../../src/errors.js';
import { migrate } from '../../src/migrations/migrate.js';
import { addTag } from '../../src/segment/admin.js';
import { createSegmentAllocator } from '../../src/segment/allocator.js';
import { ALL_FLAVORS, createTestDb, type TestDb } from '../helpers/db.js';

// The last two: a Cyrillic о (U+043E) and a Greek ο (U+03BF) among Latin letters.
const LOOK_ALIKES = [
  'order ',
  ' order',
  ' ',
  'or\u200bder',
  'order\u00a0x',
  'caf\u0065\u0301',
  '\ufefforder',
  'or\u00adder',
  '\u043erder',
  'ord\u03bfr',
];

describe.each(ALL_FLAVORS)('%s', (flavor) => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb(flavor, 'tagid');
    await migrate(db.knex);
    await addTag(db.knex, { tag: 'order' });
    await addTag(db.knex, { tag: 'caf\u00e9' });
    // Names in one script, and the mixes real names use (Latin with Han and kana), stay allowed.
    for (const tag of ['заказ-1', 'order_注文', '注文アイテム', 'ωμεγα-2']) await addTag(db.knex, { tag });
  });
  afterAll(async () => {
    await db?.drop();
  });

  it.each(LOOK_ALIKES)('%j is refused by addTag and by an allocator, naming what is wrong', async (tag) => {
    await expect(addTag(db.knex, { tag })).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
    let thrown: unknown;
    try {
      const a = createSegmentAllocator({ knex: db.knex, tag });
      await a.next();
      await a.close();
    } catch (err) {
      thrown = err;
    }
    expect(thrown).toBeInstanceOf(IdleaseError);
    expect((thrown as IdleaseError).code).toBe('BAD_ARGUMENT');
  });

  it('the tags themselves still draw, each from its own row', async () => {
    for (const tag of ['order', 'caf\u00e9']) {
      const a = createSegmentAllocator({ knex: db.knex, tag });
      expect(await a.next()).toBe(1n);
      await a.close();
    }
  });
});

describe('MariaDB: the tag column is NO PAD binary', () => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb('mysql', 'tagnopad');
    await migrate(db.knex);
    await addTag(db.knex, { tag: 'order' });
  });
  afterAll(async () => {
    await db?.drop();
  });

  it('so the table has no row for "order " (utf8mb4_bin padded it to order)', async () => {
    const [rows] = (await db.knex.raw(
      "SELECT COLLATION_NAME AS c FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'idlease_segments' AND COLUMN_NAME = 'tag'",
    )) as [Array<{ c: string }>];
    expect(rows[0]!.c).toMatch(/^utf8mb4_(nopad_bin|0900_bin)$/);
    const [padded] = (await db.knex.raw("SELECT tag FROM idlease_segments WHERE tag = 'order '")) as [unknown[]];
    expect(padded).toEqual([]);
  });

  it('a table made before (utf8mb4_bin) becomes NO PAD on the next migrate, rows kept', async () => {
    await db.knex.raw('ALTER TABLE idlease_segments MODIFY tag varchar(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL');
    await db.knex.raw("DELETE FROM idlease_migrations WHERE name LIKE '%v3-nopad'");
    await migrate(db.knex);
    const [padded] = (await db.knex.raw("SELECT tag FROM idlease_segments WHERE tag = 'order '")) as [unknown[]];
    expect(padded).toEqual([]);
    const [kept] = (await db.knex.raw("SELECT tag FROM idlease_segments WHERE tag = 'order'")) as [unknown[]];
    expect(kept).toHaveLength(1);
  });
});
