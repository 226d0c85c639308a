/**
 * Issue 13: segment allocators through a PostgreSQL failover (streaming replication,
 * primary SIGKILLed, standby promoted behind a TCP switch standing in for a VIP).
 * Old processes keep serving across the failover; fresh ones join on the new primary.
 *   - synchronous replication: zero duplicates, and no call fails except by a typed error;
 *   - asynchronous replication with the standby behind: the old processes detect the lost
 *     leases (regressions); after `tag bump --by <largest step × processes>` on the new
 *     primary before anyone draws there, zero duplicates.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { connect } from '../../src/connect.js';
import { migrate } from '../../src/migrations/migrate.js';
import { addTag, bumpTag } from '../../src/segment/index.js';
import { startPostgres, type PostgresInstance } from '../helpers/servers.js';
import { startTcpSwitch, type TcpSwitch } from '../helpers/tcp-switch.js';
import { startHaWorker, stopHaWorkers, tally, type HaWorker, type HaWorkerResult } from '../helpers/ha-workers.js';

const MAX_STEP = 2_000;
const OLD = 3;
const FRESH = 3;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Topology { primary: PostgresInstance; standby: PostgresInstance; vip: TcpSwitch; dir: string }
let current: Topology | undefined;
afterEach(async () => {
  if (!current) return;
  const t = current;
  current = undefined;
  stopHaWorkers(t.dir);
  await t.vip.close();
  await Promise.allSettled([t.primary.destroy(), t.standby.destroy()]);
  rmSync(t.dir, { recursive: true, force: true });
});

async function topology(synchronous: boolean): Promise<Topology> {
  const primary = await startPostgres({
    settings: {
      wal_level: 'replica', max_wal_senders: '4', hot_standby: 'on', fsync: 'on',
      ...(synchronous ? { synchronous_standby_names: '*', synchronous_commit: 'on' } : {}),
    },
  });
  const standby = await startPostgres({ standbyOf: primary.port, settings: { hot_standby: 'on', cluster_name: 'standby1', fsync: 'on' } });
  const vip = await startTcpSwitch(primary.port);
  current = { primary, standby, vip, dir: mkdtempSync(path.join(tmpdir(), 'idlease-ha-pg-')) };
  return current;
}

function urlVia(port: number): string {
  return `postgres://postgres@127.0.0.1:${port}/postgres`;
}

/**
 * Old processes draw; the standby falls behind for 3 s; the primary dies; the standby takes
 * over behind the VIP; fresh processes join. With `bump`, the operator's repair runs on the
 * new primary first, with the margin docs/failover.md gives: twice the IDs drawn per second
 * × the seconds the new primary is behind (failover time − its last replayed transaction),
 * plus the largest step × processes.
 */
