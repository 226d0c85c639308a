/** SQL for the segment table: DDL here; the lease and admin statements sit beside it. */
import { retryConflicts } from './conflicts.js';
import { withDeadline } from '../runtime/deadline.js';
import { isMissingColumn } from './driver-errors.js';
import {
  executorCatalogQuery,
  isMissingTable,
  notMigratedError,
  olderTableError,
  olderInstallSchema,
  relationExists,
  type CatalogQuery,
} from './missing-object.js';
import type { SqlExecutor, SqlResult, SqlValue } from './sql.js';
import { IdleaseError } from '../errors.js';
import { MAX_INT64, toBigInt } from '../ids.js';
import { type Flavor, ownObject, ownObjectName, ownSchema, quoteIdent } from './detect.js';
import { leaseInstanceExpression } from './instance.js';
import { DEFAULT_FAILOVER_GAP, MAX_FAILOVER_GAP } from '../failover-gap.js';

export interface SegmentTableRef {
  readonly schema: string | undefined;
  readonly table: string;
}

export function segmentTableDdl(flavor: Flavor, ref: SegmentTableRef): { up: string[]; down: string[] } {
  const t = ownObject(flavor, ref.schema, ref.table);
  if (flavor === 'mysql') {
    return {
      up: [
        `CREATE TABLE IF NOT EXISTS ${t} (
  tag varchar(128) NOT NULL,
  max_id bigint NOT NULL DEFAULT 0,
  step int NOT NULL DEFAULT 1000,
  description varchar(256) NOT NULL DEFAULT '',
  updated_at timestamp(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
  ${FENCING_COLUMNS.mysql.join(',\n  ')},
  PRIMARY KEY (tag),
  CONSTRAINT ${quoteIdent(flavor, ref.table + '_max_id_ck')} CHECK (max_id >= 0),
  CONSTRAINT ${quoteIdent(flavor, ref.table + '_step_ck')} CHECK (step > 0)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
      ],
      down: [`DROP TABLE IF EXISTS ${t}`],
    };
  }
  return {
    up: [
      `CREATE TABLE IF NOT EXISTS ${t} (
  tag varchar(128) PRIMARY KEY,
  max_id bigint NOT NULL DEFAULT 0 CHECK (max_id >= 0),
  step integer NOT NULL DEFAULT 1000 CHECK (step > 0),
  description varchar(256) NOT NULL DEFAULT '',
  updated_at timestamptz NOT NULL DEFAULT now(),
  ${FENCING_COLUMNS.postgres.join(',\n  ')}
)`,
    ],
    down: [`DROP TABLE IF EXISTS ${t}`],
  };
}

/**
 * The columns that fence a failover, beside max_id: `instance` names the database instance that
 * served the row's last lease (instance.ts); `failover_gap` is the row's jump; `jumps` and
 * `jumped_at` count and date the jumps for `tag list` and metrics.
 *
 * `instance` defaults to the lease's own instance expression, evaluated by the server the row is
 * inserted on: a row inserted by hand (Leaf documents adding a tag with a plain INSERT) or by an
 * app's own migration names where it was made, and its first lease there adds just the step instead
 * of jumping by the gap. Copied to a standby that is promoted later, it names the old instance and
 * still jumps. MariaDB accepts system variables in a DEFAULT expression (not stored functions), so
 * no trigger is needed — and a trigger on this table would hide LAST_INSERT_ID (leaseSegment).
 */
const FENCING_COLUMNS = {
  mysql: [
    `instance varchar(255) NULL DEFAULT (${leaseInstanceExpression('mysql')})`,
    `failover_gap bigint NOT NULL DEFAULT ${DEFAULT_FAILOVER_GAP} CHECK (failover_gap > 0 AND failover_gap <= ${MAX_FAILOVER_GAP})`,
    'jumps int NOT NULL DEFAULT 0',
    'jumped_at timestamp(3) NULL',
  ],
  postgres: [
    `instance varchar(255) DEFAULT (${leaseInstanceExpression('postgres')})`,
    `failover_gap bigint NOT NULL DEFAULT ${DEFAULT_FAILOVER_GAP} CHECK (failover_gap > 0 AND failover_gap <= ${MAX_FAILOVER_GAP})`,
    'jumps integer NOT NULL DEFAULT 0',
    'jumped_at timestamptz',
  ],
};

/**
 * Version 2 of the table, for rows made before the fencing columns: add them, and mark every row
 * with the instance the migration runs on. That is the history the earlier version trusted (an
 * operator bumped rows after a failover), so marking it costs nobody a jump; a row left unmarked
 * would jump once on its first lease, which is safe too.
 */
export function segmentFencingDdl(flavor: Flavor, ref: SegmentTableRef): string[] {
  const t = ownObject(flavor, ref.schema, ref.table);
  const columns = flavor === 'mysql' ? FENCING_COLUMNS.mysql : FENCING_COLUMNS.postgres;
  return [
    ...columns.map((c) => `ALTER TABLE ${t} ADD COLUMN IF NOT EXISTS ${c}`),
    `UPDATE ${t} SET instance = ${leaseInstanceExpression(flavor)} WHERE instance IS NULL`,
  ];
}

/**
 * Version 3, for tables made before `instance` had its DEFAULT: add it (up) or drop it (down).
 * Rows already in the table keep what they hold; a row that names no instance still jumps once.
 */
export function segmentInstanceDefaultDdl(flavor: Flavor, ref: SegmentTableRef): { up: string[]; down: string[] } {
  const t = ownObject(flavor, ref.schema, ref.table);
  return {
    up: [`ALTER TABLE ${t} ALTER COLUMN instance SET DEFAULT (${leaseInstanceExpression(flavor)})`],
    down: [`ALTER TABLE ${t} ALTER COLUMN instance DROP DEFAULT`],
  };
}

// Lease, give-back and tag admin statements. One statement per call (PGlite runs one
// statement per query), values always bound, identifiers validated by the caller and quoted
// here. Each text is built once per table and flavor; any client adapter (src/drivers) runs it.

/** The largest step a row may hold: the `step` column is a 32-bit int. */
export const MAX_ROW_STEP = 2_147_483_647;

export interface SegmentRow {
  readonly tag: string;
  readonly maxId: bigint;
  readonly step: number;
  readonly description: string;
  readonly updatedAt: Date;
  /** The database instance that served the row's last lease, or made the row (null: written as NULL, or made before idlease 0.3 by hand). */
  readonly instance: string | null;
  /** How far the first lease on another instance jumps. */
  readonly failoverGap: bigint;
  /** Failover jumps so far, and when the last one was taken. */
  readonly jumps: number;
  readonly jumpedAt: Date | null;
}

/** A segment table on one client: the statement texts for its flavor, built once. */
export interface SegmentTarget {
  readonly db: SqlExecutor;
  readonly flavor: Flavor;
  readonly ref: SegmentTableRef;
  readonly text: Readonly<
    Record<
      | 'lease'
      | 'fencedLease'
      | 'giveBack'
      | 'read'
      | 'list'
      | 'insert'
      | 'setStep'
      | 'setGap'
      | 'raiseTo'
      | 'raiseBy'
      | 'raiseToTag'
      | 'raiseByTag',
      string
    >
  >;
}

/**
 * int8 never travels as an int8: values go out as decimal strings cast in SQL (MySQL turns a
 * string operand into a DOUBLE otherwise) and come back cast to text, so no type parser a user
 * installed on their pool (pg's setTypeParser(20, parseInt), a default mysql2 pool) can round them.
 */
export function segmentTarget(db: SqlExecutor, ref: SegmentTableRef): SegmentTarget {
  const flavor = db.flavor;
  const tb = ownObject(flavor, ref.schema, ref.table);
  const mysql = flavor === 'mysql';
  const big = mysql ? 'CAST(? AS SIGNED)' : 'CAST(? AS bigint)';
  const touch = mysql ? '' : ', updated_at = now()';
  const limit = MAX_INT64.toString();
  const columns = mysql
    ? 'tag, CAST(max_id AS CHAR) AS max_id, step, description, updated_at, instance, CAST(failover_gap AS CHAR) AS failover_gap, jumps, jumped_at'
    : 'tag, max_id::text AS max_id, step, description, updated_at, instance, failover_gap::text AS failover_gap, jumps, jumped_at';
  const raiseTo = `UPDATE ${tb} SET max_id = ${big}${touch} WHERE max_id < ${big}`;
  const raiseBy = `UPDATE ${tb} SET max_id = max_id + ${big}${touch} WHERE max_id <= ${limit} - ${big}`;
  const here = leaseInstanceExpression(flavor);
  return Object.freeze({
    db,
    flavor,
    ref,
    text: Object.freeze({
      // THE lease, on the instance that served the row last: 0.2's statement plus one guard. A row
      // last leased on another database instance (a promoted standby, whose copy may lack the old
      // primary's latest leases) changes nothing here, and leaseSegment sends `fencedLease` instead.
      // LAST_INSERT_ID(expr) puts the new value in the OK packet's insertId, which mysql2 always
      // delivers exactly (a string past 2^53), whatever the pool's options.
      lease: mysql
        ? `UPDATE ${tb} SET max_id = LAST_INSERT_ID(max_id + ?) WHERE tag = ? AND max_id <= ${limit} - ? AND instance = ${here}`
        : `UPDATE ${tb} SET max_id = max_id + ?${touch} WHERE tag = ? AND max_id <= ${limit} - ? AND instance = ${here} RETURNING max_id::text AS max_id`,
      // The first lease on a new instance: the row first jumps past the next-but-one multiple of its
      // failover_gap — at least the gap above the row it finds, and round, so a person reading IDs
      // sees where a failover was — then moves by the step, and names this instance, in one
      // statement: whoever comes first jumps, the others find it marked (their guarded lease above
      // succeeds; this one, run again, adds just the step). MySQL evaluates SET left to right on the
      // updated row, so `instance` is assigned last.
      fencedLease: mysql
        ? `UPDATE ${tb} SET max_id = LAST_INSERT_ID(IF(instance <=> ${here}, max_id, (max_id DIV failover_gap + 2) * failover_gap) + ?),
  jumps = jumps + IF(instance <=> ${here}, 0, 1), jumped_at = IF(instance <=> ${here}, jumped_at, NOW(3)), instance = ${here}
WHERE tag = ? AND max_id <= ${limit} - ? - IF(instance <=> ${here}, 0, 2 * failover_gap)`
        : `UPDATE ${tb} AS s SET max_id = CASE WHEN s.instance = i.here THEN s.max_id ELSE (s.max_id / s.failover_gap + 2) * s.failover_gap END + CAST(? AS bigint),
  jumps = s.jumps + CASE WHEN s.instance = i.here THEN 0 ELSE 1 END, jumped_at = CASE WHEN s.instance = i.here THEN s.jumped_at ELSE now() END,
  instance = i.here${touch}
FROM (SELECT ${here} AS here) i
WHERE s.tag = ? AND s.max_id <= ${limit} - CAST(? AS bigint) - CASE WHEN s.instance = i.here THEN 0 ELSE 2 * s.failover_gap END
RETURNING s.max_id::text AS max_id`,
      giveBack: `UPDATE ${tb} SET max_id = ${big}${touch} WHERE tag = ? AND max_id = ${big}`,
      read: `SELECT ${columns} FROM ${tb} WHERE tag = ?`,
      list: `SELECT ${columns} FROM ${tb} ORDER BY tag`,
      // A new row is marked with the instance it is made on: its history starts there.
      insert: mysql
        ? `INSERT IGNORE INTO ${tb} (tag, max_id, step, description, failover_gap, instance) VALUES (?, ${big}, ?, ?, ${big}, ${here})`
        : `INSERT INTO ${tb} (tag, max_id, step, description, failover_gap, instance) SELECT ?, ${big}, ?, ?, ${big}, ${here} ON CONFLICT (tag) DO NOTHING`,
      setStep: `UPDATE ${tb} SET step = ?${touch} WHERE tag = ?`,
      setGap: `UPDATE ${tb} SET failover_gap = ${big}${touch} WHERE tag = ?`,
      raiseTo,
      raiseBy,
      raiseToTag: `${raiseTo} AND tag = ?`,
      raiseByTag: `${raiseBy} AND tag = ?`,
    }),
  });
}

/** Missing table → NOT_MIGRATED (what to run); anything else passes through for the caller's retry policy. */
export async function translateSegmentError(err: unknown, ref: SegmentTableRef, flavor: Flavor, query?: CatalogQuery): Promise<unknown> {
  const older = isMissingColumn(err);
  if (!older && !isMissingTable(err)) return err;
  const schema = ownSchema(flavor, ref.schema);
  const flags = [
    ...(ref.schema !== undefined && flavor !== 'mysql' ? [`--schema ${ref.schema}`] : []),
    ...(ref.table !== DEFAULT_TABLE ? [`--segments-table ${ref.table}`] : []),
  ];
  const options = [
    ...(ref.schema !== undefined && flavor !== 'mysql' ? [`schema: '${ref.schema}'`] : []),
    ...(ref.table !== DEFAULT_TABLE ? [`segments: { table: '${ref.table}' }`] : []),
  ];
  const call = `migrate(knex${options.length > 0 ? `, { ${options.join(', ')} }` : ''})`;
  if (older) return olderTableError({ table: ownObjectName(flavor, ref.schema, ref.table), call, flags: flags.join(' '), cause: err });
  return notMigratedError({
    what: `The segment table ${ownObjectName(flavor, ref.schema, ref.table)} does not exist.`,
    call: `migrate(knex${options.length > 0 ? `, { ${options.join(', ')} }` : ''})`,
    flags: flags.join(' '),
    olderIn: query ? await olderInstallSchema(query, flavor !== 'mysql', ref.schema !== undefined, schema ?? '', ref.table) : undefined,
    ownSchema: schema,
    cause: err,
  });
}

/** The same table name as migrations/segments.ts's default (dialects must not import migrations). */
const DEFAULT_TABLE = 'idlease_segments';

async function run(t: SegmentTarget, text: string, values: readonly SqlValue[], timeoutMs?: number): Promise<SqlResult> {
  try {
    const q = t.db.run(text, values);
    return await (timeoutMs ? withDeadline(q, timeoutMs) : q);
  } catch (err) {
    throw await translateSegmentError(err, t.ref, t.flavor, async (sql, values) => (await t.db.run(sql, values)).rows as unknown[][]);
  }
}

/**
 * THE lease: one atomic statement that adds `step` to max_id and returns the new value; the
 * caller owns (end − step, end]. The guard keeps max_id ≤ 2^63−1: undefined means no row
 * changed (the tag has no row, or it is too close to 2^63−1 — readSegmentRow tells which).
 *
 * A deadlock or Galera certification conflict is retried here within the same deadline
 * (conflicts.ts): on Galera every node's processes lease the same hot row.
 */
export async function leaseSegment(t: SegmentTarget, tag: string, step: number, timeoutMs?: number): Promise<bigint | undefined> {
  if (!Number.isSafeInteger(step) || step < 1) throw new IdleaseError('INVARIANT', `lease step must be a positive integer, got ${step}`);
  return retryConflicts(async (left) => {
    let res = await run(t, t.text.lease, [step, tag, step], left);
    // Nothing changed: a row last leased on another instance (fence it now), or no row, or full.
    if ((t.flavor === 'mysql' ? res.affected : res.rows.length) !== 1) res = await run(t, t.text.fencedLease, [step, tag, step], left);
    if (t.flavor === 'mysql') {
      if (res.affected !== 1) return undefined;
      const end = toBigInt(res.insertId, 'max_id (insertId)');
      // max_id + step ≥ 1, so 0 means the OK packet lost LAST_INSERT_ID(expr). MariaDB 10.11 answers
      // 0 for an UPDATE that fired any trigger on the table (an audit trigger, pt-online-schema-change's),
      // whatever the trigger does: the row moved, but where to is unknown here. Fatal, and said so: every
      // retry would move the row again for nothing (the range is abandoned, never served).
      if (end === 0n) {
        throw new IdleaseError(
          'BAD_CONFIG',
          `The lease on ${ownObjectName(t.flavor, t.ref.schema, t.ref.table)} moved max_id, but the server's answer carried no new value ` +
            '(LAST_INSERT_ID(expr) came back 0). A trigger on the segment table hides it on MariaDB: drop the trigger ' +
            '(SHOW TRIGGERS LIKE the table), or run schema-change tools that use triggers elsewhere. The leased range was not handed out.',
        );
      }
      return end;
    }
    const row = res.rows[0];
    return row ? toBigInt(row[0], 'max_id') : undefined;
  }, timeoutMs);
}

