/**
 * Issue 13: segment allocators through a PostgreSQL failover (streaming replication,
 * primary SIGKILLed, standby promoted behind a TCP switch standing in for a VIP), as
 * test/helpers/failover-scenario.ts runs it. Old processes keep serving across the
 * failover; fresh ones join on the new primary.
 *   - synchronous replication: zero duplicates, and no call fails except by a typed error;
 *   - asynchronous replication, with no `tag bump` (issue 31): zero duplicates, the first lease
 *     on the promoted standby jumping by the failover gap in the lease statement itself; also
 *     with the switch moved at once and fresh processes leasing there first.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { startPostgres, type PostgresInstance } from '../helpers/servers.js';
import { startTcpSwitch, type TcpSwitch } from '../helpers/tcp-switch.js';
import { stopHaWorkers, tally } from '../helpers/ha-workers.js';
import { expectNoDuplicates, runFailover, summary, type FailoverTopology } from '../helpers/failover-scenario.js';
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
    const { results } = await runFailover(await topology(true));
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

  it('asynchronous replication, no bump: zero duplicates (the first lease on the promoted standby jumps by the failover gap)', async () => {
    const { results } = await runFailover(await topology(false));
    expectNoDuplicates('PostgreSQL async failover, no bump', results);
  }, 120_000);

  it('asynchronous replication, the switch moved at once, fresh processes leasing first and old ones holding seconds of IDs, no bump: zero duplicates', async () => {
    const { results } = await runFailover(await topology(false), { immediate: true });
    expectNoDuplicates('PostgreSQL async failover, immediate switch, no bump', results);
  }, 120_000);
});

describe('snowflake allocators through an asynchronous PostgreSQL failover (HA, issue 24)', () => {
  it("fresh processes that claim the old holders' worker ids on the promoted standby wait out a lease first: zero duplicates, every fresh ID above every old one of its worker id", async () => {
    await expectSafeSnowflakeFailover('PostgreSQL', await topology(false));
  }, 120_000);
});
