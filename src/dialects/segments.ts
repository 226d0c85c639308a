/** SQL for the segment table: DDL here; the lease and admin statements sit beside it. */
import type { Knex } from 'knex';
import { retryConflicts } from './conflicts.js';
import { isMissingTable, legacyLayoutHint } from './missing-object.js';
import { IdleaseError } from '../errors.js';
import { MAX_INT64, toBigInt } from '../ids.js';
import { type Flavor, ownObject, ownObjectName, quoteIdent } from './detect.js';
import { affectedRows, rowsOf } from './results.js';

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
  updated_at timestamptz NOT NULL DEFAULT now()
)`,
    ],
    down: [`DROP TABLE IF EXISTS ${t}`],
  };
}

// ---------------------------------------------------------------------------
// Lease, give-back and tag admin statements. One statement per call (PGlite runs one
// statement per query), values always bound, identifiers validated by the caller and quoted here.
// ---------------------------------------------------------------------------

/** The largest step a row may hold: the `step` column is a 32-bit int. */
export const MAX_ROW_STEP = 2_147_483_647;

export interface SegmentRow {
  readonly tag: string;
  readonly maxId: bigint;
  readonly step: number;
  readonly description: string;
  readonly updatedAt: Date;
}

export type SegmentLeaseResult =
  | { readonly kind: 'leased'; readonly end: bigint }
  | { readonly kind: 'unknown' }
  | { readonly kind: 'full'; readonly maxId: bigint };

interface Target {
  readonly flavor: Flavor;
  readonly ref: SegmentTableRef;
}

function table(t: Target): string {
  return ownObject(t.flavor, t.ref.schema, t.ref.table);
}


/** Missing table → NOT_MIGRATED (what to run); anything else passes through for the caller's retry policy. */
export function translateSegmentError(err: unknown, t: Target): unknown {
  if (isMissingTable(err)) {
    return new IdleaseError(
      'NOT_MIGRATED',
      `The segment table ${ownObjectName(t.flavor, t.ref.schema, t.ref.table)} does not exist. Run \`idlease migrate\` (or migrate(knex)) first.` +
        legacyLayoutHint(t.flavor !== 'mysql' && t.ref.schema === undefined),
      { cause: err },
    );
  }
  return err;
}

async function run(knex: Knex, t: Target, sql: string, values: readonly Knex.RawBinding[], timeoutMs?: number): Promise<unknown> {
  try {
    const q = knex.raw(sql, values);
    return await (timeoutMs ? withDeadline(q, timeoutMs) : q);
  } catch (err) {
    throw translateSegmentError(err, t);
  }
}

/**
 * A statement deadline that tolerates a starved event loop. A caller spinning on
 * `await next()` runs only microtasks, so the answer to a background lease can sit in the
 * socket for seconds; when the loop finally turns, timers run before I/O and a plain
 * timeout (knex's .timeout()) would fail a statement that already succeeded. Here the
 * timer only arms a check that runs after the I/O phase (setImmediate).
 */
function withDeadline<T>(query: PromiseLike<T>, ms: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    const timer = setTimeout(() => {
      setImmediate(() => {
        if (settled) return;
        settled = true;
        reject(new Error(`statement did not answer within ${ms} ms (statementTimeoutMs)`));
      });
    }, ms);
    query.then(
      (v) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        resolve(v);
      },
      (e: unknown) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        reject(e);
      },
    );
  });
}

/** A bigint bound as a decimal string and cast in SQL: MySQL turns a string operand into a DOUBLE otherwise. */
function bigParam(flavor: Flavor): string {
  return flavor === 'mysql' ? 'CAST(? AS SIGNED)' : 'CAST(? AS bigint)';
}

/**
 * THE lease: one atomic statement that adds `step` to max_id and returns the new value.
 * The guard keeps max_id ≤ 2^63−1 (0 rows → the caller tells unknown tag from full).
 * MySQL returns the value in the OK packet's insertId via LAST_INSERT_ID(expr).
 *
 * A deadlock or Galera certification conflict is retried here within the same deadline
 * (conflicts.ts): on Galera every node's processes lease the same hot row.
 */
export async function leaseSegment(knex: Knex, t: Target, tag: string, step: number, timeoutMs?: number): Promise<SegmentLeaseResult> {
  if (!Number.isSafeInteger(step) || step < 1) throw new IdleaseError('INVARIANT', `lease step must be a positive integer, got ${step}`);
  return retryConflicts((left) => leaseOnce(knex, t, tag, step, left), timeoutMs);
}

async function leaseOnce(knex: Knex, t: Target, tag: string, step: number, timeoutMs: number | undefined): Promise<SegmentLeaseResult> {
  const tb = table(t);
  const limit = MAX_INT64.toString();
  if (t.flavor === 'mysql') {
    const res = (await run(
      knex, t,
      `UPDATE ${tb} SET max_id = LAST_INSERT_ID(max_id + ?) WHERE tag = ? AND max_id <= ${limit} - ?`,
      [step, tag, step], timeoutMs,
    )) as [{ affectedRows: number; insertId: unknown }];
    const header = res[0];
    if (header.affectedRows === 1) return { kind: 'leased', end: toBigInt(header.insertId, 'max_id (insertId)') };
  } else {
    const res = await run(
      knex, t,
      `UPDATE ${tb} SET max_id = max_id + ?, updated_at = now() WHERE tag = ? AND max_id <= ${limit} - ? RETURNING max_id::text AS max_id`,
      [step, tag, step], timeoutMs,
    );
    const row = rowsOf(t.flavor, res)[0];
    if (row) return { kind: 'leased', end: toBigInt(row.max_id, 'max_id') };
  }
  const row = await readSegmentRow(knex, t, tag, timeoutMs);
  return row ? { kind: 'full', maxId: row.maxId } : { kind: 'unknown' };
}

