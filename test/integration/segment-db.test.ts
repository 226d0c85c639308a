import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Knex } from 'knex';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ALL_FLAVORS, createTestDb, type TestDb } from '../helpers/db.js';
import { runCli } from '../helpers/cli.js';
import { migrate } from '../../src/migrations/migrate.js';
import { addTag, createSegmentAllocator, listTags, setStep, type SegmentAllocator } from '../../src/segment/index.js';
import { MAX_INT64 } from '../../src/ids.js';

function expectUniqueAndIncreasing(perAllocator: bigint[][]): void {
  const all = perAllocator.flat();
  expect(new Set(all).size).toBe(all.length);
  for (const ids of perAllocator) for (let i = 1; i < ids.length; i++) expect(ids[i]! > ids[i - 1]!).toBe(true);
}

describe.each(ALL_FLAVORS)('segment allocator on %s', (flavor) => {
  let db: TestDb;
  /** Separate pools stand in for separate processes (PGlite has one connection only). */
  const handle = (): Knex => (flavor === 'pglite' ? db.knex : db.another());
  beforeAll(async () => {
    db = await createTestDb(flavor, 'segment');
    await migrate(db.knex);
  });
  afterAll(async () => {
    await db.drop();
  });

  it('hands out IDs above 2^53 exactly', async () => {
    const start = 2n ** 53n - 3n;
    await addTag(db.knex, { tag: 'big', start, step: 4 });
    const a = createSegmentAllocator({ knex: db.knex, tag: 'big', minStep: 4, maxStep: 4 });
    const ids = await a.nextBatch(10);
    expect(ids).toEqual(Array.from({ length: 10 }, (_, i) => start + BigInt(i)));
    await a.close();
  });

  it('takes the last IDs below 2^63−1 and then raises EXHAUSTED without wrapping', async () => {
    await addTag(db.knex, { tag: 'edge', start: MAX_INT64 - 6n, step: 5 });
    const a = createSegmentAllocator({ knex: db.knex, tag: 'edge', minStep: 5, maxStep: 5 });
    const ids: bigint[] = [];
    let err: unknown;
    try {
      for (;;) ids.push(await a.next());
    } catch (e) {
      err = e;
    }
    expect(ids).toEqual(Array.from({ length: 7 }, (_, i) => MAX_INT64 - 6n + BigInt(i)));
    expect(err).toMatchObject({ code: 'EXHAUSTED' });
    await a.close();
    const row = (await listTags(db.knex)).find((r) => r.tag === 'edge')!;
    expect(row.maxId).toBe(MAX_INT64);
  });

  it('UNKNOWN_TAG says how to add the tag; create: { start, step } adds it; a missing table is NOT_MIGRATED', async () => {
    const a = createSegmentAllocator({ knex: db.knex, tag: 'nope' });
    await expect(a.next()).rejects.toMatchObject({ code: 'UNKNOWN_TAG', message: expect.stringContaining('idlease tag add nope') });
    await a.close();
    const b = createSegmentAllocator({ knex: db.knex, tag: 'made', create: { start: 1000n, step: 7 } });
    expect(await b.nextBatch(3)).toEqual([1000n, 1001n, 1002n]);
    await b.close();
    const c = createSegmentAllocator({ knex: db.knex, tag: 'x', table: 'no_such_segments' });
    await expect(c.next()).rejects.toMatchObject({ code: 'NOT_MIGRATED', message: expect.stringContaining('idlease migrate') });
    await c.close();
  });

  it('admin: addTag is idempotent, listTags reads rows, setStep validates and names missing tags', async () => {
    const first = await addTag(db.knex, { tag: 'adm', step: 250, description: 'orders' });
    expect(first).toMatchObject({ created: true, row: { tag: 'adm', maxId: 0n, step: 250, description: 'orders' } });
    const again = await addTag(db.knex, { tag: 'adm', step: 9, start: 77 });
    expect(again).toMatchObject({ created: false, row: { maxId: 0n, step: 250 } });
    expect((await setStep(db.knex, 'adm', 300)).step).toBe(300);
    expect((await setStep(db.knex, 'adm', 300)).step).toBe(300); // same value is fine (MySQL reports 0 changed rows)
    await expect(setStep(db.knex, 'ghost', 5)).rejects.toMatchObject({ code: 'UNKNOWN_TAG' });
    await expect(setStep(db.knex, 'adm', 0)).rejects.toMatchObject({ code: 'BAD_CONFIG' });
    await expect(addTag(db.knex, { tag: 'bad', start: 0 })).rejects.toMatchObject({ code: 'BAD_CONFIG' });
    expect((await listTags(db.knex)).map((r) => r.tag)).toContain('adm');
  });

  it('rolling deploy: half the allocators on step 1000, half on 20000, plus set-step mid-run — no overlap', async () => {
    await addTag(db.knex, { tag: 'roll', step: 1000 });
    const allocs: SegmentAllocator[] = [];
    for (let i = 0; i < 6; i++) {
      const step = i % 2 === 0 ? 1000 : 20000;
      allocs.push(createSegmentAllocator({ knex: handle(), tag: 'roll', minStep: step, maxStep: step }));
    }
    // An adaptive one that follows the row's step (targetLeaseMs 1: the rate never outweighs the row).
    allocs.push(createSegmentAllocator({ knex: handle(), tag: 'roll', targetLeaseMs: 1 }));
    const per: bigint[][] = allocs.map(() => []);
    await Promise.all(
      allocs.map(async (a, i) => {
        for (let round = 0; round < 30; round++) {
          if (i === 6 && round === 10) await setStep(db.knex, 'roll', 7);
          if (i === 6 && round === 20) await setStep(db.knex, 'roll', 3000);
          const batch = await a.nextBatch(round % 3 === 0 ? 1500 : 50);
          per[i]!.push(...batch);
          per[i]!.push(await a.next());
        }
      }),
    );
    expect(allocs[6]!.stats().rowStep).toBe(3000);
    expect(allocs[1]!.stats().currentStep).toBe(20000);
    await Promise.all(allocs.map((a) => a.close()));
    expectUniqueAndIncreasing(per);
  });

  it('set-step is used from the next lease by a running allocator', async () => {
    await addTag(db.knex, { tag: 'knob', step: 10 });
    const a = createSegmentAllocator({ knex: db.knex, tag: 'knob', targetLeaseMs: 1, preloadMs: 0 });
    await a.nextBatch(10);
    expect(a.stats().currentStep).toBe(10);
    await setStep(db.knex, 'knob', 500);
    const ids = await a.nextBatch(30); // uses up the preloaded 10, then leases with the new step
    expect(new Set(ids).size).toBe(30);
    expect(a.stats().currentStep).toBe(500);
    await a.close();
  });

  it('close() gives the tail back so a restart wastes nothing; an earlier allocator never gives back past a later lease', async () => {
    await addTag(db.knex, { tag: 'gb', step: 100 });
    const a = createSegmentAllocator({ knex: db.knex, tag: 'gb', minStep: 100, maxStep: 100 });
    expect(await a.nextBatch(5)).toEqual([1n, 2n, 3n, 4n, 5n]);
    await a.close();
    expect(a.stats().givenBack).toBeGreaterThan(0n);
    const b = createSegmentAllocator({ knex: handle(), tag: 'gb', minStep: 100, maxStep: 100, preloadMs: 0 });
    expect(await b.next()).toBe(6n);
    const c = createSegmentAllocator({ knex: handle(), tag: 'gb', minStep: 100, maxStep: 100, preloadMs: 0 });
    const cFirst = await c.next();
    expect(cFirst).toBeGreaterThan(105n);
    await b.close(); // b's end is no longer max_id: its tail is abandoned
    const mid = (await listTags(db.knex)).find((r) => r.tag === 'gb')!.maxId;
    expect(mid).toBeGreaterThanOrEqual(cFirst + 99n);
    const cMore = await c.nextBatch(3);
    await c.close(); // c was last: its tail comes back
    const d = createSegmentAllocator({ knex: db.knex, tag: 'gb' });
    expect(await d.next()).toBe(cMore[2]! + 1n);
    await d.close();
  });

  it('many tags share one knex pool; concurrent allocators per tag never collide', async () => {
    const tags = Array.from({ length: 12 }, (_, i) => `multi_${i}`);
    for (const tag of tags) await addTag(db.knex, { tag, step: 3 });
    const allocs = tags.flatMap((tag) => [0, 1].map(() => createSegmentAllocator({ knex: db.knex, tag, minStep: 1, maxStep: 5 })));
    const per = await Promise.all(
      allocs.map(async (a) => {
        const out: bigint[] = [];
        for (let i = 0; i < 40; i++) out.push(await a.next());
        return out;
      }),
    );
    await Promise.all(allocs.map((a) => a.close()));
    for (let t = 0; t < tags.length; t++) expectUniqueAndIncreasing([per[2 * t]!, per[2 * t + 1]!]);
  });
});

