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

/**
 * A table or column of the user's own that idlease writes into (next-id attach): ORMs make
 * mixed-case names (Prisma's model `Order` is the table "Order"), so case is kept, and the name is
 * always quoted by the dialect, which is what keeps it exact. The characters are still held to
 * letters, digits and underscore, so nothing but the name can reach the SQL.
 */
const USER_IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;

export function validateUserIdentifier(value: unknown, option: string): string {
  if (typeof value !== 'string' || !USER_IDENTIFIER.test(value)) {
    throw new IdleaseError(
      'BAD_ARGUMENT',
      `${option} must be a SQL identifier matching ${USER_IDENTIFIER.source} (letters, digits, underscore, not starting ` +
        `with a digit; at most 63 characters; case is kept: it is quoted), got ${JSON.stringify(value)}. Example: ${option}: 'orders' or 'Order'.`,
    );
  }
  return value;
}

/** The segment table's name when none is given: runtime options and migrate both default to it. */
export const DEFAULT_SEGMENT_TABLE = 'idlease_segments';

/** A ticket sequence name: an identifier that fits in idlease_tickets_<name> (48 characters at most). */
export function validateSequenceName(value: unknown, option: string): string {
  const name = validateIdentifier(value, option);
  if (name.length > 48) {
    throw new IdleaseError(
      'BAD_CONFIG',
      `${option} must be at most 48 characters (it becomes idlease_tickets_<name>), got ${name.length}.`,
    );
  }
  return name;
}

/** A snowflake worker table's name: an identifier that fits in `<name>_instance`, its instance marker (54 characters at most). */
export function validateWorkerTable(value: unknown, option: string): string {
  const name = validateIdentifier(value, option);
  if (name.length > 54) {
    throw new IdleaseError(
      'BAD_CONFIG',
      `${option} must be at most 54 characters (its instance marker is <name>_instance), got ${name.length}.`,
    );
  }
  return name;
}
