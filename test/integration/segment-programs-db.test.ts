/**
 * Issue 11 on real databases: the README's own sample, and random next/nextBatch/close
 * programs (the ones the scheduler property runs in memory) with every call awaited bare.
 * A stalled call would end in DB_UNAVAILABLE after waitTimeoutMs, which the checker refuses.
 */
import fc from 'fast-check';
import type { Knex } from 'knex';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ALL_FLAVORS, createTestDb, type TestDb } from '../helpers/db.js';
import { checkProgram, programArb, startProgram } from '../helpers/segment-programs.js';
import { migrate } from '../../src/migrations/migrate.js';
import { addTag, createSegmentAllocator } from '../../src/segment/index.js';

describe.each(ALL_FLAVORS)('segment next()/nextBatch() programs on %s', (flavor) => {
  let db: TestDb;
  const handles: Knex[] = [];
  /** Separate pools stand in for separate processes (PGlite has one connection only). */
  const handle = (i: number): Knex => (flavor === 'pglite' ? db.knex : (handles[i] ??= db.another()));
  beforeAll(async () => {
    db = await createTestDb(flavor, 'segprog');
    await migrate(db.knex);
  });
  afterAll(async () => {
    await db.drop();
  });

  it('the README sample: next() then nextBatch(n) right away, for steps 7, 50, 100, 1000', async () => {
    for (const [step, n] of [
      [1000, 1000],
      [100, 100],
      [100, 150],
      [100, 99],
      [7, 7],
      [50, 51],
    ] as const) {
      const tag = `readme_${step}_${n}`;
      await addTag(db.knex, { tag, step });
      const orders = createSegmentAllocator({ knex: db.knex, tag });
      const id = await orders.next();
      const ids = await orders.nextBatch(n);
      expect([id, ...ids]).toEqual(Array.from({ length: n + 1 }, (_, i) => BigInt(i + 1)));
      expect(orders.stats()).toMatchObject({ timeouts: 0, served: n + 1 });
      await orders.close();
    }
  });

  it('random programs, awaited bare, sharing one tag across allocators: every call answers, unique, increasing, none lost', async () => {
    const programs = fc.sample(
      programArb({ rowSteps: [7, 50, 100, 1000], maxSteps: [5, 100, 1000, 10_000_000], maxAllocators: 3, maxCallers: 2, maxCalls: 8 }),
      { numRuns: 12, seed: 11 },
    );
    for (const [k, program] of programs.entries()) {
      const tag = `prog_${k}`;
      await addTag(db.knex, { tag, step: program.rowStep });
      const state = startProgram(program, {
        cap: 5_000,
        pause: () => new Promise((r) => setTimeout(r, 1)),
        make: (i, plan, onEvent) => createSegmentAllocator({ knex: handle(i), tag, minStep: plan.minStep, maxStep: plan.maxStep, onEvent }),
      });
      await state.done;
      checkProgram(state);
      await Promise.all(state.allocators.map((a) => a.close()));
    }
  });
});
