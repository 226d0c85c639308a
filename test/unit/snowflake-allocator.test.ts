import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { createSnowflakeAllocator } from '../../src/snowflake/index.js';
import type { SnowflakeAllocatorOptions } from '../../src/snowflake/options.js';
import { decodeId, resolveLayout, type IdLayout } from '../../src/layout/index.js';
import { isIdleaseError } from '../../src/errors.js';
import { createFakeClock, type FakeClock } from './fake-clock.js';
import { createMemoryWorkerIdStore } from './worker-memory-store.js';

const START = Date.UTC(2026, 0, 1);
const TTL = 1_000;

function setup() {
  const clock = createFakeClock(START);
  // The database's clock: one judge, moving with real time, whatever any host's wall clock says.
  const store = createMemoryWorkerIdStore(() => clock.mono);
  const make = (o: Partial<SnowflakeAllocatorOptions> = {}, c: FakeClock = clock) =>
    createSnowflakeAllocator({ store, clock: c, leaseTtlMs: TTL, maxLeadMs: 100, waitTimeoutMs: 500, ...o });
  return { clock, store, make };
}

async function codeOf(p: Promise<unknown>): Promise<string | undefined> {
  try {
    await p;
  } catch (err) {
    return isIdleaseError(err) ? err.code : `not an IdleaseError: ${String(err)}`;
  }
  return undefined;
}

describe('createSnowflakeAllocator options', () => {
  it('refuses bad options with BAD_CONFIG', () => {
    const store = createMemoryWorkerIdStore(() => 0);
    for (const bad of [
      {},
      { store, knex: {} as never },
      { store, leaseTtlMs: 5 },
      { store, maxLeadMs: -1 },
      { store, group: '' },
      { store, layout: 'nope' as never },
      { store, wat: 1 } as never,
    ]) {
      expect(() => createSnowflakeAllocator(bad as SnowflakeAllocatorOptions)).toThrow(expect.objectContaining({ code: 'BAD_CONFIG' }));
    }
  });
});