/** Compare-and-set give-back: lowers max_id only while it is still exactly our end. */
export async function giveBackSegment(knex: Knex, t: Target, tag: string, expectedEnd: bigint, newMax: bigint, timeoutMs?: number): Promise<boolean> {
  const tb = table(t);
  const p = bigParam(t.flavor);
  const touch = t.flavor === 'mysql' ? '' : ', updated_at = now()';
  const res = await run(knex, t, `UPDATE ${tb} SET max_id = ${p}${touch} WHERE tag = ? AND max_id = ${p}`, [newMax.toString(), tag, expectedEnd.toString()], timeoutMs);
  return affectedRows(t.flavor, res) === 1;
}

function toRow(r: Record<string, unknown>): SegmentRow {
  const step = Number(r.step);
  return Object.freeze({
    tag: String(r.tag),
    maxId: toBigInt(r.max_id, 'max_id'),
    step,
    description: String(r.description ?? ''),
    updatedAt: r.updated_at instanceof Date ? r.updated_at : new Date(String(r.updated_at)),
  });
}

const COLUMNS = (flavor: Flavor) =>
  flavor === 'mysql' ? 'tag, CAST(max_id AS CHAR) AS max_id, step, description, updated_at' : 'tag, max_id::text AS max_id, step, description, updated_at';

export async function readSegmentRow(knex: Knex, t: Target, tag: string, timeoutMs?: number): Promise<SegmentRow | undefined> {
  const res = await run(knex, t, `SELECT ${COLUMNS(t.flavor)} FROM ${table(t)} WHERE tag = ?`, [tag], timeoutMs);
  const r = rowsOf(t.flavor, res)[0];
  return r ? toRow(r) : undefined;
}

export async function listSegmentRows(knex: Knex, t: Target): Promise<SegmentRow[]> {
  const res = await run(knex, t, `SELECT ${COLUMNS(t.flavor)} FROM ${table(t)} ORDER BY tag`, []);
  return rowsOf(t.flavor, res).map(toRow);
}

/** Insert a tag row; false when it already exists (nothing is changed then). */
export async function insertSegmentRow(
  knex: Knex, t: Target, row: { tag: string; maxId: bigint; step: number; description: string }, timeoutMs?: number,
): Promise<boolean> {
  const p = bigParam(t.flavor);
  const sql =
    t.flavor === 'mysql'
      ? `INSERT IGNORE INTO ${table(t)} (tag, max_id, step, description) VALUES (?, ${p}, ?, ?)`
      : `INSERT INTO ${table(t)} (tag, max_id, step, description) VALUES (?, ${p}, ?, ?) ON CONFLICT (tag) DO NOTHING`;
  const res = await run(knex, t, sql, [row.tag, row.maxId.toString(), row.step, row.description], timeoutMs);
  return affectedRows(t.flavor, res) === 1;
}

/** Change the admin step; false when the tag has no row. */
export async function updateSegmentStep(knex: Knex, t: Target, tag: string, step: number): Promise<boolean> {
  const touch = t.flavor === 'mysql' ? '' : ', updated_at = now()';
  const res = await run(knex, t, `UPDATE ${table(t)} SET step = ?${touch} WHERE tag = ?`, [step, tag]);
  if (t.flavor === 'mysql') {
    // affectedRows is 0 when the value is unchanged; tell "same step" from "no row".
    if (affectedRows(t.flavor, res) === 1) return true;
    return (await readSegmentRow(knex, t, tag)) !== undefined;
  }
  return affectedRows(t.flavor, res) === 1;
}

/**
 * Raise max_id, never lower it: to at least `to`, or by `by` (refused past 2^63−1). One
 * statement per call; `tag` undefined means every row. Returns the number of rows changed.
 */
export async function raiseSegmentRows(knex: Knex, t: Target, tag: string | undefined, raise: { to: bigint } | { by: bigint }): Promise<number> {
  const p = bigParam(t.flavor);
  const touch = t.flavor === 'mysql' ? '' : ', updated_at = now()';
  const where = tag === undefined ? '' : ' AND tag = ?';
  const tagValue = tag === undefined ? [] : [tag];
  const res =
    'to' in raise
      ? await run(knex, t, `UPDATE ${table(t)} SET max_id = ${p}${touch} WHERE max_id < ${p}${where}`, [raise.to.toString(), raise.to.toString(), ...tagValue])
      : await run(knex, t, `UPDATE ${table(t)} SET max_id = max_id + ${p}${touch} WHERE max_id <= ${MAX_INT64.toString()} - ${p}${where}`, [raise.by.toString(), raise.by.toString(), ...tagValue]);
  return affectedRows(t.flavor, res);
}
