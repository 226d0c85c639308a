/** collectMetrics: the exported values are the allocators' stats, and events feed the rest. */
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { collectMetrics } from '../../src/metrics/index.js';
import { redisMetrics } from '../../src/metrics/redis.js';
import { segmentMetrics } from '../../src/metrics/segment.js';
import { snowflakeMetrics } from '../../src/metrics/snowflake.js';
import type { KindMetrics } from '../../src/metrics/table.js';
import { ticketMetrics } from '../../src/metrics/ticket.js';
import { createSegmentAllocator } from '../../src/segment/index.js';
import { createSnowflakeAllocator } from '../../src/snowflake/index.js';
import { MemoryStore } from './segment-memory-store.js';
import { createFakeClock } from './fake-clock.js';
import { createMemoryWorkerIdStore } from './worker-memory-store.js';

async function sample(registry: Registry, name: string, labels: Record<string, string> = {}): Promise<number | undefined> {
  for (const metric of await registry.getMetricsAsJSON()) {
    const values = metric.values as Array<{ value: number; labels: Record<string, string | number>; metricName?: string }>;
    const v = values.find(
      (x) => (x.metricName ?? metric.name) === name && Object.entries(labels).every(([k, want]) => String(x.labels[k]) === want),
    );
    if (v) return v.value;
  }
  return undefined;
}

