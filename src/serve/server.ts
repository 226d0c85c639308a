/**
 * `idlease serve`: segment IDs over HTTP for services in any language. node:http with a
 * hand-rolled router of six routes: the hot route is one string split and one resolved
 * promise, and bench/serve.ts holds it to ≥ 0.8× a bare node:http counter server.
 *
 *   GET  /api/segment/get/{tag}           the next ID as text (Leaf's API)
 *   GET  /api/snowflake/get/{key}         a snowflake ID as text (Leaf's API; the key is only validated, as in Leaf)
 *   GET  /v1/segment/{tag}/ids?n=N        {"ids": ["…", …]}
 *   POST /v1/segment/{tag}/lease?step=S   {"start": "…", "end": "…"} — a range for a remote client
 *   GET  /api/redis/get/{tag}             with a Redis client: the next ID of the tag's Redis sequence (one order across servers)
 *   GET  /v1/redis/{tag}/ids?n=N          the same, a batch
 *   GET  /metrics  /healthz  /readyz
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { Registry } from 'prom-client';
import { MAX_ROW_STEP } from '../dialects/segments.js';
import { errorCategory, IdleaseError, isIdleaseError } from '../errors.js';
import { shellWord } from '../shell.js';
import { collectMetrics, remoteLeaseCounter } from '../metrics/collect.js';
import { probe } from '../dialects/connection-errors.js';
import { knexExecutor, type KnexLike } from '../drivers/knex.js';
import { settlesWithin } from '../runtime/deadline.js';
import { addTag, listTags } from '../segment/admin.js';
import { createSegmentAllocator } from '../segment/allocator.js';
import { createKnexSegmentStore, type SegmentStore } from '../segment/store.js';
import type { SegmentAllocator } from '../segment/types.js';
import { createSnowflakeAllocator } from '../snowflake/allocator.js';
import type { SnowflakeAllocator } from '../snowflake/types.js';
import { createRedisSequence } from '../redis-sequence/sequence.js';
import type { RedisSequence } from '../redis-sequence/types.js';

export interface ServeOptions {
  readonly knex: KnexLike;
  readonly host: string;
  readonly port: number;
  /** Serve only these tags (each must exist). Default: every tag in the table. */
  readonly tags?: readonly string[];
  /** Bearer token every /api and /v1 request must carry. */
  readonly token?: string;
  /** Require the token on /metrics too (health endpoints stay open for probes). */
  readonly protectMetrics?: boolean;
  readonly table?: string;
  readonly schema?: string;
  /** Largest n for /ids. Default 100,000. */
  readonly maxBatch?: number;
  /** Largest step for /lease. Default 10,000,000. */
  readonly maxLeaseStep?: number;
  /** Largest lease the server's own allocators take (their `maxStep`). Default 10,000,000. */
  readonly maxStep?: number;
  /** Worker-id group of the server's snowflake allocator. Default 'serve'. */
  readonly snowflakeGroup?: string;
  /**
   * Honour `?create=1` on /ids by adding a missing tag, as `idlease next` does on the embedded
   * database (the CLI sends its draws through a serve that holds that directory). Off on servers:
   * there, tags are never created over HTTP.
   */
  readonly createTags?: boolean;
  /** For hints: the command that reaches the served database (`idlease --url …`, password redacted). Default `idlease`. */
  readonly adminCommand?: string;
  /** A connected node-redis or ioredis client: served tags are also issued by Redis sequences (/api/redis, /v1/redis). Not closed by close(). */
  readonly redis?: unknown;
  readonly logger: Logger;
}

export interface IdServer {
  readonly url: string;
  readonly allocators: ReadonlyMap<string, SegmentAllocator>;
  /** Stop accepting, let requests in flight finish (bounded), close every allocator (tails given back). */
  close(timeoutMs?: number): Promise<void>;
}

type HttpCode = 'NOT_FOUND' | 'METHOD_NOT_ALLOWED' | 'UNAUTHORIZED' | 'PAYLOAD_TOO_LARGE' | 'SHUTTING_DOWN';

class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: HttpCode | IdleaseError['code'],
    message: string,
  ) {
    super(message);
  }
}

const STATUS_BY_CATEGORY = { client: 400, config: 500, unavailable: 503, invariant: 500 } as const;

function statusOf(err: unknown): number {
  if (err instanceof HttpError) return err.status;
  if (isIdleaseError(err, 'UNKNOWN_TAG')) return 404;
  const category = errorCategory(err);
  return category === undefined ? 500 : STATUS_BY_CATEGORY[category];
}

