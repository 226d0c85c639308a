import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDb, ALL_FLAVORS, type TestDb } from '../helpers/db.js';
import { toBigInt } from '../../src/ids.js';

describe.each(ALL_FLAVORS)('harness on %s', (flavor) => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb(flavor, 'harness');
  });
  afterAll(async () => {
    await db.drop();
  });

  it('returns int8 values exactly, past 2^53', async () => {
    const sql =
      flavor === 'mysql'
        ? 'select 9223372036854775807 as x, 9007199254740993 as y'
        : 'select 9223372036854775807::int8 as x, 9007199254740993::int8 as y';
    const res = await db.knex.raw(sql);
    const row = flavor === 'mysql' ? res[0][0] : res.rows[0];
    expect(toBigInt(row.x)).toBe(9223372036854775807n);
    expect(toBigInt(row.y)).toBe(9007199254740993n);
  });
});
