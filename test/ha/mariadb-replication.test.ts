/**
 * Issue 13: segment allocators through a MariaDB failover (binlog replication with GTID,
 * primary SIGKILLed, replica promoted behind a TCP switch standing in for a VIP), as
 * test/helpers/failover-scenario.ts runs it.
 *   - semi-synchronous replication (AFTER_SYNC, a timeout longer than the outage): zero duplicates;
 *   - asynchronous, with no `tag bump` (issue 31): zero duplicates, the first lease on the
 *     promoted replica jumping by the failover gap in the lease statement itself; also with the
 *     switch moved at once and fresh processes leasing there first.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import mysql from 'mysql2/promise';
import { afterEach, describe, expect, it } from 'vitest';
import { startMariadb, type ServerInstance } from '../helpers/servers.js';
import { startTcpSwitch, type TcpSwitch } from '../helpers/tcp-switch.js';
import { startHaProcess, stopHaWorkers, tally } from '../helpers/ha-workers.js';
import { REPO_ROOT } from '../helpers/cli.js';
import { connect } from '../../src/connect.js';
import { ERROR_CATEGORIES, type IdleaseErrorCode } from '../../src/errors.js';
import { migrate } from '../../src/migrations/migrate.js';
import { expectNoDuplicates, runFailover, summary, type FailoverTopology } from '../helpers/failover-scenario.js';
import { expectSafeSnowflakeFailover } from '../helpers/snowflake-failover-scenario.js';
import { sleep } from '../helpers/wait.js';

const TICKET_WORKER = path.join(REPO_ROOT, 'test/partition/ticket-worker.ts');

let current: { primary: ServerInstance; replica: ServerInstance; vip: TcpSwitch; dir: string } | undefined;
afterEach(async () => {
  if (!current) return;
  const t = current;
  current = undefined;
  stopHaWorkers(t.dir);
  await t.vip.close();
  await Promise.allSettled([t.primary.destroy(), t.replica.destroy()]);
  rmSync(t.dir, { recursive: true, force: true });
});

/** SHOW SLAVE STATUS with its field names (sql() drops them with -N). */
function slaveStatus(port: number): string {
  return execFileSync('mariadb', ['-h127.0.0.1', `-P${port}`, '-uroot', '-e', 'SHOW SLAVE STATUS\\G']).toString();
}

function sql(port: number, statement: string): string {
  return execFileSync('mariadb', ['-h127.0.0.1', `-P${port}`, '-uroot', '-N', '-e', statement]).toString();
}

async function topology(semiSync: boolean): Promise<FailoverTopology> {
  let applierBlock: mysql.Connection | undefined;
  const common = ['--log-bin=mariadb-bin', '--binlog-format=ROW', '--innodb-flush-log-at-trx-commit=1', '--sync-binlog=1'];
  // The primary waits for the replica's acknowledgement longer than the outage lasts. Its
  // semi-sync side is switched on only once set up: with no replica yet, every commit
  // (the helper's CREATE DATABASE) would wait out the timeout.
  const primary = await startMariadb([
    ...common,
    '--server-id=1',
    '--rpl-semi-sync-master-wait-point=AFTER_SYNC',
    '--rpl-semi-sync-master-timeout=60000',
  ]);
  const replica = await startMariadb([
    ...common,
    '--server-id=2',
    '--log-slave-updates',
    ...(semiSync ? ['--rpl-semi-sync-slave-enabled=ON'] : []),
  ]);
  if (semiSync) sql(primary.port, 'SET GLOBAL rpl_semi_sync_master_enabled = ON;');
  sql(
    replica.port,
    `CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=${primary.port}, MASTER_USER='root', MASTER_PASSWORD='', MASTER_USE_GTID=slave_pos; START SLAVE;`,
  );
  for (let i = 0; semiSync && i < 100 && !/\t1$/m.test(sql(primary.port, "SHOW STATUS LIKE 'Rpl_semi_sync_master_clients'")); i++) {
    await new Promise((r) => setTimeout(r, 100));
  }
  if (semiSync) expect(sql(primary.port, "SHOW STATUS LIKE 'Rpl_semi_sync_master_clients'")).toMatch(/\t1$/m);
  for (
    let i = 0;
    i < 100 &&
    !/Yes\s+Yes/.test(slaveStatus(replica.port).replace(/.*Slave_IO_Running: (\w+)[\s\S]*Slave_SQL_Running: (\w+)[\s\S]*/, '$1 $2'));
    i++
  ) {
    await new Promise((r) => setTimeout(r, 100));
  }
  const vip = await startTcpSwitch(primary.port);
  const dir = mkdtempSync(path.join(tmpdir(), 'idlease-ha-mariadb-'));
  current = { primary, replica, vip, dir };
  return {
    dir,
    vip,
    primaryPort: primary.port,
    standbyPort: replica.port,
    url: (port) => `mysql://root@127.0.0.1:${port}/test`,
    // The link to the replica is cut: its receiver (IO thread) stops, the process and the applier
    // keep running. In GTID mode MariaDB discards the relay log when a replication thread starts
    // after both were stopped (a replica restart, or STOP SLAVE then START SLAVE SQL_THREAD:
    // checked by hand, Relay_Log_Space back to 256), so what the replica acknowledged but had
    // not applied would be lost — with the primary dead, those leases are gone. This test used
    // to restart the replica here and found 2,000 duplicate IDs in two runs of four, whenever the
    // applier lagged. To make that lag certain, a read lock holds the applier back from a second
    // before the cut until the promotion.
    async stopStandby() {
      applierBlock = await mysql.createConnection({ host: '127.0.0.1', port: replica.port, user: 'root' });
      await applierBlock.query('FLUSH TABLES WITH READ LOCK');
      await sleep(1_000); // the point: a second of events received but not applied
      sql(replica.port, 'STOP SLAVE IO_THREAD;');
    },
    killPrimary: () => primary.kill(),
    async promoteStandby() {
      await applierBlock?.end();
      // Apply everything the replica received (and, semi-synchronously, acknowledged) before it
      // stops replicating and takes writes: STOP SLAVE then RESET SLAVE ALL delete the relay log.
      const status = slaveStatus(replica.port);
      const received = /Gtid_IO_Pos:[ \t]*(\S+)/.exec(status)?.[1];
      if (!received) throw new Error(`no Gtid_IO_Pos in SHOW SLAVE STATUS:\n${status}`);
      const waited = sql(replica.port, `SELECT MASTER_GTID_WAIT('${received}', 120);`).trim();
      if (waited !== '0')
        throw new Error(`the replica did not apply what it received (${received}) within 120 s: MASTER_GTID_WAIT returned ${waited}`);
      sql(replica.port, 'STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only = OFF;');
    },
  };
}