function digest(s: string): Buffer {
  return createHash('sha256').update(s).digest();
}

function queryParam(query: string, name: string): string | undefined {
  const found = [...query.matchAll(new RegExp(`(?:^|&)${name}=([^&]*)`, 'g'))];
  if (found.length > 1) throw new IdleaseError('BAD_ARGUMENT', `?${name}= is given ${found.length} times; give it once.`);
  return found[0]?.[1];
}

function intParam(query: string, name: string, min: number, max: number): number {
  const raw = queryParam(query, name);
  const v = raw !== undefined && /^\d{1,16}$/.test(raw) ? Number(raw) : NaN;
  if (!Number.isSafeInteger(v) || v < min || v > max) {
    throw new IdleaseError(
      'BAD_ARGUMENT',
      `?${name}= must be an integer from ${min} to ${max}, got ${raw === undefined ? 'nothing' : JSON.stringify(raw.slice(0, 40))}.`,
    );
  }
  return v;
}

const MAX_BODY = 1024;
const LEAF_PREFIX = '/api/segment/get/';
const PLAIN_TAG = /^[A-Za-z0-9_.-]{1,128}$/;

function sendId(res: http.ServerResponse, id: bigint): void {
  const body = String(id);
  res.writeHead(200, { 'content-type': 'text/plain', 'content-length': body.length });
  res.end(body);
}

function tagOf(segment: string): string {
  if (segment === '') throw new IdleaseError('BAD_ARGUMENT', 'The path names no tag: put the tag after the last slash.');
  try {
    return decodeURIComponent(segment);
  } catch {
    throw new IdleaseError('BAD_ARGUMENT', 'The tag in the path is not valid percent-encoding.');
  }
}

