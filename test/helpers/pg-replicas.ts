/**
 * A PostgreSQL streaming failover that loses the old primary's last writes for certain: the
 * standby's WAL receiver is stopped (primary_conninfo emptied and reloaded, as a link that drops
 * does), the old primary commits on for `loseMs`, is killed, and the standby is promoted with
 * only what it had received: a new timeline whose copy of every row trails what was handed out.
 * The replacement standby is a fresh pg_basebackup of the new primary (what Patroni does when
 * pg_rewind cannot be used). Used by the chaos run (test/chaos/run.ts).
 */
import pg from 'pg';
import { startPostgres, type PostgresInstance } from './servers.js';
import { sleep, waitFor } from './wait.js';

async function query(port: number, statement: string): Promise<pg.QueryResult> {
  const client = new pg.Client({ host: '127.0.0.1', port, user: 'postgres', database: 'postgres', connectionTimeoutMillis: 5_000 });
  await client.connect();
  try {
    return await client.query(statement);
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** A new hot standby streaming from the primary on `primaryPort`. */
export function startStandby(primaryPort: number): Promise<PostgresInstance> {
  return startPostgres({ standbyOf: primaryPort, settings: { hot_standby: 'on' } });
}

export async function promotePgLosingWrites(p: {
  readonly standby: PostgresInstance;
  readonly killOld: () => Promise<void>;
  readonly loseMs: number;
}): Promise<void> {
  await query(p.standby.port, "ALTER SYSTEM SET primary_conninfo = ''");
  await query(p.standby.port, 'SELECT pg_reload_conf()');
  // The receiver stops on the reload: wait until it has, so the writes below are lost to it.
  await waitFor(async () => Number((await query(p.standby.port, 'SELECT count(*) AS n FROM pg_stat_wal_receiver')).rows[0].n) === 0, {
    timeoutMs: 10_000,
    what: `the WAL receiver of the standby on ${p.standby.port} to stop after primary_conninfo was emptied`,
  });
  await sleep(p.loseMs); // the point: the old primary writes on, lost to the standby
  await p.killOld();
  await p.standby.promote();
}
