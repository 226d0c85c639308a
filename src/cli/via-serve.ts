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
        signal: AbortSignal.timeout(30_000),
      });
    } catch (cause) {
      throw new IdleaseError(
        'DB_UNAVAILABLE',
        `idlease serve at ${serve.url} holds the embedded database but did not answer (${(cause as Error).message}); rerun once it is up or stopped.`,
        { cause },
      );
    }
    const body = (await res.json().catch(() => ({}))) as { ids?: string[]; code?: string; message?: string };
    if (!res.ok || !Array.isArray(body.ids)) {
      // The server's own HTTP codes (SHUTTING_DOWN, UNAUTHORIZED) are the server being unavailable to this command.
      const code: IdleaseErrorCode =
        body.code !== undefined && body.code in ERROR_CATEGORIES ? (body.code as IdleaseErrorCode) : 'DB_UNAVAILABLE';
      throw new IdleaseError(
        code,
        `${body.code && !(body.code in ERROR_CATEGORIES) ? `${body.code}: ` : ''}${body.message ?? `HTTP ${res.status}`} (from idlease serve at ${serve.url}, which holds the embedded database)`,
      );
    }
    for (const id of body.ids) ids.push(BigInt(id));
  }
  return ids;
}
