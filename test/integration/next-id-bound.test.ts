/**
 * Issue 12: the time field of every next_id() stays within milliseconds of clock_timestamp()
 * whatever other transactions do. Lag is measured per row: the table's next column defaults to
 * clock_timestamp(), read right after next_id() ran for that row; |lag| counts running ahead too.
 *
 * Wall time (2 cores, shared): the 60 s idle transaction of (a) runs as part of (e), together
 * with (b), (c) and (d) at 16 sessions, so the long wait is paid once; (a) and (b) also get 5 s
 * dedicated runs (enough: the first version fell behind by a second per second there, and
 * these runs are what the mutation check uses), (d) 4 s per setting, (f) one round.
 * One private instance (max_prepared_transactions for (b)), pgbouncer in transaction mode.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Knex } from 'knex';
import { startPostgres, type PostgresInstance } from '../helpers/servers.js';
import { startPgBouncer, type PgBouncerInstance } from '../helpers/pgbouncer.js';
import { connect } from '../../src/connect.js';
import { nextIdLoad, type Lag, type NextIdLoad } from '../helpers/next-id-load.js';
import { sleep } from '../helpers/wait.js';

let pg: PostgresInstance;
let bouncer: PgBouncerInstance;
let admin: Knex;
let load: NextIdLoad;
beforeAll(async () => {
  pg = await startPostgres({ settings: { max_prepared_transactions: '4', max_connections: '60' } });
  bouncer = await startPgBouncer({ serverPort: pg.port, poolMode: 'transaction', poolSize: 8 });
  admin = connect(pg.url, { poolMax: 2 });
  load = nextIdLoad(pg.url, admin);
}, 60_000);
afterAll(async () => {
  await admin
    ?.raw(
      `SELECT pg_catalog.pg_terminate_backend(pid) FROM pg_catalog.pg_stat_activity WHERE pid <> pg_catalog.pg_backend_pid() AND backend_type = 'client backend'`,
    )
    .catch(() => undefined);
  for (const gid of ['idl_bound_b', 'idl_bound_e']) await admin?.raw(`ROLLBACK PREPARED '${gid}'`).catch(() => undefined);
  await admin?.destroy();
  await bouncer?.stop();
  await pg?.destroy();
});

function expectBound(l: Lag, p99: number, label: string): void {
  // One line per scenario, so a failure names it and the figures.
  const line = `${label}: rows ${l.rows}, |lag| p50 ${l.p50.toFixed(2)} ms, p99 ${l.p99.toFixed(2)} ms, max ${l.max.toFixed(2)} ms`;
  console.log(line);
  expect(l.rows, line).toBeGreaterThan(0);
  expect(l.distinct, line).toBe(l.rows);
  expect(l.notIncreasing, line).toBe(0);
  expect(l.p99, line).toBeLessThanOrEqual(p99);
  // The worst row: a time field held back shows here as the length of the hold (seconds: (a), (b),
  // (e)'s 60 s), far past this bound. One row alone can also lag by a scheduler slice: a backend
  // preempted between next_id() and the row's clock_timestamp(), 16 of them and pgbouncer on 2
  // cores with the version matrix beside (64 ms once in a CI run, p99 3.7 ms). The p99 bounds the rest.
  expect(l.max, line).toBeLessThanOrEqual(MAX_LAG_MS);
}

/** No row's |lag| above this: a hold shows as seconds; one preempted backend, tens of ms. */
const MAX_LAG_MS = 250;

