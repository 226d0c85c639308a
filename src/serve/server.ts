/**
 * `idlease serve`: segment IDs over HTTP for services in any language, on node:http. Its
 * concerns live in rooms of their own: the route table (routes.ts), the auth check (auth.ts),
 * the connection limiter (connections.ts), the error→HTTP mapper (http-errors.ts) and the
 * served tags (tags.ts); this file wires them. The hot route is one string test and one
 * resolved promise, and bench/serve.ts holds it to ≥ 0.8× a bare node:http counter server.
 *
 *   GET  /api/segment/get/{tag}           the next ID as text (Leaf's API)
 *   GET  /api/snowflake/get/{key}         a snowflake ID as text (Leaf's API; the key is only validated, as in Leaf)
 *   GET  /v1/segment/{tag}/ids?n=N        {"ids": ["…", …]}
 *   POST /v1/segment/{tag}/lease?step=S   {"start": "…", "end": "…"} — a range for a remote client
 *   GET  /api/redis/get/{tag}             with a Redis client: the next ID of the tag's Redis sequence (one order across servers)
 *   GET  /v1/redis/{tag}/ids?n=N          the same, a batch
 *   GET  /metrics  /healthz  /readyz      (HEAD too)
 */
import { shellWord } from '../shell.js';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { Registry } from 'prom-client';
import { MAX_ROW_STEP } from '../dialects/segments.js';
import { IdleaseError } from '../errors.js';
import { collectMetrics } from '../metrics/collect.js';
import { probe } from '../dialects/connection-errors.js';
import { knexExecutor, type KnexLike } from '../drivers/knex.js';
import { settlesWithin } from '../runtime/deadline.js';
import { createKnexSegmentStore } from '../segment/store.js';
import type { SegmentAllocator } from '../segment/types.js';
import { createSnowflakeAllocator } from '../snowflake/allocator.js';
import type { SnowflakeAllocator } from '../snowflake/types.js';
import { createRedisSequence } from '../redis-sequence/sequence.js';
import type { RedisSequence } from '../redis-sequence/types.js';
import { createAuth } from './auth.js';
import { createConnectionLimiter } from './connections.js';
import { errorResponder, HttpError } from './http-errors.js';
import { intParam, queryParam, RouteTable, type Route } from './routes.js';
import { ServedTags } from './tags.js';