describe('snowflake allocator on an injected clock', () => {
  it('issues strictly increasing exact bigints past 2^53 with its worker id and the wall time', async () => {
    const { clock, make } = setup();
    const a = make({ layout: 'twitter' });
    const first = await clock.settle(a.next());
    expect(a.workerId).toBe(0);
    const batch = await clock.settle(a.nextBatch(10_000));
    const all = [first, ...batch];
    for (let i = 1; i < all.length; i++) expect(all[i]! > all[i - 1]!).toBe(true);
    expect(first > 2n ** 53n).toBe(true);
    const d = decodeId(first, a.layout);
    expect(d.shard).toBe(0);
    expect(Math.abs(d.unixMs - clock.wall)).toBeLessThanOrEqual(100);
    await clock.settle(a.close());
  });

  it('fences itself: past the lease without a renewal it issues nothing, DB_UNAVAILABLE after the bound, then recovers by itself', async () => {
    const { clock, store, make } = setup();
    const a = make();
    await clock.settle(a.next());
    store.down = true;
    await clock.advance(TTL);
    // The fence ran out (ttl minus margin since the last renewal was sent): no ID, however often asked.
    expect(a.stats().fenced).toBe(false);
    expect(await codeOf(clock.settle(a.next()))).toBe('DB_UNAVAILABLE');
    store.down = false;
    const id = await clock.settle(a.next());
    expect(typeof id).toBe('bigint');
    expect(a.stats().leaseErrors).toBeGreaterThan(0);
    await clock.settle(a.close());
  });

  it('a paused holder whose id was taken issues nothing under the lost lease, and the new holder starts above it', async () => {
    const { clock, store, make } = setup();
    const layout = resolveLayout({ timeBits: 41, shardBits: 1, sequenceBits: 12 }, START);
    const a = make({ layout });
    const b = make({ layout });
    const fromA = await clock.settle(a.nextBatch(100));
    await clock.settle(b.next());
    expect([a.workerId, b.workerId]).toEqual([0, 1]);
    const aBound = store.rows.get('default\u00000')!.maxTimeMs;
    // A freezes (SIGSTOP) past its lease; C takes its id meanwhile, B keeps its own.
    clock.jump(3 * TTL);
    const c = make({ layout });
    const fromC = await clock.settle(c.nextBatch(100));
    expect(c.workerId).toBe(0);
    for (const id of fromC) expect(decodeId(id, layout).unixMs).toBeGreaterThan(Number(aBound) - layout.timeUnitMs);
    // A resumes: its next ID is not under id 0 (it must renew first, learns the loss, waits for a free id).
    const later = a.next();
    const code = await codeOf(clock.settle(later));
    expect(code).toBe('NO_WORKER_ID');
    expect(a.workerId).toBeUndefined();
    await clock.settle(c.close());
    const resumed = await clock.settle(a.next());
    expect(resumed > fromA.at(-1)!).toBe(true);
    const all = [...fromA, ...fromC, resumed];
    expect(new Set(all).size).toBe(all.length);
    await clock.settle(Promise.all([a.close(), b.close()]));
  });

  it('NO_WORKER_ID names the group and how many holders are alive', async () => {
    const { clock, make } = setup();
    const layout = resolveLayout({ timeBits: 41, shardBits: 1, sequenceBits: 12 }, START);
    const a = make({ layout, group: 'orders' });
    const b = make({ layout, group: 'orders' });
    await clock.settle(Promise.all([a.next(), b.next()]));
    const c = make({ layout, group: 'orders' });
    const err = await clock.settle(c.next()).catch((e: unknown) => e);
    expect(isIdleaseError(err, 'NO_WORKER_ID')).toBe(true);
    expect((err as Error).message).toMatch(/group "orders".*2 holders are alive/);
    await clock.settle(Promise.all([a.close(), b.close(), c.close()]));
  });

  it('a new holder of an id starts above the old holder even when its own clock is far behind', async () => {
    const { clock, make } = setup();
    const ahead = createFakeClock(START + 60_000);
    const a = make({}, ahead);
    // A's host runs a minute fast; its clock is driven alongside the shared one.
    const p = a.nextBatch(50);
    for (let i = 0; i < 50 && !(await Promise.race([p.then(() => true), Promise.resolve(false)])); i++)
      await Promise.all([ahead.advance(1), clock.advance(1)]);
    const fromA = await p;
    await Promise.all([ahead.settle(a.close()), clock.advance(1)]);
    const b = make({ maxLeadMs: 120_000, waitTimeoutMs: 5_000 });
    const fromB = await clock.settle(b.nextBatch(50));
    expect(b.workerId).toBe(0);
    expect(fromB[0]! > fromA.at(-1)!).toBe(true);
    await clock.settle(b.close());
  });

  it('a clock stepped back borrows up to maxLeadMs, then waits, then CLOCK_BACKWARDS; it recovers when the clock catches up', async () => {
    const { clock, make } = setup();
    const a = make();
    const before = await clock.settle(a.next());
    clock.wall -= 50;
    const borrowed = await clock.settle(a.next());
    expect(borrowed > before).toBe(true);
    clock.wall -= 10_000;
    expect(await codeOf(clock.settle(a.next()))).toBe('CLOCK_BACKWARDS');
    clock.wall += 10_100;
    const after = await clock.settle(a.next());
    expect(after > borrowed).toBe(true);
    await clock.settle(a.close());
  });

  it('more than 2^sequenceBits IDs in one unit borrow the next unit, never wrap, and stop at maxLeadMs', async () => {
    const { clock, make } = setup();
    const layout = resolveLayout({ timeBits: 41, shardBits: 10, sequenceBits: 2, timeUnitMs: 10 }, START);
    const a = make({ layout, maxLeadMs: 50 });
    await clock.settle(a.next());
    const frozen = await a.nextBatch(20);
    for (let i = 1; i < frozen.length; i++) expect(frozen[i]! > frozen[i - 1]!).toBe(true);
    // 4 per 10 ms unit, at most 50 ms ahead: about 6 units' worth with the clock standing still.
    // Time passes for the lease (monotonic) while the wall clock stands still.
    let settled = false;
    const held = codeOf(a.nextBatch(100)).finally(() => (settled = true));
    for (let i = 0; i < 2_000 && !settled; i++) {
      await clock.advance(1);
      clock.wall -= 1;
    }
    expect(await held).toBe('CLOCK_BACKWARDS');
    const last = decodeId(frozen.at(-1)!, layout);
    expect(last.unixMs - clock.wall).toBeLessThanOrEqual(50);
    await clock.settle(a.close());
  });

  it('EXHAUSTED when the time field is full', async () => {
    const { clock, make } = setup();
    // 12 bits of ms that began 4090 ms ago: 5 ms left.
    const layout: IdLayout = resolveLayout({ timeBits: 12, shardBits: 10, sequenceBits: 12, epoch: START - 4_090 }, null);
    const a = make({ layout });
    await clock.settle(a.next());
    await clock.advance(10);
    expect(await codeOf(clock.settle(a.next()))).toBe('EXHAUSTED');
    await clock.settle(a.close());
  });

  it('property: clock steps, pauses, overflow and takeovers never repeat an ID, each allocator strictly increasing', async () => {
    const op = fc.oneof(
      fc.record({ kind: fc.constant('issue' as const), who: fc.nat(2), n: fc.integer({ min: 1, max: 40 }) }),
      fc.record({ kind: fc.constant('step' as const), who: fc.nat(2), ms: fc.integer({ min: -3_000, max: 3_000 }) }),
      fc.record({ kind: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 800 }) }),
      fc.record({ kind: fc.constant('pause' as const), ms: fc.integer({ min: 0, max: 3 * TTL }) }),
      fc.record({ kind: fc.constant('restart' as const), who: fc.nat(2) }),
    );
    await fc.assert(
      fc.asyncProperty(fc.array(op, { minLength: 1, maxLength: 25 }), async (ops) => {
        const shared = createFakeClock(START);
        const store = createMemoryWorkerIdStore(() => shared.mono);
        // Three hosts, two worker ids (1 worker bit), 4 IDs per ms: takeovers and overflow are common.
        const layout = resolveLayout({ timeBits: 41, shardBits: 1, sequenceBits: 2 }, START);
        const skew = [0, 0, 0];
        const clocks = [0, 1, 2].map((i) => ({
          wallMs: () => shared.wall + skew[i]!,
          monoMs: () => shared.mono,
          sleep: (ms: number) => shared.sleep(ms),
        }));
        const make = (i: number) =>
          createSnowflakeAllocator({ store, clock: clocks[i]!, layout, leaseTtlMs: TTL, maxLeadMs: 100, waitTimeoutMs: 300 });
        const allocs = [make(0), make(1), make(2)];
        const seen = new Set<bigint>();
        const last = [-1n, -1n, -1n];
        const take = (i: number, id: bigint) => {
          expect(seen.has(id)).toBe(false);
          seen.add(id);
          expect(id > last[i]!).toBe(true);
          last[i] = id;
          const d = decodeId(id, layout);
          expect(d.unixMs - (shared.wall + skew[i]!)).toBeLessThanOrEqual(100 + layout.timeUnitMs);
          // The hot path adds to the previous ID instead of encoding: the fields must still be right.
          expect(d.shard).toBe(allocs[i]!.workerId);
        };
        for (const o of ops) {
          if (o.kind === 'issue') {
            const ids = await shared.settle(
              allocs[o.who]!.nextBatch(o.n).catch(() => [] as bigint[]),
              5_000,
            );
            for (const id of ids) take(o.who, id);
          } else if (o.kind === 'step') skew[o.who]! += o.ms;
          else if (o.kind === 'advance') await shared.advance(o.ms);
          else if (o.kind === 'pause') shared.jump(o.ms);
          else {
            await shared.settle(allocs[o.who]!.close(), 5_000);
            allocs[o.who] = make(o.who);
            last[o.who] = -1n; // a new process: only uniqueness carries over
          }
        }
        await shared.settle(Promise.all(allocs.map((a) => a.close())), 5_000);
      }),
      { numRuns: 60 },
    );
  });
});