describe('collectMetrics (prom-client)', () => {
  it('segment metrics equal stats(); two allocators on one tag add up; lease latency and errors by code come from events', async () => {
    const store = new MemoryStore();
    store.rows.set('order', { maxId: 0n, step: 10 });
    const a = createSegmentAllocator({ store, tag: 'order', minStep: 10, maxStep: 10 });
    const b = createSegmentAllocator({ store, tag: 'order', minStep: 10, maxStep: 10 });
    const registry = new Registry();
    const stop = collectMetrics(registry, a);
    collectMetrics(registry, b);
    await a.nextBatch(25);
    await b.nextBatch(3);
    await new Promise((r) => setTimeout(r, 10)); // preloads land
    const [sa, sb] = [a.stats(), b.stats()];
    expect(await sample(registry, 'idlease_segment_ids_served_total', { tag: 'order' })).toBe(sa.served + sb.served);
    expect(await sample(registry, 'idlease_segment_leases_total', { tag: 'order' })).toBe(sa.leases + sb.leases);
    expect(await sample(registry, 'idlease_segment_remaining_ids', { tag: 'order' })).toBe(Number(sa.remaining + sb.remaining));
    expect(await sample(registry, 'idlease_segment_lease_duration_seconds_count', { tag: 'order' })).toBe(sa.leases + sb.leases);
    // A failing lease shows up by its code, with a timestamp.
    store.down = true;
    const c = createSegmentAllocator({ store, tag: 'order', waitTimeoutMs: 50, retryMinMs: 5, retryMaxMs: 10 });
    collectMetrics(registry, c);
    await expect(c.next()).rejects.toMatchObject({ code: 'DB_UNAVAILABLE' });
    expect(await sample(registry, 'idlease_segment_lease_errors_total', { tag: 'order', code: 'ECONNREFUSED' })).toBeGreaterThan(0);
    expect(await sample(registry, 'idlease_segment_timeouts_total', { tag: 'order' })).toBe(1);
    expect((await sample(registry, 'idlease_segment_last_error_timestamp_seconds', { tag: 'order' }))! * 1000).toBeGreaterThan(
      Date.now() - 60_000,
    );
    expect(await registry.metrics()).toMatch(/# TYPE idlease_segment_ids_served_total counter/);
    // Detaching a: its numbers leave the sums.
    stop();
    expect(await sample(registry, 'idlease_segment_ids_served_total', { tag: 'order' })).toBe(b.stats().served + c.stats().served);
    await Promise.all([a.close(), b.close(), c.close()]);
  });

  it('an allocator added later on the same tag leaves the lease histogram counts alone; series exist at zero before any event', async () => {
    const store = new MemoryStore();
    store.rows.set('order', { maxId: 0n, step: 10 });
    const registry = new Registry();
    const a = createSegmentAllocator({ store, tag: 'order', minStep: 10, maxStep: 10 });
    collectMetrics(registry, a);
    expect(await sample(registry, 'idlease_segment_lease_duration_seconds_count', { tag: 'order' })).toBe(0);
    expect(await sample(registry, 'idlease_segment_ids_served_total', { tag: 'order' })).toBe(0);
    await a.nextBatch(25);
    const leases = a.stats().leases;
    expect(leases).toBeGreaterThan(0);
    const b = createSegmentAllocator({ store, tag: 'order', minStep: 10, maxStep: 10 });
    collectMetrics(registry, b);
    expect(await sample(registry, 'idlease_segment_lease_duration_seconds_count', { tag: 'order' })).toBe(leases);
    await Promise.all([a.close(), b.close()]);
  });

  it('snowflake: clock-backwards waits, timeouts and the lead borrowed from the clock, on an injected clock', async () => {
    const clock = createFakeClock(Date.UTC(2026, 0, 1));
    const store = createMemoryWorkerIdStore(() => clock.mono);
    const a = createSnowflakeAllocator({ store, clock, group: 'api', leaseTtlMs: 1_000, maxLeadMs: 100, waitTimeoutMs: 500 });
    const registry = new Registry();
    collectMetrics(registry, a);
    await clock.settle(a.next());
    clock.wall -= 50; // borrowed: no wait
    await clock.settle(a.next());
    expect(await sample(registry, 'idlease_snowflake_lead_seconds', { group: 'api' })).toBeCloseTo(0.05, 2);
    expect(await sample(registry, 'idlease_snowflake_clock_waits_total', { group: 'api' })).toBe(0);
    clock.wall -= 10_000; // past maxLeadMs: wait, then CLOCK_BACKWARDS
    await expect(clock.settle(a.next())).rejects.toMatchObject({ code: 'CLOCK_BACKWARDS' });
    expect(await sample(registry, 'idlease_snowflake_clock_waits_total', { group: 'api' })).toBe(1);
    expect(await sample(registry, 'idlease_snowflake_timeouts_total', { group: 'api' })).toBe(1);
    // Waiting for the clock and then getting an ID: a wait, not a timeout.
    clock.wall += a.stats().leadMs - 200; // 200 ms behind: about 100 ms of waiting
    await clock.settle(a.next());
    expect(await sample(registry, 'idlease_snowflake_clock_waits_total', { group: 'api' })).toBe(2);
    expect(await sample(registry, 'idlease_snowflake_timeouts_total', { group: 'api' })).toBe(1);
    expect(await sample(registry, 'idlease_snowflake_ids_issued_total', { group: 'api' })).toBe(3);
    await clock.settle(a.close());
  });

  it('snowflake: a claim on a database instance the worker table was not settled on counts one failover wait', async () => {
    const clock = createFakeClock(Date.UTC(2026, 0, 1));
    const store = createMemoryWorkerIdStore(() => clock.mono);
    store.failover('mem:2', store.snapshot());
    const a = createSnowflakeAllocator({ store, clock, group: 'api', leaseTtlMs: 1_000, maxLeadMs: 100, waitTimeoutMs: 2_000 });
    const registry = new Registry();
    collectMetrics(registry, a);
    expect(await sample(registry, 'idlease_snowflake_failover_waits_total', { group: 'api' })).toBe(0);
    await clock.settle(a.next());
    expect(await sample(registry, 'idlease_snowflake_failover_waits_total', { group: 'api' })).toBe(1);
    await clock.settle(a.close());
  });

  it("each kind's families are the rows of its own table, picked by the kind stats() carry", async () => {
    const kinds: Array<[string, KindMetrics<never, unknown>]> = [
      ['segment', segmentMetrics],
      ['ticket', ticketMetrics],
      ['snowflake', snowflakeMetrics],
      ['redis', redisMetrics],
    ];
    for (const [kind, metrics] of kinds) {
      const names = metrics.tables(metrics.instruments(new Registry())).flatMap((t) => t.rows.map(([name]) => name));
      expect(names.length, kind).toBeGreaterThan(0);
      for (const name of names) expect(name, kind).toMatch(new RegExp(`^idlease_${kind}_`));
    }
    const store = new MemoryStore();
    store.rows.set('order', { maxId: 0n, step: 10 });
    const a = createSegmentAllocator({ store, tag: 'order', minStep: 10, maxStep: 10 });
    expect(a.stats().kind).toBe('segment');
    const registry = new Registry();
    collectMetrics(registry, a);
    expect(await sample(registry, 'idlease_segment_ids_served_total', { tag: 'order' })).toBe(0);
    expect(await sample(registry, 'idlease_redis_ids_served_total', { tag: 'order' })).toBeUndefined();
    // A look-alike whose stats() name another kind is not guessed at from its shape.
    expect(() => collectMetrics(registry, { tag: 'x', nextBatch() {}, stats: () => ({ kind: 'other', reseeds: 0 }) } as never)).toThrow(
      expect.objectContaining({ code: 'BAD_ARGUMENT' }),
    );
  });

  it('rejects what is not a registry or an allocator with BAD_ARGUMENT', () => {
    expect(() => collectMetrics({} as Registry)).toThrow(expect.objectContaining({ code: 'BAD_ARGUMENT' }));
    expect(() => collectMetrics(new Registry(), {} as never)).toThrow(expect.objectContaining({ code: 'BAD_ARGUMENT' }));
  });
});
