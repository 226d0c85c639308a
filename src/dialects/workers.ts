/**
 * SQL for the worker-id lease table (snowflake allocators). One statement per call, values
 * bound, identifiers validated by the caller and quoted here. Expiry is always compared with
 * the database's clock (now()/NOW(3)): hosts disagree about the time, the database is one judge.
 */
import { isIdleaseError } from '../errors.js';
import {
  asText,
  bigParam,
  fromDual,
  hasReturning,
  affectedCountsUnchanged,
  intParam,
  msParamTimestamp,
  now as nowExpr,
  onConflictDoNothing,
  onConflictUpdate,
  pastTimestamp,
  perDialect,
  type PerDialect,
  plusMsParam,
  textParam,
  timestampMs,
} from './flavor.js';
import { toBigInt, toInt32 } from '../ids.js';
import { type Flavor, isPostgres, namedSchema, ownObject, ownObjectName, ownSchema, quoteIdent } from './detect.js';
import { instanceExpression, PGLITE_INSTANCE } from './instance.js';
import { retryConflicts } from './conflicts.js';
import { executorCatalogQuery, isMissingTable, notMigratedError, olderInstallSchema, relationExists } from './missing-object.js';
import type { SqlExecutor, SqlResult, SqlValue } from './sql.js';

export interface WorkerTableRef {
  readonly schema: string | undefined;
  readonly table: string;
}

/**
 * `max_time_ms` is the highest Unix millisecond any holder of the id may have put into an ID
 * (a bound written before use). Claims never lower it: it outlives holders, which is what
 * lets the next holder start above the last one whatever either host's clock says.
 */
export function workerTableDdl(flavor: Flavor, ref: WorkerTableRef): { up: string[]; down: string[] } {
  const t = ownObject(flavor, ref.schema, ref.table);
  const marker = instanceMarkerDdl(flavor, ref);
  return {
    up: [perDialect(flavor, WORKER_TABLE)(t, quoteIdent(flavor, ref.table + '_worker_id_ck')), ...marker.up, markFreshTable(flavor, ref)],
    down: [...marker.down, `DROP TABLE IF EXISTS ${t}`],
  };
}

