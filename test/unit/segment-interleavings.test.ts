/**
 * Issue 11: whatever the promise interleaving, every call answers. fast-check's scheduler
 * releases the store's answers and the callers' pauses in every order it picks, while
 * callers otherwise await bare (0–3 extra microtask ticks), as users write them.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createSegmentAllocator, type SegmentLeaseResult, type SegmentStore } from '../../src/segment/index.js';
import { MAX_INT64 } from '../../src/ids.js';
import { checkProgram, programArb, startProgram } from '../helpers/segment-programs.js';

/** One row per tag, each statement applied when the scheduler releases it (as a database would). */
function scheduledStore(s: fc.Scheduler, rowStep: number): SegmentStore {
  const row = { maxId: 0n, step: rowStep };
  return {
    read: s.scheduleFunction(async () => ({ ...row })),
    lease: s.scheduleFunction(async (_tag: string, step: number): Promise<SegmentLeaseResult> => {
      if (row.maxId > MAX_INT64 - BigInt(step)) return { kind: 'full', maxId: row.maxId };
      row.maxId += BigInt(step);
      return { kind: 'leased', end: row.maxId };
    }),
    giveBack: s.scheduleFunction(async (_tag: string, expectedEnd: bigint, newMax: bigint) => {
      if (row.maxId !== expectedEnd) return false;
      row.maxId = newMax;
      return true;
    }),
    create: s.scheduleFunction(async () => false),
  };
}

/** Let unscheduled continuations (bare awaits) run until nothing is left for the scheduler. */
async function settle(s: fc.Scheduler): Promise<void> {
  for (let i = 0; i < 50; i++) {
    await s.waitIdle();
    await new Promise((r) => setImmediate(r));
    if (s.count() === 0) return;
  }
}

describe('segment allocator under every interleaving (fast-check scheduler, in-memory store)', () => {
  it('answers every next()/nextBatch()/close() with unique, increasing IDs and loses none', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.scheduler(),
        programArb({ rowSteps: [1, 2, 7, 10, 100], maxSteps: [1, 5, 20, 10_000_000], maxAllocators: 2, maxCallers: 3, maxCalls: 6 }),
        async (s, program) => {
          const store = scheduledStore(s, program.rowStep);
          const state = startProgram(program, {
            cap: 500,
            pause: () => s.schedule(Promise.resolve(), 'caller pause'),
            // A long wait bound: a stalled call stays pending and the checker names it.
            make: (_i, plan, onEvent) =>
              createSegmentAllocator({
                store,
                tag: 't',
                minStep: plan.minStep,
                maxStep: plan.maxStep,
                waitTimeoutMs: 600_000,
                closeTimeoutMs: 600_000,
                onEvent,
              }),
          });
          await settle(s);
          let verdict: unknown;
          try {
            checkProgram(state);
          } catch (err) {
            verdict = err;
          }
          // close() waits for a lease in flight, which only the scheduler can release.
          const closed = Promise.all(state.allocators.map((a) => a.close()));
          await settle(s);
          await closed;
          await state.done;
          if (verdict !== undefined) throw verdict;
        },
      ),
      { numRuns: 300 },
    );
  }, 120_000);

  it('the README sample: next() then nextBatch(step) on a fresh allocator, awaited bare', async () => {
    for (const [step, n] of [
      [1000, 1000],
      [100, 100],
      [100, 150],
      [7, 7],
      [50, 51],
      [100, 99],
    ] as const) {
      const rows = { maxId: 0n };
      const store: SegmentStore = {
        read: async () => ({ maxId: rows.maxId, step }),
        lease: async (_t, k) => ({ kind: 'leased', end: (rows.maxId += BigInt(k)) }),
        giveBack: async () => false,
        create: async () => false,
      };
      const orders = createSegmentAllocator({ store, tag: 'order', waitTimeoutMs: 1_000 });
      const id = await orders.next();
      const ids = await orders.nextBatch(n);
      expect([id, ...ids]).toEqual(Array.from({ length: n + 1 }, (_, i) => BigInt(i + 1)));
      await orders.close();
    }
  });
});

