import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createSegmentAllocator, type SegmentAllocator, type SegmentEvent } from '../../src/segment/index.js';
import { isIdleaseError } from '../../src/errors.js';
import { MAX_INT64 } from '../../src/ids.js';
import { MemoryStore } from './segment-memory-store.js';
import { createFakeClock } from './fake-clock.js';
import { seededRandom } from '../chaos/schedule.js';

/** Deterministic random numbers from a fast-check seed (the chaos run's generator). */
const rng = seededRandom;

type Op =
  | { k: 'next'; who: number; count: number }
  | { k: 'batch'; who: number; n: number }
  | { k: 'ranges'; who: number; n: number }
  | { k: 'step'; step: number }
  | { k: 'restart'; who: number }
  | { k: 'pause'; ms: number };

const opArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 5, arbitrary: fc.record({ k: fc.constant('next' as const), who: fc.nat(2), count: fc.integer({ min: 1, max: 40 }) }) },
  { weight: 3, arbitrary: fc.record({ k: fc.constant('batch' as const), who: fc.nat(2), n: fc.integer({ min: 1, max: 60 }) }) },
  { weight: 2, arbitrary: fc.record({ k: fc.constant('ranges' as const), who: fc.nat(2), n: fc.integer({ min: 1, max: 60 }) }) },
  { weight: 1, arbitrary: fc.record({ k: fc.constant('step' as const), step: fc.constantFrom(1, 2, 7, 13, 50, 1000) }) },
  { weight: 1, arbitrary: fc.record({ k: fc.constant('restart' as const), who: fc.nat(2) }) },
  { weight: 1, arbitrary: fc.record({ k: fc.constant('pause' as const), ms: fc.integer({ min: 0, max: 3 }) }) },
);

const stepsArb = fc
  .record({ minStep: fc.constantFrom(1, 3, 10), maxStep: fc.constantFrom(1, 5, 20, 100, 5000) })
  .map((s) => ({ minStep: Math.min(s.minStep, s.maxStep), maxStep: s.maxStep }));

