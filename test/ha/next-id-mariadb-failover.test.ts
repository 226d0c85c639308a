/**
 * Issue 37: next_id() on MariaDB through an asynchronous failover with writers at the switch and
 * no operator step. Primary and replica (GTID, ROW, event scheduler on both), writers inserting
 * through a TCP switch that stands in for a VIP. The replica's applier is held back and its
 * receiver cut, so the old primary hands out IDs for a few seconds that the replica never gets
 * (the ticker moves the primary's sequence on; the replica's copy stays behind, and its ticker
 * arrives SLAVESIDE_DISABLED). The primary is SIGKILLed, the replica promoted, the switch moved,
 * and the writers carry on: no ID any writer was given twice. The fence is in the column
 * DEFAULT (IDs made off the home server run the failover gap ahead); without it this run repeats
 * IDs (145 in a run with the fence term removed from the DEFAULT).
 * A ticker re-enabled on the new primary (as MaxScale's handle_events would) stays idle there.
 * Then `next-id attach` on the new primary makes it home, and IDs stay unique across that too.
 */
import { execFileSync } from 'node:child_process';
import mysql from 'mysql2/promise';
import { afterAll, describe, expect, it } from 'vitest';
import { runMain } from '../helpers/in-process.js';
import { startMariadb, type ServerInstance } from '../helpers/servers.js';
import { startTcpSwitch, type TcpSwitch } from '../helpers/tcp-switch.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const sql = (port: number, statement: string) =>
  execFileSync('mariadb', ['-h127.0.0.1', `-P${port}`, '-uroot', '-N', '-e', statement]).toString();

let primary: ServerInstance | undefined;
let replica: ServerInstance | undefined;
let vip: TcpSwitch | undefined;
afterAll(async () => {
  await vip?.close();
  await Promise.allSettled([primary?.destroy(), replica?.destroy()]);
});

/** A writer: 500-row INSERT … RETURNING through the switch, reconnecting on any error; keeps the IDs it was given. */
function writer(port: () => number, w: number, stop: () => boolean) {
  const given: bigint[] = [];
  let errors = 0;
  const values = Array.from({ length: 500 }, () => `(${w})`).join(',');
  const done = (async () => {
    while (!stop()) {
      let c: mysql.Connection | undefined;
      try {
        c = await mysql.createConnection({ host: '127.0.0.1', port: port(), user: 'root', database: 'test', connectTimeout: 2_000 });
        while (!stop()) {
          const [rows] = (await c.query(`INSERT INTO ids (w) VALUES ${values} RETURNING CAST(id AS CHAR) AS id`)) as unknown as [
            Array<{ id: string }>,
          ];
          for (const r of rows) given.push(BigInt(r.id));
        }
      } catch {
        errors++;
        await sleep(50);
      } finally {
        await c?.end().catch(() => undefined);
        c?.destroy();
      }
    }
  })();
  return { given, done, errors: () => errors };
}

