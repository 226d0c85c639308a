/**
 * Snowflake holders behind a slow link: 200 ms ± 100 ms each way on every chunk between the
 * allocators and the database (test/helpers/delay-link.ts; this kernel has no netem, so the
 * delay is a relay's, not the kernel's). With the default lease (10 s, renewed every 3.3 s,
 * fenced 9 s after a renewal was sent) a renewal's few delayed round trips fit many times over:
 * every holder keeps its id for the whole run, issues without a failed call, and the renewal
 * latency the allocator reports (`renewed` events) shows the delay it rode out. Two allocators,
 * one per worker id, every ID counted.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { withUrl } from '../helpers/cli.js';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { startDelayLink, type DelayLink } from '../helpers/delay-link.js';
import { connect } from '../../src/connect.js';
import { migrate } from '../../src/migrations/migrate.js';
import { createSnowflakeAllocator, type SnowflakeEvent } from '../../src/snowflake/index.js';
import { PARTITION_LAYOUT } from './layout.js';

const DELAY_MS = 200;
const JITTER_MS = 100;
const RUN_MS = 10_000;

describe.each(['postgres', 'mysql'] as const)('snowflake holders behind a 200 ms ± 100 ms link (%s)', (flavor) => {
  let db: TestDb;
  let link: DelayLink;
  beforeAll(async () => {
    db = await createTestDb(flavor, 'sf_delay');
    await migrate(db.knex, { workers: true });
    link = await startDelayLink(Number(new URL(db.url).port || (flavor === 'mysql' ? 3306 : 5432)), DELAY_MS, JITTER_MS);
  });
  afterAll(async () => {
    await link?.close();
    await db?.drop();
  });

  it('renewals keep both leases for the whole run: no lost id, no failed call, no duplicate', async () => {
    const url = withUrl(db.url, (u) => (u.port = String(link.port)));
    const runs = [0, 1].map(async () => {
      const knex = connect(url, { poolMax: 2 });
      const events: SnowflakeEvent[] = [];
      const alloc = createSnowflakeAllocator({ knex, group: 'delay', layout: PARTITION_LAYOUT });
      alloc.onEvent((e) => events.push(e));
      const ids: bigint[] = [];
      const failures: string[] = [];
      try {
        for (const until = Date.now() + RUN_MS; Date.now() < until;) {
          try {
            ids.push(...(await alloc.nextBatch(4)));
          } catch (err) {
            failures.push(String((err as Error).message));
          }
          await new Promise((r) => setTimeout(r, 5));
        }
        return { ids, failures, events, workerId: alloc.workerId };
      } finally {
        await alloc.close();
        await knex.destroy();
      }
    });
    const results = await Promise.all(runs);
    const renewals = results.flatMap((r) => r.events.flatMap((e) => (e.type === 'renewed' ? [e.latencyMs] : [])));
    const summary = JSON.stringify({
      ids: results.map((r) => r.ids.length),
      renewals: renewals.length,
      renewalLatencyMs: { min: Math.min(...renewals), max: Math.max(...renewals) },
      events: results.map((r) => [...new Set(r.events.map((e) => e.type))]),
      failures: results.map((r) => r.failures.slice(0, 3)),
    });
    console.log(`${flavor}: ${summary}`);
    for (const r of results) {
      expect(r.failures, summary).toEqual([]);
      expect(
        r.events.filter((e) => e.type === 'lost' || e.type === 'lease-error'),
        summary,
      ).toEqual([]);
      expect(
        r.events.filter((e) => e.type === 'claimed'),
        summary,
      ).toHaveLength(1);
    }
    expect(results.map((r) => r.workerId).sort(), summary).toEqual([0, 1]);
    // Every renewal rode the delay: at least one round trip each way.
    expect(renewals.length, summary).toBeGreaterThanOrEqual(4);
    expect(Math.min(...renewals), summary).toBeGreaterThanOrEqual(2 * (DELAY_MS - JITTER_MS));
    const all = results.flatMap((r) => r.ids);
    expect(new Set(all).size, summary).toBe(all.length);
    expect(all.length, summary).toBeGreaterThan(100);
  }, 60_000);
});