describe('segment allocator: waits that end without IDs lose none', () => {
  /** A store whose lease answers only when told to. */
  function gatedStore(step: number) {
    const row = { maxId: 0n };
    let open = true;
    const gate: Array<() => void> = [];
    const store: SegmentStore = {
      read: async () => ({ maxId: row.maxId, step }),
      lease: async (_t, k) => {
        if (!open) await new Promise<void>((r) => gate.push(r));
        return { kind: 'leased', end: (row.maxId += BigInt(k)) };
      },
      giveBack: async (_t, expected, newMax) => (row.maxId === expected ? ((row.maxId = newMax), true) : false),
      create: async () => false,
    };
    return {
      store,
      row,
      hold: () => {
        open = false;
      },
      release: () => {
        open = true;
        gate.splice(0).forEach((r) => r());
      },
    };
  }

  it('a batch that times out hands its IDs back: the next caller gets them, and the error says the lease has not answered', async () => {
    const g = gatedStore(10);
    const a = createSegmentAllocator({ store: g.store, tag: 't', minStep: 10, maxStep: 10, waitTimeoutMs: 50 });
    expect(await a.nextBatch(6)).toEqual([1n, 2n, 3n, 4n, 5n, 6n]); // half used: the preload starts
    await new Promise((r) => setTimeout(r, 5)); // and lands: 11..20 is the spare
    g.hold();
    const err = await a.nextBatch(25).catch((e: unknown) => e); // takes 7..20, waits for 11 more
    expect(err).toMatchObject({
      code: 'DB_UNAVAILABLE',
      message: expect.stringMatching(/has not answered \(no database error seen yet\)/),
    });
    g.release();
    expect(await a.nextBatch(3)).toEqual([11n, 12n, 13n]); // 11..20 came back; 7..10 were in the older segment
    expect(a.stats().timeouts).toBe(1);
    await a.close();
  });

  it('close() racing a pending batch rejects it with CLOSED and gives its IDs back to the row', async () => {
    const g = gatedStore(10);
    const a = createSegmentAllocator({ store: g.store, tag: 't', minStep: 10, maxStep: 10, closeTimeoutMs: 50 });
    expect(await a.next()).toBe(1n);
    await new Promise((r) => setTimeout(r, 5));
    g.hold();
    const pending = a.nextBatch(30);
    const closing = a.close();
    await expect(pending).rejects.toMatchObject({ code: 'CLOSED' });
    g.release();
    await closing;
    // The lease in flight when close() began was abandoned (its end unknown to close) — so max_id
    // stays above it; nothing below an ID handed out (1) was ever given back.
    expect(g.row.maxId >= 1n).toBe(true);
    const b = createSegmentAllocator({ store: g.store, tag: 't', minStep: 10, maxStep: 10 });
    expect(await b.next()).toBe(g.row.maxId - 9n);
    await b.close();
  });

  it("close() with a pending batch gives the batch's IDs back to the row once the lease in flight lands", async () => {
    const g = gatedStore(10);
    const a = createSegmentAllocator({ store: g.store, tag: 't', minStep: 10, maxStep: 10 });
    expect(await a.next()).toBe(1n);
    g.hold();
    const pending = a.nextBatch(25); // takes 2..10 and waits for a lease held at the gate
    const closing = a.close();
    g.release();
    await expect(pending).rejects.toMatchObject({ code: 'CLOSED' });
    await closing;
    expect(g.row.maxId).toBe(1n); // 2..10 and the late lease 11..20 both went back
    const b = createSegmentAllocator({ store: g.store, tag: 't', minStep: 10, maxStep: 10 });
    expect(await b.next()).toBe(2n);
    await b.close();
  });

  it('DB_UNAVAILABLE names the last database error when the lease keeps failing', async () => {
    const store: SegmentStore = {
      read: async () => {
        throw new Error('connect ECONNREFUSED 127.0.0.1:3306');
      },
      lease: async () => ({ kind: 'unknown' }),
      giveBack: async () => false,
      create: async () => false,
    };
    const a = createSegmentAllocator({ store, tag: 't', waitTimeoutMs: 60, retryMinMs: 5, retryMaxMs: 10 });
    await expect(a.next()).rejects.toMatchObject({
      code: 'DB_UNAVAILABLE',
      message: expect.stringContaining('last database error: connect ECONNREFUSED 127.0.0.1:3306'),
    });
    await a.close();
  });
});
