/**
 * Issue 13: a tag's row that goes backwards (failover to a replica that missed recent
 * leases, a restore) is detected by every allocator that leased above it, never served,
 * pushed back up, and repaired by `idlease tag bump`.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ALL_FLAVORS, createTestDb, ownTable, type TestDb } from '../helpers/db.js';
import { runCli } from '../helpers/cli.js';
import { migrate } from '../../src/migrations/migrate.js';
import { addTag, bumpTag, createSegmentAllocator, listTags, type SegmentEvent } from '../../src/segment/index.js';
import { MAX_INT64 } from '../../src/ids.js';

describe.each(ALL_FLAVORS)('segment regression and tag bump on %s', (flavor) => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb(flavor, 'segreg');
    await migrate(db.knex);
  });
  afterAll(async () => {
    await db.drop();
  });

  const maxIdOf = async (tag: string) => (await listTags(db.knex)).find((r) => r.tag === tag)!.maxId;

  it('a row lowered under a running allocator: the regressed range is refused with INVARIANT and an event, the row is pushed above our end, and the allocator goes on above it', async () => {
    await addTag(db.knex, { tag: 'reg', step: 100 });
    const events: SegmentEvent[] = [];
    const a = createSegmentAllocator({ knex: db.knex, tag: 'reg', minStep: 100, maxStep: 100, onEvent: (e) => events.push(e) });
    const served = await a.nextBatch(150); // leases 1..100 and 101..200, and preloads 201..300
    while (a.stats().leaseInFlight) await new Promise((r) => setTimeout(r, 5));
    const end = await maxIdOf('reg');
    expect(end).toBe(300n);
    // The failover: the row is back where a replica saw it.
    await db.knex.raw(`UPDATE ${ownTable(flavor, 'idlease_segments')} SET max_id = 50 WHERE tag = ?`, ['reg']);
    const after: bigint[] = [];
    let error: unknown;
    for (let i = 0; i < 400 && error === undefined; i++) {
      try {
        after.push(await a.next());
      } catch (e) {
        error = e;
      }
    }
    expect(error).toMatchObject({ code: 'INVARIANT', message: expect.stringMatching(/went backwards.*idlease tag bump reg --by/s) });
    const reg = events.find((e) => e.type === 'regression');
    expect(reg).toMatchObject({ type: 'regression', tag: 'reg', previousEnd: end });
    expect(a.stats().regressions).toBe(1);
    expect(await maxIdOf('reg')).toBeGreaterThanOrEqual(end);
    // The allocator carries on above everything it saw: no ID repeats, still increasing.
    const more = await a.nextBatch(300);
    const all = [...served, ...after, ...more];
    expect(new Set(all).size).toBe(all.length);
    for (let i = 1; i < all.length; i++) expect(all[i]! > all[i - 1]!).toBe(true);
    expect(more[0]! > end).toBe(true);
    await a.close();
  });

  it('bumpTag raises by n or to at least n, never lowers, refuses past 2^63−1, and names unknown tags', async () => {
    await addTag(db.knex, { tag: 'b1', step: 10 });
    await addTag(db.knex, { tag: 'b2', start: 1001n, step: 10 });
    expect(await bumpTag(db.knex, { tag: 'b1', by: 500 })).toEqual([{ tag: 'b1', before: 0n, after: 500n }]);
    expect(await bumpTag(db.knex, { tag: 'b1', to: 100 })).toEqual([{ tag: 'b1', before: 500n, after: 500n }]);
    const all = await bumpTag(db.knex, { all: true, to: 2n ** 60n });
    expect(all.filter((r) => r.tag === 'b1' || r.tag === 'b2').map((r) => r.after)).toEqual([2n ** 60n, 2n ** 60n]);
    await addTag(db.knex, { tag: 'top', start: MAX_INT64 - 5n });
    await expect(bumpTag(db.knex, { tag: 'top', by: 10 })).rejects.toMatchObject({ code: 'EXHAUSTED' });
    expect(await maxIdOf('top')).toBe(MAX_INT64 - 6n);
    await expect(bumpTag(db.knex, { tag: 'nope', by: 1 })).rejects.toMatchObject({ code: 'UNKNOWN_TAG' });
    await expect(bumpTag(db.knex, { tag: 'b1' })).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
    await expect(bumpTag(db.knex, { tag: 'b1', all: true, by: 1 })).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
    await expect(bumpTag(db.knex, { tag: 'b1', by: -3 })).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
  });
});

// The CLI needs a database another process can reach: PGlite's test database lives in this process.
describe.each(['mysql', 'postgres'] as const)('idlease tag bump (CLI) on %s', (flavor) => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb(flavor, 'segbump');
    await migrate(db.knex);
  });
  afterAll(async () => {
    await db.drop();
  });

  it('idlease tag bump from the CLI', async () => {
    await addTag(db.knex, { tag: 'cli', step: 10 });
    const r = await runCli(['tag', 'bump', 'cli', '--by', '7000', '--url', db.url, '--json']);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual([{ tag: 'cli', before: '0', after: '7000' }]);
    const bad = await runCli(['tag', 'bump', 'cli', '--url', db.url]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/^idlease: BAD_ARGUMENT: /);
  });
});
