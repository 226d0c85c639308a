/**
 * Issue 24 item 3: snowflake allocators through an asynchronous failover, for any
 * primary/standby pair of test/ha/ (the topologies of test/helpers/failover-scenario.ts).
 *
 * Two old processes hold both worker ids (one worker bit) through a switch of their own that
 * keeps pointing at the primary. The standby stops receiving; for longer than a lease the old
 * processes renew on the primary only, so the standby's copy of both leases expires. Two fresh
 * processes start meanwhile on the main switch (the VIP) and wait: both ids are held. The primary
 * is SIGKILLed; the old processes, cut off with it, issue until their fence (ttl − margin after
 * their last renewal). The standby is promoted and the VIP moved: the fresh processes claim the
 * two ids, which look expired there, while the old holders may still be inside their fence.
 * Later the old processes' switch moves too: their renewals find the ids taken (`lost`).
 */
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { decodeId } from '../../src/layout/index.js';
import { connect } from '../../src/connect.js';
import { migrate } from '../../src/migrations/migrate.js';
import { SNOWFLAKE_HA_LAYOUT } from '../ha/snowflake-ha-layout.js';
import type { FailoverTopology } from './failover-scenario.js';
import { expect } from 'vitest';
import { readIds, startHaProcess, stopHaWorkers, tally } from './ha-workers.js';
import { REPO_ROOT } from './cli.js';
import { startTcpSwitch } from './tcp-switch.js';
import { sleep } from './wait.js';

const WORKER = path.join(REPO_ROOT, 'test/ha/snowflake-ha-worker.ts');
export const SNOWFLAKE_TTL_MS = 4_000;
export const SNOWFLAKE_LEAD_MS = 500;

export interface SnowflakeHaResult {
  readonly name: string;
  readonly file: string;
  readonly ids: number;
  readonly errors: Record<string, number>;
  readonly untyped: number;
  readonly claims: ReadonlyArray<{ workerId: number; at: number }>;
  readonly failoverWaits: number;
  readonly lost: number;
  readonly waitMs: number;
  /** Events but `renewed` and `lease-error`, each as '<unix ms> <type> <workerId>'. */
  readonly log: readonly string[];
  readonly leaseErrors: number;
}

/** Per worker id: the old holders' last ID time and the fresh holders' first, and whether any fresh ID is at or below an old one. */
export interface WorkerIdUse {
  readonly workerId: number;
  readonly oldLastMs: number | undefined;
  readonly freshFirstMs: number | undefined;
  /** freshFirstMs − oldLastMs: negative means both used the id in the same stretch of time. */
  readonly gapMs: number | undefined;
  readonly freshNotAbove: number;
}

export async function runSnowflakeFailover(
  t: FailoverTopology,
): Promise<{ results: SnowflakeHaResult[]; uses: WorkerIdUse[]; timeline: Record<string, number> }> {
  const t0 = Date.now();
  const timeline: Record<string, number> = {};
  const mark = (what: string) => (timeline[what] = Date.now() - t0);
  const knex = connect(t.url(t.vip.port), { poolMax: 1 });
  await migrate(knex, { segments: false, workers: true });
  await knex.destroy();
  const oldSwitch = await startTcpSwitch(t.primaryPort);
  const cfg = { leaseTtlMs: SNOWFLAKE_TTL_MS, maxLeadMs: SNOWFLAKE_LEAD_MS, waitTimeoutMs: 1_000 };
  // Old and fresh processes stop apart: the old ones first, so that they cannot claim an id a
  // fresh one gives back on its way out and mix a second lease into the comparison below.
  const oldDir = path.join(t.dir, 'old');
  const freshDir = path.join(t.dir, 'fresh');
  mkdirSync(oldDir);
  mkdirSync(freshDir);
  const start = (name: string, port: number) =>
    startHaProcess<Omit<SnowflakeHaResult, 'name' | 'file'>>(WORKER, name, name.startsWith('old') ? oldDir : freshDir, {
      ...cfg,
      url: t.url(port),
    });
  try {
    const old = [start('old0', oldSwitch.port), start('old1', oldSwitch.port)];
    await Promise.all(old.map((w) => w.serving));
    mark('old serving');
    await sleep(1_000);
    await t.stopStandby();
    mark('standby stopped');
    const fresh = [start('fresh0', t.vip.port), start('fresh1', t.vip.port)];
    // The standby's copy of every lease expires: it last heard of them before it stopped.
    await sleep(SNOWFLAKE_TTL_MS + 1_000);
    await t.killPrimary();
    mark('primary killed');
    await t.promoteStandby();
    t.vip.pointTo(t.standbyPort);
    mark('promoted');
    await Promise.race([Promise.all(fresh.map((w) => w.serving)), sleep(30_000)]);
    mark('fresh serving');
    await sleep(1_000);
    // The old processes reach the new primary too: their ids are taken.
    oldSwitch.pointTo(t.standbyPort);
    await sleep(1_500);
    stopHaWorkers(oldDir);
    const oldResults = await Promise.all(old.map((w) => w.done));
    stopHaWorkers(freshDir);
    const results = [...oldResults, ...(await Promise.all(fresh.map((w) => w.done)))];
    mark('stopped');
    return { results, uses: workerIdUse(results), timeline };
  } finally {
    // On a failure too: no worker outlives the test (each stops within a batch of its stop file).
    stopHaWorkers(oldDir);
    stopHaWorkers(freshDir);
    await oldSwitch.close();
  }
}