describe('segment allocator against an in-memory store (property)', () => {
  it('never hands out an ID twice, is strictly increasing per allocator, and stays inside leased ranges — with delays, lost answers, step changes and restarts', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 2 ** 31 - 1 }),
        fc.array(stepsArb, { minLength: 3, maxLength: 3 }),
        fc.array(fc.array(opArb, { minLength: 1, maxLength: 25 }), { minLength: 3, maxLength: 3 }),
        fc.constantFrom(0, 0.1, 0.3),
        async (seed, steps, scripts, failRate) => {
          const random = rng(seed);
          const store = new MemoryStore({ random, maxDelayMs: 2, failBefore: failRate / 2, failAfter: failRate / 2 });
          store.rows.set('t', { maxId: 0n, step: 10 });
          const handed: bigint[] = [];
          const allocs: SegmentAllocator[] = [];
          const perAllocator: bigint[][] = [];
          const make = (who: number) => {
            const a = createSegmentAllocator({
              store,
              tag: 't',
              ...steps[who]!,
              targetLeaseMs: 5,
              preloadMs: 1,
              waitTimeoutMs: 200,
              retryMinMs: 1,
              retryMaxMs: 4,
              closeTimeoutMs: 200,
            });
            allocs[who] = a;
            perAllocator.push([]);
            return perAllocator.length - 1;
          };
          const slot = [make(0), make(1), make(2)];
          const record = (who: number, ids: bigint[]) => {
            handed.push(...ids);
            perAllocator[slot[who]!]!.push(...ids);
          };
          const expectedFailure = (err: unknown) => {
            // Lost answers and failures may run memory dry: DB_UNAVAILABLE is the only acceptable failure.
            if (!isIdleaseError(err, 'DB_UNAVAILABLE')) throw err;
          };
          // Three concurrent "processes", each running its own script.
          await Promise.all(
            scripts.map(async (script, who) => {
              for (const op of script) {
                const a = allocs[who]!;
                switch (op.k) {
                  case 'next': {
                    // Fire them concurrently: callers that arrive during a switch are served in order.
                    const got = await Promise.allSettled(Array.from({ length: op.count }, () => a.next()));
                    const ids: bigint[] = [];
                    for (const g of got) {
                      if (g.status === 'fulfilled') ids.push(g.value);
                      else expectedFailure(g.reason);
                    }
                    record(who, ids);
                    break;
                  }
                  case 'batch':
                    try {
                      const ids = await a.nextBatch(op.n);
                      expect(ids.length).toBe(op.n);
                      record(who, ids);
                    } catch (err) {
                      expectedFailure(err);
                    }
                    break;
                  case 'ranges':
                    try {
                      const ids: bigint[] = [];
                      for (const r of await a.nextRanges(op.n)) {
                        expect(r.end >= r.start).toBe(true);
                        for (let id = r.start; id <= r.end; id++) ids.push(id);
                      }
                      expect(ids.length).toBe(op.n);
                      record(who, ids);
                    } catch (err) {
                      expectedFailure(err);
                    }
                    break;
                  case 'step':
                    store.rows.get('t')!.step = op.step;
                    break;
                  case 'restart':
                    await a.close();
                    slot[who] = make(who);
                    break;
                  case 'pause':
                    await new Promise((r) => setTimeout(r, op.ms));
                    break;
                }
              }
            }),
          );
          await Promise.all(allocs.map((a) => a.close()));
          expect(new Set(handed).size).toBe(handed.length);
          for (const ids of perAllocator) for (let i = 1; i < ids.length; i++) expect(ids[i]! > ids[i - 1]!).toBe(true);
          const ranges = store.granted;
          for (const id of handed) expect(ranges.some((r) => id >= r.start && id <= r.end)).toBe(true);
          // The row never falls below an ID that was handed out.
          const max = handed.reduce((m, x) => (x > m ? x : m), 0n);
          expect(store.rows.get('t')!.maxId >= max).toBe(true);
        },
      ),
      { numRuns: 40 },
    );
  }, 120_000);

  it('serves concurrent callers in arrival order across a segment switch, none twice', async () => {
    const store = new MemoryStore({ random: rng(7), maxDelayMs: 3, failBefore: 0, failAfter: 0 });
    store.rows.set('t', { maxId: 0n, step: 3 });
    const a = createSegmentAllocator({ store, tag: 't', minStep: 3, maxStep: 3 });
    const ids = await Promise.all(Array.from({ length: 50 }, () => a.next()));
    expect(ids).toEqual(Array.from({ length: 50 }, (_, i) => BigInt(i + 1)));
    const batches = await Promise.all([a.nextBatch(4), a.next(), a.nextBatch(7)]);
    expect(batches).toEqual([[51n, 52n, 53n, 54n], 55n, [56n, 57n, 58n, 59n, 60n, 61n, 62n]]);
    await a.close();
  });

  it('keeps one lease in flight at most, whatever the pressure', async () => {
    const store = new MemoryStore({ random: rng(3), maxDelayMs: 2, failBefore: 0, failAfter: 0 });
    store.rows.set('t', { maxId: 0n, step: 1 });
    let inFlight = 0;
    let peak = 0;
    const lease = store.lease.bind(store);
    store.lease = async (tag, step) => {
      peak = Math.max(peak, ++inFlight);
      try {
        return await lease(tag, step);
      } finally {
        inFlight--;
      }
    };
    const a = createSegmentAllocator({ store, tag: 't', maxStep: 2 });
    const ids = await Promise.all(Array.from({ length: 300 }, () => a.next()));
    expect(new Set(ids).size).toBe(300);
    expect(peak).toBe(1);
    await a.close();
  });

  it('rejects with DB_UNAVAILABLE (cause attached) within waitTimeoutMs when memory is empty and the store is down, then recovers', async () => {
    const store = new MemoryStore();
    store.rows.set('t', { maxId: 0n, step: 5 });
    const a = createSegmentAllocator({ store, tag: 't', minStep: 5, maxStep: 5, waitTimeoutMs: 150, retryMinMs: 5, retryMaxMs: 20 });
    const before = await a.nextBatch(5);
    store.down = true;
    // What is in memory (the preloaded segment) is still served.
    const fromMemory: bigint[] = [];
    let failure: unknown;
    const t0 = Date.now();
    for (;;) {
      try {
        fromMemory.push(await a.next());
      } catch (err) {
        failure = err;
        break;
      }
    }
    expect(Date.now() - t0).toBeLessThan(5_000);
    expect(isIdleaseError(failure, 'DB_UNAVAILABLE')).toBe(true);
    expect(String(((failure as Error).cause as Error).message)).toMatch(/ECONNREFUSED/);
    expect(a.stats().timeouts).toBe(1);
    store.down = false;
    const after = await a.nextBatch(12);
    const all = [...before, ...fromMemory, ...after];
    expect(new Set(all).size).toBe(all.length);
    for (let i = 1; i < all.length; i++) expect(all[i]! > all[i - 1]!).toBe(true);
    await a.close();
  });

  it('hands out up to 2^63−1 exactly and then raises EXHAUSTED, never wrapping', async () => {
    const store = new MemoryStore();
    store.rows.set('t', { maxId: MAX_INT64 - 10n, step: 4 });
    const a = createSegmentAllocator({ store, tag: 't', minStep: 4, maxStep: 4 });
    const ids: bigint[] = [];
    let err: unknown;
    try {
      for (;;) ids.push(await a.next());
    } catch (e) {
      err = e;
    }
    expect(ids).toEqual(Array.from({ length: 10 }, (_, i) => MAX_INT64 - 9n + BigInt(i)));
    expect(isIdleaseError(err, 'EXHAUSTED')).toBe(true);
    await expect(a.nextBatch(1)).rejects.toMatchObject({ code: 'EXHAUSTED' });
    await a.close();
  });

  it('UNKNOWN_TAG says how to add the tag; create: { start, step } adds it', async () => {
    const store = new MemoryStore();
    const a = createSegmentAllocator({ store, tag: 'order' });
    await expect(a.next()).rejects.toMatchObject({ code: 'UNKNOWN_TAG', message: expect.stringContaining('idlease tag add order') });
    await a.close();
    const b = createSegmentAllocator({ store, tag: 'order', create: { start: 2n ** 60n, step: 50 } });
    expect(await b.next()).toBe(2n ** 60n);
    expect(store.rows.get('order')!.step).toBe(50);
    await b.close();
  });

  it('rejects bad nextBatch(n) with BAD_ARGUMENT and calls after close() with CLOSED', async () => {
    const store = new MemoryStore();
    store.rows.set('t', { maxId: 0n, step: 10 });
    const a = createSegmentAllocator({ store, tag: 't', maxBatch: 100 });
    for (const n of [0, -1, 1.5, NaN, 101, Infinity]) await expect(a.nextBatch(n)).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
    expect(await a.next()).toBe(1n);
    await a.close();
    await expect(a.next()).rejects.toMatchObject({ code: 'CLOSED' });
    await expect(a.nextBatch(2)).rejects.toMatchObject({ code: 'CLOSED' });
  });

  it('validates options with BAD_CONFIG', () => {
    const store = new MemoryStore();
    for (const bad of [
      { tag: 7 },
      { tag: 't', minStep: 0 },
      { tag: 't', minStep: 10, maxStep: 5 },
      { tag: 't', maxStep: 2 ** 31 },
      { tag: 't', waitTimeoutMs: 0 },
      { tag: 't', bogus: 1 },
      { tag: 't', create: { start: 0 } },
      { tag: 't', table: 'Bad-Name' },
      { tag: 't', clock: { wallMs: () => 0 } },
    ]) {
      expect(() => createSegmentAllocator({ store, ...(bad as { tag: string }) }), JSON.stringify(bad)).toThrow(
        expect.objectContaining({ code: 'BAD_CONFIG' }),
      );
    }
    expect(() => createSegmentAllocator({ tag: 't' })).toThrow(expect.objectContaining({ code: 'BAD_CONFIG' }));
    // A string that is no tag is BAD_ARGUMENT, whatever is wrong with it (its length included).
    for (const tag of ['', 'x'.repeat(129), 'or\u0000der'])
      expect(() => createSegmentAllocator({ store, tag }), JSON.stringify(tag)).toThrow(expect.objectContaining({ code: 'BAD_ARGUMENT' }));
  });

  it('close() gives the unused tail back so a restart continues without a gap, but never past a later lease', async () => {
    const store = new MemoryStore();
    store.rows.set('t', { maxId: 0n, step: 100 });
    const a = createSegmentAllocator({ store, tag: 't', minStep: 100, maxStep: 100 });
    expect(await a.nextBatch(3)).toEqual([1n, 2n, 3n]);
    await a.close();
    expect(store.rows.get('t')!.maxId).toBe(3n);
    expect(a.stats().givenBack).toBeGreaterThan(0n);
    const b = createSegmentAllocator({ store, tag: 't', minStep: 100, maxStep: 100 });
    const c = createSegmentAllocator({ store, tag: 't', minStep: 100, maxStep: 100 });
    expect(await b.next()).toBe(4n);
    await new Promise((r) => setTimeout(r, 5)); // let b's preload settle
    expect(await c.next()).toBeGreaterThan(103n); // c leased after b
    const events: SegmentEvent[] = [];
    await b.close();
    expect(store.rows.get('t')!.maxId).toBeGreaterThan(103n); // b's CAS failed: c leased after it
    const cIds = await c.nextBatch(5);
    await c.close();
    const d = createSegmentAllocator({ store, tag: 't', onEvent: (e) => events.push(e) });
    const next = await d.next();
    expect(next).toBe(cIds[4]! + 1n); // c was last: its tail came back
    await d.close();
    expect(events.some((e) => e.type === 'give-back' && e.ok)).toBe(true);
  });

  it('the lease loop runs on the injected clock: its backoff waits for clock time, stats() reads it', async () => {
    const store = new MemoryStore();
    store.rows.set('t', { maxId: 0n, step: 10 });
    store.down = true;
    const clock = createFakeClock(1_700_000_000_000);
    const errors: SegmentEvent[] = [];
    // A minute between retries: only the fake clock can get through it within the test.
    const a = createSegmentAllocator({
      store,
      tag: 't',
      clock,
      retryMinMs: 60_000,
      retryMaxMs: 60_000,
      waitTimeoutMs: 30_000,
      onEvent: (e) => {
        if (e.type === 'lease-error') errors.push(e);
      },
    });
    const first = a.next();
    await new Promise((r) => setTimeout(r, 50));
    expect(errors).toHaveLength(1);
    store.down = false;
    await new Promise((r) => setTimeout(r, 50));
    expect(store.leaseCalls, 'the retry waits for clock time, not real time').toBe(0);
    expect(await clock.settle(first, 80_000, 1_000)).toBe(1n);
    expect(errors).toHaveLength(1);
    expect(a.stats().lastLeaseAt).toBeGreaterThanOrEqual(1_700_000_000_000 + 45_000);
    await a.close();
  });
});
