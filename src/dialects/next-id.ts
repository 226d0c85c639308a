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
 * The sequence is moved up to the clock (setval, "the jump") only under a session-scoped
 * exclusive advisory lock; every draw (nextval) holds the same key in shared mode for that one
 * nextval and releases it in the same expression. So no nextval runs during a jump, and no lock
 * of idlease's outlives the call that took it: an idle-in-transaction session or a prepared
 * transaction that called next_id() holds nothing a jump waits for (the previous version held
 * the shared lock to the end of the transaction, and such a transaction stopped every catch-up).
 * A jump waits only for draws in flight and other jumps (microseconds); a draw that finds a jump
 * under way goes to the slow path and waits for it. A draw more than the slack behind the clock
 * is never served: it is replaced by a fresh one, so the first ID after an install, a restore or
 * a long idle period carries the current time.
 *
 * Cost is what shapes the code. A bulk insert pays per row: one PL/pgSQL call, a shared lock taken and released,
 * a cached nextval (the sequence has CACHE NEXT_ID_CACHE) and a dozen operators. A single-row
 * insert pays per transaction, and there PL/pgSQL prepares every operator it runs afresh (about
 * 1k instructions each), so the fast path is three short statements, the freshness test avoids
 * date_part, and everything rare lives in a second function whose statements are prepared only
 * when it runs. A draw may trail the clock by NEXT_ID_SLACK_MS before it is caught up, so the
 * catch-up (a subtransaction, tens of thousands of instructions) happens at most about once per
 * slack, not on every millisecond's first insert.
 *
 * Order: within a session IDs strictly increase. Across sessions they interleave within the
 * slack: each session reserves NEXT_ID_CACHE values at a time, and a reserved value is served
 * only while it is within the slack of the clock (older ones are skipped, never reused).
 *
 * DDL cannot take bind parameters, so the layout goes into the function bodies as integer
 * literals; every one comes from a validated layout and is checked to be an integer here.
 */
import { resolveLayout, type IdLayout } from '../layout/index.js';
import { IdleaseError } from '../errors.js';
import { toBigInt } from '../ids.js';
import { qualified, quoteIdent } from './detect.js';
import { clockMs, intLiteral, isTrue } from './flavor.js';
import type { SqlExecutor } from './sql.js';

export const NEXT_ID_SEQUENCE = 'idlease_next_id_seq';
/** The rare path (catch-up, busy lock): a function of its own; its calls count the catch-ups. */
export const NEXT_ID_SLOW_FUNCTION = 'idlease_next_id_slow';
/**
 * A draw up to this many ms behind the clock is served as it is: catching up costs a
 * subtransaction, so it is done at most about once per NEXT_ID_SLACK_MS, not every millisecond.
 */
export const NEXT_ID_SLACK_MS = 3;
/**
 * Values each session reserves per trip to the sequence (its CACHE): a bulk insert touches the
 * sequence's page once per NEXT_ID_CACHE rows instead of every row. Kept small because a reserved
 * value can go stale while its session idles (then it is skipped, see the slow path).
 */
export const NEXT_ID_CACHE = 4;
/** Year 287,000-odd: counters stop here even where the time field could go on (to_timestamp's range). */
const NEXT_ID_LAST_UNIX_MS = 9_000_000_000_000_000;
/** First key of the two-int advisory lock space, so idlease's locks are recognisable in pg_locks. */
export const NEXT_ID_LOCK_CLASS = 0x1d1ea5e;

