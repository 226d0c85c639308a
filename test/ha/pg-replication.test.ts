/**
 * Issue 13: segment allocators through a PostgreSQL failover (streaming replication,
 * primary SIGKILLed, standby promoted behind a TCP switch standing in for a VIP), as
 * test/helpers/failover-scenario.ts runs it. Old processes keep serving across the
 * failover; fresh ones join on the new primary.
 *   - synchronous replication: zero duplicates, and no call fails except by a typed error;
 *   - asynchronous replication: the old processes detect the lost leases; after
 *     `tag bump` with the documented margin before fresh processes draw, zero duplicates.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { startPostgres, type PostgresInstance } from '../helpers/servers.js';
import { startTcpSwitch, type TcpSwitch } from '../helpers/tcp-switch.js';
import { stopHaWorkers, tally } from '../helpers/ha-workers.js';
import { runFailover, summary, type FailoverTopology } from '../helpers/failover-scenario.js';
import { expectSafeSnowflakeFailover } from '../helpers/snowflake-failover-scenario.js';

let current: { primary: PostgresInstance; standby: PostgresInstance; vip: TcpSwitch; dir: string } | undefined;
afterEach(async () => {
  if (!current) return;
  const t = current;
  current = undefined;
  stopHaWorkers(t.dir);
  await t.vip.close();
  await Promise.allSettled([t.primary.destroy(), t.standby.destroy()]);
  rmSync(t.dir, { recursive: true, force: true });
});

async function topology(synchronous: boolean): Promise<FailoverTopology> {
  const primary = await startPostgres({
    settings: {
      wal_level: 'replica',
      max_wal_senders: '4',
      hot_standby: 'on',
      fsync: 'on',
      ...(synchronous ? { synchronous_standby_names: '*', synchronous_commit: 'on' } : {}),
    },
  });
  const standby = await startPostgres({ standbyOf: primary.port, settings: { hot_standby: 'on', cluster_name: 'standby1', fsync: 'on' } });
  const vip = await startTcpSwitch(primary.port);
  const dir = mkdtempSync(path.join(tmpdir(), 'idlease-ha-pg-'));
  current = { primary, standby, vip, dir };
  return {
    dir,
    vip,
    primaryPort: primary.port,
    standbyPort: standby.port,
    url: (port) => `postgres://postgres@127.0.0.1:${port}/postgres`,
    stopStandby: () => standby.stop(),
    killPrimary: () => primary.kill(),
    async promoteStandby() {
      await standby.start();
      await standby.promote();
    },
  };
}

describe('segment allocators through a PostgreSQL failover (HA)', () => {
  it('synchronous replication: zero duplicates, every failed call a typed error, fresh and old processes both serve after the failover', async () => {
    const { results } = await runFailover(await topology(true), { bump: false });
    const { total, duplicates, notIncreasing } = tally(results);
    const why = summary(results);
    expect(duplicates, why).toBe(0);
    expect(notIncreasing, why).toEqual([]);
    expect(
      results.every((r) => r.untyped === 0),
      why,
    ).toBe(true);
    expect(
      results.every((r) => Object.keys(r.errors).every((c) => c === 'DB_UNAVAILABLE')),
      why,
    ).toBe(true);
    expect(
      results.every((r) => r.ids > 0 && r.regressions === 0),
      why,
    ).toBe(true);
    expect(total).toBeGreaterThan(10_000);
  }, 120_000);

  it('asynchronous replication: with `tag bump` (the documented margin) before fresh processes draw, zero duplicates', async () => {
    const { results, margin } = await runFailover(await topology(false), { bump: true });
    const why = `margin ${margin}\n${summary(results)}`;
    const { duplicates, notIncreasing } = tally(results);
    expect(duplicates, why).toBe(0);
    expect(notIncreasing, why).toEqual([]);
    // The margin covered every lease the old primary granted: no old process saw the row behind it.
    expect(
      results.reduce((s, r) => s + r.regressions, 0),
      why,
    ).toBe(0);
    expect(
      results.every((r) => r.untyped === 0 && Object.keys(r.errors).length === 0),
      why,
    ).toBe(true);
    expect(
      results.every((r) => r.ids > 0),
      why,
    ).toBe(true);
  }, 120_000);

  it('asynchronous replication without the bump: the old processes detect the regression (INVARIANT, never served)', async () => {
    const { results } = await runFailover(await topology(false), { bump: false });
    const why = summary(results);
    const old = results.filter((r) => r.name.startsWith('old'));
    expect(
      old.reduce((s, r) => s + r.regressions, 0),
      why,
    ).toBeGreaterThan(0);
    expect(
      old.some((r) => (r.errors.INVARIANT ?? 0) > 0),
      why,
    ).toBe(true);
    expect(tally(results).notIncreasing, why).toEqual([]);
    // Fresh processes had no way to know: duplicates between them and the old ones are
    // the documented hazard of asynchronous failover (docs/failover.md), not asserted here.
  }, 120_000);
});

describe('snowflake allocators through an asynchronous PostgreSQL failover (HA, issue 24)', () => {
  it("fresh processes that claim the old holders' worker ids on the promoted standby wait out a lease first: zero duplicates, every fresh ID above every old one of its worker id", async () => {
    await expectSafeSnowflakeFailover('PostgreSQL', await topology(false));
  }, 120_000);
});
