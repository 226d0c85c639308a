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
import { type Flavor, isPostgres, namedSchema, ownObject, ownObjectName, ownSchema, quoteIdent } from './detect.js';
import {
  affectedCountsUnchanged,
  asText,
  bigParam,
  insertIgnore,
  newValue,
  newValueReturning,
  newValueSet,
  now,
  perDialect,
  type PerDialect,
} from './flavor.js';
import { leaseInstanceExpression } from './instance.js';
import { DEFAULT_FAILOVER_GAP, MAX_FAILOVER_GAP } from '../failover-gap.js';

export interface SegmentTableRef {
  readonly schema: string | undefined;
  readonly table: string;
}

export function segmentTableDdl(flavor: Flavor, ref: SegmentTableRef): { up: string[]; down: string[] } {
  const t = ownObject(flavor, ref.schema, ref.table);
  return {
    up: [perDialect(flavor, SEGMENT_TABLE)(t, (name) => quoteIdent(flavor, ref.table + name))],
    down: [`DROP TABLE IF EXISTS ${t}`],
  };
}

/** CREATE TABLE, given the quoted table and the quoted name of a constraint from its suffix. */
const SEGMENT_TABLE: PerDialect<(t: string, constraint: (suffix: string) => string) => string> = {
  mysql: (t, constraint) => `CREATE TABLE IF NOT EXISTS ${t} (
  tag varchar(128) NOT NULL,
  max_id bigint NOT NULL DEFAULT 0,
  step int NOT NULL DEFAULT 1000,
  description varchar(256) NOT NULL DEFAULT '',
  updated_at timestamp(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
  ${FENCING_COLUMNS.mysql.join(',\n  ')},
  PRIMARY KEY (tag),
  CONSTRAINT ${constraint('_max_id_ck')} CHECK (max_id >= 0),
  CONSTRAINT ${constraint('_step_ck')} CHECK (step > 0)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
  postgres: (t) => `CREATE TABLE IF NOT EXISTS ${t} (
  tag varchar(128) PRIMARY KEY,
  max_id bigint NOT NULL DEFAULT 0 CHECK (max_id >= 0),
  step integer NOT NULL DEFAULT 1000 CHECK (step > 0),
  description varchar(256) NOT NULL DEFAULT '',
  updated_at timestamptz NOT NULL DEFAULT now(),
  ${FENCING_COLUMNS.postgres.join(',\n  ')}
)`,
};

/** What an UPDATE adds to keep updated_at current: MySQL's column does it itself (ON UPDATE CURRENT_TIMESTAMP). */
const TOUCH: PerDialect<string> = { mysql: '', postgres: `, updated_at = ${now('postgres')}` };

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
const FENCING_COLUMNS: PerDialect<readonly string[]> = {
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
  const columns = perDialect(flavor, FENCING_COLUMNS);
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
  const big = bigParam(flavor);
  const touch = perDialect(flavor, TOUCH);
  const limit = MAX_INT64.toString();
  const columns = `tag, ${asText(flavor, 'max_id')} AS max_id, step, description, updated_at, instance, ${asText(flavor, 'failover_gap')} AS failover_gap, jumps, jumped_at`;
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
      lease: `UPDATE ${tb} SET ${newValueSet(flavor, 'max_id', 'max_id + ?')}${touch} WHERE tag = ? AND max_id <= ${limit} - ? AND instance = ${here}${newValueReturning(flavor, 'max_id', 'max_id')}`,
      fencedLease: perDialect(flavor, FENCED_LEASE)({ tb, here, limit, touch }),
      giveBack: `UPDATE ${tb} SET max_id = ${big}${touch} WHERE tag = ? AND max_id = ${big}`,
      read: `SELECT ${columns} FROM ${tb} WHERE tag = ?`,
      list: `SELECT ${columns} FROM ${tb} ORDER BY tag`,
      // A new row is marked with the instance it is made on: its history starts there.
      insert: insertIgnore(
        flavor,
        `${tb} (tag, max_id, step, description, failover_gap, instance)`,
        `VALUES (?, ${big}, ?, ?, ${big}, ${here})`,
        'tag',
      ),
      setStep: `UPDATE ${tb} SET step = ?${touch} WHERE tag = ?`,
      setGap: `UPDATE ${tb} SET failover_gap = ${big}${touch} WHERE tag = ?`,
      raiseTo,
      raiseBy,
      raiseToTag: `${raiseTo} AND tag = ?`,
      raiseByTag: `${raiseBy} AND tag = ?`,
    }),
  });
}

/**
 * Timelines from the row's instance to this one ('pg:tl' and 8 hex digits, instance.ts): at least
 * 1 (a row from before the fence, or from a history this one did not branch from), at most 1,000,
 * so that 1,001 times the largest gap (10^15) stays inside a bigint.
 */
const TIMELINE = (instance: string) => `('x' || substr(${instance}, 6))::bit(32)::int`;
const PG_HOPS = `LEAST(1000, GREATEST(1, CASE WHEN s.instance ~ '^pg:tl[0-9A-Fa-f]{8}$' AND i.here ~ '^pg:tl[0-9A-Fa-f]{8}$' THEN ${TIMELINE('i.here')} - ${TIMELINE('s.instance')} ELSE 1 END))`;

/**
 * The first lease on a new instance: the row first jumps past the next-but-one multiple of its
 * failover_gap — at least the gap above the row it finds, and round, so a person reading IDs sees
 * where a failover was — then moves by the step, and names this instance, in one statement.
 * On PostgreSQL the jump is one gap more for every timeline between the row's and this one
 * (PG_HOPS): two promotions in a row, the second to a standby that never received the first new
 * primary's jump, would otherwise land both jumps on the same multiple and repeat what the first
 * handed out. MariaDB's server_ids have no order to count, so there the jump is always one gap
 * (docs/failover.md says when that is not enough). Whoever comes first jumps, the others find it
 * marked (their guarded lease succeeds; this one, run again, adds just the step). Per dialect as a whole: MySQL evaluates SET left to right on
 * the updated row, so `instance` is assigned last there; PostgreSQL reads the instance once in a
 * FROM item and every SET sees the old row.
 */
const FENCED_LEASE: PerDialect<(s: { tb: string; here: string; limit: string; touch: string }) => string> = {
  mysql: ({
    tb,
    here,
    limit,
  }) => `UPDATE ${tb} SET ${newValueSet('mysql', 'max_id', `IF(instance <=> ${here}, max_id, (max_id DIV failover_gap + 2) * failover_gap) + ?`)},
  jumps = jumps + IF(instance <=> ${here}, 0, 1), jumped_at = IF(instance <=> ${here}, jumped_at, ${now('mysql')}), instance = ${here}
WHERE tag = ? AND max_id <= ${limit} - ? - IF(instance <=> ${here}, 0, 2 * failover_gap)`,
  postgres: ({
    tb,
    here,
    limit,
    touch,
  }) => `UPDATE ${tb} AS s SET max_id = CASE WHEN s.instance = i.here THEN s.max_id ELSE (s.max_id / s.failover_gap + 1 + ${PG_HOPS}) * s.failover_gap END + ${bigParam('postgres')},
  jumps = s.jumps + CASE WHEN s.instance = i.here THEN 0 ELSE 1 END, jumped_at = CASE WHEN s.instance = i.here THEN s.jumped_at ELSE ${now('postgres')} END,
  instance = i.here${touch}
FROM (SELECT ${here} AS here) i
WHERE s.tag = ? AND s.max_id <= ${limit} - ${bigParam('postgres')} - CASE WHEN s.instance = i.here THEN 0 ELSE (1 + ${PG_HOPS}) * s.failover_gap END${newValueReturning('postgres', 's.max_id', 'max_id')}`,
};

/** Missing table → NOT_MIGRATED (what to run); anything else passes through for the caller's retry policy. */
export async function translateSegmentError(err: unknown, ref: SegmentTableRef, flavor: Flavor, query?: CatalogQuery): Promise<unknown> {
  const older = isMissingColumn(err);
  if (!older && !isMissingTable(err)) return err;
  const schema = ownSchema(flavor, ref.schema);
  const named = namedSchema(flavor, ref.schema);
  const flags = [
    ...(named !== undefined ? [`--schema ${named}`] : []),
    ...(ref.table !== DEFAULT_TABLE ? [`--segments-table ${ref.table}`] : []),
  ];
  const options = [
    ...(named !== undefined ? [`schema: '${named}'`] : []),
    ...(ref.table !== DEFAULT_TABLE ? [`segments: { table: '${ref.table}' }`] : []),
  ];
  const call = `migrate(knex${options.length > 0 ? `, { ${options.join(', ')} }` : ''})`;
  if (older) return olderTableError({ table: ownObjectName(flavor, ref.schema, ref.table), call, flags: flags.join(' '), cause: err });
  return notMigratedError({
    what: `The segment table ${ownObjectName(flavor, ref.schema, ref.table)} does not exist.`,
    call: `migrate(knex${options.length > 0 ? `, { ${options.join(', ')} }` : ''})`,
    flags: flags.join(' '),
    olderIn: query ? await olderInstallSchema(query, isPostgres(flavor), ref.schema !== undefined, schema ?? '', ref.table) : undefined,
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
    let end = newValue(t.flavor, await run(t, t.text.lease, [step, tag, step], left), 'max_id');
    // Nothing changed: a row last leased on another instance (fence it now), or no row, or full.
    if (end === undefined) end = newValue(t.flavor, await run(t, t.text.fencedLease, [step, tag, step], left), 'max_id');
    // max_id + step ≥ 1, so 0 means the OK packet lost LAST_INSERT_ID(expr) (MySQL only: see
    // newValue). MariaDB 10.11 answers 0 for an UPDATE that fired any trigger on the table (an
    // audit trigger, pt-online-schema-change's), whatever the trigger does: the row moved, but
    // where to is unknown here. Fatal, and said so: every retry would move the row again for
    // nothing (the range is abandoned, never served).
    if (end === 0n) {
      throw new IdleaseError(
        'BAD_CONFIG',
        `The lease on ${ownObjectName(t.flavor, t.ref.schema, t.ref.table)} moved max_id, but the server's answer carried no new value ` +
          '(LAST_INSERT_ID(expr) came back 0). A trigger on the segment table hides it on MariaDB: drop the trigger ' +
          '(SHOW TRIGGERS LIKE the table), or run schema-change tools that use triggers elsewhere. The leased range was not handed out.',
      );
    }
    return end;
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
  if (!(await relationExists(query, isPostgres(db.flavor), ownObject(db.flavor, ref.schema, ref.table)))) return [];
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
  return !affectedCountsUnchanged(t.flavor) && (await readSegmentRow(t, tag)) !== undefined;
}

/** Change the admin step; false when the tag has no row. */
export async function updateSegmentStep(t: SegmentTarget, tag: string, step: number): Promise<boolean> {
  const res = await run(t, t.text.setStep, [step, tag]);
  if (res.affected === 1) return true;
  // MySQL counts a row whose value did not change as unaffected; tell "same step" from "no row".
  return !affectedCountsUnchanged(t.flavor) && (await readSegmentRow(t, tag)) !== undefined;
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