export interface NextIdObjects {
  readonly schema: string;
  readonly shard: number;
  readonly layout: IdLayout;
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

/**
 * The pieces of next_id() as SQL text, shared by the functions (nextIdDdl) and by the column
 * DEFAULT that `attach` writes (nextIdDefaultExpression), so both test freshness and compose
 * the ID the same way.
 */
function nextIdParts(o: NextIdObjects) {
  const f = 'postgres' as const;
  const seq = qualified(f, o.schema, NEXT_ID_SEQUENCE);
  const { timeBits, shardBits, sequenceBits, epochMs } = o.layout;
  const S = intLiteral(sequenceBits);
  const shardPart = intLiteral(BigInt(o.shard) << BigInt(sequenceBits));
  // The last counter: where the time field is full, or (for layouts of more than ~53 time bits)
  // where the time would pass year 287,000 and leave to_timestamp's range, whichever comes first.
  const lastMs = BigInt(Math.min(2 ** timeBits - 1, NEXT_ID_LAST_UNIX_MS - epochMs));
  return {
    seq,
    // regclass literal: resolved once per cached plan, independent of search_path.
    seqLit: `'${seq}'::pg_catalog.regclass`,
    slow: qualified(f, o.schema, NEXT_ID_SLOW_FUNCTION),
    maxCounter: intLiteral(((lastMs + 1n) << BigInt(sequenceBits)) - 1n),
    k1: intLiteral(NEXT_ID_LOCK_CLASS),
    k2: intLiteral(nextIdLockKey(o.schema)),
    // The counter v with the shard slotted in between its time and sequence parts:
    // v + T * (2^shiftTime - 2^S) + shard * 2^S, where T = v >> S. Four operators, because in a
    // single-row transaction PL/pgSQL pays for each operator node again (about 1k instructions).
    composeOf: (v: string) =>
      `${v} + (${v} >> ${S}) * ${intLiteral((1n << BigInt(shardBits + sequenceBits)) - (1n << BigInt(sequenceBits)))} + ${shardPart}`,
    // Is v at most the slack behind the clock? Compared as timestamps (to_timestamp is cheap,
    // date_part parses its unit name on every call); the float is exact to well under a
    // microsecond for any layout, and NULL (no draw) compares as not fresh. The constants fold.
    // (No LEAST/GREATEST here: they skip NULLs.) The sequence's MAXVALUE keeps v in range.
    freshOf: (v: string) =>
      `pg_catalog.to_timestamp(${v} * (0.001::float8 / ${intLiteral(1n << BigInt(sequenceBits))}) + ${intLiteral(epochMs + NEXT_ID_SLACK_MS)}::float8 / 1000) > pg_catalog.clock_timestamp()`,
    // The same test with its constants folded here, for the DEFAULT, which the planner reads
    // again for every INSERT it plans. The same doubles: dividing by a power of two is exact,
    // and a quotient rounds to the double nearest the exact one, whose shortest decimal
    // spelling (JavaScript's) parses back to it.
    freshFoldedOf: (v: string) =>
      `pg_catalog.to_timestamp(${v} * ${floatLiteral(0.001 / 2 ** sequenceBits)}::float8 + ${floatLiteral((epochMs + NEXT_ID_SLACK_MS) / 1000)}::float8) > pg_catalog.clock_timestamp()`,
  };
}

/** A finite double as SQL text that parses back to the same double (JavaScript's shortest spelling). */
function floatLiteral(x: number): string {
  if (!Number.isFinite(x)) throw new Error(`internal: ${x} is not a finite number`);
  const text = String(x);
  if (!/^[0-9.e+-]+$/.test(text)) throw new Error(`internal: ${text} is not a float literal`);
  return `'${text}'`;
}

/**
 * The draw: nextval under the shared side of the jump lock, taken, used for one nextval and
 * released inside one expression, so no statement boundary (where a cancel is processed) falls
 * between them and the lock never outlives the call: an idle or prepared transaction holds
 * nothing of idlease's. NULL when a jump holds the lock. unlock returns true (x1); were it ever
 * false the product is 0, a stale draw, which the slow path replaces.
 */
function lockedDraw(p: ReturnType<typeof nextIdParts>): string {
  return `CASE WHEN pg_catalog.pg_try_advisory_lock_shared(${p.k1}, ${p.k2}) THEN pg_catalog.nextval(${p.seqLit}) * pg_catalog.pg_advisory_unlock_shared(${p.k1}, ${p.k2})::integer END`;
}

/**
 * The column DEFAULT `attach` writes: next_id()'s fast path as a plain expression, so a row
 * pays for no PL/pgSQL call (a third of next_id()'s cost in a bulk insert) and no inlining at
 * plan time. What it costs instead is per statement: the planner reads and plans the whole
 * expression for every INSERT that is not a prepared statement (about 13 µs of server CPU more
 * than a call of next_id(), measured), hence `form: 'call'` for apps of unprepared single rows. A DEFAULT cannot name the draw twice, so the freshness test takes the draw and
 * the ID is composed from currval() of the same sequence: within one row's CASE nothing else
 * of this session draws from it in between (CASE evaluates its test before its result). A
 * stale draw, or none (a jump holds the lock), is dropped and the slow path draws afresh.
 * Privileges are next_id()'s: USAGE on the sequence covers nextval and currval.
 */
export function nextIdDefaultExpression(o: NextIdObjects): string {
  const p = nextIdParts(o);
  const current = `pg_catalog.currval(${p.seqLit})`;
  return `CASE WHEN ${p.freshFoldedOf(`(${lockedDraw(p)})`)} THEN ${p.composeOf(current)} ELSE ${p.slow}(NULL::bigint) END`;
}

/** The other DEFAULT `attach` can write (`form: 'call'`): a call of the schema's next_id(). */
export function nextIdCall(schema: string): string {
  return `${quoteIdent('postgres', schema)}.next_id()`;
}

export function nextIdDdl(o: NextIdObjects): { up: string[]; down: string[] } {
  const f = 'postgres' as const;
  const s = quoteIdent(f, o.schema);
  const p = nextIdParts(o);
  const { seq, seqLit, slow, maxCounter, k1, k2 } = p;
  const { timeBits, shardBits, sequenceBits, epochMs } = o.layout;
  const S = intLiteral(sequenceBits);
  const shiftTime = intLiteral(shardBits + sequenceBits);
  const seqMask = intLiteral((1n << BigInt(sequenceBits)) - 1n);
  const epoch = intLiteral(epochMs);
  // The clock as a counter, to the counter unit rather than the millisecond, so that it agrees
  // with the fast path's test (else a draw could be stale there and fresh here, for up to 1 ms of
  // calls); capped one past the last counter so the cast cannot overflow before the check.
  const nowCounter = `LEAST((${clockMs('postgres')} - ${epoch}) * ${intLiteral(1n << BigInt(sequenceBits))}, ${maxCounter}::float8 + 1)::bigint`;
  const composeOf = p.composeOf;
  const compose = composeOf('v');
  const fresh = p.freshOf('v');
  const slack = intLiteral(BigInt(NEXT_ID_SLACK_MS) << BigInt(sequenceBits));
  const cache = intLiteral(NEXT_ID_CACHE);
  const exhausted = `next_id(): the time field of ${o.schema}.next_id() is exhausted (${timeBits} time bits from epoch ${new Date(epochMs).toISOString()}); install a layout with more timeBits or a later epoch in a new schema`;
  return {
    up: [
      `CREATE SCHEMA IF NOT EXISTS ${s}`,
      // MAXVALUE is the last counter the time field can hold: nextval raises past it, never wraps.
      `CREATE SEQUENCE IF NOT EXISTS ${seq} AS bigint MINVALUE 0 MAXVALUE ${maxCounter} START 0 CACHE ${cache} NO CYCLE`,
      // The slow path: a draw more than the slack behind the clock, or none (NULL) because a
      // jump held the lock. Apart from next_id() so that its statements are prepared only in the
      // transactions that run them.
      `CREATE OR REPLACE FUNCTION ${slow}(drawn bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE AS $$
DECLARE
  -- No initialised variables: PL/pgSQL prepares each initialiser like a statement.
  target bigint;
  tries integer;
BEGIN
  -- Locks here are session-scoped so that they end with the draw or the jump, not with the
  -- caller's transaction; the block releases them on any error or cancel, including one that
  -- arrives between taking a lock and the next statement. No wait here is on an open
  -- transaction: only on draws in flight (one nextval each) and on another session's jump.
  BEGIN
    FOR tries IN 1..50 LOOP
      target := ${nowCounter};
      IF target > ${maxCounter} THEN
        RAISE EXCEPTION '${exhausted}' USING ERRCODE = '22003';
      END IF;
      IF drawn >= target - ${slack} THEN
        RETURN ${composeOf('drawn')};
      END IF;
      -- The sequence itself is behind (or never drawn: NULL, a fresh install): jump, if no draw
      -- is in flight.
      IF NOT COALESCE(pg_catalog.pg_sequence_last_value(${seqLit}) >= target - ${slack}, false) THEN
        IF pg_catalog.pg_try_advisory_lock(${k1}, ${k2}) THEN
          -- No draw is in flight and none can start: the sequence's own value covers every value
          -- any session has drawn or holds in its cache, so setting it to at least that never
          -- moves it back. setval also empties this session's cache, so the next draw is fresh.
          target := ${nowCounter};
          drawn := pg_catalog.setval(${seqLit}, GREATEST(pg_catalog.pg_sequence_last_value(${seqLit}), target));
          drawn := pg_catalog.nextval(${seqLit});
          PERFORM pg_catalog.pg_advisory_unlock(${k1}, ${k2});
          RETURN ${composeOf('drawn')};
        END IF;
        -- A draw is in flight or another session is jumping. Drawing now would only take stale
        -- values and hold the shared lock that the jump needs free (16 sessions doing so on a
        -- fresh install kept every try-lock failing for ~20 ms): wait for a jump in progress,
        -- holding nothing, and test again.
        PERFORM pg_catalog.pg_advisory_lock_shared(${k1}, ${k2});
        PERFORM pg_catalog.pg_advisory_unlock_shared(${k1}, ${k2});
        CONTINUE;
      END IF;
      -- The sequence is fresh and only this session's cache is stale (values it reserved a
      -- while ago): draw past the cache under the shared lock (at most ${NEXT_ID_CACHE - 1} values left in it,
      -- so the last of these draws comes from the sequence); the skipped values are never used.
      -- Tested again above.
      PERFORM pg_catalog.pg_advisory_lock_shared(${k1}, ${k2});
      drawn := GREATEST(${Array.from({ length: NEXT_ID_CACHE }, () => `pg_catalog.nextval(${seqLit})`).join(', ')});
      PERFORM pg_catalog.pg_advisory_unlock_shared(${k1}, ${k2});
    END LOOP;
    -- Fifty misses in a row (draws always in flight): wait for the lock, which queues new draws
    -- behind it, and jump.
    PERFORM pg_catalog.pg_advisory_lock(${k1}, ${k2});
    target := ${nowCounter};
    drawn := pg_catalog.setval(${seqLit}, GREATEST(pg_catalog.pg_sequence_last_value(${seqLit}), target));
    drawn := pg_catalog.nextval(${seqLit});
    PERFORM pg_catalog.pg_advisory_unlock(${k1}, ${k2});
  EXCEPTION WHEN OTHERS OR QUERY_CANCELED THEN
    -- Whatever of ours this session holds at this point, it took in this call.
    PERFORM pg_catalog.pg_advisory_unlock(${k1}, ${k2}) FROM pg_catalog.pg_locks
      WHERE locktype = 'advisory' AND pid = pg_catalog.pg_backend_pid() AND classid = ${k1} AND objid = ${k2} AND objsubid = 2 AND mode = 'ExclusiveLock' AND granted;
    PERFORM pg_catalog.pg_advisory_unlock_shared(${k1}, ${k2}) FROM pg_catalog.pg_locks
      WHERE locktype = 'advisory' AND pid = pg_catalog.pg_backend_pid() AND classid = ${k1} AND objid = ${k2} AND objsubid = 2 AND mode = 'ShareLock' AND granted;
    RAISE;
  END;
  RETURN ${composeOf('drawn')};
END
$$`,
      // The draw: see lockedDraw. `attach` writes the same fast path as a plain DEFAULT.
      `CREATE OR REPLACE FUNCTION ${s}.next_id() RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE AS $$
DECLARE
  v bigint;
BEGIN
  v := ${lockedDraw(p)};
  IF ${fresh} THEN
    RETURN ${compose};
  END IF;
  RETURN ${slow}(v);
END
$$`,
      `CREATE OR REPLACE FUNCTION ${s}.id_timestamp(id bigint) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT AS $$
SELECT pg_catalog.to_timestamp(((id >> ${shiftTime}) + ${epoch})::float8 / 1000)
$$`,
      `CREATE OR REPLACE FUNCTION ${s}.id_shard(id bigint) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT AS $$
SELECT ((id >> ${S}) & ${intLiteral((1n << BigInt(shardBits)) - 1n)})::integer
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
      `DROP TABLE IF EXISTS ${qualified(f, o.schema, NEXT_ID_REPLACED)}`,
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

/**
 * Columns whose DEFAULT calls <schema>.next_id() or is the expression `attach` writes (which
 * calls the slow path): they would break if next_id() were dropped.
 */
export async function nextIdDependents(db: SqlExecutor, schema: string): Promise<DependentColumn[]> {
  const res = await db.run(
    `SELECT DISTINCT c.oid::regclass::text AS tbl, a.attname::text AS col
       FROM pg_catalog.pg_depend d
       JOIN pg_catalog.pg_attrdef ad ON d.classid = 'pg_catalog.pg_attrdef'::regclass AND d.objid = ad.oid
       JOIN pg_catalog.pg_class c ON c.oid = ad.adrelid
       JOIN pg_catalog.pg_attribute a ON a.attrelid = ad.adrelid AND a.attnum = ad.adnum
       JOIN pg_catalog.pg_proc p ON d.refclassid = 'pg_catalog.pg_proc'::regclass AND d.refobjid = p.oid
       JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
      WHERE n.nspname = ? AND ((p.proname = 'next_id' AND p.pronargs = 0) OR (p.proname = ? AND p.pronargs = 1))
      ORDER BY 1, 2`,
    [schema, NEXT_ID_SLOW_FUNCTION],
  );
  return res.rows.map(([table, column]) => ({ table: String(table), column: String(column) }));
}

/** Drop those columns' DEFAULTs (the columns and their data stay). */
export async function dropNextIdDefaults(db: SqlExecutor, dependents: readonly DependentColumn[]): Promise<void> {
  for (const d of dependents) {
    // regclass::text is already quoted where needed; the column is quoted here.
    await db.run(`ALTER TABLE ${d.table} ALTER COLUMN ${'"' + d.column.replace(/"/g, '""') + '"'} DROP DEFAULT`, []);
  }
}

export interface NextIdBumpResult {
  /** The sequence's last value before (null: never drawn). */
  readonly before: bigint | null;
  readonly after: bigint;
}

/**
 * Raise the sequence behind `<schema>.next_id()` so that the next draw's time field is at
 * least the database clock plus `aheadMs`: the repair after a failover that may have lost
 * draws which had run ahead of the clock. Never lowers it. The layout is read from the
 * function's own comment (written at install), so the bump agrees with the installed bits.
 * Holds the jump lock for the transaction, so no draw runs while the sequence moves.
 */
export async function bumpNextIdSequence(db: SqlExecutor, schema: string, aheadMs: number): Promise<NextIdBumpResult> {
  const f = 'postgres' as const;
  const fn = `${quoteIdent(f, schema)}.next_id()`;
  return db.transaction(async (tx) => {
    const described = await tx.run("SELECT pg_catalog.obj_description(pg_catalog.to_regprocedure(?), 'pg_proc') AS c", [fn]);
    const comment = String(described.rows[0]?.[0] ?? '');
    const m = /layout (\d+)\/(\d+)\/(\d+) bits, epoch \S+ \((\d+)\)/.exec(comment);
    if (!m) {
      throw new IdleaseError(
        'NOT_MIGRATED',
        `No idlease next_id() in schema ${JSON.stringify(schema)}. Install it: migrate(knex, { segments: false, nextId: { schema: '${schema}' } }) (CLI: idlease migrate --no-segments --next-id --next-id-schema ${schema}).`,
        {
          cli: {
            message: `No idlease next_id() in schema ${JSON.stringify(schema)}. Install it: \`{idlease} migrate --no-segments --next-id --next-id-schema ${schema}\` (with the layout flags it should have), or name the schema it is in with --next-id-schema.`,
          },
        },
      );
    }
    const sequenceBits = Number(m[3]);
    const epochMs = Number(m[4]);
    await tx.run('SELECT pg_catalog.pg_advisory_xact_lock(CAST(? AS integer), CAST(? AS integer))', [
      NEXT_ID_LOCK_CLASS,
      nextIdLockKey(schema),
    ]);
    const seq = `'${qualified(f, schema, NEXT_ID_SEQUENCE)}'::pg_catalog.regclass`;
    const res = await tx.run(
      `SELECT b::text AS before, pg_catalog.setval(${seq}, GREATEST(COALESCE(b, 0), t))::text AS after
         FROM (SELECT pg_catalog.pg_sequence_last_value(${seq}) AS b,
                      ((${clockMs('postgres')} + CAST(? AS float8) - CAST(? AS float8)) * CAST(? AS float8))::bigint AS t) q`,
      [aheadMs, epochMs, 2 ** sequenceBits],
    );
    const [before, after] = res.rows[0]!;
    return Object.freeze({ before: before == null ? null : toBigInt(before, 'last_value'), after: toBigInt(after, 'setval') });
  });
}

/** What `COMMENT ON FUNCTION <schema>.next_id()` records: the shard and layout it was installed with. */
export async function readNextIdInstall(db: SqlExecutor, schema: string): Promise<{ shard: number; layout: IdLayout } | undefined> {
  const fn = `${quoteIdent('postgres', schema)}.next_id()`;
  const described = await db.run("SELECT pg_catalog.obj_description(pg_catalog.to_regprocedure(?), 'pg_proc') AS c", [fn]);
  const m = /shard (\d+), layout (\d+)\/(\d+)\/(\d+) bits, epoch \S+ \((\d+)\)/.exec(String(described.rows[0]?.[0] ?? ''));
  if (!m) return undefined;
  const layout = resolveLayout({ timeBits: Number(m[2]), shardBits: Number(m[3]), sequenceBits: Number(m[4]), epoch: Number(m[5]) }, null);
  return { shard: Number(m[1]), layout };
}

/** The time field's lag now (clock − the time of the last draw), in ms; null when never drawn. */
/**
 * How far the next ID's time field would trail (lag) or run ahead of (lead) the clock now. The
 * fast path serves a draw up to NEXT_ID_SLACK_MS behind the clock as it is and catches anything
 * older up to the clock first, so an idle sequence is no lag at all: the lag is at most the slack.
 * A lead is real: the counter ran ahead in a burst or was bumped past the clock.
 */
export async function nextIdTimeField(db: SqlExecutor, schema: string, layout: IdLayout): Promise<{ lagMs: number; leadMs: number }> {
  const seq = `'${qualified('postgres', schema, NEXT_ID_SEQUENCE)}'::pg_catalog.regclass`;
  const res = await db.run(`SELECT pg_catalog.pg_sequence_last_value(${seq})::text, floor(${clockMs('postgres')})::bigint::text`, []);
  const [last, now] = res.rows[0]!;
  // Never drawn: the first draw catches up to the clock.
  if (last == null) return { lagMs: 0, leadMs: 0 };
  const nextMs = ((toBigInt(last, 'last_value') + 1n) >> BigInt(layout.sequenceBits)) + BigInt(layout.epochMs);
  const behind = Number(toBigInt(now, 'clock') - nextMs);
  if (behind < 0) return { lagMs: 0, leadMs: -behind };
  return { lagMs: behind < NEXT_ID_SLACK_MS ? behind : 0, leadMs: 0 };
}

export async function postgresColumnShape(
  db: SqlExecutor,
  table: string,
  column: string,
): Promise<{ dataType: string; identity: boolean; generated: boolean; default: string | null } | undefined> {
  const res = await db.run(
    // Every column named: the knex executor reads rows by name, so two unnamed ones would collide.
    `SELECT pg_catalog.format_type(a.atttypid, a.atttypmod) AS data_type, a.attidentity <> '' AS is_identity, a.attgenerated <> '' AS is_generated,
            (SELECT pg_catalog.pg_get_expr(ad.adbin, ad.adrelid) FROM pg_catalog.pg_attrdef ad WHERE ad.adrelid = a.attrelid AND ad.adnum = a.attnum) AS column_default
       FROM pg_catalog.pg_attribute a WHERE a.attrelid = pg_catalog.to_regclass(?) AND a.attname = ? AND a.attnum > 0 AND NOT a.attisdropped`,
    [table, column],
  );
  const row = res.rows[0];
  if (!row) return undefined;
  return { dataType: String(row[0]), identity: isTrue(row[1]), generated: isTrue(row[2]), default: row[3] == null ? null : String(row[3]) };
}

/** Whether `table` (as written, quoted where it must be) names a table: to tell a missing table from a missing column. */
export async function postgresTableExists(db: SqlExecutor, table: string): Promise<boolean> {
  const res = await db.run('SELECT pg_catalog.to_regclass(?) IS NOT NULL AS found', [table]);
  return isTrue(res.rows[0]?.[0]);
}

/**
 * The DEFAULTs `attach --replace` replaced, per column, so that detach puts each back: a table in
 * next_id()'s schema, made when first needed (most installs never replace one), dropped with
 * next_id() by the down migration.
 */
export const NEXT_ID_REPLACED = 'idlease_next_id_replaced';

export async function recordPostgresReplacedDefault(
  db: SqlExecutor,
  schema: string,
  table: string,
  column: string,
  previous: string,
): Promise<void> {
  const t = qualified('postgres', schema, NEXT_ID_REPLACED);
  await db.run(
    `CREATE TABLE IF NOT EXISTS ${t} (table_name text NOT NULL, column_name text NOT NULL, previous_default text NOT NULL, replaced_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (table_name, column_name))`,
    [],
  );
  await db.run(
    `INSERT INTO ${t} (table_name, column_name, previous_default) VALUES (?, ?, ?) ON CONFLICT (table_name, column_name) DO UPDATE SET previous_default = EXCLUDED.previous_default, replaced_at = now()`,
    [table, column, previous],
  );
}

/** The DEFAULT attach replaced on `table.column` (and forget it), or undefined when it replaced none. */
export async function takePostgresReplacedDefault(
  db: SqlExecutor,
  schema: string,
  table: string,
  column: string,
): Promise<string | undefined> {
  const t = qualified('postgres', schema, NEXT_ID_REPLACED);
  if (!isTrue((await db.run('SELECT pg_catalog.to_regclass(?) IS NOT NULL', [t])).rows[0]?.[0])) return undefined;
  const res = await db.run(`DELETE FROM ${t} WHERE table_name = ? AND column_name = ? RETURNING previous_default`, [table, column]);
  const row = res.rows[0];
  return row === undefined ? undefined : String(row[0]);
}

export async function setPostgresColumnDefault(db: SqlExecutor, table: string, column: string, expression: string | null): Promise<void> {
  await db.run(
    `ALTER TABLE ${table} ALTER COLUMN ${quoteIdent('postgres', column)} ${expression === null ? 'DROP DEFAULT' : `SET DEFAULT ${expression}`}`,
    [],
  );
}
