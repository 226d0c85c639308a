/**
 * Which database instance a statement runs on, as SQL text the statement evaluates on the server
 * (never read from the connection string: a router, a pool or a VIP decides where it lands).
 * Every mechanism that must notice a failover on its own reads it here: snowflake claims compare
 * it with the worker table's marker, segment leases and ticket draws with the instance that served
 * the row last, in the same statement.
 */
import type { Flavor } from './detect.js';
import { perDialect, type PerDialect } from './flavor.js';

/**
 * PGlite's instance. A directory is open in one process at a time (embedded/lock.ts) and nothing
 * replicates it, so its history never forks: claims do not report it, leases never jump on it.
 */
export const PGLITE_INSTANCE = 'pglite';

/**
 * The instance for snowflake claims (rare statements, so it may read the control file and the
 * status table), as text that changes when the history of writes may have forked:
 * - PostgreSQL: the system identifier (shared by a primary and its physical standbys) and the
 *   current timeline (a promotion or a point-in-time recovery starts a new one);
 * - MariaDB: `@@server_id` (replication needs every server's to differ) and the second the server
 *   started (Uptime counts from it, against the statement's own start: exact, no jitter), so an
 *   old primary restarted and promoted again is a new instance too;
 * - PGlite: PGLITE_INSTANCE;
 * - MariaDB Galera (`wsrep_on`): the cluster's state UUID. Commits are certified by the whole
 *   cluster before they return, so a node's death loses nothing: every node is the same history.
 */
export function instanceExpression(flavor: Flavor): string {
  return perDialect(flavor, INSTANCE);
}

/** The timeline of the WAL being written, as 8 hex digits; fails on a standby ("recovery is in progress"). */
const PG_TIMELINE = 'substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)';

/**
 * The instance for leases and draws, which run on the hot path: only what costs nothing to read.
 * Measured here: pg_control_system() reads the control file (~40 µs a statement, ~9 % of a lease),
 * MariaDB's status table ~65–300 µs (up to 80 % of a 0.37 ms lease); the timeline, `@@server_id`
 * and `@@wsrep_cluster_name` are a few µs. What that leaves out, and why it is enough:
 * - PostgreSQL, the system identifier: a promotion or a PITR starts a new timeline, which is what
 *   forks a history; a logical restore elsewhere is a restore (docs/failover.md: bump it);
 * - MariaDB, the start second: a restart of a durable server (innodb_flush_log_at_trx_commit = 1,
 *   the default) loses nothing; every other server has its own server_id;
 * - Galera, the state UUID: the cluster name names one certified history just as well, and a node
 *   joining or leaving changes neither.
 */
export function leaseInstanceExpression(flavor: Flavor): string {
  return perDialect(flavor, LEASE_INSTANCE);
}

const mariadbStatus = (name: string) => `(SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = '${name}')`;

const INSTANCE: PerDialect<string> = {
  mysql: `IF(@@global.wsrep_on = 1, CONCAT('galera:', ${mariadbStatus('WSREP_CLUSTER_STATE_UUID')}), CONCAT('mariadb:', @@server_id, ':', CAST(UNIX_TIMESTAMP() - CAST(${mariadbStatus('UPTIME')} AS SIGNED) AS SIGNED)))`,
  // PGlite is told apart by the database itself: idlease's own embedded knex client speaks
  // the postgres flavor, so the executor's flavor cannot say it.
  postgres: `CASE WHEN version() LIKE '%PGlite%' THEN '${PGLITE_INSTANCE}' ELSE 'pg:' || (SELECT system_identifier::text FROM pg_control_system()) || ':' || ${PG_TIMELINE} END`,
};

/**
 * How many promotions lie between the instance that served a row last and this one, for the jump
 * (segments.ts PG_HOPS does the same in SQL): PostgreSQL timelines count them, at least 1 and at most
 * 1,000; anything else (MariaDB server_ids, which have no order; a row from before the fence) is 1.
 */
export function instanceHops(from: string | null, here: string): number {
  const timeline = (instance: string | null) =>
    instance !== null && /^pg:tl[0-9A-Fa-f]{8}$/.test(instance) ? parseInt(instance.slice(5), 16) : undefined;
  const a = timeline(from);
  const b = timeline(here);
  return a === undefined || b === undefined ? 1 : Math.min(1_000, Math.max(1, b - a));
}

const LEASE_INSTANCE: PerDialect<string> = {
  mysql: `IF(@@global.wsrep_on = 1, CONCAT('galera:', @@global.wsrep_cluster_name), CONCAT('mariadb:', @@server_id))`,
  // PGlite has a timeline too (always 1: nothing promotes it), so it needs no case of its own here.
  postgres: `'pg:tl' || ${PG_TIMELINE}`,
};
