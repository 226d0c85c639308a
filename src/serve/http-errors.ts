/**
 * The error→HTTP mapper of `idlease serve`: every failure becomes `{"code", "message",
 * "requestId"}` with the status of its code's category (ERROR_CATEGORIES, the table the CLI's
 * exit codes read). A client sees idlease's words only: a `client` error's own message (it is
 * about the request and built by idlease), otherwise a fixed sentence per code. What the driver
 * or the database said (SQL text with values, addresses, driver messages) stays in the
 * server's log, under the same request id.
 */
import type http from 'node:http';
import { randomFillSync } from 'node:crypto';
import type { Logger } from 'pino';
import { errorCategory, isIdleaseError, type IdleaseErrorCode } from '../errors.js';

export type HttpCode =
  | 'NOT_FOUND'
  | 'METHOD_NOT_ALLOWED'
  | 'UNAUTHORIZED'
  | 'FORBIDDEN'
  | 'MISDIRECTED'
  | 'PAYLOAD_TOO_LARGE'
  | 'SHUTTING_DOWN'
  | 'BUSY'
  | 'TOO_MANY_ATTEMPTS'
  | 'TAG_QUOTA';

export class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: HttpCode | IdleaseErrorCode,
    message: string,
    /** Extra response headers (`retry-after`). */
    readonly headers: Readonly<Record<string, string>> = {},
  ) {
    super(message);
  }
}

const STATUS_BY_CATEGORY = { client: 400, config: 500, unavailable: 503, invariant: 500 } as const;

/** What a client reads for a code whose own message may carry the database's words. */
const PUBLIC_MESSAGES: Partial<Record<IdleaseErrorCode, string>> = {
  BAD_CONFIG: 'The server is not set up to answer this (see its log).',
  NOT_MIGRATED: 'The database misses a table or function idlease needs: run idlease migrate on it (see the server log).',
  DB_UNAVAILABLE: 'The database did not answer within the bound; retry, or ask another instance.',
  REDIS_UNAVAILABLE: 'Redis did not answer within the bound; retry, or ask another instance.',
  DB_LOCKED: 'The database is held by another process; retry later.',
  CLOSED: 'The server is shutting down; retry on another instance.',
  NO_WORKER_ID: 'No snowflake worker id is free; retry later.',
  CLOCK_BACKWARDS: "The server's clock is behind the last issued time; retry later.",
  EXHAUSTED: 'The tag cannot issue this many more IDs below 2^63−1.',
  INVARIANT: 'A value from the database broke a guarantee and was refused (see the server log).',
  UNSAFE_NUMBER: 'The database driver is set up to lose digits of IDs (see the server log).',
  MIGRATION_FAILED: 'A migration failed (see the server log).',
};

export interface ErrorAnswer {
  readonly status: number;
  readonly code: string;
  readonly message: string;
  readonly headers?: Readonly<Record<string, string>>;
}

/** The status, code and client-facing message of a failure. */
export function toHttpError(err: unknown): ErrorAnswer {
  if (err instanceof HttpError) return { status: err.status, code: err.code, message: err.message, headers: err.headers };
  if (isIdleaseError(err)) {
    if (err.code === 'UNKNOWN_TAG') return { status: 404, code: err.code, message: err.message };
    const category = errorCategory(err)!;
    const message = category === 'client' ? err.message : (PUBLIC_MESSAGES[err.code] ?? 'The request failed (see the server log).');
    return { status: STATUS_BY_CATEGORY[category], code: err.code, message };
  }
  return { status: 500, code: 'INTERNAL', message: 'The request failed (see the server log).' };
}

// Request ids are drawn from a pool of random bytes filled 6 KiB at a time: one call into the
// system's generator per refusal (randomBytes(6)) was the most costly single step of a 401, ahead of
// writing it, when 16 anonymous clients flooded /metrics (randomFillSync 2.7 % of the server's time).
const ID_BYTES = 6;
const idPool = Buffer.alloc(ID_BYTES * 1024);
let idAt = idPool.length;

/** A fresh request id: 12 hex digits (48 random bits), as randomBytes(6) gave. */
export function requestId(): string {
  if (idAt === idPool.length) {
    randomFillSync(idPool);
    idAt = 0;
  }
  idAt += ID_BYTES;
  return idPool.toString('hex', idAt - ID_BYTES, idAt);
}

/** Writes failures as JSON and logs the full story of a 5xx server-side (at most one line a second under an outage). */
export function errorResponder(logger: Logger): (req: http.IncomingMessage, res: http.ServerResponse, err: unknown) => void {
  let lastLog = 0;
  let suppressed = 0;
  return (req, res, err) => {
    const answer = toHttpError(err);
    const id = requestId();
    // An HttpError is a refusal of idlease's own (BUSY, SHUTTING_DOWN): counted elsewhere, not a failure to log.
    if (answer.status >= 500 && !(err instanceof HttpError)) {
      if (Date.now() - lastLog > 1_000) {
        lastLog = Date.now();
        const cause = (err as { cause?: unknown })?.cause;
        logger.error(
          {
            event: 'request-failed',
            requestId: id,
            status: answer.status,
            code: answer.code,
            method: req.method,
            path: (req.url ?? '').split('?')[0]!.slice(0, 200),
            err: err instanceof Error ? err.message : String(err),
            ...(cause instanceof Error ? { cause: cause.message } : {}),
            ...(suppressed > 0 ? { suppressed } : {}),
          },
          'request failed',
        );
        suppressed = 0;
      } else suppressed++;
    }
    if (res.headersSent) {
      res.destroy();
      return;
    }
    const body = JSON.stringify({ code: answer.code, message: answer.message, requestId: id });
    res.writeHead(answer.status, {
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(body),
      ...(answer.status === 401 ? { 'www-authenticate': 'Bearer' } : {}),
      ...answer.headers,
    });
    res.end(body);
  };
}
