/**
 * The load scenarios of issue 12 (idle and prepared transactions that called next_id(), bulk
 * inserts, many single-row sessions) and the per-row lag they are judged by. Shared by
 * test/integration/next-id-bound.test.ts (which asserts the bound) and bench/next-id.ts
 * (which reports the figures), so both measure the same thing the same way.
 *
 * Lag is measured per row: the table's `at` column defaults to clock_timestamp(), evaluated right
 * after next_id() ran for that row; |lag| counts running ahead too.
 */
import type { Knex } from 'knex';
import { connect } from '../../src/connect.js';
import { migrate } from '../../src/migrations/migrate.js';
import { sleep } from './wait.js';

export interface Lag {
  rows: number;
  distinct: number;
  notIncreasing: number;
  p50: number;
  p99: number;
  max: number;
  /** Rows whose time field is before the given instant (ms since 1970), e.g. the install. */
  beforeStart: number;
}

export interface NextIdLoad {
  /** next_id() in `schema` and a table `schema.t (id, at, s, x)`; returns the install time (ms since 1970). */
  install(schema: string, layout?: object): Promise<number>;
  lagOf(schema: string, since: number, where?: string): Promise<Lag>;
  /** n sessions (through `url`) inserting single rows flat out until `until` settles; session s = base + i, order x. */
  inserters(url: string, schema: string, n: number, until: Promise<unknown>, base?: number): Promise<void>;
  /** A session that called next_id() and then sits idle in its transaction for ms. */
  idleInTransaction(schema: string, ms: number): Promise<void>;
  /** A prepared transaction that called next_id(), left prepared; returns a function that ends it. */
  prepared(schema: string, gid: string): Promise<() => Promise<void>>;
}

/** `admin` is a connection to the database at `url` (the server needs max_prepared_transactions > 0 for prepared()). */
export function nextIdLoad(url: string, admin: Knex): NextIdLoad {
  return {
    async install(schema, layout = {}) {
      await migrate(admin, { segments: false, nextId: { schema, ...layout } });
      await admin.raw(
        `CREATE TABLE ${schema}.t (id bigint NOT NULL DEFAULT ${schema}.next_id(), at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(), s int NOT NULL, x bigint NOT NULL)`,
      );
      return Date.now();
    },

    async lagOf(schema, since, where = 'true') {
      const res = await admin.raw(
        `SELECT count(*)::int AS rows, count(DISTINCT id)::int AS distinct_ids,
                (SELECT count(*) FROM (SELECT id <= lag(id) OVER (PARTITION BY s ORDER BY x) AS bad FROM ${schema}.t WHERE s >= 0 AND ${where}) q WHERE bad)::int AS not_increasing,
                percentile_cont(0.5) WITHIN GROUP (ORDER BY abs(l)) AS p50,
                percentile_cont(0.99) WITHIN GROUP (ORDER BY abs(l)) AS p99,
                max(abs(l)) AS max,
                count(*) FILTER (WHERE ms < ?)::int AS before_start
           FROM (SELECT id, extract(epoch FROM at - ${schema}.id_timestamp(id)) * 1000 AS l,
                        extract(epoch FROM ${schema}.id_timestamp(id)) * 1000 AS ms
                   FROM ${schema}.t WHERE ${where}) q`,
        [since],
      );
      const r = res.rows[0];
      return {
        rows: r.rows,
        distinct: r.distinct_ids,
        notIncreasing: r.not_increasing,
        p50: Number(r.p50),
        p99: Number(r.p99),
        max: Number(r.max),
        beforeStart: r.before_start,
      };
    },

    async inserters(target, schema, n, until, base = 0) {
      let done = false;
      void until.finally(() => (done = true));
      const sessions = Array.from({ length: n }, () => connect(target, { poolMax: 1 }));
      try {
        await Promise.all(
          sessions.map(async (k, i) => {
            for (let x = 0; !done; x++) await k.raw(`INSERT INTO ${schema}.t (s, x) VALUES (?, ?)`, [base + i, x]);
          }),
        );
      } finally {
        await Promise.all(sessions.map((k) => k.destroy()));
      }
    },

    async idleInTransaction(schema, ms) {
      const k = connect(url, { poolMax: 1 });
      try {
        await k.transaction(async (trx) => {
          await trx.raw(`SELECT ${schema}.next_id()`);
          await sleep(ms);
        });
      } finally {
        await k.destroy();
      }
    },

    async prepared(schema, gid) {
      const k = connect(url, { poolMax: 1 });
      await k.raw('BEGIN');
      await k.raw(`SELECT ${schema}.next_id()`);
      await k.raw(`PREPARE TRANSACTION '${gid}'`);
      await k.destroy();
      return async () => {
        await admin.raw(`ROLLBACK PREPARED '${gid}'`);
      };
    },
  };
}