/** Compare-and-set give-back: lowers max_id only while it is still exactly our end. */
export async function giveBackSegment(
  t: SegmentTarget,
  tag: string,
  expectedEnd: bigint,
  newMax: bigint,
  timeoutMs?: number,
): Promise<boolean> {
  const res = await run(t, t.text.giveBack, [newMax.toString(), tag, expectedEnd.toString()], timeoutMs);
  return res.affected === 1;
}

const toDate = (v: unknown): Date => (v instanceof Date ? v : new Date(String(v)));

/** Columns in the order `read`/`list` select them. */
function toRow(r: readonly unknown[]): SegmentRow {
  const [tag, maxId, step, description, updatedAt, instance, failoverGap, jumps, jumpedAt] = r;
  return Object.freeze({
    tag: String(tag),
    maxId: toBigInt(maxId, 'max_id'),
    step: Number(step),
    description: String(description ?? ''),
    updatedAt: toDate(updatedAt),
    instance: instance == null ? null : String(instance),
    failoverGap: toBigInt(failoverGap, 'failover_gap'),
    jumps: Number(jumps),
    jumpedAt: jumpedAt == null ? null : toDate(jumpedAt),
  });
}

export async function readSegmentRow(t: SegmentTarget, tag: string, timeoutMs?: number): Promise<SegmentRow | undefined> {
  const r = (await run(t, t.text.read, [tag], timeoutMs)).rows[0];
  return r ? toRow(r) : undefined;
}