function workerIdUse(results: readonly SnowflakeHaResult[]): WorkerIdUse[] {
  const uses: WorkerIdUse[] = [];
  for (const workerId of [0, 1]) {
    let oldMax: bigint | undefined;
    const freshIds: bigint[] = [];
    for (const r of results) {
      for (const id of readIds(r.file)) {
        if (decodeId(id, SNOWFLAKE_HA_LAYOUT).shard !== workerId) continue;
        if (r.name.startsWith('old')) oldMax = oldMax === undefined || id > oldMax ? id : oldMax;
        else freshIds.push(id);
      }
    }
    const freshMin = freshIds.reduce<bigint | undefined>((m, id) => (m === undefined || id < m ? id : m), undefined);
    const ms = (id: bigint | undefined) => (id === undefined ? undefined : decodeId(id, SNOWFLAKE_HA_LAYOUT).unixMs);
    const oldLastMs = ms(oldMax);
    const freshFirstMs = ms(freshMin);
    uses.push({
      workerId,
      oldLastMs,
      freshFirstMs,
      gapMs: oldLastMs === undefined || freshFirstMs === undefined ? undefined : freshFirstMs - oldLastMs,
      freshNotAbove: oldMax === undefined ? 0 : freshIds.filter((id) => id <= oldMax).length,
    });
  }
  return uses;
}

export function snowflakeSummary(results: readonly SnowflakeHaResult[], uses: readonly WorkerIdUse[], timeline: object): string {
  return [
    ...results.map(
      (r) =>
        `${r.name}: ${r.ids} ids, claims ${JSON.stringify(r.claims.map((c) => c.workerId))}, failoverWaits ${r.failoverWaits} (${r.waitMs} ms), lost ${r.lost}, errors ${JSON.stringify(r.errors)}, untyped ${r.untyped}`,
    ),
    ...uses.map(
      (u) =>
        `worker id ${u.workerId}: old last ${u.oldLastMs}, fresh first ${u.freshFirstMs}, gap ${u.gapMs} ms, fresh IDs not above old ${u.freshNotAbove}`,
    ),
    `timeline (ms): ${JSON.stringify(timeline)}`,
  ].join('\n');
}

/**
 * The scenario's verdict, the same on every engine: no duplicate, each process increasing, the
 * old holders lost their ids once, the fresh ones took them and waited out one lease, and every
 * fresh ID sorts above the old holder's last under the same worker id.
 */
export async function expectSafeSnowflakeFailover(engine: string, t: FailoverTopology): Promise<void> {
  const { results, uses, timeline } = await runSnowflakeFailover(t);
  const why = snowflakeSummary(results, uses, timeline);
  const { total, duplicates, notIncreasing } = tally(results);
  console.log(`${engine} snowflake failover: ${total} IDs, ${duplicates} duplicates\n${why}`);
  expect(duplicates, why).toBe(0);
  expect(notIncreasing, why).toEqual([]);
  const old = results.filter((r) => r.name.startsWith('old'));
  const fresh = results.filter((r) => r.name.startsWith('fresh'));
  // The old processes held both ids, then found them taken once they reached the new primary.
  expect(old.map((r) => r.claims[0]?.workerId).sort(), why).toEqual([0, 1]);
  expect(
    old.every((r) => r.lost === 1 && r.failoverWaits === 0),
    why,
  ).toBe(true);
  // The fresh ones took those ids on the promoted standby and each waited there once.
  expect(fresh.map((r) => r.claims[0]?.workerId).sort(), why).toEqual([0, 1]);
  expect(
    fresh.every((r) => r.ids > 0 && r.failoverWaits === 1 && r.waitMs === SNOWFLAKE_TTL_MS + SNOWFLAKE_LEAD_MS),
    why,
  ).toBe(true);
  // No overlap in time under one worker id: every fresh ID sorts above the old holders' last.
  expect(
    uses.every((u) => u.freshNotAbove === 0 && u.gapMs !== undefined && u.gapMs > 0),
    why,
  ).toBe(true);
  expect(
    results.every((r) => r.untyped === 0 && Object.keys(r.errors).every((c) => c === 'NO_WORKER_ID' || c === 'DB_UNAVAILABLE')),
    why,
  ).toBe(true);
  expect(total, why).toBeGreaterThan(1_000);
}
