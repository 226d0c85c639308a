/**
 * One short chaos run in CI (issue 42): the seed's schedule of process kills, pauses past the
 * lease, server kills and freezes, two failovers in a row on PostgreSQL and on MariaDB (each losing
 * writes, the MariaDB pair sometimes a fail-back), Redis wiped and restarted, and admin commands beside the
 * allocators, over segments (PostgreSQL, MariaDB), snowflake, the Redis sequence, next_id() (PostgreSQL,
 * MariaDB) and tickets (three MariaDB servers). Soaks:
 * `npm run chaos -- --seeds 1,2,3 --seconds 60`.
 */
import { expect, it } from 'vitest';
import { describeRun, runChaos } from './run.js';
import { scheduleFor } from './schedule.js';

it('seed 1 for 40 s draws both double failovers', () => {
  const kinds = scheduleFor(1, 40).map((f) => f.kind);
  expect(kinds).toContain('failover-pg');
  expect(kinds).toContain('failover-mariadb');
});

it('seed 1 for 40 s: no repeat, every promised order kept, every mechanism issuing again within 15 s of the last fault', async () => {
  const r = await runChaos({ seed: 1, seconds: 40 });
  const why = describeRun(r);
  console.log(`chaos: ${why}`);
  for (const s of r.spaces) {
    expect(s.repeats, why).toBe(0);
    expect(s.orderViolations, why).toEqual([]);
    expect(s.ids, why).toBeGreaterThan(1_000);
  }
  expect(r.spaces.map((s) => s.space).sort()).toEqual([
    'next-id-mariadb',
    'next-id-pg',
    'redis',
    'segment-mariadb',
    'segment-pg',
    'snowflake-pg',
    'tickets',
  ]);
  expect(r.stalled, why).toEqual([]);
  expect(r.recoveryAfterLastMs, why).toBeLessThan(15_000);
  expect(Object.values(r.faults).filter((n) => n > 0).length, why).toBeGreaterThanOrEqual(8);
}, 240_000);