/** Every row of a segment table; none when the table does not exist (a down migration's check). */
export async function segmentRowsIfAny(db: SqlExecutor, ref: SegmentTableRef): Promise<SegmentRow[]> {
  const t = segmentTarget(db, ref);
  const query = executorCatalogQuery(db);
  if (!(await relationExists(query, db.flavor !== 'mysql', ownObject(db.flavor, ref.schema, ref.table)))) return [];
  try {
    return (await t.db.run(t.text.list, [])).rows.map(toRow);
  } catch (err) {
    if (isMissingTable(err)) return [];
    throw err;
  }
}

export async function listSegmentRows(t: SegmentTarget): Promise<SegmentRow[]> {
  return (await run(t, t.text.list, [])).rows.map(toRow);
}

/** Insert a tag row; false when it already exists (nothing is changed then). */
export async function insertSegmentRow(
  t: SegmentTarget,
  row: { tag: string; maxId: bigint; step: number; description: string; failoverGap?: bigint },
  timeoutMs?: number,
): Promise<boolean> {
  const gap = (row.failoverGap ?? DEFAULT_FAILOVER_GAP).toString();
  const res = await run(t, t.text.insert, [row.tag, row.maxId.toString(), row.step, row.description, gap], timeoutMs);
  return res.affected === 1;
}