export interface ServeOptions {
  readonly knex: KnexLike;
  readonly host: string;
  readonly port: number;
  /** Serve only these tags (each must exist). Default: every tag in the table. */
  readonly tags?: readonly string[];
  /** Bearer token every /api and /v1 request must carry (never empty). */
  readonly token?: string;
  /**
   * A secret of this run, written only into the embedded directory's lock file (0600): the CLI
   * of the same user presents it to draw through the server and to create tags there.
   */
  readonly runSecret?: string;
  /** Require the token on /metrics too (health endpoints stay open for probes). */
  readonly protectMetrics?: boolean;
  /** Let requests carrying the token add a missing tag (`/ids?create=1`). Default off. */
  readonly allowCreate?: boolean;
  /** Host header names accepted (DNS-rebinding defence). Default: any. */
  readonly allowedHosts?: readonly string[];
  readonly table?: string;
  readonly schema?: string;
  /** Largest n for /ids. Default 10,000 (a response of ~230 KB). */
  readonly maxBatch?: number;
  /** Largest step for /lease. Default 10,000,000. */
  readonly maxLeaseStep?: number;
  /** Largest lease the server's own allocators take (their `maxStep`). Default 10,000,000. */
  readonly maxStep?: number;
  /** Worker-id group of the server's snowflake allocator. Default 'serve'. */
  readonly snowflakeGroup?: string;
  /** Requests waiting on one connection before it is closed. Default 32. */
  readonly maxPipelined?: number;
  /** Open connections at most. Default 1024. */
  readonly maxConnections?: number;
  /** A connection that moves no byte for this long is closed. Default 30,000 ms. */
  readonly idleTimeoutMs?: number;
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

/** Largest n for /ids unless --max-batch says otherwise. */
export const DEFAULT_MAX_BATCH = 10_000;
const MAX_BODY = 1024;
const LEAF_PREFIX = '/api/segment/get/';
const PLAIN_TAG = /^[A-Za-z0-9_.-]{1,128}$/;

function sendText(res: http.ServerResponse, body: string): void {
  res.writeHead(200, { 'content-type': 'text/plain', 'content-length': body.length });
  res.end(body);
}

/** `{"ids": ["…", …]}` written by hand: a JSON.stringify replacer runs once per ID (100,000 calls for a large batch). */
function sendIds(res: http.ServerResponse, ids: readonly bigint[]): void {
  const body = ids.length === 0 ? '{"ids":[]}' : `{"ids":["${ids.join('","')}"]}`;
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': body.length });
  res.end(body);
}

function sendJson(res: http.ServerResponse, status: number, value: unknown): void {
  const body = JSON.stringify(value, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v));
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

export async function startServer(o: ServeOptions): Promise<IdServer> {
  if (o.token !== undefined && o.token.length === 0)
    throw new IdleaseError('BAD_CONFIG', 'The token is empty (an unset variable?): give a real token, or none on a loopback address.');
  const maxBatch = o.maxBatch ?? DEFAULT_MAX_BATCH;
  const maxLeaseStep = Math.min(o.maxLeaseStep ?? 10_000_000, MAX_ROW_STEP);
  const store = createKnexSegmentStore(o.knex, { table: o.table, schema: o.schema });
  const db = knexExecutor(o.knex);
  const registry = new Registry();
  collectMetrics(registry); // the metric families exist even before the first tag
  const tags = new ServedTags({
    knex: o.knex,
    tags: o.tags,
    table: o.table,
    schema: o.schema,
    maxStep: o.maxStep,
    registry,
    ...(o.adminCommand === undefined ? {} : { adminCommand: o.adminCommand }),
  });
  const sequences = new Map<string, RedisSequence>();
  const auth = createAuth(o);
  const limiter = createConnectionLimiter(o);
  const respondError = errorResponder(o.logger);
  let closing = false;
  // Created at the first snowflake request, so a server without idlease_workers still serves segments.
  let snowflake: Promise<SnowflakeAllocator> | undefined;

  await tags.refresh();
  const missing = tags.missing();
  if (missing.length > 0) {
    throw new IdleaseError(
      'UNKNOWN_TAG',
      `--tags names tags that do not exist: ${missing.join(', ')}. Add them first: ${missing.map((t) => `\`${o.adminCommand ?? 'idlease'} tag add ${shellWord(t)}\``).join(', ')}.`,
    );
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
    await tags.allocatorFor(tag); // only served tags
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

  /**
   * Ready means: the database answers within 1 s and the server is not shutting down. A tag out
   * of IDs is that tag's problem (its requests fail with EXHAUSTED), reported per tag, never a
   * reason to take the whole server out of rotation. Without the token: ready or not, nothing else.
   */
  async function readiness(full: boolean): Promise<{ status: number; body: unknown }> {
    const answer = await probe(db, 1_000);
    const database = answer === 'ok' ? 'ok' : answer === 'late' ? 'no answer within 1000 ms' : 'unreachable';
    const ready = database === 'ok' && !closing;
    return { status: ready ? 200 : 503, body: full ? { ready, database, tags: tags.report() } : { ready } };
  }

  const routes = new RouteTable([
    {
      method: 'GET',
      path: '/api/segment/get/{tag}',
      access: 'token',
      async handle({ res, params }) {
        sendText(res, String(await (await tags.allocatorFor(params.tag!)).next()));
      },
    },
    {
      method: 'GET',
      path: '/api/snowflake/get/{key}',
      access: 'token',
      async handle({ res }) {
        sendText(res, String(await (await snowflakeAllocator()).next()));
      },
    },
    {
      method: 'GET',
      path: '/v1/segment/{tag}/ids',
      access: 'token',
      async handle({ req, res, params, query }) {
        const n = intParam(query, 'n', 1, maxBatch);
        if (queryParam(query, 'create') === '1') {
          if (!auth.mayCreate(req))
            throw new HttpError(
              403,
              'FORBIDDEN',
              `Tags are created over HTTP only with the token on a server started with --allow-create; else: \`${o.adminCommand ?? 'idlease'} tag add ${shellWord(params.tag!)}\`.`,
            );
          await tags.create(params.tag!, queryParam(query, 'start'), queryParam(query, 'step'));
        }
        sendIds(res, await (await tags.allocatorFor(params.tag!)).nextBatch(n));
      },
    },
    {
      method: 'POST',
      path: '/v1/segment/{tag}/lease',
      access: 'token',
      async handle({ res, params, query }) {
        const tag = params.tag!;
        const step = intParam(query, 'step', 1, maxLeaseStep);
        await tags.allocatorFor(tag); // only served tags
        // The same one-statement lease the allocators use: this range overlaps nobody's.
        const r = await store.lease(tag, step);
        if (r.kind === 'unknown') throw new IdleaseError('UNKNOWN_TAG', `Tag ${JSON.stringify(tag)} has no row.`);
        if (r.kind === 'full')
          throw new IdleaseError('EXHAUSTED', `Tag ${JSON.stringify(tag)} cannot lease ${step} more IDs below 2^63−1 (max_id ${r.maxId}).`);
        tags.countRemoteLease(tag, step);
        sendJson(res, 200, { start: (r.end - BigInt(step) + 1n).toString(), end: r.end.toString() });
      },
    },
    {
      method: 'GET',
      path: '/api/redis/get/{tag}',
      access: 'token',
      async handle({ res, params }) {
        sendText(res, String(await (await sequenceFor(params.tag!)).next()));
      },
    },
    {
      method: 'GET',
      path: '/v1/redis/{tag}/ids',
      access: 'token',
      async handle({ res, params, query }) {
        const n = intParam(query, 'n', 1, maxBatch);
        sendIds(res, await (await sequenceFor(params.tag!)).nextBatch(n));
      },
    },
    {
      method: 'GET',
      path: '/healthz',
      access: 'open',
      head: true,
      async handle({ res }) {
        sendJson(res, 200, { status: 'ok' });
      },
    },
    {
      method: 'GET',
      path: '/readyz',
      access: 'open',
      head: true,
      async handle({ req, res }) {
        const r = await readiness(auth.required ? auth.authorized(req) : true);
        sendJson(res, r.status, r.body);
      },
    },
    {
      method: 'GET',
      path: '/metrics',
      access: 'metrics',
      head: true,
      async handle({ res }) {
        const body = await registry.metrics();
        res.writeHead(200, { 'content-type': registry.contentType, 'content-length': Buffer.byteLength(body) });
        res.end(body);
      },
    } satisfies Route,
  ]);

  async function route(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q < 0 ? url : url.slice(0, q);
    const found = routes.find(path, req.method ?? 'GET');
    if (!found.match) {
      if (found.allowed.length > 0) {
        res.setHeader('allow', found.allowed.join(', '));
        throw new HttpError(405, 'METHOD_NOT_ALLOWED', `Use ${found.allowed.join(' or ')} here.`);
      }
      throw new HttpError(404, 'NOT_FOUND', `No route ${JSON.stringify(path.slice(0, 100))}. Routes: ${routes.describe()}.`);
    }
    const { route: r, params } = found.match;
    auth.check(req, r.access);
    if (closing && r.access !== 'open')
      throw new HttpError(503, 'SHUTTING_DOWN', 'The server is shutting down; retry on another instance.');
    await r.handle({ req, res, params, query: q < 0 ? '' : url.slice(q + 1) });
  }

  function handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    const done = () => limiter.done(res);
    // The hot route without the router: a served tag spelled plainly, no query string.
    const url = req.url ?? '';
    if (url.startsWith(LEAF_PREFIX) && req.method === 'GET' && !closing && PLAIN_TAG.test(url.slice(LEAF_PREFIX.length))) {
      const a = tags.allocators.get(url.slice(LEAF_PREFIX.length));
      if (a && auth.authorized(req) && !o.allowedHosts) {
        a.next().then(
          (id) => {
            sendText(res, String(id));
            done();
          },
          (err: unknown) => {
            respondError(req, res, err);
            done();
          },
        );
        return;
      }
    }
    route(req, res).then(done, (err: unknown) => {
      respondError(req, res, err);
      done();
    });
  }

  const server = http.createServer(
    { maxHeaderSize: 8 * 1024, requestTimeout: 30_000, headersTimeout: 10_000, keepAliveTimeout: 5_000 },
    (req, res) => {
      const length = Number(req.headers['content-length'] ?? 0);
      if (length > MAX_BODY || req.headers['transfer-encoding'] !== undefined) {
        respondError(req, res, new HttpError(413, 'PAYLOAD_TOO_LARGE', `Requests carry no body (at most ${MAX_BODY} bytes).`));
        req.destroy();
        return;
      }
      if (closing) res.setHeader('connection', 'close');
      req.resume();
      limiter.run(req, () => handle(req, res));
    },
  );
  limiter.apply(server);
  server.on('clientError', (err: NodeJS.ErrnoException, socket) => {
    // Malformed requests (bad request line, oversized headers): answer 400/431 and hang up, never crash.
    if (!socket.writable) return;
    const [status, reason, code] =
      err.code === 'HPE_HEADER_OVERFLOW'
        ? [431, 'Request Header Fields Too Large', 'HEADERS_TOO_LARGE']
        : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
          ? [408, 'Request Timeout', 'REQUEST_TIMEOUT']
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
    allocators: tags.allocators,
    async close(timeoutMs = 10_000) {
      closing = true;
      tags.closing = true;
      const drained = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      await settlesWithin(drained, timeoutMs);
      server.closeAllConnections();
      const sf = snowflake?.catch(() => undefined);
      await Promise.all(
        [...tags.allocators.values(), ...sequences.values()].map((a) => a.close()).concat(sf ? [sf.then((a) => a?.close())] : []),
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
