/**
 * How far next_id()'s time field strays from clock_timestamp() under issue 12's scenario (e):
 * all at once, on a private server (prepared transactions need max_prepared_transactions > 0),
 * one transaction that called next_id() sits idle, one stays prepared, an n-row INSERT … SELECT
 * runs, and 16 sessions insert single rows flat out. Lag per row, as the bound test measures it
 * (test/helpers/next-id-load.ts): |time field − clock_timestamp() right after the draw|.
 *
 * The test asserts the bound (p99 ≤ 10 ms, max ≤ 50 ms with 16 busy sessions on 2 cores); this
 * prints the figures. Part of `npm run bench -- next-id`.
 */
import { connect } from '../src/connect.js';
import { nextIdLoad, type Lag } from '../test/helpers/next-id-load.js';
import { startPostgres } from '../test/helpers/servers.js';

const LAG_ROWS = Number(process.env.IDLEASE_BENCH_LAG_ROWS ?? 3_000_000);
const IDLE_SECONDS = Number(process.env.IDLEASE_BENCH_LAG_SECONDS ?? 20);
const SESSIONS = 16;

export interface LagUnderLoad {
  readonly description: string;
  readonly bulk: Lag;
  readonly single: Lag;
}

export async function lagUnderLoad(): Promise<LagUnderLoad> {
  const pg = await startPostgres({ settings: { max_prepared_transactions: '2', max_connections: '40' } });
  const admin = connect(pg.url, { poolMax: 2 });
  try {
    const load = nextIdLoad(pg.url, admin);
    const since = await load.install('lag');
    const end = await load.prepared('lag', 'idl_bench_lag');
    try {
      const idle = load.idleInTransaction('lag', IDLE_SECONDS * 1000);
      // then() once: a knex query runs again each time it is awaited.
      const bulk = admin.raw(`INSERT INTO lag.t (s, x) SELECT -1, g FROM generate_series(1, ?) g`, [LAG_ROWS]).then(() => undefined);
      await Promise.all([idle, bulk, load.inserters(pg.url, 'lag', SESSIONS, Promise.all([idle, bulk]))]);
    } finally {
      await end();
    }
    return {
      description: `a transaction idle for ${IDLE_SECONDS} s and a prepared one (both called next_id()), a ${LAG_ROWS.toLocaleString('en')}-row INSERT … SELECT and ${SESSIONS} single-row sessions, all at once`,
      bulk: await load.lagOf('lag', since, 's < 0'),
      single: await load.lagOf('lag', since, 's >= 0'),
    };
  } finally {
    await admin.raw(`ROLLBACK PREPARED 'idl_bench_lag'`).catch(() => undefined);
    await admin.destroy();
    await pg.destroy();
  }
}