async function failover(t: Topology, options: { bump: boolean }): Promise<{ results: HaWorkerResult[]; margin: bigint | undefined }> {
  const knex = connect(urlVia(t.vip.port), { poolMax: 1 });
  await migrate(knex);
  await addTag(knex, { tag: 'order', step: 100 });
  const workers: HaWorker[] = [];
  for (let i = 0; i < OLD; i++) workers.push(startHaWorker(`old${i}`, t.dir, { url: urlVia(t.vip.port), tag: 'order', maxStep: MAX_STEP }));
  await Promise.all(workers.map((w) => w.serving));
  await sleep(1_000);
  // The tag's rate, as an operator reads it from monitoring (max_id over time).
  const maxId = async () => BigInt(((await knex.raw("SELECT max_id::text AS m FROM idlease_segments WHERE tag = 'order'")) as { rows: Array<{ m: string }> }).rows[0]!.m);
  const [m0, t0] = [await maxId(), Date.now()];
  await sleep(1_000);
  const perSecond = Number(await maxId() - m0) / ((Date.now() - t0) / 1000);
  await knex.destroy();
  await t.standby.stop(); // the standby falls behind (or, synchronous, the primary's commits wait)
  await sleep(3_000);
  const failedAt = Date.now();
  await t.primary.kill();
  await t.standby.start();
  await t.standby.promote();
  let margin: bigint | undefined;
  if (options.bump) {
    const admin = connect(urlVia(t.standby.port), { poolMax: 1 });
    const replayed = Number(((await admin.raw('SELECT extract(epoch FROM pg_last_xact_replay_timestamp()) * 1000 AS ms')) as { rows: Array<{ ms: string }> }).rows[0]!.ms);
    margin = BigInt(Math.ceil(2 * perSecond * ((failedAt - replayed) / 1000))) + BigInt(MAX_STEP * (OLD + FRESH));
    await bumpTag(admin, { all: true, by: margin });
    await admin.destroy();
  }
  t.vip.pointTo(t.standby.port);
  const fresh: HaWorker[] = [];
  for (let i = 0; i < FRESH; i++) fresh.push(startHaWorker(`fresh${i}`, t.dir, { url: urlVia(t.vip.port), tag: 'order', maxStep: MAX_STEP }));
  await Promise.all(fresh.map((w) => w.serving));
  await sleep(2_000);
  stopHaWorkers(t.dir);
  return { results: await Promise.all([...workers, ...fresh].map((w) => w.done)), margin };
}

function summary(results: HaWorkerResult[]): string {
  return results.map((r) => `${r.name}: ${r.ids} ids, ${r.leases} leases, ${r.regressions} regressions, errors ${JSON.stringify(r.errors)}`).join('\n');
}

describe('segment allocators through a PostgreSQL failover (HA)', () => {
  it('synchronous replication: zero duplicates, every failed call a typed error, fresh and old processes both serve after the failover', async () => {
    const t = await topology(true);
    const { results } = await failover(t, { bump: false });
    const { total, duplicates, notIncreasing } = tally(results);
    const why = summary(results);
    expect(duplicates, why).toBe(0);
    expect(notIncreasing, why).toEqual([]);
    expect(results.every((r) => r.untyped === 0), why).toBe(true);
    expect(results.every((r) => Object.keys(r.errors).every((c) => c === 'DB_UNAVAILABLE')), why).toBe(true);
    expect(results.every((r) => r.ids > 0 && r.regressions === 0), why).toBe(true);
    expect(total).toBeGreaterThan(10_000);
  }, 120_000);

  it('asynchronous replication: old processes detect the lost leases; with `tag bump` before fresh processes draw, zero duplicates', async () => {
    const t = await topology(false);
    const { results, margin } = await failover(t, { bump: true });
    const why = `margin ${margin}\n${summary(results)}`;
    const { duplicates, notIncreasing } = tally(results);
    expect(duplicates, why).toBe(0);
    expect(notIncreasing, why).toEqual([]);
    // The margin covered every lease the old primary granted: no old process saw the row behind it.
    expect(results.reduce((s, r) => s + r.regressions, 0), why).toBe(0);
    expect(results.every((r) => r.untyped === 0 && Object.keys(r.errors).length === 0), why).toBe(true);
    expect(results.every((r) => r.ids > 0), why).toBe(true);
  }, 120_000);

  it('asynchronous replication without the bump: the old processes detect the regression (INVARIANT, never served)', async () => {
    const t = await topology(false);
    const { results } = await failover(t, { bump: false });
    const why = summary(results);
    const old = results.filter((r) => r.name.startsWith('old'));
    expect(old.reduce((s, r) => s + r.regressions, 0), why).toBeGreaterThan(0);
    expect(old.some((r) => (r.errors.INVARIANT ?? 0) > 0), why).toBe(true);
    const { notIncreasing } = tally(results);
    expect(notIncreasing, why).toEqual([]);
    // Fresh processes had no way to know: duplicates between them and the old ones are
    // the documented hazard of asynchronous failover (docs/failover.md), not asserted here.
  }, 120_000);
});
