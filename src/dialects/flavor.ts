/**
 * One primitive per SQL difference between the flavors idlease speaks. A statement file asks
 * for `asText(flavor, expr)` instead of repeating `flavor === 'mysql' ? … : …`: each dialect is
 * one object below (`MYSQL`, `POSTGRES`) that supplies every primitive of `DialectSql`, so adding
 * an engine is one more object here (the compiler lists what it lacks), its instance expression
 * (instance.ts), and an entry in the few per-dialect tables of statements that differ as a whole
 * (the DDL, the ticket counter, the fenced lease, the worker claim: each a `PerDialect` the
 * compiler points to). Identifiers reaching these helpers are already validated
 * (identifiers.ts); integers are checked to be integers before they are inlined.
 */
import { IdleaseError } from '../errors.js';
import { toBigInt } from '../ids.js';
import { quoteIdent, qualified, type Flavor } from './detect.js';
import type { SqlResult } from './sql.js';

export { quoteIdent, qualified };

/** The SQL dialects. PGlite speaks PostgreSQL's: it differs only in being one in-process connection. */
export type Dialect = 'mysql' | 'postgres';

const DIALECT_OF: Readonly<Record<Flavor, Dialect>> = { mysql: 'mysql', postgres: 'postgres', pglite: 'postgres' };

/** A statement (or anything) that differs per dialect as a whole, not by a primitive. */
export type PerDialect<T> = Readonly<Record<Dialect, T>>;

/** The entry of a per-dialect table for this flavor. */
export function perDialect<T>(flavor: Flavor, table: PerDialect<T>): T {
  return table[DIALECT_OF[flavor]];
}

/** What a dialect supplies: each member is one SQL difference, documented on its exported function below. */
interface DialectSql {
  readonly asText: (expr: string) => string;
  readonly bigParam: string;
  readonly intParam: string;
  readonly textParam: string;
  readonly booleanLiteral: (value: boolean) => string;
  readonly stringLiteral: (doubled: string) => string;
  readonly clockMs: string;
  readonly now: string;
  readonly plusMsParam: (timestamp: string) => string;
  readonly msParamTimestamp: string;
  readonly timestampMs: (column: string) => string;
  readonly pastTimestamp: string;
  readonly currentSchema: string;
  readonly fromDual: string;
  readonly insertIgnore: (into: string, rows: string, key: string) => string;
  readonly onConflictDoNothing: (key: string) => string;
  readonly onConflictUpdate: (key: string, columns: readonly string[]) => string;
  readonly newValueSet: (column: string, expr: string) => string;
  readonly newValueReturning: (expr: string, alias: string) => string;
  readonly newValue: (res: SqlResult, what: string) => bigint | undefined;
  readonly hasReturning: boolean;
  readonly affectedCountsUnchanged: boolean;
}

const MYSQL: DialectSql = {
  asText: (expr) => `CAST(${expr} AS CHAR)`,
  bigParam: 'CAST(? AS SIGNED)',
  intParam: 'CAST(? AS SIGNED)',
  textParam: '?',
  booleanLiteral: (value) => (value ? '1' : '0'),
  stringLiteral: (doubled) => `'${doubled.replace(/\\/g, '\\\\')}'`,
  // UTC whatever the server's or the session's time zone: UNIX_TIMESTAMP(SYSDATE(3)) read the
  // datetime in the session's zone, so across a DST fall-back the clock ran an hour ahead and
  // then stood still for the repeated hour. UTC_TIMESTAMP is read per statement (each statement
  // of a stored program too), and the difference of two datetimes involves no zone.
  clockMs: "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) / 1000",
  now: 'NOW(3)',
  plusMsParam: (timestamp) => `${timestamp} + INTERVAL ? * 1000 MICROSECOND`,
  msParamTimestamp: 'FROM_UNIXTIME(? / 1000)',
  timestampMs: (column) => `CAST(ROUND(UNIX_TIMESTAMP(${column}) * 1000) AS CHAR)`,
  // A TIMESTAMP cannot hold 1970-01-01 00:00:00 in every time zone (0 is the "zero date").
  pastTimestamp: `'1970-01-02 00:00:00'`,
  currentSchema: 'DATABASE()',
  fromDual: ' FROM DUAL',
  insertIgnore: (into, rows) => `INSERT IGNORE INTO ${into} ${rows}`,
  onConflictDoNothing: (key) => `ON DUPLICATE KEY UPDATE ${key} = ${key}`,
  onConflictUpdate: (_key, columns) => `ON DUPLICATE KEY UPDATE ${columns.map((c) => `${c} = VALUES(${c})`).join(', ')}`,
  // LAST_INSERT_ID(expr) puts the new value in the OK packet's insertId, which mysql2 always
  // delivers exactly (a string past 2^53), whatever the pool's options.
  newValueSet: (column, expr) => `${column} = LAST_INSERT_ID(${expr})`,
  newValueReturning: () => '',
  newValue: (res, what) => (res.affected === 1 ? toBigInt(res.insertId, `${what} (insertId)`) : undefined),
  hasReturning: false,
  affectedCountsUnchanged: false,
};

