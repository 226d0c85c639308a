import { IdleaseError } from './errors.js';

/** Largest value a signed 64-bit column (bigint / BIGINT) can hold. */
export const MAX_INT64 = (1n << 63n) - 1n;
/** Largest value an unsigned 64-bit column (BIGINT UNSIGNED) can hold. */
export const MAX_UINT64 = (1n << 64n) - 1n;

/**
 * Drivers hand int8 back as string (pg, mysql2 with bigNumberStrings), bigint or
 * number (PGlite, by size). A number is only trusted while it is a safe integer:
 * past 2^53 it may already have lost digits, and an ID that lost digits is a duplicate.
 */
export function toBigInt(value: unknown, what = 'value'): bigint {
  if (typeof value === 'bigint') return value;
  if (typeof value === 'string' && /^-?\d+$/.test(value)) return BigInt(value);
  if (typeof value === 'number' && Number.isSafeInteger(value)) return BigInt(value);
  throw new IdleaseError(
    'INVARIANT',
    `The database returned ${what} = ${String(value)} (${typeof value}), which is not an exact integer. ` +
      'Configure the driver to return int8 as string or bigint (idlease.connect does this).',
  );
}