describe('snowflake close() is bounded', () => {
  const never = () => new Promise<never>(() => undefined);

  it('closes within closeTimeoutMs when the store never answers the claim (real clock)', async () => {
    const store = { ...createMemoryWorkerIdStore(() => 0), claim: never, renew: never, release: never, list: never };
    const a = createSnowflakeAllocator({ store, closeTimeoutMs: 100 });
    const started = performance.now();
    await a.close();
    const took = performance.now() - started;
    expect(took).toBeGreaterThanOrEqual(90);
    expect(took).toBeLessThan(2_000);
    expect(await codeOf(a.next())).toBe('CLOSED');
  });

  it('closes within closeTimeoutMs of fake time when a renewal or the release hangs, and a hook that throws changes nothing', async () => {
    for (const hang of ['renew', 'release'] as const) {
      const { clock, store, make } = setup();
      const a = make({
        closeTimeoutMs: 300,
        onEvent: () => {
          throw new Error('broken hook');
        },
      });
      await clock.settle(a.next());
      store[hang] = never;
      if (hang === 'renew') await clock.advance(TTL / 3 + 1); // the renewal is now in flight for good
      const startedAt = clock.mono;
      await clock.settle(a.close(), 1_000);
      expect(clock.mono - startedAt).toBeLessThanOrEqual(301);
      expect(a.stats().issued).toBe(1);
    }
  });
});

describe('a claim or renewal that never answers (real clock)', () => {
  it('is given up at ttl − margin and asked again: the holder keeps its id and issues again, no waiting on TCP', async () => {
    const store = createMemoryWorkerIdStore(() => performance.now());
    const renew = store.renew.bind(store);
    let hangs = 0;
    // The second renewal (the first after the claim's own) hangs for good, as behind a silent network cut.
    let renewals = 0;
    store.renew = (...args) => (++renewals === 2 ? (hangs++, new Promise<never>(() => undefined)) : renew(...args));
    const errors: string[] = [];
    const a = createSnowflakeAllocator({
      store,
      leaseTtlMs: 300,
      waitTimeoutMs: 1_000,
      onEvent: (e) => e.type === 'lease-error' && errors.push((e.error as Error).message),
    });
    await a.next();
    // Fenced at 270 ms after the last answered renewal, given up at 270 ms after the hung one was sent, renewed at once after.
    await new Promise((r) => setTimeout(r, 700));
    await a.next();
    expect(hangs).toBe(1);
    expect(errors).toEqual(['statement did not answer within 270 ms (leaseTtlMs less the fence margin: a later answer fences nothing)']);
    expect(a.stats()).toMatchObject({ workerId: 0, lost: 0, claims: 1 });
    expect(a.stats().renewals).toBeGreaterThanOrEqual(3);
    await a.close();
  });
});
