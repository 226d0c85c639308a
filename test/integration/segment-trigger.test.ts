/**
 * A trigger on the segment table (an audit trigger; pt-online-schema-change installs three).
 * MariaDB answers an UPDATE that fired one with insert id 0 in the OK packet, which is where the
 * MySQL lease reads its new max_id from (LAST_INSERT_ID(expr)): the allocator must say so with
 * BAD_CONFIG, once, and hand nothing out, not a range computed from 0. PostgreSQL reads the
 * value from RETURNING, which a trigger does not change.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDb, ownTable, type TestDb } from '../helpers/db.js';
import { migrate } from '../../src/migrations/migrate.js';
import { addTag, createSegmentAllocator, listTags } from '../../src/segment/index.js';

describe.each(['mysql', 'postgres'] as const)('segment table with a trigger on %s', (flavor) => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb(flavor, 'segtrig');
    await migrate(db.knex);
    const t = ownTable(flavor, 'idlease_segments');
    if (flavor === 'mysql') {
      await db.knex.raw(`CREATE TABLE seg_audit (tag varchar(128), max_id bigint) ENGINE=InnoDB`);
      await db.knex.raw(`CREATE TRIGGER seg_audit AFTER UPDATE ON ${t} FOR EACH ROW INSERT INTO seg_audit VALUES (NEW.tag, NEW.max_id)`);
    } else {
      await db.knex.raw(`CREATE TABLE seg_audit (tag varchar(128), max_id bigint)`);
      await db.knex.raw(
        `CREATE FUNCTION seg_audit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO seg_audit VALUES (NEW.tag, NEW.max_id); RETURN NEW; END $$`,
      );
      await db.knex.raw(`CREATE TRIGGER seg_audit AFTER UPDATE ON ${t} FOR EACH ROW EXECUTE FUNCTION seg_audit()`);
    }
    await addTag(db.knex, { tag: 'audited', step: 100 });
  });
  afterAll(async () => {
    await db.drop();
  });

  it(flavor === 'mysql' ? 'BAD_CONFIG naming the trigger, nothing handed out' : 'leases as usual', async () => {
    const a = createSegmentAllocator({ knex: db.knex, tag: 'audited', minStep: 100, maxStep: 100, waitTimeoutMs: 2_000 });
    try {
      if (flavor === 'mysql') {
        await expect(a.next()).rejects.toMatchObject({ code: 'BAD_CONFIG', message: expect.stringMatching(/trigger/) });
        // Fatal: the loop stopped after one lease, so the row moved once, by one step.
        expect((await listTags(db.knex)).find((r) => r.tag === 'audited')!.maxId).toBe(100n);
      } else {
        expect(await a.nextBatch(150)).toEqual(Array.from({ length: 150 }, (_, i) => BigInt(i + 1)));
      }
    } finally {
      await a.close();
    }
  });
});
