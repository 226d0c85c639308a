/**
 * Issue 24 item 3: a worker-id claim on a database instance the worker table's marker does not
 * name (an asynchronous failover's promoted standby, which may have lost a live holder's last
 * renewals) waits out leaseTtlMs + maxLeadMs before issuing, then marks the table. On the
 * in-memory store with an injected clock; the real failovers are test/ha/snowflake-failover.test.ts.
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { createSnowflakeAllocator } from '../../src/snowflake/index.js';
import type { SnowflakeEvent } from '../../src/snowflake/types.js';
import { decodeId, resolveLayout } from '../../src/layout/index.js';
import { isIdleaseError } from '../../src/errors.js';
import { createFakeClock } from './fake-clock.js';
import { createMemoryWorkerIdStore } from './worker-memory-store.js';

const START = Date.UTC(2026, 0, 1);
const TTL = 1_000;
const LEAD = 100;
// Two worker ids: a fresh process after the failover must take an id an old one held.
const LAYOUT = resolveLayout({ timeBits: 41, shardBits: 1, sequenceBits: 12 }, START);

function setup() {
  const clock = createFakeClock(START);
  const store = createMemoryWorkerIdStore(() => clock.mono);
  const events: SnowflakeEvent[] = [];
  const make = (waitTimeoutMs = 500) =>
    createSnowflakeAllocator({
      store,
      clock,
      layout: LAYOUT,
      leaseTtlMs: TTL,
      maxLeadMs: LEAD,
      waitTimeoutMs,
      onEvent: (e) => events.push(e),
    });
  return { clock, store, events, make };
}

describe('snowflake claims after a failover (injected clock)', () => {
  it('a claim on a promoted standby that lost renewals waits ttl + maxLeadMs, issues above the old holder, then marks the table; later claims do not wait', async () => {
    const { clock, store, events, make } = setup();
    const a = make();
    const b = make();
    const fromA: bigint[] = [await clock.settle(a.next())];
    await clock.settle(b.next());
    expect([a.workerId, b.workerId]).toEqual([0, 1]);
    expect(a.stats().failoverWaits + b.stats().failoverWaits).toBe(0);
    // The standby stops receiving; the primary goes on taking renewals for longer than a lease.
    const standby = store.snapshot();
    for (let i = 0; i < 15; i++) {
      await clock.advance(100);
      fromA.push(...(await clock.settle(a.nextBatch(10))));
    }
    // The primary dies; the standby, where both leases look expired, is promoted.
    store.failover('mem:2', standby);
    const c = make();
    const early = await clock.settle(c.next()).catch((e: unknown) => e);
    expect(c.workerId).toBe(0);
    // waitTimeoutMs (500) is shorter than the wait (1,100 ms): a typed error that says why.
    expect(isIdleaseError(early, 'NO_WORKER_ID'), String(early)).toBe(true);
    expect((early as Error).message).toMatch(/marker does not name.*leaseTtlMs \+ maxLeadMs \(1100 ms\)/);
    expect(c.stats()).toMatchObject({ failoverWaits: 1, fenced: false });
    expect(c.stats().failoverWaitLeftMs).toBeGreaterThan(0);
    expect(events).toContainEqual({ type: 'failover-wait', workerId: 0, waitMs: TTL + LEAD, instance: 'mem:2', markedInstance: 'mem:1' });
    // Meanwhile the old holder of id 0 issues only until its fence, then learns of the loss.
    for (let i = 0; i < 12; i++) {
      await clock.advance(50);
      fromA.push(...(await clock.settle(a.nextBatch(5).catch(() => [] as bigint[]))));
    }
    expect(a.stats().lost).toBe(1);
    const fromC = await clock.settle(c.nextBatch(100));
    expect(c.stats()).toMatchObject({ failoverWaits: 1, failoverWaitLeftMs: 0, fenced: true });
    expect(store.marker).toBe('mem:2');
    expect(events).toContainEqual({ type: 'failover-settled', workerId: 0, instance: 'mem:2' });
    // Every ID of the new holder is above every ID of the old one under the same worker id.
    const lastOfA = fromA.filter((id) => decodeId(id, LAYOUT).shard === 0).at(-1)!;
    expect(fromC[0]! > lastOfA).toBe(true);
    // B's row came through the failover with its token: B renews there and never waited.
    expect(b.stats()).toMatchObject({ lost: 0, failoverWaits: 0, workerId: 1 });
    // A claims again once B gives id 1 back: the marker names this instance now, no wait.
    await clock.settle(b.close());
    const resumed = await clock.settle(a.next());
    expect(a.workerId).toBe(1);
    expect(a.stats().failoverWaits).toBe(0);
    const all = [...fromA, ...fromC, resumed];
    expect(new Set(all).size).toBe(all.length);
    await clock.settle(Promise.all([a.close(), c.close()]));
  });

  it('with waitTimeoutMs above the wait, next() rides it out; a store that reports no instance never waits', async () => {
    const { clock, store, make } = setup();
    store.failover('mem:2', store.snapshot());
    const c = make(2 * TTL);
    const startedAt = clock.mono;
    await clock.settle(c.next());
    expect(clock.mono - startedAt).toBeGreaterThanOrEqual(TTL + LEAD);
    await clock.settle(c.close());

    store.instance = undefined;
    store.marker = null;
    const d = make();
    const t0 = clock.mono;
    await clock.settle(d.next());
    expect(clock.mono - t0).toBeLessThan(TTL);
    expect(d.stats().failoverWaits).toBe(0);
    await clock.settle(d.close());
  });

  it('a marker write that fails is a lease-error, the allocator issues anyway, and the next claimer waits again', async () => {
    const { clock, store, events, make } = setup();
    store.failover('mem:2', store.snapshot());
    store.markInstance = () => Promise.reject(new Error('marker write refused'));
    const c = make(2 * TTL);
    await clock.settle(c.next());
    expect(events.some((e) => e.type === 'lease-error' && (e.error as Error).message === 'marker write refused')).toBe(true);
    expect(store.marker).toBe('mem:1');
    const d = make(2 * TTL);
    await clock.settle(d.next());
    expect(d.stats().failoverWaits).toBe(1);
    await clock.settle(Promise.all([c.close(), d.close()]));
  });

  it('property: failovers to standbys of any lag, pauses, restarts and takeovers never repeat an ID', async () => {
    const op = fc.oneof(
      { weight: 4, arbitrary: fc.record({ kind: fc.constant('issue' as const), who: fc.nat(2), n: fc.integer({ min: 1, max: 40 }) }) },
      { weight: 3, arbitrary: fc.record({ kind: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 800 }) }) },
      { weight: 1, arbitrary: fc.record({ kind: fc.constant('pause' as const), ms: fc.integer({ min: 0, max: 3 * TTL }) }) },
      { weight: 1, arbitrary: fc.record({ kind: fc.constant('restart' as const), who: fc.nat(2) }) },
      { weight: 1, arbitrary: fc.record({ kind: fc.constant('standby-stops' as const) }) },
      { weight: 1, arbitrary: fc.record({ kind: fc.constant('failover' as const) }) },
    );
    type Op = typeof op extends fc.Arbitrary<infer T> ? T : never;
    // The shape of the hazard, always tried first: both ids held, the standby stops, the primary
    // takes renewals for longer than a lease; the failover comes just after a renewal round, so
    // the process without an id (it retries its claim every 250 ms at most) claims an expired id
    // before its old holder renews there (every 333 ms), and both issue in the same millisecond.
    const hazard: Op[] = [
      { kind: 'issue', who: 0, n: 1 },
      { kind: 'issue', who: 1, n: 1 },
      { kind: 'standby-stops' },
      { kind: 'advance', ms: 800 },
      { kind: 'advance', ms: 534 },
      { kind: 'failover' },
      { kind: 'advance', ms: 300 },
      { kind: 'issue', who: 0, n: 8 },
      { kind: 'issue', who: 2, n: 8 },
      { kind: 'issue', who: 1, n: 8 },
    ];
    await fc.assert(
      fc.asyncProperty(fc.array(op, { minLength: 1, maxLength: 30 }), async (ops) => {
        const shared = createFakeClock(START);
        const store = createMemoryWorkerIdStore(() => shared.mono);
        // The hosts' wall clocks agree: across a failover the guarantee rests on that, to within
        // the fence margin (docs/failover.md). Three processes, two worker ids, 4 IDs per ms.
        const layout = resolveLayout({ timeBits: 41, shardBits: 1, sequenceBits: 2 }, START);
        const clocks = [0, 1, 2].map(() => ({
          wallMs: () => shared.wall,
          monoMs: () => shared.mono,
          sleep: (ms: number) => shared.sleep(ms),
        }));
        const make = (i: number) =>
          createSnowflakeAllocator({ store, clock: clocks[i]!, layout, leaseTtlMs: TTL, maxLeadMs: LEAD, waitTimeoutMs: 300 });
        const allocs = [make(0), make(1), make(2)];
        let standby = store.snapshot();
        let instances = 1;
        const seen = new Set<bigint>();
        for (const o of ops) {
          if (o.kind === 'issue') {
            const ids = await shared.settle(
              allocs[o.who]!.nextBatch(o.n).catch(() => [] as bigint[]),
              5_000,
            );
            for (const id of ids) {
              expect(seen.has(id)).toBe(false);
              seen.add(id);
            }
          } else if (o.kind === 'advance') await shared.advance(o.ms);
          else if (o.kind === 'pause') shared.jump(o.ms);
          else if (o.kind === 'restart') {
            await shared.settle(allocs[o.who]!.close(), 5_000);
            allocs[o.who] = make(o.who);
          } else if (o.kind === 'standby-stops') standby = store.snapshot();
          else {
            store.failover(`mem:${++instances}`, standby);
            standby = store.snapshot();
          }
        }
        await shared.settle(Promise.all(allocs.map((a) => a.close())), 5_000);
      }),
      { numRuns: 150, examples: [[hazard]] },
    );
  });
});
