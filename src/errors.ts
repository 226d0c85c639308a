/**
 * Every failure idlease raises on purpose is an IdleaseError with a stable `code`.
 * Callers branch on `code`; the message is for humans and says what to do.
 */
export type IdleaseErrorCode =
  | 'BAD_CONFIG' // options rejected up front (names, steps, servers, layouts)
  | 'BAD_ARGUMENT' // a call's argument is out of range (nextBatch(n), decodeId(id))
  | 'UNKNOWN_TAG' // segment tag has no row; add it or opt in to create it
  | 'NOT_MIGRATED' // a table/function idlease needs is missing; run migrate
  | 'DB_UNAVAILABLE' // the database did not answer within the bound; cause attached
  | 'EXHAUSTED' // a counter reached its field's limit; never wraps
  | 'CLOSED' // the allocator was closed
  | 'INVARIANT' // a value from the database broke a guarantee (refused, not handed out)
  | 'MIGRATION_FAILED'; // a migration could not be applied or rolled back

export class IdleaseError extends Error {
  readonly code: IdleaseErrorCode;

  constructor(code: IdleaseErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'IdleaseError';
    this.code = code;
  }
}

export function isIdleaseError(err: unknown, code?: IdleaseErrorCode): err is IdleaseError {
  return err instanceof IdleaseError && (code === undefined || err.code === code);
}
