/**
 * The failover fence in the statements themselves, on each engine: a segment row or a ticket scheme
 * row last served by another database instance — what a promoted standby finds — jumps past its
 * failover gap on the first lease or draw there, once, whoever comes first, with no bump.
 *
 * The "other instance" is written into the row by hand, and the row (or counter) is set behind what
 * was already issued, as an asynchronous standby that missed the last writes would hold it. The real
 * failovers (replication, Patroni) are in test/ha/.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ALL_FLAVORS, createTestDb, ownTable, type TestDb } from '../helpers/db.js';
import { migrate } from '../../src/migrations/migrate.js';
import { addTag, createSegmentAllocator, listTags, setFailoverGap } from '../../src/segment/index.js';
import { createTicketAllocator } from '../../src/ticket/index.js';
import { MAX_INT64 } from '../../src/ids.js';
import type { SegmentEvent } from '../../src/segment/types.js';
import { sleep, waitFor } from '../helpers/wait.js';

const GAP = 1_000_000n;

describe.each(ALL_FLAVORS)('failover fence on %s', (flavor) => {
  let db: TestDb;
  const segments = () => ownTable(flavor, 'idlease_segments');
  beforeAll(async () => {
    db = await createTestDb(flavor, 'fence');
    await migrate(db.knex, { tickets: { increment: 3, offset: 2, failoverGap: GAP } });
  });
  afterAll(async () => {
    await db?.drop();
  });

  it('a new tag is marked with the instance it is made on: leasing there never jumps', async () => {
    await addTag(db.knex, { tag: 'calm', step: 10 });
    const a = createSegmentAllocator({ knex: db.knex, tag: 'calm', minStep: 10, maxStep: 10 });
    const ids = await a.nextBatch(25);
    await a.close();
    expect(ids[0]).toBe(1n);
    expect(ids.at(-1)).toBe(25n);
    const row = (await listTags(db.knex)).find((r) => r.tag === 'calm')!;
    expect(row.jumps).toBe(0);
    expect(row.instance).toMatch(flavor === 'mysql' ? /^mariadb:\d+$/ : /^pg:tl[0-9A-F]{8}$/);
  });

  it('a row behind what was issued, last leased elsewhere: eight allocators at once jump it once; every later ID is above every earlier one', async () => {
    await addTag(db.knex, { tag: 'order', step: 100, failoverGap: GAP });
    const before = createSegmentAllocator({ knex: db.knex, tag: 'order', minStep: 100, maxStep: 100 });
    const issued = await before.nextBatch(450);
    // What the old primary leased (`before` holds the part it has not served yet, preloaded included):
    // read once its preload has landed (a lease still in flight would move the row after the read).
    const maxIdNow = async () => (await listTags(db.knex)).find((r) => r.tag === 'order')!.maxId;
    const leased = await waitFor(
      async () => {
        const a = await maxIdNow();
        await sleep(150);
        return (await maxIdNow()) === a ? a : undefined;
      },
      { timeoutMs: 10_000, what: "the old primary's preload to land" },
    );
    // The standby's copy: 300 IDs behind, its last lease made on the old primary.
    await db.knex.raw(`UPDATE ${segments()} SET max_id = max_id - 300, instance = ? WHERE tag = ?`, ['old-primary', 'order']);
    const events: SegmentEvent[] = [];
    const all = [
      before,
      ...Array.from({ length: flacount(flavor) }, () =>
        createSegmentAllocator({ knex: db.knex, tag: 'order', minStep: 100, maxStep: 100, onEvent: (e) => events.push(e) }),
      ),
    ];
    before.onEvent((e) => events.push(e));
    const after = (await Promise.all(all.map((a) => a.nextBatch(250)))).flat();
    await Promise.all(all.map((a) => a.close()));
    // Below the old primary's end: only what `before` held in memory; above it: past the gap.
    expect(after.filter((id) => id <= leased).length).toBeLessThanOrEqual(Number(leased) - issued.length);
    expect(after.filter((id) => id > leased).every((id) => id > leased - 300n + GAP)).toBe(true);
    expect(new Set([...issued, ...after].map(String)).size).toBe(issued.length + after.length);
    const row = (await listTags(db.knex)).find((r) => r.tag === 'order')!;
    expect(row.jumps).toBe(1);
    expect(row.jumpedAt).toBeInstanceOf(Date);
    expect(row.instance).not.toBe('old-primary');
    const jumps = events.filter((e) => e.type === 'failover-jump');
    expect(jumps).toHaveLength(1);
    const jump = jumps[0] as Extract<SegmentEvent, { type: 'failover-jump' }>;
    expect((jump.start - 1n) % GAP).toBe(0n);
    expect(jump.start - 1n).toBeGreaterThanOrEqual(jump.rowWas + GAP);
    expect(all.reduce((n, a) => n + a.stats().failoverJumps, 0)).toBe(1);
  });

  it('a jump that would pass 2^63 − 1 is EXHAUSTED, never a wrap', async () => {
    await addTag(db.knex, { tag: 'top', start: (MAX_INT64 - 5000n).toString(), step: 10, failoverGap: 1000 });
    await db.knex.raw(`UPDATE ${segments()} SET instance = ? WHERE tag = ?`, ['old-primary', 'top']);
    const a = createSegmentAllocator({ knex: db.knex, tag: 'top', minStep: 10, maxStep: 10 });
    // The next-but-one multiple of the gap above the row, then the step.
    expect(await a.next()).toBe(((MAX_INT64 - 5001n) / 1000n + 2n) * 1000n + 1n);
    await db.knex.raw(`UPDATE ${segments()} SET instance = ? WHERE tag = ?`, ['old-primary', 'top']);
    await db.knex.raw(`UPDATE ${segments()} SET max_id = ? WHERE tag = ?`, [(MAX_INT64 - 1500n).toString(), 'top']);
    const b = createSegmentAllocator({ knex: db.knex, tag: 'top', minStep: 10, maxStep: 10 });
    await expect(b.next()).rejects.toMatchObject({ code: 'EXHAUSTED' });
    await Promise.all([a.close(), b.close()]);
  });

  it('failover gaps out of range are BAD_ARGUMENT', async () => {
    for (const bad of [0, -1, '1e3', '10000000000000001', 1.5]) {
      await expect(addTag(db.knex, { tag: 'bad', failoverGap: bad })).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
      await expect(setFailoverGap(db.knex, 'order', bad)).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
    }
    expect((await setFailoverGap(db.knex, 'order', '2000000')).failoverGap).toBe(2_000_000n);
    await expect(setFailoverGap(db.knex, 'nope', 5)).rejects.toMatchObject({ code: 'UNKNOWN_TAG' });
  });

  it('tickets: a counter behind what it issued, last drawn elsewhere: two allocators fence it once, the residue kept', async () => {
    const options = { servers: [{ knex: db.knex, offset: 2 }], increment: 3 };
    const first = createTicketAllocator(options);
    const issued = await Promise.all(Array.from({ length: 40 }, () => first.next()));
    const highest = issued.reduce((m, x) => (x > m ? x : m));
    const schemes = ownTable(flavor, 'idlease_ticket_schemes');
    const counter = ownTable(flavor, 'idlease_tickets_default');
    // The standby's copy: the counter 10 tickets back, last drawn on the old primary.
    if (flavor === 'mysql') {
      await db.knex.raw(`DELETE FROM ${counter}`);
      await db.knex.raw(`ALTER TABLE ${counter} AUTO_INCREMENT = ${highest - 30n}`);
    } else {
      await db.knex.raw(`SELECT setval('${counter.replaceAll('"', '')}', ?)`, [(highest - 30n).toString()]);
    }
    await db.knex.raw(`UPDATE ${schemes} SET instance = ?`, ['old-primary']);
    const second = createTicketAllocator(options);
    const after = await Promise.all(Array.from({ length: 60 }, (_, i) => (i % 2 ? first : second).next()));
    const low = after.reduce((m, x) => (x < m ? x : m));
    expect(low).toBeGreaterThan(highest - 30n + GAP);
    expect(after.every((id) => id % 3n === 2n)).toBe(true);
    expect(new Set([...issued, ...after].map(String)).size).toBe(100);
    const jumps = [first, second].flatMap((a) => a.stats().servers.map((s) => s.failoverJumps));
    expect(jumps.reduce((a, b) => a + b, 0)).toBe(1);
    const row = (await db.knex.raw(`SELECT jumps FROM ${schemes}`)) as unknown;
    expect(JSON.stringify(row)).toMatch(/"jumps":1/);
    await Promise.all([first.close(), second.close()]);
  });
});

/** PGlite is one connection: fewer allocators, the same race through its queue. */
function flacount(flavor: string): number {
  return flavor === 'pglite' ? 3 : 7;
}
