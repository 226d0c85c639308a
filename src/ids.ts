import { IdleaseError } from './errors.js';

/** Largest value a signed 64-bit column (bigint / BIGINT) can hold. */
export const MAX_INT64 = (1n << 63n) - 1n;
/** Largest value an unsigned 64-bit column (BIGINT UNSIGNED) can hold. */
export const MAX_UINT64 = (1n << 64n) - 1n;

/** The settings that keep int8 out of JS numbers, named wherever one is refused. */
export const EXACT_INT8_FIX =
  "Read int8 as bigint or string: Drizzle bigint(…, { mode: 'bigint' }); pg leaves int8 as strings by default, " +
  'so drop setTypeParser(20, parseInt) or use pg.types.setTypeParser(20, BigInt); mysql2 needs supportBigNumbers: true ' +
  'and bigNumberStrings: true (idlease.connect sets them); PGlite and postgres.js return exact values unless told otherwise.';

/**
 * A JS number past 2^53 may already have lost digits (383000482429295994 arrives as
 * 383000482429296000), and an ID that lost digits is a duplicate, or a lookup that finds nothing.
 */
export function unsafeNumberError(value: number, what: string): IdleaseError {
  return new IdleaseError(
    'UNSAFE_NUMBER',
    `${what} arrived as the JS number ${String(value)}, past 2^53 (Number.MAX_SAFE_INTEGER), where numbers lose digits; refused. ${EXACT_INT8_FIX}`,
  );
}

/**
 * Drivers hand int8 back as string (pg, mysql2 with bigNumberStrings), bigint or
 * number (PGlite, by size). A number is only trusted while it is a safe integer:
 * past 2^53 it may already have lost digits, and an ID that lost digits is a duplicate.
 */
export function toBigInt(value: unknown, what = 'value'): bigint {
  if (typeof value === 'bigint') return value;
  if (typeof value === 'string' && /^-?\d+$/.test(value)) return BigInt(value);
  if (typeof value === 'number' && Number.isSafeInteger(value)) return BigInt(value);
  if (typeof value === 'number' && Number.isInteger(value)) throw unsafeNumberError(value, `The database's ${what}`);
  throw new IdleaseError(
    'INVARIANT',
    `The database returned ${what} = ${String(value)} (${typeof value}), which is not an exact integer. ` +
      'Configure the driver to return int8 as string or bigint (idlease.connect does this).',
  );
}

/**
 * A 32-bit `int` column (a worker id, a pid) as a JS number: these fit a number exactly, unlike
 * IDs. Anything that is not an integer in int range is a driver or schema surprise, not a value.
 */
export function toInt32(value: unknown, what = 'value'): number {
  const n = typeof value === 'string' && /^-?\d+$/.test(value) ? Number(value) : typeof value === 'bigint' ? Number(value) : value;
  if (typeof n === 'number' && Number.isInteger(n) && n >= -2_147_483_648 && n <= 2_147_483_647) return n;
  throw new IdleaseError('INVARIANT', `The database returned ${what} = ${String(value)} (${typeof value}), which is not a 32-bit integer.`);
}
