/**
 * The failover fence reads `@@server_id` inside the lease and the ticket draw
 * (src/dialects/instance.ts), so it holds only if a replica's copy of a row names the server the
 * write was made on. With ROW or MIXED logging the value travels as data. With STATEMENT the
 * replica evaluates the expression itself: this shows, on a real primary and replica, that
 * MariaDB's applier evaluates it as the primary's id (it applies each event under the server_id
 * that logged it), for the tag's insert and for the first lease, and that a promoted replica
 * then jumps. If a MariaDB release changed that, this test fails.
 */
import { execFileSync } from 'node:child_process';
import type { Knex } from 'knex';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect } from '../../src/connect.js';
import { migrate } from '../../src/migrations/migrate.js';
import { addTag, createSegmentAllocator } from '../../src/segment/index.js';
import { startMariadb, type ServerInstance } from '../helpers/servers.js';

let primary: ServerInstance;
let replica: ServerInstance;
const handles: Knex[] = [];

function sql(port: number, text: string): string {
  return execFileSync('mariadb', ['-h127.0.0.1', `-P${port}`, '-uroot', '-N', '-B', '-e', text], { encoding: 'utf8' }).trim();
}

function open(inst: ServerInstance): Knex {
  const k = connect(inst.url, { poolMax: 2 });
  handles.push(k);
  return k;
}

/** The replica's copy of a column of the tag's row, once it has applied everything the primary logged. */
async function onReplica(tag: string, column: string): Promise<string> {
  const target = sql(primary.port, 'SELECT @@gtid_binlog_pos');
  for (let i = 0; i < 200 && sql(replica.port, 'SELECT @@gtid_slave_pos') !== target; i++) await new Promise((r) => setTimeout(r, 50));
  expect(sql(replica.port, 'SELECT @@gtid_slave_pos')).toBe(target);
  return sql(replica.port, `SELECT ${column} FROM test.idlease_segments WHERE tag = '${tag}'`);
}

beforeAll(async () => {
  const common = ['--log-bin=mariadb-bin', '--binlog-format=STATEMENT'];
  primary = await startMariadb([...common, '--server-id=1']);
  replica = await startMariadb([...common, '--server-id=2', '--log-slave-updates']);
  sql(
    replica.port,
    `CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=${primary.port}, MASTER_USER='root', MASTER_PASSWORD='', MASTER_USE_GTID=slave_pos; START SLAVE;`,
  );
  await migrate(open(primary));
}, 120_000);

afterAll(async () => {
  await Promise.all(handles.map((k) => k.destroy()));
  await Promise.all([replica?.destroy(), primary?.destroy()]);
});

describe('binlog_format = STATEMENT', () => {
  it('the replica copies the primary id for the insert and the lease; promoted, it jumps', async () => {
    const knex = open(primary);
    await addTag(knex, { tag: 'order', step: 10 });
    // The statement itself is in the binary log, not its rows.
    expect(sql(primary.port, 'SHOW BINLOG EVENTS')).toMatch(
      /Query\t1\t\d+\tuse `test`; INSERT IGNORE INTO `idlease_segments`.*@@server_id/,
    );
    expect(await onReplica('order', 'instance')).toBe('mariadb:1');

    const before = createSegmentAllocator({ knex, tag: 'order', waitTimeoutMs: 5_000 });
    try {
      expect(await before.next()).toBe(1n);
    } finally {
      await before.close();
    }
    expect(await onReplica('order', 'CONCAT(instance, " ", max_id)')).toBe('mariadb:1 1'); // close() gave back the unused 2…10

    // The replica promoted: its first lease finds a row of another instance and jumps past the gap.
    sql(replica.port, 'STOP SLAVE; RESET SLAVE ALL;');
    const after = createSegmentAllocator({ knex: open(replica), tag: 'order', waitTimeoutMs: 5_000 });
    try {
      expect(await after.next()).toBe(2n * 10n ** 10n + 1n);
    } finally {
      await after.close();
    }
  }, 60_000);
});
