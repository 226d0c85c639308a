/**
 * SQL for the worker-id lease table (snowflake allocators). One statement per call, values
 * bound, identifiers validated by the caller and quoted here. Expiry is always compared with
 * the database's clock (now()/NOW(3)): hosts disagree about the time, the database is one judge.
 */
import type { Knex } from 'knex';
import { IdleaseError, isIdleaseError } from '../errors.js';
import { toBigInt, toInt32 } from '../ids.js';
import { type Flavor, ownObject, ownObjectName, ownSchema, quoteIdent } from './detect.js';
import { retryConflicts } from './conflicts.js';
import { isMissingTable, knexCatalogQuery, notMigratedError, olderInstallSchema, relationExists } from './missing-object.js';
import { affectedRows, rowsOf } from './results.js';

export interface WorkerTableRef {
  readonly schema: string | undefined;
  readonly table: string;
}

export interface WorkerTarget {
  readonly flavor: Flavor;
  readonly ref: WorkerTableRef;
}

/**
 * `max_time_ms` is the highest Unix millisecond any holder of the id may have put into an ID
 * (a bound written before use). Claims never lower it: it outlives holders, which is what
 * lets the next holder start above the last one whatever either host's clock says.
 */
export function workerTableDdl(flavor: Flavor, ref: WorkerTableRef): { up: string[]; down: string[] } {
  const t = ownObject(flavor, ref.schema, ref.table);
  if (flavor === 'mysql') {
    return {
      up: [
        `CREATE TABLE IF NOT EXISTS ${t} (
  worker_group varchar(128) NOT NULL,
  worker_id int NOT NULL,
  holder_token char(32) NOT NULL,
  holder_host varchar(255) NOT NULL DEFAULT '',
  holder_pid int NOT NULL DEFAULT 0,
  holder_started_at timestamp(3) NULL,
  lease_expires_at timestamp(3) NOT NULL,
  max_time_ms bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (worker_group, worker_id),
  CONSTRAINT ${quoteIdent(flavor, ref.table + '_worker_id_ck')} CHECK (worker_id >= 0)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
      ],
      down: [`DROP TABLE IF EXISTS ${t}`],
    };
  }
  return {
    up: [
      `CREATE TABLE IF NOT EXISTS ${t} (
  worker_group varchar(128) NOT NULL,
  worker_id integer NOT NULL CHECK (worker_id >= 0),
  holder_token char(32) NOT NULL,
  holder_host varchar(255) NOT NULL DEFAULT '',
  holder_pid integer NOT NULL DEFAULT 0,
  holder_started_at timestamptz,
  lease_expires_at timestamptz NOT NULL,
  max_time_ms bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (worker_group, worker_id)
)`,
    ],
    down: [`DROP TABLE IF EXISTS ${t}`],
  };
}

export interface WorkerHolder {
  /** Random per claim: renew and release match on it, so a holder can only touch its own lease. */
  readonly token: string;
  readonly host: string;
  readonly pid: number;
  readonly startedAt: Date;
}

export interface WorkerClaim {
  readonly workerId: number;
  /** The previous holders' recorded bound (0 for a fresh id): issue only above it. */
  readonly maxTimeMs: bigint;
}

export interface WorkerRow {
  readonly group: string;
  readonly workerId: number;
  readonly host: string;
  readonly pid: number;
  readonly startedAt: Date | null;
  readonly leaseExpiresAt: Date;
  readonly maxTimeMs: bigint;
  /** Whether the lease is unexpired by the database's clock at the time of the read. */
  readonly alive: boolean;
}

async function translate(err: unknown, knex: Knex, t: WorkerTarget): Promise<unknown> {
  if (!isMissingTable(err)) return err;
  const schema = ownSchema(t.flavor, t.ref.schema);
  const explicitSchema = t.ref.schema !== undefined && t.flavor !== 'mysql';
  const customTable = t.ref.table !== 'idlease_workers';
  const options = [...(explicitSchema ? [`schema: '${t.ref.schema}'`] : []), `workers: ${customTable ? `{ table: '${t.ref.table}' }` : 'true'}`];
  return notMigratedError({
    what: `The worker table ${ownObjectName(t.flavor, t.ref.schema, t.ref.table)} does not exist.`,
    call: `migrate(knex, { ${options.join(', ')} })`,
    flags: [...(explicitSchema ? [`--schema ${t.ref.schema}`] : []), customTable ? `--workers-table ${t.ref.table}` : '--workers'].join(' '),
    olderIn: await olderInstallSchema(
      knexCatalogQuery(knex, t.flavor),
      t.flavor !== 'mysql', t.ref.schema !== undefined, schema ?? '', t.ref.table,
    ),
    ownSchema: schema,
    cause: err,
  });
}

async function run(knex: Knex, t: WorkerTarget, sql: string, values: readonly Knex.RawBinding[]): Promise<unknown> {
  try {
    return await knex.raw(sql, values);
  } catch (err) {
    throw await translate(err, knex, t);
  }
}

const table = (t: WorkerTarget) => ownObject(t.flavor, t.ref.schema, t.ref.table);

/**
 * THE claim: one INSERT that takes the lowest id of the group that is either expired or was
 * never used, and on a row that exists takes it over only while it is still expired (two
 * claimers of one id: the second finds it alive and changes nothing). `max_time_ms` is kept,
 * so the claimer learns the previous holders' bound. Returns undefined when nothing was taken
 * (all ids alive, or a race lost: the caller counts and retries).
 */
export async function claimWorkerId(
  knex: Knex, t: WorkerTarget, group: string, maxWorkerId: number, holder: WorkerHolder, ttlMs: number,
): Promise<WorkerClaim | undefined> {
  const tb = table(t);
  // The lowest candidate: expired rows, and the first gap (0, or one past an existing id).
  const candidate = `SELECT MIN(c.id) AS id FROM (
    SELECT worker_id AS id FROM ${tb} WHERE worker_group = ? AND lease_expires_at < NOW_EXPR
    UNION ALL
    SELECT g.id FROM (SELECT 0 AS id UNION ALL SELECT worker_id + 1 FROM ${tb} WHERE worker_group = ?) g
     WHERE g.id <= ? AND NOT EXISTS (SELECT 1 FROM ${tb} x WHERE x.worker_group = ? AND x.worker_id = g.id)
  ) c`;
  if (t.flavor === 'mysql') {
    const now = 'NOW(3)';
    const sql = `INSERT INTO ${tb} (worker_group, worker_id, holder_token, holder_host, holder_pid, holder_started_at, lease_expires_at, max_time_ms)
SELECT ?, pick.id, ?, ?, ?, ?, ${now} + INTERVAL ? * 1000 MICROSECOND, 0 FROM (${candidate.replaceAll('NOW_EXPR', now)}) pick WHERE pick.id IS NOT NULL
ON DUPLICATE KEY UPDATE
  holder_token = IF(lease_expires_at < ${now}, VALUES(holder_token), holder_token),
  holder_host = IF(lease_expires_at < ${now}, VALUES(holder_host), holder_host),
  holder_pid = IF(lease_expires_at < ${now}, VALUES(holder_pid), holder_pid),
  holder_started_at = IF(lease_expires_at < ${now}, VALUES(holder_started_at), holder_started_at),
  lease_expires_at = IF(lease_expires_at < ${now}, VALUES(lease_expires_at), lease_expires_at)`;
    // Column order matters in MySQL's ON DUPLICATE KEY UPDATE: lease_expires_at goes last, so
    // every condition above still reads the old expiry.
    // Claimers racing for the same gap deadlock on InnoDB's gap locks; the loser changed nothing.
    await retryConflicts(() => run(knex, t, sql, [
      group, holder.token, holder.host, holder.pid, holder.startedAt, ttlMs, group, group, maxWorkerId, group,
    ]));
    const res = await run(knex, t, `SELECT worker_id, CAST(max_time_ms AS CHAR) AS max_time_ms FROM ${tb} WHERE worker_group = ? AND holder_token = ?`, [group, holder.token]);
    const row = rowsOf(t.flavor, res)[0];
    return row && { workerId: toInt32(row.worker_id, 'worker_id'), maxTimeMs: toBigInt(row.max_time_ms, 'max_time_ms') };
  }
  const now = 'now()';
  const sql = `INSERT INTO ${tb} AS w (worker_group, worker_id, holder_token, holder_host, holder_pid, holder_started_at, lease_expires_at, max_time_ms)
SELECT ?, pick.id, ?, ?, ?, ?, ${now} + make_interval(secs => ?::float8 / 1000), 0 FROM (${candidate.replaceAll('NOW_EXPR', now)}) pick WHERE pick.id IS NOT NULL
ON CONFLICT (worker_group, worker_id) DO UPDATE SET
  holder_token = EXCLUDED.holder_token, holder_host = EXCLUDED.holder_host, holder_pid = EXCLUDED.holder_pid,
  holder_started_at = EXCLUDED.holder_started_at, lease_expires_at = EXCLUDED.lease_expires_at
  WHERE w.lease_expires_at < ${now}
RETURNING worker_id, max_time_ms::text AS max_time_ms`;
  const res = await run(knex, t, sql, [group, holder.token, holder.host, holder.pid, holder.startedAt, ttlMs, group, group, maxWorkerId, group]);
  const row = rowsOf(t.flavor, res)[0];
  return row && { workerId: toInt32(row.worker_id, 'worker_id'), maxTimeMs: toBigInt(row.max_time_ms, 'max_time_ms') };
}

/**
 * Extend our own lease and raise the recorded bound. Matches on the token, not on expiry: a
 * lease that lapsed but nobody took is still only ours, so renewing it is safe. False → the
 * id was taken over (or released): the holder must stop and claim again.
 */
export async function renewWorkerId(
  knex: Knex, t: WorkerTarget, group: string, workerId: number, token: string, ttlMs: number, maxTimeMs: bigint,
): Promise<boolean> {
  const tb = table(t);
  const sql =
    t.flavor === 'mysql'
      ? `UPDATE ${tb} SET lease_expires_at = NOW(3) + INTERVAL ? * 1000 MICROSECOND, max_time_ms = GREATEST(max_time_ms, CAST(? AS SIGNED)) WHERE worker_group = ? AND worker_id = ? AND holder_token = ?`
      : `UPDATE ${tb} SET lease_expires_at = now() + make_interval(secs => ?::float8 / 1000), max_time_ms = GREATEST(max_time_ms, CAST(? AS bigint)) WHERE worker_group = ? AND worker_id = ? AND holder_token = ?`;
  const res = await run(knex, t, sql, [ttlMs, maxTimeMs.toString(), group, workerId, token]);
  // MySQL counts a row whose values did not change as 0 affected; the expiry always moves (NOW(3)), except within one ms.
  if (affectedRows(t.flavor, res) === 1) return true;
  if (t.flavor !== 'mysql') return false;
  const check = await run(knex, t, `SELECT 1 AS ok FROM ${tb} WHERE worker_group = ? AND worker_id = ? AND holder_token = ?`, [group, workerId, token]);
  return rowsOf(t.flavor, check).length === 1;
}

/**
 * Give the id back now (expiry in the past). `usedMaxTimeMs` replaces the recorded bound: a
 * holder that has stopped issuing knows exactly the highest time it used, which is usually far
 * below the bound it recorded ahead (now + ttl + lead), so the next holder need not wait that out.
 */
export async function releaseWorkerId(knex: Knex, t: WorkerTarget, group: string, workerId: number, token: string, usedMaxTimeMs: bigint): Promise<boolean> {
  const tb = table(t);
  const past = t.flavor === 'mysql' ? `'1970-01-02 00:00:00'` : `'epoch'::timestamptz`;
  const big = t.flavor === 'mysql' ? 'CAST(? AS SIGNED)' : 'CAST(? AS bigint)';
  const res = await run(knex, t, `UPDATE ${tb} SET lease_expires_at = ${past}, max_time_ms = ${big} WHERE worker_group = ? AND worker_id = ? AND holder_token = ?`, [usedMaxTimeMs.toString(), group, workerId, token]);
  return affectedRows(t.flavor, res) === 1;
}

/** Rows of one group (or all groups), each with `alive` judged by the database's clock. */
/** Leases not yet expired by the database's clock; none when the table does not exist (a down migration's check). */
export async function liveWorkerLeases(knex: Knex, t: WorkerTarget): Promise<WorkerRow[]> {
  const query = knexCatalogQuery(knex, t.flavor);
  if (!(await relationExists(query, t.flavor !== 'mysql', table(t)))) return [];
  try {
    return (await listWorkerRows(knex, t)).filter((r) => r.alive);
  } catch (err) {
    if (isIdleaseError(err, 'NOT_MIGRATED')) return [];
    throw err;
  }
}

export async function listWorkerRows(knex: Knex, t: WorkerTarget, group?: string): Promise<WorkerRow[]> {
  const tb = table(t);
  const cols =
    t.flavor === 'mysql'
      ? 'worker_group, worker_id, holder_host, holder_pid, holder_started_at, lease_expires_at, CAST(max_time_ms AS CHAR) AS max_time_ms, (lease_expires_at >= NOW(3)) AS alive'
      : 'worker_group, worker_id, holder_host, holder_pid, holder_started_at, lease_expires_at, max_time_ms::text AS max_time_ms, (lease_expires_at >= now()) AS alive';
  const where = group === undefined ? '' : ' WHERE worker_group = ?';
  const res = await run(knex, t, `SELECT ${cols} FROM ${tb}${where} ORDER BY worker_group, worker_id`, group === undefined ? [] : [group]);
  return rowsOf(t.flavor, res).map((r) =>
    Object.freeze({
      group: String(r.worker_group),
      workerId: toInt32(r.worker_id, 'worker_id'),
      host: String(r.holder_host),
      pid: toInt32(r.holder_pid, 'holder_pid'),
      startedAt: r.holder_started_at == null ? null : new Date(r.holder_started_at as string),
      leaseExpiresAt: new Date(r.lease_expires_at as string),
      maxTimeMs: toBigInt(r.max_time_ms, 'max_time_ms'),
      alive: r.alive === true || Number(r.alive) === 1,
    }),
  );
}