describe('next_id() on MariaDB through an asynchronous failover', () => {
  it('writers at the switch, primary killed, replica promoted with no idlease step: 0 duplicates; attach on the new primary keeps them unique', async () => {
    const common = ['--log-bin=mariadb-bin', '--binlog-format=ROW', '--event-scheduler=ON', '--log-slave-updates'];
    primary = await startMariadb([...common, '--server-id=1']);
    replica = await startMariadb([...common, '--server-id=2']);
    const p = primary.port;
    const r = replica.port;
    sql(
      r,
      `CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=${p}, MASTER_USER='root', MASTER_PASSWORD='', MASTER_USE_GTID=slave_pos; START SLAVE;`,
    );
    const url = (port: number) => `mysql://root@127.0.0.1:${port}/test`;
    expect((await runMain(['--url', url(p), 'migrate', '--no-segments', '--next-id', '--shard', '3'])).err).toBe('');
    sql(p, 'CREATE TABLE test.ids (id bigint NOT NULL, w int NOT NULL, KEY (id))');
    expect((await runMain(['--url', url(p), 'next-id', 'attach', 'ids'])).err).toBe('');
    vip = await startTcpSwitch(p);

    let stopping = false;
    const writers = [1, 2, 3, 4].map((w) =>
      writer(
        () => vip!.port,
        w,
        () => stopping,
      ),
    );
    await sleep(2_000);
    // Lag made certain: the applier held back, then the receiver cut; the primary writes on.
    const block = await mysql.createConnection({ host: '127.0.0.1', port: r, user: 'root' });
    await block.query('FLUSH TABLES WITH READ LOCK');
    await sleep(1_000);
    // Through a connection, not the mariadb client: execFileSync would stop this process's
    // writers for the ~200 ms a client takes to start, and the lost window would begin late.
    const control = await mysql.createConnection({ host: '127.0.0.1', port: r, user: 'root' });
    await control.query('STOP SLAVE IO_THREAD');
    await control.end();
    await sleep(3_000);
    await primary.kill();
    await block.end();
    const received = /Gtid_IO_Pos:[ \t]*(\S+)/.exec(
      execFileSync('mariadb', ['-h127.0.0.1', `-P${r}`, '-uroot', '-e', 'SHOW SLAVE STATUS\\G']).toString(),
    )?.[1];
    expect(received).toBeDefined();
    expect(sql(r, `SELECT MASTER_GTID_WAIT('${received}', 120);`).trim()).toBe('0');
    sql(r, 'STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only = OFF;');
    vip.pointTo(r);
    await sleep(3_000);

    // Still fenced: the promoted replica is not home, and says how to make it so.
    const fenced = JSON.parse((await runMain(['--url', url(r), '--json', 'next-id', 'status'])).out);
    expect(fenced).toMatchObject({ homeServerId: 1, serverId: 2, shard: 3 });
    // A failover manager that re-enables the events it finds (MaxScale's handle_events) starts
    // the ticker here too. Off home it must stay idle: moving the sequence to the clock would
    // make the fenced IDs track the clock a gap ahead, which the old home's own IDs reach a gap
    // after a fail-back. So the sequence keeps trailing the clock until attach runs here.
    sql(r, 'ALTER EVENT test.idlease_next_id_tick ENABLE;');
    await sleep(2_500);
    const idle = JSON.parse((await runMain(['--url', url(r), '--json', 'next-id', 'status'])).out);
    expect(idle.lagMs, 'the ticker moved the sequence on a server that is not home').toBeGreaterThan(1_500);
    // Attach here: this server becomes home, its ticker runs, writers keep going.
    expect((await runMain(['--url', url(r), 'next-id', 'attach', 'ids'])).err).toBe('');
    await sleep(2_000);
    stopping = true;
    await Promise.all(writers.map((w) => w.done));

    const all = writers.flatMap((w) => w.given);
    const seen = new Set<bigint>();
    let duplicates = 0;
    for (const id of all) {
      if (seen.has(id)) duplicates++;
      seen.add(id);
    }
    const [[after]] = (await (async () => {
      const c = await mysql.createConnection({ host: '127.0.0.1', port: r, user: 'root', database: 'test' });
      try {
        return await c.query('SELECT COUNT(*) AS n, COUNT(DISTINCT id) AS d, SUM(id <= 0) AS np FROM ids');
      } finally {
        await c.end();
      }
    })()) as unknown as [[{ n: number; d: number; np: string }]];
    const home = JSON.parse((await runMain(['--url', url(r), '--json', 'next-id', 'status'])).out);
    const why = `given ${all.length} IDs (${writers.map((w) => `${w.given.length}/${w.errors()} errors`).join(', ')}), duplicates ${duplicates}; on the new primary ${after.n} rows, ${after.d} distinct`;
    console.log(`next_id() MariaDB failover: ${why}`);
    expect(duplicates, why).toBe(0);
    expect(Number(after.n), why).toBe(Number(after.d));
    expect(Number(after.np), why).toBe(0);
    expect(all.length, why).toBeGreaterThan(2_000);
    expect(home).toMatchObject({ homeServerId: 2, serverId: 2 });
  }, 180_000);
});
