/**
 * The failover scenario of issue 13, for any primary/standby pair behind a TCP switch:
 * old processes draw; the standby falls behind for 3 s (stopped); the primary is killed;
 * the standby is promoted and the switch points to it; fresh processes join.
 *
 * No operator step runs (issue 31): the promoted server is fenced by the first lease there.
 *
 * With `immediate` (issue 31: no order of events chosen for the product), the old processes hold
 * seconds of IDs (`targetLeaseMs` 3000), so they need no lease right after the switch, and the
 * fresh processes — loaded ahead, waiting on a go file — make their first call the moment the
 * switch moves: the first lease on the promoted server is a fresh process's, from the stale row.
 * Only fencing in the lease statement keeps that from reissuing the old processes' IDs.
 */
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { connect } from '../../src/connect.js';
import { migrate } from '../../src/migrations/migrate.js';
import { addTag } from '../../src/segment/index.js';
import { expect } from 'vitest';
import { ERROR_CATEGORIES, type IdleaseErrorCode } from '../../src/errors.js';
import { startHaWorker, stopHaWorkers, tally, type HaWorker, type HaWorkerResult } from './ha-workers.js';
import type { TcpSwitch } from './tcp-switch.js';
import { sleep } from './wait.js';

export interface FailoverTopology {
  readonly dir: string;
  readonly vip: TcpSwitch;
  readonly primaryPort: number;
  readonly standbyPort: number;
  url(port: number): string;
  stopStandby(): Promise<void>;
  killPrimary(): Promise<void>;
  /** Start the standby again and make it a writable primary. */
  promoteStandby(): Promise<void>;
}

export const MAX_STEP = 2_000;
export const OLD = 3;
export const FRESH = 3;

export async function runFailover(t: FailoverTopology, options: { immediate?: boolean } = {}): Promise<{ results: HaWorkerResult[] }> {
  const goFile = path.join(t.dir, 'go');
  const knex = connect(t.url(t.vip.port), { poolMax: 1 });
  await migrate(knex);
  await addTag(knex, { tag: 'order', step: 100 });
  const start = (name: string) =>
    startHaWorker(name, t.dir, {
      url: t.url(t.vip.port),
      tag: 'order',
      ...(options.immediate
        ? { maxStep: 1_000_000, targetLeaseMs: 3_000, pauseMs: 1, ...(name.startsWith('fresh') ? { goFile } : {}) }
        : { maxStep: MAX_STEP }),
    });
  const old: HaWorker[] = Array.from({ length: OLD }, (_, i) => start(`old${i}`));
  await Promise.all(old.map((w) => w.serving));
  await knex.destroy();
  await sleep(2_000); // the point: the old processes lease for a while, their steps growing, before anything fails
  const freshAhead = options.immediate ? Array.from({ length: FRESH }, (_, i) => start(`fresh${i}`)) : [];
  await t.stopStandby();
  await sleep(3_000); // the point: 3 s of leases only the primary has, which the promoted standby never sees
  await t.killPrimary();
  await t.promoteStandby();
  t.vip.pointTo(t.standbyPort);
  if (options.immediate) writeFileSync(goFile, '');
  const fresh: HaWorker[] = options.immediate ? freshAhead : Array.from({ length: FRESH }, (_, i) => start(`fresh${i}`));
  await Promise.all(fresh.map((w) => w.serving));
  await sleep(2_000); // the point: old and fresh processes both lease on the new primary, where repeats would be
  stopHaWorkers(t.dir);
  return { results: await Promise.all([...old, ...fresh].map((w) => w.done)) };
}

export function summary(results: readonly HaWorkerResult[]): string {
  return results
    .map(
      (r) =>
        `${r.name}: ${r.ids} ids, ${r.leases} leases, ${r.failoverJumps} failover jumps, ${r.regressions} regressions, errors ${JSON.stringify(r.errors)}`,
    )
    .join('\n');
}

/**
 * The verdict with no operator step (issue 31): no ID twice, each process increasing, every
 * failed call a typed error of a retryable kind (never untyped, never INVARIANT: with the
 * failover fenced in the lease no old process sees the row behind it), and every process served.
 */
export function expectNoDuplicates(label: string, results: readonly HaWorkerResult[]): void {
  const { total, duplicates, notIncreasing } = tally(results);
  const why = summary(results);
  console.log(`${label}: ${total} IDs, ${duplicates} duplicates\n${why}`);
  expect(duplicates, why).toBe(0);
  expect(notIncreasing, why).toEqual([]);
  expect(
    results.every(
      (r) => r.untyped === 0 && Object.keys(r.errors).every((code) => ERROR_CATEGORIES[code as IdleaseErrorCode] === 'unavailable'),
    ),
    why,
  ).toBe(true);
  expect(
    results.every((r) => r.ids > 0),
    why,
  ).toBe(true);
}