describe('next_id(): the time field stays within milliseconds of the clock (issue 12)', () => {
  it('(f) 16 sessions starting together on a fresh install: no ID carries a time before the install', { timeout: 60_000 }, async () => {
    const sessions = Array.from({ length: 16 }, () => connect(pg.url, { poolMax: 1 }));
    try {
      await Promise.all(sessions.map((k) => k.raw('SELECT 1'))); // connected, so they do start together
      const installed = await load.install('bf');
      // Each session's first statement compiles the functions and races the others for the first
      // catch-up; 50 rows each so p99 is a percentile (with 3 rows each it was the second-worst
      // row, one descheduled backend), while max still covers every first draw.
      await Promise.all(sessions.map((k, s) => k.raw('INSERT INTO bf.t (s, x) SELECT ?, g FROM generate_series(1, 50) g', [s])));
      const l = await load.lagOf('bf', installed - 5);
      expect(l.beforeStart).toBe(0);
      // 16 backends that each compile the functions at once on 2 cores: the allowance for
      // 16 busy sessions (CPU scheduling alone adds a few ms) applies, p99 ≤ 10 ms.
      expectBound(l, 10, '(f) fresh install, 16 sessions');
    } finally {
      await Promise.all(sessions.map((k) => k.destroy()));
    }
  });

  it('(a) an idle transaction that called next_id() does not hold the time field back (5 s)', { timeout: 60_000 }, async () => {
    const since = await load.install('ba');
    const idle = load.idleInTransaction('ba', 5_000);
    await sleep(100);
    await load.inserters(pg.url, 'ba', 1, idle);
    expectBound(await load.lagOf('ba', since), 5, '(a) idle transaction');
  });

  it('(b) a prepared transaction that called next_id() does not hold the time field back (5 s)', { timeout: 60_000 }, async () => {
    const since = await load.install('bb');
    const end = await load.prepared('bb', 'idl_bound_b');
    try {
      await load.inserters(pg.url, 'bb', 1, sleep(5_000));
    } finally {
      await end();
    }
    expectBound(await load.lagOf('bb', since), 5, '(b) prepared transaction');
  });

  it(
    '(d) 4 and 16 sessions inserting single rows flat out, directly and through pgbouncer (transaction mode)',
    { timeout: 90_000 },
    async () => {
      const since = await load.install('bd');
      await load.inserters(pg.url, 'bd', 4, sleep(4_000), 0);
      expectBound(await load.lagOf('bd', since, 's < 100'), 5, '(d) 4 sessions');
      await load.inserters(pg.url, 'bd', 16, sleep(4_000), 100);
      expectBound(await load.lagOf('bd', since, 's >= 100 AND s < 200'), 10, '(d) 16 sessions');
      // Through pgbouncer a client's statements run on several server sessions: its IDs are unique
      // but need not increase, so only the bound and uniqueness are asserted there.
      await load.inserters(bouncer.via(pg.url), 'bd', 16, sleep(4_000), -1000);
      const viaBouncer = await load.lagOf('bd', since, 's < 0');
      expectBound({ ...viaBouncer, notIncreasing: 0 }, 10, '(d) 16 clients via pgbouncer');
      const all = await load.lagOf('bd', since);
      expect(all.distinct).toBe(all.rows);
    },
  );

  it(
    'bursts faster than 2^sequenceBits per ms run ahead by at most the burst (2-bit sequence: 4 IDs per ms)',
    { timeout: 60_000 },
    async () => {
      const since = await load.install('bburst', { sequenceBits: 2 });
      const n = 4_000;
      await admin.raw(`INSERT INTO bburst.t (s, x) SELECT 0, g FROM generate_series(1, ${n}) g`);
      const l = await load.lagOf('bburst', since);
      expect(l.distinct).toBe(n);
      expect(l.notIncreasing).toBe(0);
      // The time field runs ahead by at most the burst's count over 4 per ms (n / 4 ms), plus the
      // slack; here the clock keeps up with part of it, so the lead is less.
      const ahead = await admin.raw(`SELECT max(extract(epoch FROM bburst.id_timestamp(id) - at) * 1000) AS a FROM bburst.t`);
      const lead = Number(ahead.rows[0].a);
      console.log(`burst of ${n} at 4 per ms: time field ahead by at most ${lead.toFixed(1)} ms (bound ${n / 4} ms)`);
      expect(lead).toBeLessThanOrEqual(n / 4 + 5);
      // Once the burst is over, the clock catches the sequence up and single draws are fresh again.
      await sleep(Math.max(0, lead) + 20);
      const afterAt = Date.now();
      await admin.raw(`INSERT INTO bburst.t (s, x) VALUES (1, 0)`);
      const last = await load.lagOf('bburst', afterAt - 1000, 's = 1');
      expect(last.max).toBeLessThanOrEqual(50);
    },
  );

  it(
    '(e) all at once: an idle transaction (60 s, this is (a) at full length), a prepared one, a 3M-row INSERT … SELECT and 16 single-row sessions',
    { timeout: 150_000 },
    async () => {
      const since = await load.install('be');
      const end = await load.prepared('be', 'idl_bound_e');
      try {
        const idle = load.idleInTransaction('be', 60_000);
        await sleep(100);
        // then() once: a knex query runs again each time it is awaited.
        const bulk = admin.raw(`INSERT INTO be.t (s, x) SELECT -1, g FROM generate_series(1, 3000000) g`).then(() => undefined);
        await Promise.all([idle, bulk, load.inserters(pg.url, 'be', 16, Promise.all([idle, bulk]))]);
      } finally {
        await end();
      }
      expectBound(await load.lagOf('be', since, 's < 0'), 10, '(e) the 3M-row INSERT … SELECT');
      expectBound(await load.lagOf('be', since, 's >= 0'), 10, '(e) 16 single-row sessions');
    },
  );
});
