/**
 * `idlease next` on an embedded directory that `idlease serve` holds: the server has the only
 * open copy of the database, so the IDs come from it over HTTP instead of from a second copy.
 */
import { ERROR_CATEGORIES, IdleaseError, type IdleaseErrorCode } from '../errors.js';
import type { LockHolder } from '../embedded/lock.js';

type ServeAddress = NonNullable<LockHolder['serve']>;

/** What a server that does not say its batch cap answers at most per /ids request (serve's default). */
const SERVE_BATCH = 10_000;

export interface DrawRequest {
  readonly tag: string;
  readonly count: number;
  readonly table: string;
  readonly schema?: string;
  /** Add the tag when missing, as `next` does on the embedded database. */
  readonly create?: { start?: string; step?: number };
  /** How long one answer may take (--wait): the server stands in for the database it holds. */
  readonly waitMs: number;
}

export async function drawThroughServe(serve: ServeAddress, request: DrawRequest): Promise<bigint[]> {
  if (serve.table !== request.table || (serve.schema ?? undefined) !== (request.schema ?? undefined)) {
    throw new IdleaseError(
      'DB_LOCKED',
      `idlease serve at ${serve.url} holds this embedded database with --table ${serve.table}${serve.schema ? ` --schema ${serve.schema}` : ''}; ` +
        'give the same flags to go through it, or stop it first.',
    );
  }
  const ids: bigint[] = [];
  while (ids.length < request.count) {
    const n = Math.min(serve.maxBatch ?? SERVE_BATCH, request.count - ids.length);
    const params = new URLSearchParams({ n: String(n) });
    if (request.create) {
      params.set('create', '1');
      if (request.create.start !== undefined) params.set('start', request.create.start);
      if (request.create.step !== undefined) params.set('step', String(request.create.step));
    }
    const url = `${serve.url}/v1/segment/${encodeURIComponent(request.tag)}/ids?${params}`;
    let res: Response;
    try {
      res = await fetch(url, {
        headers: serve.secret ? { authorization: `Bearer ${serve.secret}` } : {},
        signal: AbortSignal.timeout(request.waitMs),
      });
    } catch (cause) {
      const late = (cause as Error)?.name === 'TimeoutError';
      throw new IdleaseError(
        'DB_UNAVAILABLE',
        `idlease serve at ${serve.url} holds the embedded database but did not answer ${late ? `within ${request.waitMs / 1000} s` : `(${(cause as Error).message})`}; rerun once it is up or stopped${late ? ' (--wait <seconds> waits longer)' : ''}.`,
        { cause },
      );
    }
    const body = (await res.json().catch(() => ({}))) as { ids?: unknown[]; code?: string; message?: string };
    if (!res.ok || !Array.isArray(body.ids)) {
      // The server's own HTTP codes (SHUTTING_DOWN, UNAUTHORIZED) are the server being unavailable to this command.
      const code: IdleaseErrorCode =
        body.code !== undefined && body.code in ERROR_CATEGORIES ? (body.code as IdleaseErrorCode) : 'DB_UNAVAILABLE';
      throw new IdleaseError(
        code,
        `${body.code && !(body.code in ERROR_CATEGORIES) ? `${body.code}: ` : ''}${body.message ?? `HTTP ${res.status}`} (from idlease serve at ${serve.url}, which holds the embedded database)`,
      );
    }
    checkAnswer(serve, body.ids, n, ids.at(-1));
    for (const id of body.ids) ids.push(BigInt(id as string));
  }
  return ids;
}

const MAX_ID = (1n << 63n) - 1n;

/**
 * What a holder answers is checked before it is printed: whoever holds the lock file could be
 * anything listening on that port (a stale file, another user's process). Segment IDs from one
 * server come from its one allocator, strictly increasing, so a call's IDs — across its batches —
 * are positive 64-bit integers, `n` per request, each above the one before; anything else is
 * INVARIANT and nothing is printed.
 */
function checkAnswer(serve: ServeAddress, answer: unknown[], n: number, before: bigint | undefined): void {
  const wrong = (why: string) =>
    new IdleaseError(
      'INVARIANT',
      `idlease serve at ${serve.url}, which holds the embedded database, answered IDs that cannot be right (${why}); none are printed. ` +
        'Check what runs at that address (the lock file names its process), stop it, and rerun.',
    );
  if (answer.length !== n) throw wrong(`${answer.length} IDs for n=${n}`);
  let last = before;
  for (const text of answer) {
    if (typeof text !== 'string' || !/^[1-9]\d{0,18}$/.test(text) || BigInt(text) > MAX_ID)
      throw wrong(`${JSON.stringify(text)} is not an ID`);
    const id = BigInt(text);
    if (last !== undefined && id <= last) throw wrong(`${id} after ${last}: repeated or out of order`);
    last = id;
  }
}