describe('idlease next / tag (CLI, real processes)', () => {
  it('on a fresh checkout the embedded default (PGlite) creates the database, migrates, adds the tag and continues on the next run', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'idlease-cli-'));
    try {
      const env = { IDLEASE_URL: undefined };
      const one = await runCli(['next', 'order', '-n', '5'], { cwd: dir, env });
      expect(one.stderr).toMatch(/^idlease: created a new embedded database in \.\/\.idlease\/pglite\/ [^\n]+\n$/);
      expect(one.code).toBe(0);
      expect(one.stdout.trim().split('\n')).toEqual(['1', '2', '3', '4', '5']);
      const two = await runCli(['--json', 'next', 'order', '-n', '3'], { cwd: dir, env });
      expect(JSON.parse(two.stdout)).toEqual({ tag: 'order', ids: ['6', '7', '8'] });
      const list = await runCli(['--json', 'tag', 'list'], { cwd: dir, env });
      expect(JSON.parse(list.stdout)).toMatchObject([{ tag: 'order', maxId: '8', step: 1000 }]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it.each(['mysql', 'postgres'] as const)(
    'on %s: UNKNOWN_TAG until `tag add`, then next/set-step work; bad input exits 2',
    async (flavor) => {
      const db = await createTestDb(flavor, 'segcli');
      try {
        await migrate(db.knex);
        const url = ['--url', db.url];
        const missing = await runCli([...url, 'next', 'order']);
        expect(missing.code).toBe(2);
        expect(missing.stderr).toContain(`idlease --url ${db.url} tag add order`);
        expect((await runCli([...url, 'tag', 'add', 'order', '--start', '9007199254740993', '--step', '50'])).code).toBe(0);
        const got = await runCli([...url, 'next', 'order', '-n', '2']);
        expect(got.stdout.trim().split('\n')).toEqual(['9007199254740993', '9007199254740994']);
        const step = await runCli([...url, '--json', 'tag', 'set-step', 'order', '70']);
        expect(JSON.parse(step.stdout)).toMatchObject({ tag: 'order', step: 70 });
        expect((await runCli([...url, 'tag', 'set-step', 'order', '0'])).code).toBe(2);
      } finally {
        await db.drop();
      }
    },
  );
});