export async function startServer(o: ServeOptions): Promise<IdServer> {
  const maxBatch = o.maxBatch ?? 100_000;
  const maxLeaseStep = Math.min(o.maxLeaseStep ?? 10_000_000, MAX_ROW_STEP);
  const table = { table: o.table, schema: o.schema };
  const store: SegmentStore = createKnexSegmentStore(o.knex, { table: o.table, schema: o.schema });
  const db = knexExecutor(o.knex);
  const registry = new Registry();
  const allocators = new Map<string, SegmentAllocator>();
  const sequences = new Map<string, RedisSequence>();
  const tokenDigest = o.token ? digest(o.token) : undefined;
  let known = new Set<string>();
  let knownAt = 0;
  let closing = false;
  // Created at the first snowflake request, so a server without idlease_workers still serves segments.
  let snowflake: Promise<SnowflakeAllocator> | undefined;

  const countRemoteLease = remoteLeaseCounter(registry);
  collectMetrics(registry); // the metric families exist even before the first tag

  /**
   * Every served tag gets its allocator (and so its metrics, at zero) as soon as it is known:
   * creating one costs no database round trip (the first lease waits for the first ID), and
   * an alert on a tag needs its series before the tag's first request.
   */
  function serveTag(tag: string): SegmentAllocator {
    let a = allocators.get(tag);
    if (a) return a;
    a = createSegmentAllocator({
      knex: o.knex,
      tag,
      table: o.table,
      schema: o.schema,
      ...(o.maxStep === undefined ? {} : { maxStep: o.maxStep }),
    });
    allocators.set(tag, a);
    collectMetrics(registry, a);
    countRemoteLease(tag, 0);
    return a;
  }

  async function refreshTags(): Promise<void> {
    const rows = await listTags(o.knex, table);
    known = new Set(rows.map((r) => r.tag).filter((t) => !o.tags || o.tags.includes(t)));
    knownAt = Date.now();
    if (!closing) for (const tag of known) serveTag(tag);
  }
  await refreshTags();
  const missing = (o.tags ?? []).filter((t) => !known.has(t));
  if (missing.length > 0) {
    throw new IdleaseError(
      'UNKNOWN_TAG',
      `--tags names tags that do not exist: ${missing.join(', ')}. Add them first: ${missing.map((t) => `\`${o.adminCommand ?? 'idlease'} tag add ${shellWord(t)}\``).join(', ')}.`,
    );
  }

  /** The allocator for a served tag; tags added since the last look are found at most once a second. */
  async function allocatorFor(tag: string): Promise<SegmentAllocator> {
    const a = allocators.get(tag);
    if (a) return a;
    if (!known.has(tag) && Date.now() - knownAt > 1_000 && (!o.tags || o.tags.includes(tag))) await refreshTags();
    if (!known.has(tag)) {
      // Not in --tags: the fix is the server's flag. Missing: the tag's row, added by the CLI (or ?create=1 where honoured).
      throw new IdleaseError(
        'UNKNOWN_TAG',
        o.tags && !o.tags.includes(tag)
          ? `Tag ${JSON.stringify(tag)} is not served here: this server runs with --tags ${o.tags.join(',')}; restart it with --tags ${shellWord([...o.tags, tag].join(','))} to serve it.`
          : o.createTags
            ? `Tag ${JSON.stringify(tag)} does not exist. Add it with GET /v1/segment/${encodeURIComponent(tag)}/ids?create=1 (this server holds its embedded database).`
            : `Tag ${JSON.stringify(tag)} does not exist, and tags are never created over HTTP. Add it: \`${o.adminCommand ?? 'idlease'} tag add ${shellWord(tag)}\`.`,
      );
    }
    return serveTag(tag);
  }

  /** The Redis sequence of a served tag, made on its first request. */
  async function sequenceFor(tag: string): Promise<RedisSequence> {
    let s = sequences.get(tag);
    if (s) return s;
    if (o.redis === undefined)
      throw new HttpError(
        404,
        'NOT_FOUND',
        'This server has no Redis: start it with --redis-url redis://… to serve /api/redis and /v1/redis.',
      );
    await allocatorFor(tag); // only served tags
    s = sequences.get(tag);
    if (s) return s;
    s = createRedisSequence({
      redis: o.redis,
      knex: o.knex,
      tag,
      table: o.table,
      schema: o.schema,
      ...(o.maxStep === undefined ? {} : { maxStep: o.maxStep }),
    });
    sequences.set(tag, s);
    collectMetrics(registry, s);
    return s;
  }

  async function addMissingTag(tag: string, query: string): Promise<void> {
    if (known.has(tag) || (o.tags && !o.tags.includes(tag))) return;
    const start = queryParam(query, 'start');
    const step = queryParam(query, 'step');
    await addTag(o.knex, {
      ...table,
      tag,
      ...(start ? { start } : {}),
      ...(step ? { step: intParam(query, 'step', 1, MAX_ROW_STEP) } : {}),
    });
    known.add(tag);
  }

  function authorized(req: http.IncomingMessage): boolean {
    if (!tokenDigest) return true;
    const h = req.headers.authorization;
    if (typeof h !== 'string' || !h.startsWith('Bearer ')) return false;
    return timingSafeEqual(digest(h.slice(7)), tokenDigest);
  }

  let lastErrorLog = 0;
  function fail(res: http.ServerResponse, err: unknown): void {
    const status = statusOf(err);
    const code = err instanceof HttpError || isIdleaseError(err) ? err.code : 'INTERNAL';
    const message = err instanceof Error ? err.message : String(err);
    // Under an outage every request fails the same way: one log line a second is enough.
    if (status >= 500 && Date.now() - lastErrorLog > 1_000) {
      lastErrorLog = Date.now();
      o.logger.error({ event: 'request-failed', status, code, err: message }, 'request failed');
    }
    if (res.headersSent) {
      res.destroy();
      return;
    }
    const body = JSON.stringify({ code, message });
    res.writeHead(status, {
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(body),
      ...(status === 401 ? { 'www-authenticate': 'Bearer' } : {}),
    });
    res.end(body);
  }

  function json(res: http.ServerResponse, status: number, value: unknown): void {
    const body = JSON.stringify(value, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v));
    res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    res.end(body);
  }

  async function ready(): Promise<{
    ready: boolean;
    database: string;
    tags: Record<string, { remaining: string; lastError: string | undefined }>;
  }> {
    const answer = await probe(db, 1_000);
    const database =
      answer === 'ok' ? 'ok' : answer === 'late' ? 'no answer within 1000 ms' : ((answer.error as Error)?.message ?? String(answer.error));
    const tags: Record<string, { remaining: string; lastError: string | undefined }> = {};
    let runway = true;
    for (const [tag, a] of allocators) {
      const s = a.stats();
      const lastError = s.lastError === undefined ? undefined : ((s.lastError as Error).message ?? String(s.lastError));
      tags[tag] = { remaining: s.remaining.toString(), lastError };
      if (s.remaining === 0n && lastError !== undefined) runway = false;
    }
    return { ready: database === 'ok' && runway && !closing, database, tags };
  }

  async function snowflakeAllocator(): Promise<SnowflakeAllocator> {
    if (!snowflake) {
      const a = createSnowflakeAllocator({
        knex: o.knex,
        group: o.snowflakeGroup ?? 'serve',
        ...(o.schema === undefined ? {} : { schema: o.schema }),
      });
      // The first next() claims the worker id: a missing table or no free id is reported to this
      // request, and the next request tries afresh.
      snowflake = a.next().then(
        () => {
          collectMetrics(registry, a);
          return a;
        },
        async (err: unknown) => {
          snowflake = undefined;
          await a.close().catch(() => undefined);
          throw err;
        },
      );
    }
    return snowflake;
  }

  async function route(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q < 0 ? url : url.slice(0, q);
    const query = q < 0 ? '' : url.slice(q + 1);
    const parts = path.split('/');
    // parts[0] is '' (the path starts with '/').
    if (parts[1] === 'api' && parts[2] === 'segment' && parts[3] === 'get' && parts.length === 5) {
      guard(req, 'GET', true);
      const a = await allocatorFor(tagOf(parts[4]!));
      sendId(res, await a.next());
      return;
    }
    if (parts[1] === 'api' && parts[2] === 'snowflake' && parts[3] === 'get' && parts.length === 5) {
      guard(req, 'GET', true);
      tagOf(parts[4]!);
      sendId(res, await (await snowflakeAllocator()).next());
      return;
    }
    if (parts[1] === 'v1' && parts[2] === 'segment' && parts.length === 5) {
      const tag = tagOf(parts[3]!);
      if (parts[4] === 'ids') {
        guard(req, 'GET', true);
        const n = intParam(query, 'n', 1, maxBatch);
        if (o.createTags && queryParam(query, 'create') === '1') await addMissingTag(tag, query);
        const a = await allocatorFor(tag);
        json(res, 200, { ids: await a.nextBatch(n) });
        return;
      }
      if (parts[4] === 'lease') {
        guard(req, 'POST', true);
        const step = intParam(query, 'step', 1, maxLeaseStep);
        await allocatorFor(tag); // only served tags
        // The same one-statement lease the allocators use: this range overlaps nobody's.
        const r = await store.lease(tag, step);
        if (r.kind === 'unknown') throw new IdleaseError('UNKNOWN_TAG', `Tag ${JSON.stringify(tag)} has no row.`);
        if (r.kind === 'full')
          throw new IdleaseError('EXHAUSTED', `Tag ${JSON.stringify(tag)} cannot lease ${step} more IDs below 2^63−1 (max_id ${r.maxId}).`);
        countRemoteLease(tag, step);
        json(res, 200, { start: (r.end - BigInt(step) + 1n).toString(), end: r.end.toString() });
        return;
      }
    }
    if (parts[1] === 'api' && parts[2] === 'redis' && parts[3] === 'get' && parts.length === 5) {
      guard(req, 'GET', true);
      sendId(res, await (await sequenceFor(tagOf(parts[4]!))).next());
      return;
    }
    if (parts[1] === 'v1' && parts[2] === 'redis' && parts[4] === 'ids' && parts.length === 5) {
      guard(req, 'GET', true);
      const n = intParam(query, 'n', 1, maxBatch);
      json(res, 200, { ids: await (await sequenceFor(tagOf(parts[3]!))).nextBatch(n) });
      return;
    }
    if (parts.length === 2) {
      if (parts[1] === 'healthz') {
        guard(req, 'GET', false);
        json(res, 200, { status: 'ok' });
        return;
      }
      if (parts[1] === 'readyz') {
        guard(req, 'GET', false);
        const r = await ready();
        json(res, r.ready ? 200 : 503, r);
        return;
      }
      if (parts[1] === 'metrics') {
        guard(req, 'GET', o.protectMetrics === true);
        const body = await registry.metrics();
        res.writeHead(200, { 'content-type': registry.contentType, 'content-length': Buffer.byteLength(body) });
        res.end(body);
        return;
      }
    }
    throw new HttpError(
      404,
      'NOT_FOUND',
      `No route ${JSON.stringify(path.slice(0, 100))}. Routes: GET /api/segment/get/{tag}, GET /api/snowflake/get/{key}, GET /v1/segment/{tag}/ids?n=, POST /v1/segment/{tag}/lease?step=, GET /api/redis/get/{tag}, GET /v1/redis/{tag}/ids?n=, GET /metrics, /healthz, /readyz.`,
    );
  }

  function guard(req: http.IncomingMessage, method: 'GET' | 'POST', needsToken: boolean): void {
    if (req.method !== method) throw new HttpError(405, 'METHOD_NOT_ALLOWED', `Use ${method} here.`);
    if (needsToken && !authorized(req))
      throw new HttpError(
        401,
        'UNAUTHORIZED',
        'Send Authorization: Bearer <token> (the --token / IDLEASE_TOKEN the server was started with).',
      );
    if (closing) throw new HttpError(503, 'SHUTTING_DOWN', 'The server is shutting down; retry on another instance.');
  }

  const server = http.createServer({ maxHeaderSize: 8 * 1024, requestTimeout: 30_000, headersTimeout: 10_000 }, (req, res) => {
    const length = Number(req.headers['content-length'] ?? 0);
    if (length > MAX_BODY || req.headers['transfer-encoding'] !== undefined) {
      fail(res, new HttpError(413, 'PAYLOAD_TOO_LARGE', `Requests carry no body (at most ${MAX_BODY} bytes).`));
      req.destroy();
      return;
    }
    if (closing) res.setHeader('connection', 'close');
    req.resume();
    // The hot route without the router: a served tag spelled plainly, no query string.
    const url = req.url ?? '';
    if (url.startsWith(LEAF_PREFIX) && req.method === 'GET' && !closing && PLAIN_TAG.test(url.slice(LEAF_PREFIX.length))) {
      const a = allocators.get(url.slice(LEAF_PREFIX.length));
      if (a && authorized(req)) {
        a.next().then(
          (id) => sendId(res, id),
          (err: unknown) => fail(res, err),
        );
        return;
      }
    }
    route(req, res).catch((err: unknown) => fail(res, err));
  });
  server.on('clientError', (err: NodeJS.ErrnoException, socket) => {
    // Malformed requests (bad request line, oversized headers): answer 400/431 and hang up, never crash.
    if (!socket.writable) return;
    const [status, reason, code] =
      err.code === 'HPE_HEADER_OVERFLOW'
        ? [431, 'Request Header Fields Too Large', 'HEADERS_TOO_LARGE']
        : [400, 'Bad Request', 'BAD_REQUEST'];
    const body = JSON.stringify({ code, message: `${reason}: the request could not be parsed.` });
    socket.end(
      `HTTP/1.1 ${status} ${reason}\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err) => reject(listenError(err as NodeJS.ErrnoException, o.host, o.port)));
    server.listen(o.port, o.host, () => resolve());
  });
  const address = server.address() as AddressInfo;
  const url = `http://${address.family === 'IPv6' ? `[${address.address}]` : address.address}:${address.port}`;

  return {
    url,
    allocators,
    async close(timeoutMs = 10_000) {
      closing = true;
      const drained = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      await settlesWithin(drained, timeoutMs);
      server.closeAllConnections();
      const sf = snowflake?.catch(() => undefined);
      await Promise.all(
        [...allocators.values(), ...sequences.values()].map((a) => a.close()).concat(sf ? [sf.then((a) => a?.close())] : []),
      );
    },
  };
}

/**
 * Why the server could not listen, as the setup problem it is (BAD_CONFIG): the port is taken,
 * needs privileges, or the host is not an address of this machine. Anything else stays as it is.
 */
function listenError(err: NodeJS.ErrnoException, host: string, port: number): unknown {
  const at = `${host}:${port}`;
  const why: Record<string, string> = {
    EADDRINUSE: `${at} is already in use: stop what listens there, or pick another port (--port; 0 picks a free one)`,
    EACCES: `listening on ${at} needs privileges this process does not have: pick a port above 1023 (--port)`,
    EADDRNOTAVAIL: `${host} is not an address of this machine: pick one it has (--host), e.g. 127.0.0.1 or 0.0.0.0`,
    ENOTFOUND: `${host} does not resolve: pick an address of this machine (--host), e.g. 127.0.0.1 or 0.0.0.0`,
  };
  const text = err.code === undefined ? undefined : why[err.code];
  return text === undefined ? err : new IdleaseError('BAD_CONFIG', `cannot listen: ${text} (${err.message}).`, { cause: err });
}
