import { IdleaseError } from './errors.js';

/**
 * Identifiers are interpolated into SQL (they cannot be bound), so they are held to a
 * pattern every dialect accepts unquoted and then quoted anyway. Lower case only: Postgres
 * folds unquoted names, MySQL on some file systems is case-sensitive; one rule avoids both.
 */
const IDENTIFIER = /^[a-z_][a-z0-9_]{0,62}$/;

export function validateIdentifier(value: unknown, option: string): string {
  if (typeof value !== 'string' || !IDENTIFIER.test(value)) {
    throw new IdleaseError(
      'BAD_CONFIG',
      `${option} must be a lower-case SQL identifier matching ${IDENTIFIER.source} ` +
        `(letters, digits, underscore; at most 63 characters), got ${JSON.stringify(value)}. ` +
        `Example: ${option}: 'idlease_segments'.`,
    );
  }
  return value;
}