/** CREATE TABLE, given the quoted table and the quoted name of its worker_id constraint. */
const WORKER_TABLE: PerDialect<(t: string, check: string) => string> = {
  mysql: (t, check) => `CREATE TABLE IF NOT EXISTS ${t} (
  worker_group varchar(128) NOT NULL,
  worker_id int NOT NULL,
  holder_token char(32) NOT NULL,
  holder_host varchar(255) NOT NULL DEFAULT '',
  holder_pid int NOT NULL DEFAULT 0,
  holder_started_at timestamp(3) NULL,
  lease_expires_at timestamp(3) NOT NULL,
  max_time_ms bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (worker_group, worker_id),
  CONSTRAINT ${check} CHECK (worker_id >= 0)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
  postgres: (t) => `CREATE TABLE IF NOT EXISTS ${t} (
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
};

/**
 * The instance marker's table is named after the worker table: `<table>_instance`, so the worker
 * table's name is held to 54 characters (BAD_CONFIG above that, from validateWorkerTable).
 */
export function instanceMarkerTable(table: string): string {
  return `${table}_instance`;
}

/**
 * One row (id 1): the database instance on which the worker table's history is known to be
 * complete. A claimer on another instance (a promoted standby, a restored backup: the marker it
 * finds names the old primary) cannot tell whether a live holder's last claims and renewals were
 * lost, so it waits out a lease before issuing and then writes its own instance here
 * (docs/failover.md#snowflake-worker-ids-at-a-failover). No row: history unknown too.
 */
export function instanceMarkerDdl(flavor: Flavor, ref: WorkerTableRef): { up: string[]; down: string[] } {
  const m = ownObject(flavor, ref.schema, instanceMarkerTable(ref.table));
  const up = perDialect(flavor, MARKER_TABLE)(m, quoteIdent(flavor, ref.table + '_one_ck'));
  return { up: [up], down: [`DROP TABLE IF EXISTS ${m}`] };
}

/** CREATE TABLE of the marker, given the quoted table and the quoted name of its one-row constraint. */
const MARKER_TABLE: PerDialect<(m: string, check: string) => string> = {
  mysql: (m, check) => `CREATE TABLE IF NOT EXISTS ${m} (
  id smallint NOT NULL,
  instance varchar(255) NOT NULL,
  written_at timestamp(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (id),
  CONSTRAINT ${check} CHECK (id = 1)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
  postgres: (m) => `CREATE TABLE IF NOT EXISTS ${m} (
  id smallint NOT NULL PRIMARY KEY CHECK (id = 1),
  instance varchar(255) NOT NULL,
  written_at timestamptz NOT NULL DEFAULT now()
)`,
};

/**
 * A worker table migrate has just created holds no lease anywhere: its history is complete on
 * this instance, so the first claims need not wait. A table that already has rows (created
 * before, bookkeeping lost) is left unmarked.
 */
function markFreshTable(flavor: Flavor, ref: WorkerTableRef): string {
  const t = ownObject(flavor, ref.schema, ref.table);
  const m = ownObject(flavor, ref.schema, instanceMarkerTable(ref.table));
  return `INSERT INTO ${m} (id, instance) SELECT 1, ${instanceExpression(flavor)}${fromDual(flavor)} WHERE NOT EXISTS (SELECT 1 FROM ${t}) ${onConflictDoNothing(flavor, 'id')}`;
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
  /**
   * The database instance the claim was written on (instanceExpression), and the one the worker
   * table's marker names (null: no marker). When they differ the table's history may be missing
   * a live holder's last claims or renewals, and the claimer waits out a lease before issuing.
   * A store that leaves `instance` undefined never makes the allocator wait.
   */
  readonly instance?: string;
  readonly markedInstance?: string | null;
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

/** A worker table on one client: the statement texts for its flavor, built once. */
export interface WorkerTarget {
  readonly db: SqlExecutor;
  readonly ref: WorkerTableRef;
  readonly text: Readonly<Record<'claim' | 'claimed' | 'renew' | 'owned' | 'release' | 'list' | 'listGroup' | 'mark', string>>;
}

/**
 * Times travel as Unix milliseconds, never as a driver's Date: each client converts dates
 * with its own time-zone rules (mysql2 in the process's zone, pg's text through the raw
 * parsers), while epoch milliseconds computed by the database mean the same on every one.
 * int8 goes out as a decimal string cast in SQL and comes back cast to text, as for segments.
 */
export function workerTarget(db: SqlExecutor, ref: WorkerTableRef): WorkerTarget {
  const flavor = db.flavor;
  const tb = ownObject(flavor, ref.schema, ref.table);
  const now = nowExpr(flavor);
  const big = bigParam(flavor);
  const expiry = plusMsParam(flavor, now);
  // Every computed column is named: knex hands rows over as objects, where two unnamed columns would collide.
  const toMs = (col: string) => `${timestampMs(flavor, col)} AS ${col}`;
  const text = (col: string) => `${asText(flavor, col)} AS ${col}`;
  const mine = 'worker_group = ? AND worker_id = ? AND holder_token = ?';
  const marker = ownObject(flavor, ref.schema, instanceMarkerTable(ref.table));
  const instance = instanceExpression(flavor);
  // What a claim answers besides the id: the instance it ran on and the one the marker names.
  const instances = `${instance} AS instance, (SELECT m.instance FROM ${marker} m WHERE m.id = 1) AS marked_instance`;
  // The lowest candidate: expired rows, and the first gap (0, or one past an existing id).
  const candidate = `SELECT MIN(c.id) AS id FROM (
    SELECT worker_id AS id FROM ${tb} WHERE worker_group = ? AND lease_expires_at < ${now}
    UNION ALL
    SELECT g.id FROM (SELECT 0 AS id UNION ALL SELECT worker_id + 1 FROM ${tb} WHERE worker_group = ?) g
     WHERE g.id <= ? AND NOT EXISTS (SELECT 1 FROM ${tb} x WHERE x.worker_group = ? AND x.worker_id = g.id)
  ) c`;
  const insert = `(worker_group, worker_id, holder_token, holder_host, holder_pid, holder_started_at, lease_expires_at, max_time_ms)
SELECT ?, pick.id, ?, ?, ${intParam(flavor)}, ${msParamTimestamp(flavor)}, ${expiry}, 0 FROM (${candidate}) pick WHERE pick.id IS NOT NULL`;
  const columns = `worker_group, worker_id, holder_host, holder_pid, ${toMs('holder_started_at')}, ${toMs('lease_expires_at')}, ${text('max_time_ms')}, CASE WHEN lease_expires_at >= ${now} THEN 1 ELSE 0 END AS alive`;
  const list = `SELECT ${columns} FROM ${tb}`;
  return Object.freeze({
    db,
    ref,
    text: Object.freeze({
      claim: `${perDialect(flavor, CLAIM)(tb, insert, now)}${hasReturning(flavor) ? `\nRETURNING worker_id, ${text('max_time_ms')}, ${instances}` : ''}`,
      claimed: `SELECT worker_id, ${text('max_time_ms')}, ${instances} FROM ${tb} WHERE worker_group = ? AND holder_token = ?`,
      renew: `UPDATE ${tb} SET lease_expires_at = ${expiry}, max_time_ms = GREATEST(max_time_ms, ${big}) WHERE ${mine}`,
      owned: `SELECT 1 FROM ${tb} WHERE ${mine}`,
      release: `UPDATE ${tb} SET lease_expires_at = ${pastTimestamp(flavor)}, max_time_ms = ${big} WHERE ${mine}`,
      list: `${list} ORDER BY worker_group, worker_id`,
      listGroup: `${list} WHERE worker_group = ? ORDER BY worker_group, worker_id`,
      // Only while still on the instance the claimer waited on: after yet another failover the
      // marker keeps naming an older instance, and the next claimer waits again.
      mark: `INSERT INTO ${marker} (id, instance, written_at) SELECT 1, ${textParam(flavor)}, ${now}${fromDual(flavor)} WHERE ${instance} = ?
${onConflictUpdate(flavor, 'id', ['instance', 'written_at'])}`,
    }),
  });
}

/**
 * THE claim's INSERT: takes the candidate id, and on a row that exists takes it over only while it
 * is still expired. A conditional upsert, per dialect as a whole. Column order matters in MySQL's
 * ON DUPLICATE KEY UPDATE: lease_expires_at goes last, so every condition above it still reads the
 * old expiry.
 */
const CLAIM: PerDialect<(tb: string, insert: string, now: string) => string> = {
  mysql: (tb, insert, now) => `INSERT INTO ${tb} ${insert}
ON DUPLICATE KEY UPDATE
  holder_token = IF(lease_expires_at < ${now}, VALUES(holder_token), holder_token),
  holder_host = IF(lease_expires_at < ${now}, VALUES(holder_host), holder_host),
  holder_pid = IF(lease_expires_at < ${now}, VALUES(holder_pid), holder_pid),
  holder_started_at = IF(lease_expires_at < ${now}, VALUES(holder_started_at), holder_started_at),
  lease_expires_at = IF(lease_expires_at < ${now}, VALUES(lease_expires_at), lease_expires_at)`,
  postgres: (tb, insert, now) => `INSERT INTO ${tb} AS w ${insert}
ON CONFLICT (worker_group, worker_id) DO UPDATE SET
  holder_token = EXCLUDED.holder_token, holder_host = EXCLUDED.holder_host, holder_pid = EXCLUDED.holder_pid,
  holder_started_at = EXCLUDED.holder_started_at, lease_expires_at = EXCLUDED.lease_expires_at
  WHERE w.lease_expires_at < ${now}`,
};

async function translate(err: unknown, t: WorkerTarget): Promise<unknown> {
  if (!isMissingTable(err)) return err;
  const flavor = t.db.flavor;
  const schema = ownSchema(flavor, t.ref.schema);
  const explicitSchema = namedSchema(flavor, t.ref.schema);
  const customTable = t.ref.table !== 'idlease_workers';
  const options = [
    ...(explicitSchema !== undefined ? [`schema: '${explicitSchema}'`] : []),
    `workers: ${customTable ? `{ table: '${t.ref.table}' }` : 'true'}`,
  ];
  return notMigratedError({
    what: `The worker table ${ownObjectName(flavor, t.ref.schema, t.ref.table)} or its instance marker ${ownObjectName(flavor, t.ref.schema, instanceMarkerTable(t.ref.table))} does not exist.`,
    call: `migrate(knex, { ${options.join(', ')} })`,
    flags: [
      ...(explicitSchema !== undefined ? [`--schema ${explicitSchema}`] : []),
      customTable ? `--workers-table ${t.ref.table}` : '--workers',
    ].join(' '),
    olderIn: await olderInstallSchema(
      executorCatalogQuery(t.db),
      isPostgres(flavor),
      t.ref.schema !== undefined,
      schema ?? '',
      t.ref.table,
    ),
    ownSchema: schema,
    cause: err,
  });
}

async function run(t: WorkerTarget, text: string, values: readonly SqlValue[]): Promise<SqlResult> {
  try {
    return await t.db.run(text, values);
  } catch (err) {
    throw await translate(err, t);
  }
}

function toClaim(row: readonly unknown[] | undefined): WorkerClaim | undefined {
  return (
    row && {
      workerId: toInt32(row[0], 'worker_id'),
      maxTimeMs: toBigInt(row[1], 'max_time_ms'),
      ...(row[2] == null || row[2] === PGLITE_INSTANCE
        ? {}
        : { instance: String(row[2]), markedInstance: row[3] == null ? null : String(row[3]) }),
    }
  );
}

/**
 * Record that the worker table's history is complete on `instance`: the caller claimed there and
 * has waited out a lease since, so every holder whose claims or renewals went to an older instance
 * has fenced itself. Written only while the database still is that instance.
 */
export async function markWorkerInstance(t: WorkerTarget, instance: string): Promise<void> {
  await run(t, t.text.mark, [instance, instance]);
}

/**
 * THE claim: one INSERT that takes the lowest id of the group that is either expired or was
 * never used, and on a row that exists takes it over only while it is still expired (two
 * claimers of one id: the second finds it alive and changes nothing). `max_time_ms` is kept,
 * so the claimer learns the previous holders' bound. Returns undefined when nothing was taken
 * (all ids alive, or a race lost: the caller counts and retries).
 */
export async function claimWorkerId(
  t: WorkerTarget,
  group: string,
  maxWorkerId: number,
  holder: WorkerHolder,
  ttlMs: number,
): Promise<WorkerClaim | undefined> {
  const values = [group, holder.token, holder.host, holder.pid, holder.startedAt.getTime(), ttlMs, group, group, maxWorkerId, group];
  if (hasReturning(t.db.flavor)) return toClaim((await run(t, t.text.claim, values)).rows[0]);
  // Claimers racing for the same gap deadlock on InnoDB's gap locks; the loser changed nothing.
  await retryConflicts(() => run(t, t.text.claim, values));
  // MySQL has no RETURNING: the outcome is read back by the claim's own token. The INSERT
  // committed before this read, so any connection of a pool sees it; no shared session needed.
  return toClaim((await run(t, t.text.claimed, [group, holder.token])).rows[0]);
}

/**
 * Extend our own lease and raise the recorded bound. Matches on the token, not on expiry: a
 * lease that lapsed but nobody took is still only ours, so renewing it is safe. False → the
 * id was taken over (or released): the holder must stop and claim again.
 */
export async function renewWorkerId(
  t: WorkerTarget,
  group: string,
  workerId: number,
  token: string,
  ttlMs: number,
  maxTimeMs: bigint,
): Promise<boolean> {
  const res = await run(t, t.text.renew, [ttlMs, maxTimeMs.toString(), group, workerId, token]);
  // MySQL counts a row whose values did not change as 0 affected; the expiry always moves (NOW(3)), except within one ms.
  if (res.affected === 1) return true;
  if (affectedCountsUnchanged(t.db.flavor)) return false;
  return (await run(t, t.text.owned, [group, workerId, token])).rows.length === 1;
}

/**
 * Give the id back now (expiry in the past). `usedMaxTimeMs` replaces the recorded bound: a
 * holder that has stopped issuing knows exactly the highest time it used, which is usually far
 * below the bound it recorded ahead (now + ttl + lead), so the next holder need not wait that out.
 */
export async function releaseWorkerId(
  t: WorkerTarget,
  group: string,
  workerId: number,
  token: string,
  usedMaxTimeMs: bigint,
): Promise<boolean> {
  const res = await run(t, t.text.release, [usedMaxTimeMs.toString(), group, workerId, token]);
  return res.affected === 1;
}

/** Leases not yet expired by the database's clock; none when the table does not exist (a down migration's check). */
export async function liveWorkerLeases(db: SqlExecutor, ref: WorkerTableRef): Promise<WorkerRow[]> {
  const t = workerTarget(db, ref);
  if (!(await relationExists(executorCatalogQuery(db), isPostgres(db.flavor), ownObject(db.flavor, ref.schema, ref.table)))) return [];
  try {
    return (await listWorkerRows(t)).filter((r) => r.alive);
  } catch (err) {
    if (isIdleaseError(err, 'NOT_MIGRATED')) return [];
    throw err;
  }
}

const msDate = (value: unknown, what: string) => new Date(Number(toBigInt(value, what)));

/** Rows of one group (or all groups), each with `alive` judged by the database's clock. */
export async function listWorkerRows(t: WorkerTarget, group?: string): Promise<WorkerRow[]> {
  const res = group === undefined ? await run(t, t.text.list, []) : await run(t, t.text.listGroup, [group]);
  return res.rows.map(([worker_group, workerId, host, pid, startedAt, expiresAt, maxTimeMs, alive]) =>
    Object.freeze({
      group: String(worker_group),
      workerId: toInt32(workerId, 'worker_id'),
      host: String(host),
      pid: toInt32(pid, 'holder_pid'),
      startedAt: startedAt == null ? null : msDate(startedAt, 'holder_started_at'),
      leaseExpiresAt: msDate(expiresAt, 'lease_expires_at'),
      maxTimeMs: toBigInt(maxTimeMs, 'max_time_ms'),
      alive: Number(alive) === 1,
    }),
  );
}
