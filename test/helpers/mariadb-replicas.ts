/**
 * MariaDB GTID replication between private servers (test/helpers/servers.ts), done the way a
 * failover manager and a DBA do it: a replica rebuilt from a consistent dump of its source, and a
 * promotion that loses the old primary's last writes on purpose (the applier held, the receiver
 * cut) so that the new primary's copy of every sequence and row trails what was handed out.
 * Used by the failover sequences (test/ha/next-id-mariadb-failover.test.ts) and the chaos run.
 * Asynchronous (child processes, not execFileSync): a chaos run's sampler and fault timers go on
 * while a dump runs.
 */
import { spawn } from 'node:child_process';
import mysql from 'mysql2/promise';
import { sleep } from './wait.js';

/** Run a MariaDB client tool to completion; its stdout, or an error carrying its stderr. */
function tool(file: string, args: readonly string[], input?: NodeJS.ReadableStream): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, { stdio: [input ? 'pipe' : 'ignore', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    let err = '';
    child.stdout!.on('data', (b: Buffer) => out.push(b));
    child.stderr!.on('data', (b: Buffer) => (err += b.toString()));
    if (input) input.pipe(child.stdin!);
    child.once('error', reject);
    child.once('close', (code) =>
      code === 0 ? resolve(Buffer.concat(out)) : reject(new Error(`${file} ${args.join(' ')} exited ${code}: ${err.trim()}`)),
    );
  });
}

/** Statements on the server at `port` as root, through the mariadb client; its tab-separated output. */
export async function mariadbSql(port: number, statements: string): Promise<string> {
  return (await tool('mariadb', ['-h127.0.0.1', `-P${port}`, '-uroot', '-N', '-e', statements])).toString();
}

/**
 * Empty `target` and make it a replica of `source` from a consistent dump carrying its GTID
 * position, routines and events (`--routines --events`, as docs/next-id.md tells a DBA).
 * The dump restores idlease's ticker ENABLED; it is left as replication leaves an event
 * (SLAVESIDE_DISABLED), so that only a failover manager enables it on promotion.
 */
export async function rebuildReplica(target: number, source: number): Promise<void> {
  await mariadbSql(
    target,
    'STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only = ON; SET sql_log_bin = 0; DROP DATABASE IF EXISTS test; RESET MASTER;',
  );
  const dump = spawn(
    'mariadb-dump',
    [
      '-h127.0.0.1',
      `-P${source}`,
      '-uroot',
      '--single-transaction',
      '--gtid',
      '--master-data=1',
      '--skip-add-locks',
      '--events',
      '--routines',
      '--databases',
      'test',
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let dumpErr = '';
  dump.stderr.on('data', (b: Buffer) => (dumpErr += b.toString()));
  const dumped = new Promise<void>((resolve, reject) =>
    dump.once('close', (code) =>
      code === 0 ? resolve() : reject(new Error(`mariadb-dump from ${source} exited ${code}: ${dumpErr.trim()}`)),
    ),
  );
  await Promise.all([tool('mariadb', ['-h127.0.0.1', `-P${target}`, '-uroot'], dump.stdout), dumped]);
  await mariadbSql(target, 'SET sql_log_bin = 0; ALTER EVENT test.idlease_next_id_tick DISABLE ON SLAVE;');
  await mariadbSql(
    target,
    `CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=${source}, MASTER_USER='root', MASTER_PASSWORD='', MASTER_USE_GTID=slave_pos; START SLAVE;`,
  );
}

/** Wait until `replica` has applied everything its receiver got (MASTER_GTID_WAIT on Gtid_IO_Pos). */
export async function applyReceived(replica: number): Promise<void> {
  const received = /Gtid_IO_Pos:[ \t]*(\S*)/.exec(await mariadbSql(replica, 'SHOW SLAVE STATUS\\G'))?.[1] ?? '';
  if (received === '') return;
  const waited = (await mariadbSql(replica, `SELECT MASTER_GTID_WAIT('${received}', 120);`)).trim();
  if (waited !== '0') throw new Error(`replica on ${replica} did not apply up to ${received} within 120 s (MASTER_GTID_WAIT: ${waited})`);
}

export interface Promotion {
  /** The replica to promote. */
  readonly to: number;
  /** SIGKILL the old primary: called once the new primary has stopped receiving. */
  readonly killOld: () => Promise<void>;
  /** How long the old primary writes on, lost to the new one, before it is killed. */
  readonly loseMs: number;
  /** Enable idlease's ticker on the new primary, as MaxScale's handle_events does. */
  readonly enableEvents: boolean;
}

/**
 * An asynchronous failover that loses writes for certain: `to`'s applier is held (FLUSH TABLES WITH
 * READ LOCK) and its receiver stopped, the old primary writes on for `loseMs` and is killed; `to`
 * applies what it had received, leaves replication and takes writes. The caller moves its VIP.
 */
export async function promoteLosingWrites(p: Promotion): Promise<void> {
  const block = await mysql.createConnection({ host: '127.0.0.1', port: p.to, user: 'root' });
  try {
    await block.query('FLUSH TABLES WITH READ LOCK');
    await sleep(300); // the applier holds the lock before the receiver is stopped
    await mariadbSql(p.to, 'STOP SLAVE IO_THREAD');
    await sleep(p.loseMs); // the point: the old primary writes on, lost to `to`
    await p.killOld();
  } finally {
    await block.end().catch(() => block.destroy());
  }
  await applyReceived(p.to);
  await mariadbSql(p.to, 'STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only = OFF;');
  if (p.enableEvents) await mariadbSql(p.to, 'ALTER EVENT test.idlease_next_id_tick ENABLE;');
}
