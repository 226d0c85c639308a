/**
 * All SQL for the Postgres next_id(): one sequence + PL/pgSQL functions per schema (logical shard).
 *
 * The sequence value carries the time: v = (ms since epoch << sequenceBits) | n, and the ID is
 * v with the shard slotted in between (strictly increasing in v). Uniqueness therefore rests on
 * one thing only, that the sequence never moves backwards; speed does not enter into it. A burst
 * of more than 2^sequenceBits IDs in a millisecond counts on into the next milliseconds' space
 * (the time field runs ahead, the clock catches up); a clock that steps back finds the sequence
 * ahead of it and is ignored.
 *
 * The sequence is moved up to the clock (setval) only under an exclusive advisory lock that
 * every caller's nextval holds in shared mode, so no nextval can pass the target while the
 * jump happens. The shared lock is transaction-scoped (after the first call in a transaction
 * it is a local re-grant, which keeps bulk inserts fast); the jump lock is session-scoped and
 * released at once, and only tried: when another open transaction holds the shared lock the
 * caller keeps the value it drew (unique, just behind the clock) instead of waiting.
 *
 * DDL cannot take bind parameters, so the layout goes into the function bodies as integer
 * literals; every one comes from a validated layout and is checked to be an integer here.
 */
import type { Knex } from 'knex';
import type { IdLayout } from '../layout/index.js';
import { qualified, quoteIdent } from './detect.js';

export const NEXT_ID_SEQUENCE = 'idlease_next_id_seq';
const SLOW_FUNCTION = 'idlease_next_id_slow';
/** First key of the two-int advisory lock space, so idlease's locks are recognisable in pg_locks. */
export const NEXT_ID_LOCK_CLASS = 0x1d1ea5e;

export interface NextIdObjects {
  readonly schema: string;
  readonly shard: number;
  readonly layout: IdLayout;
}

function int(value: number | bigint): string {
  const s = String(value);
  if (!/^-?\d+$/.test(s)) throw new Error(`internal: ${s} is not an integer literal`);
  return s;
}

