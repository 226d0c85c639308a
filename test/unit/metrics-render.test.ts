/**
 * renderMetrics (src/metrics/render.ts), the render `idlease serve` answers /metrics with, writes
 * the text prom-client's `registry.metrics()` writes for the same state, byte for byte — every
 * kind's families, allocators sharing a tag, events after a render (a histogram series' cached
 * text made again), label values that need escaping, families it does not know — and promtool
 * reads it.
 */
import { spawnSync } from 'node:child_process';
import { Counter, Gauge, Histogram, Registry, Summary } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { collectMetrics, remoteLeaseCounter } from '../../src/metrics/collect.js';
import { renderHistogramFast, renderMetrics } from '../../src/metrics/render.js';
import { createSegmentAllocator } from '../../src/segment/index.js';
import { createSnowflakeAllocator } from '../../src/snowflake/index.js';
import { createFakeClock } from './fake-clock.js';
import { MemoryStore } from './segment-memory-store.js';
import { createMemoryWorkerIdStore } from './worker-memory-store.js';

async function same(registry: Registry): Promise<string> {
  const fast = (await renderMetrics(registry)).toString();
  expect(fast).toBe(await registry.metrics());
  return fast;
}

describe('renderMetrics', () => {
  it("writes prom-client's text for every kind, shared tags, events between renders and other families", async () => {
    const store = new MemoryStore();
    for (const tag of ['order', 'user', 'zero']) store.rows.set(tag, { maxId: 0n, step: 10 });
    const registry = new Registry();
    const a = createSegmentAllocator({ store, tag: 'order', minStep: 10, maxStep: 10 });
    const b = createSegmentAllocator({ store, tag: 'order', minStep: 10, maxStep: 10 });
    const c = createSegmentAllocator({ store, tag: 'user', minStep: 10, maxStep: 10 });
    const z = createSegmentAllocator({ store, tag: 'zero', minStep: 10, maxStep: 10 });
    collectMetrics(registry, a, b, c, z);
    const clock = createFakeClock(Date.UTC(2026, 0, 1));
    // Three of one group hold worker ids 0, 1 and 2: the highest (2) is not the sum (3).
    const workerIds = createMemoryWorkerIdStore(() => clock.mono);
    const sfs = [0, 1, 2].map(() => createSnowflakeAllocator({ store: workerIds, clock, group: 'api', leaseTtlMs: 1_000 }));
    collectMetrics(registry, ...sfs);
    for (const sf of sfs) await clock.settle(sf.next()); // claims settled: a claim landing between the two renders is not what is compared
    const remote = remoteLeaseCounter(registry);
    remote('order', 0);
    // Families that are not idlease's: rendered from prom-client's own values.
    const other = new Counter({
      name: 'app_requests_total',
      help: 'with "quotes" and a \\ and\na newline',
      labelNames: ['path'],
      registers: [registry],
    });
    other.inc({ path: 'a"b\\c\nd' }, 2);
    new Gauge({ name: 'app_plain', help: 'no labels', registers: [registry] }).set(Number.NEGATIVE_INFINITY);
    const summary = new Summary({ name: 'app_summary', help: 's', labelNames: ['k'], registers: [registry] });
    summary.observe({ k: 'v' }, 3);
    const plainHistogram = new Histogram({ name: 'app_plain_seconds', help: 'no labels', buckets: [0.1, 1], registers: [registry] });
    renderHistogramFast(plainHistogram);
    plainHistogram.observe(0.5);
    const quoted = new Histogram({ name: 'app_quoted_seconds', help: 'h', labelNames: ['k'], buckets: [0.1, 1], registers: [registry] });
    renderHistogramFast(quoted);
    quoted.observe({ k: 'x"y\\z\nw' }, 2);

    const first = await same(registry); // every series at zero
    expect(first).toContain('idlease_segment_ids_served_total{tag="zero"} 0');
    expect(first).toContain('idlease_segment_runway_seconds{tag="zero"} +Inf');
    expect(first).toContain('idlease_snowflake_worker_id{group="api"} 2');
    await a.nextBatch(25);
    await b.nextBatch(3);
    await c.next();
    remote('order', 500);
    await new Promise((r) => setTimeout(r, 10)); // preloads land
    const second = await same(registry);
    expect(second).not.toBe(first);
    expect(second).toContain(`idlease_segment_ids_served_total{tag="order"} ${a.stats().served + b.stats().served}`);
    // A lease failing: errors by code, the error time, and the latency series of a tag made again.
    store.down = true;
    const d = createSegmentAllocator({ store, tag: 'order', waitTimeoutMs: 50, retryMinMs: 5, retryMaxMs: 10 });
    collectMetrics(registry, d);
    await expect(d.next()).rejects.toMatchObject({ code: 'DB_UNAVAILABLE' });
    store.down = false;
    await a.nextBatch(30);
    await new Promise((r) => setTimeout(r, 10)); // preloads land
    quoted.observe({ k: 'x"y\\z\nw' }, 0.05);
    expect(await same(registry)).toMatch(/idlease_segment_lease_errors_total\{tag="order",code="[^"]+"\} [1-9]/);
    await same(registry); // again with nothing moved: every cached series as it was
    await Promise.all([a.close(), b.close(), c.close(), d.close(), z.close(), ...sfs.map((sf) => clock.settle(sf.close()))]);
  });

  it('leaves to prom-client what it would refuse or write otherwise: default labels, OpenMetrics, a counter that went down', async () => {
    const store = new MemoryStore();
    store.rows.set('order', { maxId: 0n, step: 10 });
    const a = createSegmentAllocator({ store, tag: 'order', minStep: 10, maxStep: 10 });
    const labelled = new Registry();
    labelled.setDefaultLabels({ instance: 'x' });
    collectMetrics(labelled, a);
    expect((await same(labelled)).includes('instance="x"')).toBe(true);
    const open = new Registry();
    open.setContentType(Registry.OPENMETRICS_CONTENT_TYPE as never); // typed for Prometheus text: collectMetrics takes the default Registry
    collectMetrics(open, a);
    expect((await renderMetrics(open)).toString()).toBe(await open.metrics());
    // A stats() that goes wrong: prom-client refuses the counter going down, and so does the render.
    const registry = new Registry();
    const broken = Object.create(a) as typeof a;
    broken.stats = () => ({ ...a.stats(), served: -1 });
    collectMetrics(registry, broken as never);
    await expect(registry.metrics()).rejects.toThrow(/decrease a counter/);
    await expect(renderMetrics(registry)).rejects.toThrow(/decrease a counter/);
    await a.close();
  });

  it('promtool reads the render of 200 tags', async () => {
    const registry = new Registry();
    const store = new MemoryStore();
    const all = [];
    for (let i = 0; i < 200; i++) {
      store.rows.set(`t${i}`, { maxId: 0n, step: 10 });
      all.push(createSegmentAllocator({ store, tag: `t${i}`, minStep: 10, maxStep: 10 }));
    }
    collectMetrics(registry, ...all);
    await Promise.all(all.slice(0, 50).map((x) => x.nextBatch(5)));
    const text = await same(registry);
    const r = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
    if (r.error) throw new Error('promtool is not installed: run `bash scripts/ensure-databases.sh` (or `apt-get install prometheus`).');
    expect(r.stderr + r.stdout).toBe('');
    expect(r.status).toBe(0);
    await Promise.all(all.map((x) => x.close()));
  });
});