describe('segment allocators through a MariaDB failover (HA)', () => {
  it('semi-synchronous replication (AFTER_SYNC): zero duplicates, every failed call a typed error', async () => {
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

  it('asynchronous replication, no bump: zero duplicates (the first lease on the promoted replica jumps by the failover gap)', async () => {
    const { results } = await runFailover(await topology(false));
    expectNoDuplicates('MariaDB async failover, no bump', results);
  }, 120_000);

  it('asynchronous replication, the switch moved at once, fresh processes leasing first and old ones holding seconds of IDs, no bump: zero duplicates', async () => {
    const { results } = await runFailover(await topology(false), { immediate: true });
    expectNoDuplicates('MariaDB async failover, immediate switch, no bump', results);
  }, 120_000);
});

/**
 * Issue 31 item 2: a ticket server failing over to an asynchronous replica, the switch moved at
 * once. The old processes draw on through the failover (a draw is one statement, nothing is held in
 * memory), so the first draws on the promoted replica are theirs, from a counter behind what they
 * issued; a fresh process joins. Only the fence in the draw keeps those tickets from repeating.
 */
async function runTicketFailover(t: FailoverTopology) {
  const knex = connect(t.url(t.vip.port), { poolMax: 1 });
  await migrate(knex, { segments: false, tickets: true });
  await knex.destroy();
  const start = (name: string) =>
    startHaProcess<{ ids: number; errors: Record<string, number>; untyped: number }>(TICKET_WORKER, name, t.dir, {
      urls: [t.url(t.vip.port)],
      callers: 4,
      statementTimeoutMs: 1_000,
      timeoutMs: 3_000,
      backoffMaxMs: 500,
    });
  const old = [start('old0'), start('old1'), start('old2')];
  await sleep(3_000); // the point: the old processes draw tickets with both servers in step
  await t.stopStandby();
  await sleep(3_000); // the point: tickets only the primary has, which the promoted replica never sees
  await t.killPrimary();
  await t.promoteStandby();
  t.vip.pointTo(t.standbyPort);
  const fresh = [start('fresh0')];
  await sleep(5_000); // the point: old and fresh processes draw on the promoted replica, where repeats would be
  stopHaWorkers(t.dir);
  return Promise.all([...old, ...fresh].map((w) => w.done));
}

describe('ticket servers through an asynchronous MariaDB failover (HA, issue 31)', () => {
  it('the switch moved at once, no operator step: zero duplicate tickets, every failed call typed', async () => {
    const results = await runTicketFailover(await topology(false));
    const { total, duplicates } = tally(results);
    const why = results.map((r) => `${r.name}: ${r.ids} tickets, errors ${JSON.stringify(r.errors)}, untyped ${r.untyped}`).join('\n');
    console.log(`MariaDB ticket failover, immediate switch: ${total} tickets, ${duplicates} duplicates\n${why}`);
    expect(duplicates, why).toBe(0);
    expect(
      results.every(
        (r) =>
          r.ids > 0 && r.untyped === 0 && Object.keys(r.errors).every((c) => ERROR_CATEGORIES[c as IdleaseErrorCode] === 'unavailable'),
      ),
      why,
    ).toBe(true);
    // Two callers share a process and its file, so ordering within a file is not asserted.
  }, 120_000);
});

describe('snowflake allocators through an asynchronous MariaDB failover (HA, issue 24)', () => {
  it("fresh processes that claim the old holders' worker ids on the promoted standby wait out a lease first: zero duplicates, every fresh ID above every old one of its worker id", async () => {
    await expectSafeSnowflakeFailover('MariaDB', await topology(false));
  }, 120_000);
});