/** A stable 31-bit lock key per schema (FNV-1a), the same from every client. */
export function nextIdLockKey(schema: string): number {
  let h = 0x811c9dc5;
  for (const ch of Buffer.from(schema, 'utf8')) {
    h ^= ch;
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h & 0x7fffffff;
}

export function nextIdDdl(o: NextIdObjects): { up: string[]; down: string[] } {
  const f = 'postgres' as const;
  const s = quoteIdent(f, o.schema);
  const seq = qualified(f, o.schema, NEXT_ID_SEQUENCE);
  // regclass literal: resolved once per cached plan, independent of search_path.
  const seqLit = `'${seq}'::pg_catalog.regclass`;
  const slow = qualified(f, o.schema, SLOW_FUNCTION);
  const { timeBits, shardBits, sequenceBits, epochMs } = o.layout;
  const S = int(sequenceBits);
  const shiftTime = int(shardBits + sequenceBits);
  const seqMask = int((1n << BigInt(sequenceBits)) - 1n);
  const shardPart = int(BigInt(o.shard) << BigInt(sequenceBits));
  const maxCounter = int((1n << BigInt(timeBits + sequenceBits)) - 1n);
  const epoch = int(epochMs);
  const k1 = int(NEXT_ID_LOCK_CLASS);
  const k2 = int(nextIdLockKey(o.schema));
  const nowCounter = `((pg_catalog.floor(pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) * 1000)::int8 - ${epoch}) << ${S})`;
  // The counter v with the shard slotted in between its time and sequence parts.
  const compose = `((v >> ${S}) << ${shiftTime}) | ${shardPart} | (v & ${seqMask})`;
  const exhausted = `next_id(): the time field of ${o.schema}.next_id() is exhausted (${timeBits} time bits from epoch ${new Date(epochMs).toISOString()}); install a layout with more timeBits or a later epoch in a new schema`;
  return {
    up: [
      `CREATE SCHEMA IF NOT EXISTS ${s}`,
      // MAXVALUE is the last counter the time field can hold: nextval raises past it, never wraps.
      `CREATE SEQUENCE IF NOT EXISTS ${seq} AS bigint MINVALUE 0 MAXVALUE ${maxCounter} START 0 NO CYCLE`,
      // The slow path, apart so next_id() itself is two statements (PL/pgSQL pays per statement).
      // Takes the drawn counter (NULL when the shared lock was busy) and returns the finished ID.
      `CREATE OR REPLACE FUNCTION ${slow}(drawn bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE AS $$
DECLARE
  v bigint := drawn;
  target bigint;
  locked boolean := false;
BEGIN
  IF v IS NULL THEN
    -- The shared lock was busy: a jump is in progress; it lasts microseconds.
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(${k1}, ${k2});
    v := pg_catalog.nextval(${seqLit});
  END IF;
  target := ${nowCounter};
  IF v >= target THEN
    RETURN ${compose};
  END IF;
  IF target > ${maxCounter} THEN
    RAISE EXCEPTION '${exhausted}' USING ERRCODE = '22003';
  END IF;
  -- Behind the clock: move the sequence up to it, but only if no other transaction holds the
  -- shared lock (none can draw until we unlock). Otherwise keep v: unique, merely older.
  BEGIN
    -- Inside the block, so a cancel arriving right after the lock still reaches the unlock.
    locked := pg_catalog.pg_try_advisory_lock(${k1}, ${k2});
    IF NOT locked THEN
      RETURN ${compose};
    END IF;
    -- Draw again: others may have drawn past target between our nextval and the lock.
    v := pg_catalog.nextval(${seqLit});
    IF v < target THEN
      v := pg_catalog.setval(${seqLit}, target);
    END IF;
    locked := NOT pg_catalog.pg_advisory_unlock(${k1}, ${k2});
  EXCEPTION WHEN OTHERS OR QUERY_CANCELED THEN
    IF locked THEN
      locked := NOT pg_catalog.pg_advisory_unlock(${k1}, ${k2});
    END IF;
    RAISE;
  END;
  RETURN ${compose};
END
$$`,
      `CREATE OR REPLACE FUNCTION ${s}.next_id() RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE AS $$
DECLARE
  v bigint;
BEGIN
  v := CASE WHEN pg_catalog.pg_try_advisory_xact_lock_shared(${k1}, ${k2}) THEN pg_catalog.nextval(${seqLit}) END;
  -- NULL (lock busy) or behind the clock: the slow path. Otherwise the counter is the ID.
  RETURN CASE WHEN v >= ${nowCounter} THEN ${compose} ELSE ${slow}(v) END;
END
$$`,
      `CREATE OR REPLACE FUNCTION ${s}.id_timestamp(id bigint) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT AS $$
SELECT pg_catalog.to_timestamp(((id >> ${shiftTime}) + ${epoch})::float8 / 1000)
$$`,
      `CREATE OR REPLACE FUNCTION ${s}.id_shard(id bigint) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT AS $$
SELECT ((id >> ${S}) & ${int((1n << BigInt(shardBits)) - 1n)})::integer
$$`,
      `CREATE OR REPLACE FUNCTION ${s}.id_sequence(id bigint) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT AS $$
SELECT (id & ${seqMask})::integer
$$`,
      `COMMENT ON FUNCTION ${s}.next_id() IS ${literal(`idlease next_id: shard ${o.shard}, layout ${timeBits}/${shardBits}/${sequenceBits} bits, epoch ${new Date(epochMs).toISOString()} (${epochMs})`)}`,
    ],
    down: [
      `DROP FUNCTION IF EXISTS ${s}.next_id()`,
      `DROP FUNCTION IF EXISTS ${slow}(bigint)`,
      `DROP FUNCTION IF EXISTS ${s}.id_timestamp(bigint)`,
      `DROP FUNCTION IF EXISTS ${s}.id_shard(bigint)`,
      `DROP FUNCTION IF EXISTS ${s}.id_sequence(bigint)`,
      `DROP SEQUENCE IF EXISTS ${seq}`,
    ],
  };
}

/** A string literal for DDL (COMMENT ON takes no parameters); only ever fed validated text. */
function literal(text: string): string {
  return `'${text.replace(/'/g, "''")}'`;
}

export interface DependentColumn {
  readonly table: string;
  readonly column: string;
}

/** Columns whose DEFAULT calls <schema>.next_id(): they would break if it were dropped. */
export async function nextIdDependents(knex: Knex, schema: string): Promise<DependentColumn[]> {
  const res = await knex.raw(
    `SELECT c.oid::regclass::text AS tbl, a.attname::text AS col
       FROM pg_catalog.pg_depend d
       JOIN pg_catalog.pg_attrdef ad ON d.classid = 'pg_catalog.pg_attrdef'::regclass AND d.objid = ad.oid
       JOIN pg_catalog.pg_class c ON c.oid = ad.adrelid
       JOIN pg_catalog.pg_attribute a ON a.attrelid = ad.adrelid AND a.attnum = ad.adnum
       JOIN pg_catalog.pg_proc p ON d.refclassid = 'pg_catalog.pg_proc'::regclass AND d.refobjid = p.oid
       JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
      WHERE n.nspname = ? AND p.proname = 'next_id' AND p.pronargs = 0
      ORDER BY 1, 2`,
    [schema],
  );
  return (res.rows as Array<{ tbl: string; col: string }>).map((r) => ({ table: r.tbl, column: r.col }));
}

/** Drop those columns' DEFAULTs (the columns and their data stay). */
export async function dropNextIdDefaults(knex: Knex, dependents: readonly DependentColumn[]): Promise<void> {
  for (const d of dependents) {
    // regclass::text is already quoted where needed; the column is quoted here.
    await knex.raw(`ALTER TABLE ${d.table} ALTER COLUMN ${'"' + d.column.replace(/"/g, '""') + '"'} DROP DEFAULT`);
  }
}
