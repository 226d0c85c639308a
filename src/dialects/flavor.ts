/**
 * One primitive per SQL difference between the flavors idlease speaks. A statement file asks
 * for `asText(flavor, expr)` instead of repeating `flavor === 'mysql' ? … : …`, so adding an
 * engine is one more branch here (and its instance expression in instance.ts), not a hunt
 * through every statement. Identifiers reaching these helpers are already validated
 * (identifiers.ts); integers are checked to be integers before they are inlined.
 */
import { IdleaseError } from '../errors.js';
import { quoteIdent, qualified, type Flavor } from './detect.js';

export { quoteIdent, qualified };

/** An expression read back as text, so a 64-bit value never passes through a JS number. */
export function asText(flavor: Flavor, expr: string): string {
  return flavor === 'mysql' ? `CAST(${expr} AS CHAR)` : `(${expr})::text`;
}

/** A bound 64-bit integer (sent as a decimal string). */
export function bigParam(flavor: Flavor): string {
  return flavor === 'mysql' ? 'CAST(? AS SIGNED)' : 'CAST(? AS bigint)';
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
  const doubled = text.replace(/'/g, "''");
  return flavor === 'mysql' ? `'${doubled.replace(/\\/g, '\\\\')}'` : `'${doubled}'`;
}

/** The database clock in Unix milliseconds, read per call (not frozen per statement), as a float. */
export function clockMs(flavor: Flavor): string {
  // NOW(3) is fixed for a whole statement on MariaDB; SYSDATE(3) is read each time.
  return flavor === 'mysql' ? 'UNIX_TIMESTAMP(SYSDATE(3)) * 1000' : "pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) * 1000";
}

/** The schema (PostgreSQL) or database (MySQL) the session works in. */
export function currentSchemaExpr(flavor: Flavor): string {
  return flavor === 'mysql' ? 'DATABASE()' : 'pg_catalog.current_schema()';
}