/** Change a row's failover gap; false when the tag has no row. */
export async function updateFailoverGap(t: SegmentTarget, tag: string, gap: bigint): Promise<boolean> {
  const res = await run(t, t.text.setGap, [gap.toString(), tag]);
  if (res.affected === 1) return true;
  return t.flavor === 'mysql' && (await readSegmentRow(t, tag)) !== undefined;
}

/** Change the admin step; false when the tag has no row. */
export async function updateSegmentStep(t: SegmentTarget, tag: string, step: number): Promise<boolean> {
  const res = await run(t, t.text.setStep, [step, tag]);
  if (res.affected === 1) return true;
  // MySQL counts a row whose value did not change as unaffected; tell "same step" from "no row".
  return t.flavor === 'mysql' && (await readSegmentRow(t, tag)) !== undefined;
}

/**
 * Raise max_id, never lower it: to at least `to`, or by `by` (refused past 2^63−1). One
 * statement per call; `tag` undefined means every row. Returns the number of rows changed.
 */
export async function raiseSegmentRows(t: SegmentTarget, tag: string | undefined, raise: { to: bigint } | { by: bigint }): Promise<number> {
  const value = ('to' in raise ? raise.to : raise.by).toString();
  const text =
    'to' in raise ? (tag === undefined ? t.text.raiseTo : t.text.raiseToTag) : tag === undefined ? t.text.raiseBy : t.text.raiseByTag;
  const res = await run(t, text, tag === undefined ? [value, value] : [value, value, tag]);
  return res.affected;
}