const POSTGRES: DialectSql = {
  asText: (expr) => `(${expr})::text`,
  bigParam: 'CAST(? AS bigint)',
  intParam: 'CAST(? AS integer)',
  textParam: 'CAST(? AS varchar)',
  booleanLiteral: (value) => (value ? 'true' : 'false'),
  stringLiteral: (doubled) => `'${doubled}'`,
  clockMs: "pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) * 1000",
  now: 'now()',
  plusMsParam: (timestamp) => `${timestamp} + make_interval(secs => CAST(? AS float8) / 1000)`,
  msParamTimestamp: 'to_timestamp(CAST(? AS float8) / 1000)',
  timestampMs: (column) => `round(extract(epoch FROM ${column}) * 1000)::bigint::text`,
  pastTimestamp: `'epoch'::timestamptz`,
  currentSchema: 'pg_catalog.current_schema()',
  fromDual: '',
  insertIgnore: (into, rows, key) => `INSERT INTO ${into} ${rows} ON CONFLICT ${key === '' ? '' : `(${key}) `}DO NOTHING`,
  onConflictDoNothing: (key) => `ON CONFLICT (${key}) DO NOTHING`,
  onConflictUpdate: (key, columns) => `ON CONFLICT (${key}) DO UPDATE SET ${columns.map((c) => `${c} = EXCLUDED.${c}`).join(', ')}`,
  newValueSet: (column, expr) => `${column} = ${expr}`,
  newValueReturning: (expr, alias) => ` RETURNING ${POSTGRES.asText(expr)} AS ${alias}`,
  newValue: (res, what) => (res.rows[0] ? toBigInt(res.rows[0][0], what) : undefined),
  hasReturning: true,
  affectedCountsUnchanged: true,
};

const DIALECTS: PerDialect<DialectSql> = { mysql: MYSQL, postgres: POSTGRES };
const sql = (flavor: Flavor): DialectSql => perDialect(flavor, DIALECTS);

/** An expression read back as text, so a 64-bit value never passes through a JS number. */
export function asText(flavor: Flavor, expr: string): string {
  return sql(flavor).asText(expr);
}

/** A bound 64-bit integer (sent as a decimal string). */
export function bigParam(flavor: Flavor): string {
  return sql(flavor).bigParam;
}

/** A bound 32-bit integer where the statement alone gives it no type (a SELECT list). */
export function intParam(flavor: Flavor): string {
  return sql(flavor).intParam;
}

/** A bound string where the statement alone gives PostgreSQL no type for it (a SELECT list). */
export function textParam(flavor: Flavor): string {
  return sql(flavor).textParam;
}

/** A boolean literal for a boolean column (MySQL: tinyint 1/0). */
export function booleanLiteral(flavor: Flavor, value: boolean): string {
  return sql(flavor).booleanLiteral(value);
}

/** A boolean as each client returns it: true, 't' (pg read as text), 1 (MySQL tinyint). */
export function isTrue(value: unknown): boolean {
  return value === true || value === 't' || Number(value) === 1;
}

/**
 * DDL takes no bound values (neither MySQL nor PostgreSQL accepts parameters in utility
 * statements or in a column DEFAULT), so integers are inlined — only ever from a validated
 * number or bigint, and refused here if they are anything else.
 */
