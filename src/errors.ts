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
  | 'REDIS_UNAVAILABLE' // Redis (a Redis sequence's issuer) did not answer within the bound; cause attached
  | 'DB_LOCKED' // another process holds the embedded (PGlite) directory and did not let go within the bound
  | 'EXHAUSTED' // a counter reached its field's limit; never wraps
  | 'CLOSED' // the allocator was closed
  | 'INVARIANT' // a value from the database broke a guarantee (refused, not handed out)
  | 'UNSAFE_NUMBER' // an ID arrived as a JS number past 2^53, which may have lost digits; the message names the driver setting
  | 'MIGRATION_FAILED' // a migration could not be applied or rolled back
  | 'NO_WORKER_ID' // every worker id of a snowflake group is held by a live process
  | 'CLOCK_BACKWARDS'; // the wall clock stayed behind the last issued time longer than the wait bound

/**
 * The same failure in the words of the `idlease` command, where the library message names
 * options or calls (`waitTimeoutMs`, `migrate(knex, …)`) that a CLI user does not type.
 * `{idlease}` stands for `idlease` with the connection flags the user gave (`--url …`), so a
 * command in the hint runs against the same database when pasted.
 */
export interface CliWording {
  readonly message: string;
  /** The database the hint's command must use when it is not the command's own (one ticket server of several): a redacted URL. */
  readonly url?: string;
}

export class IdleaseError extends Error {
  readonly code: IdleaseErrorCode;
  /** The message for CLI users, when it differs from `message` (the CLI prints this one). */
  readonly cli?: CliWording;

  constructor(code: IdleaseErrorCode, message: string, options?: { cause?: unknown; cli?: CliWording }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'IdleaseError';
    this.code = code;
    if (options?.cli !== undefined) this.cli = options.cli;
  }
}

export function isIdleaseError(err: unknown, code?: IdleaseErrorCode): err is IdleaseError {
  return err instanceof IdleaseError && (code === undefined || err.code === code);
}

/**
 * What kind of failure a code is, read by every surface that must say it in its own terms:
 * the CLI's exit code and `idlease serve`'s HTTP status.
 * - `client`: the caller asked for something wrong (fix the input) — exit 2, HTTP 400/404;
 * - `config`: the setup is wrong (options, a missing migration) — exit 2, HTTP 500;
 * - `unavailable`: the database did not answer in time, or the allocator is shutting down; it
 *   recovers by itself — exit 1, HTTP 503;
 * - `invariant`: a value broke a guarantee and was refused, or a counter is full — exit 1,
 *   HTTP 500: a person must look.
 */
export type IdleaseErrorCategory = 'client' | 'config' | 'unavailable' | 'invariant';

export const ERROR_CATEGORIES: Readonly<Record<IdleaseErrorCode, IdleaseErrorCategory>> = Object.freeze({
  BAD_ARGUMENT: 'client',
  UNKNOWN_TAG: 'client',
  BAD_CONFIG: 'config',
  NOT_MIGRATED: 'config',
  MIGRATION_FAILED: 'config',
  UNSAFE_NUMBER: 'config',
  DB_UNAVAILABLE: 'unavailable',
  REDIS_UNAVAILABLE: 'unavailable',
  DB_LOCKED: 'unavailable',
  CLOSED: 'unavailable',
  NO_WORKER_ID: 'unavailable',
  CLOCK_BACKWARDS: 'unavailable',
  EXHAUSTED: 'invariant',
  INVARIANT: 'invariant',
});

export function errorCategory(err: unknown): IdleaseErrorCategory | undefined {
  return isIdleaseError(err) ? ERROR_CATEGORIES[err.code] : undefined;
}

/**
 * Whether trying again can stop this code from recurring: only `unavailable` codes recover by
 * themselves; the others (client, config, invariant) need a person. Read by code so that a store
 * built on its own copy of idlease is judged the same. `retriedAnyway` lists codes a caller keeps
 * retrying although the table says otherwise (each names why).
 */
export function isFatalCode(code: unknown, retriedAnyway: readonly IdleaseErrorCode[] = []): boolean {
  if (typeof code !== 'string' || !Object.hasOwn(ERROR_CATEGORIES, code)) return false;
  return ERROR_CATEGORIES[code as IdleaseErrorCode] !== 'unavailable' && !retriedAnyway.includes(code as IdleaseErrorCode);
}

/** The lease loops' question: retry after `err`? Anything but an IdleaseError with a fatal code (see isFatalCode) is retried. */
export function isRetryable(err: unknown, retriedAnyway: readonly IdleaseErrorCode[] = []): boolean {
  return !(isIdleaseError(err) && isFatalCode(err.code, retriedAnyway));
}