export function intLiteral(value: number | bigint): string {
  if (typeof value === 'number' && !Number.isSafeInteger(value)) throw new IdleaseError('BAD_CONFIG', `not an integer: ${value}`);
  if (typeof value !== 'number' && typeof value !== 'bigint') throw new Error(`internal: ${String(value)} is not an integer`);
  return BigInt(value).toString();
}

/** A string literal for DDL (COMMENT, a DEFAULT): only ever fed validated or internal text. */
export function stringLiteral(flavor: Flavor, text: string): string {
  return sql(flavor).stringLiteral(text.replace(/'/g, "''"));
}

/** The database clock in Unix milliseconds, read per call (not frozen per statement), as a float. */
export function clockMs(flavor: Flavor): string {
  return sql(flavor).clockMs;
}

/** The statement's time as a timestamp (millisecond precision on MySQL), for a timestamp column. */
export function now(flavor: Flavor): string {
  return sql(flavor).now;
}

/** A timestamp expression plus a bound number of milliseconds. */
export function plusMsParam(flavor: Flavor, timestamp: string): string {
  return sql(flavor).plusMsParam(timestamp);
}

/** A bound Unix millisecond count as a timestamp. */
export function msParamTimestamp(flavor: Flavor): string {
  return sql(flavor).msParamTimestamp;
}

/** A timestamp column as Unix milliseconds, read back as text (each client converts Dates its own way). */
export function timestampMs(flavor: Flavor, column: string): string {
  return sql(flavor).timestampMs(column);
}

/** A timestamp long past, for "expired now". */
export function pastTimestamp(flavor: Flavor): string {
  return sql(flavor).pastTimestamp;
}

/** The schema (PostgreSQL) or database (MySQL) the session works in. */
export function currentSchemaExpr(flavor: Flavor): string {
  return sql(flavor).currentSchema;
}

/** What a SELECT that reads no table needs before its WHERE (MySQL: FROM DUAL), with its leading space. */
export function fromDual(flavor: Flavor): string {
  return sql(flavor).fromDual;
}

/**
 * Insert rows (`VALUES (…)` or a SELECT) unless one with the same key exists: `into` is
 * `table (columns)`, `key` the conflict target's columns ('' for any). On MySQL this is INSERT
 * IGNORE, which also turns other errors of the row into warnings: where that must not happen,
 * use onConflictDoNothing.
 */
export function insertIgnore(flavor: Flavor, into: string, rows: string, key: string): string {
  return sql(flavor).insertIgnore(into, rows, key);
}

/** The tail of an INSERT that leaves a row with the same key (one column) as it is, and nothing else. */
export function onConflictDoNothing(flavor: Flavor, key: string): string {
  return sql(flavor).onConflictDoNothing(key);
}

/** The tail of an INSERT that, on a row with the same key, sets `columns` from the new row. */
export function onConflictUpdate(flavor: Flavor, key: string, columns: readonly string[]): string {
  return sql(flavor).onConflictUpdate(key, columns);
}

/**
 * A single-row UPDATE that hands back the new value of one bigint column: `newValueSet` is the
 * SET item, `newValueReturning` the statement's tail (with its leading space), `newValue` reads
 * the result (undefined: no row changed). MySQL has no RETURNING; LAST_INSERT_ID(expr) carries
 * the value in the OK packet instead — and 0 there means the packet lost it (a trigger fired).
 */
export function newValueSet(flavor: Flavor, column: string, expr: string): string {
  return sql(flavor).newValueSet(column, expr);
}

export function newValueReturning(flavor: Flavor, expr: string, alias: string): string {
  return sql(flavor).newValueReturning(expr, alias);
}

export function newValue(flavor: Flavor, res: SqlResult, what: string): bigint | undefined {
  return sql(flavor).newValue(res, what);
}

/** Whether INSERT and UPDATE can hand rows back (RETURNING); where not, the caller reads them back. */
export function hasReturning(flavor: Flavor): boolean {
  return sql(flavor).hasReturning;
}

/**
 * Whether an UPDATE's affected count includes rows it matched but left unchanged (PostgreSQL);
 * MySQL counts only rows whose values changed, so 0 there may still mean the row exists.
 */
export function affectedCountsUnchanged(flavor: Flavor): boolean {
  return sql(flavor).affectedCountsUnchanged;
}
