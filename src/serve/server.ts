/**
 * `idlease serve`: segment IDs over HTTP for services in any language, on node:http. Its
 * concerns live in rooms of their own: the routes (handlers.ts) and the router (router.ts),
 * the auth check (auth.ts), the connection limiter (connections.ts), the error→HTTP mapper
 * (http-errors.ts), the send helpers and listen errors (http.ts) and what IDs come from
 * (allocators.ts); this file wires them. The hot route is one string test and, while the
 * segment lasts, no promise; bench/serve.ts holds it to ≥ 0.9× a bare node:http counter server.
 */
import http from 'node:http';
import type { Socket } from 'node:net';
import type { Logger } from 'pino';
import { Counter, Registry } from 'prom-client';
import { MAX_ROW_STEP } from '../dialects/segments.js';
import { knexExecutor, type KnexLike } from '../drivers/knex.js';
import { IdleaseError } from '../errors.js';
import { singleFlightCache } from '../metrics/cache.js';
import { collectMetrics } from '../metrics/collect.js';
import { renderMetrics } from '../metrics/render.js';
import { settlesWithin } from '../runtime/deadline.js';
import { createKnexSegmentStore } from '../segment/store.js';
import type { SegmentAllocator } from '../segment/types.js';
import { shellWord } from '../shell.js';
import { ServeAllocators } from './allocators.js';
import { createAuth, STATUS_UNAUTHORIZED, UNAUTHORIZED, type Credential } from './auth.js';
import { createBatchQueue, DEFAULT_MAX_QUEUED_IDS } from './batch-queue.js';
import { createConnectionLimiter } from './connections.js';
import { createConnectionGuard, rateLimitedLog } from './guard.js';
import { routes } from './handlers.js';
import { errorResponder, HttpError } from './http-errors.js';
import { createProber } from './probe.js';
import { answerClientError, listen, sendJson, sendText, urlOf } from './http.js';
import { RouteTable } from './router.js';
import { createStatusPage } from './status.js';

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

  /** Let requests carrying the token add a missing tag (`/ids?create=1`). Default off. */
  readonly allowCreate?: boolean;
  /** Host header names accepted besides the loopback names and `host` (DNS-rebinding defence). On a wildcard host (0.0.0.0, ::) without this list: any. */
  readonly allowedHosts?: readonly string[];
  /** Addresses of the reverse proxies in front: wrong tokens from one count against the client its X-Forwarded-For names (else the header is ignored). */
  readonly trustProxy?: readonly string[];
  /** Tags created over HTTP stop when the server knows this many. Default 1,000. */
  readonly maxTags?: number;
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
  /** Open connections at most; beyond, the longest-idle is shed or the new one answered 503. Default 1024. */
  readonly maxConnections?: number;
  /** Open connections from one client address at most. Default 128. */
  readonly maxConnectionsPerAddress?: number;
  /** A complete request header must arrive within this of connecting or of the previous answer. Default 10,000 ms. */
  readonly headerTimeoutMs?: number;
  /** Bytes of answers written but not read, across all connections; over it the oldest unread are shed. Default 16 MiB. */
  readonly maxHeldBytes?: number;
  /** IDs of batch requests waiting their turn, across all connections; over it (or a quarter of it from one address) 503. Default 1,000,000. */
  readonly maxQueuedIds?: number;
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

export async function startServer(o: ServeOptions): Promise<IdServer> {
  if (o.token !== undefined && o.token.length === 0)
    throw new IdleaseError('BAD_CONFIG', 'The token is empty (an unset variable?): give a real token, or none on a loopback address.');
  // An option that cannot do what it says is refused, not ignored: creating takes the token (or the run secret, which needs no flag).
  if (o.allowCreate && o.token === undefined)
    throw new IdleaseError(
      'BAD_CONFIG',
      '--allow-create lets requests carrying the token create tags, and this server has no token: give --token-file <file> (or $IDLEASE_TOKEN), or leave --allow-create out.',
    );
  const adminCommand = o.adminCommand ?? 'idlease';
  const db = knexExecutor(o.knex);
  const registry = new Registry();
  collectMetrics(registry); // the metric families exist even before the first tag
  const allocators = new ServeAllocators({ ...o, registry });
  const tags = allocators.tags;
  const log = rateLimitedLog(o.logger);
  const guard = createConnectionGuard(o, registry, log);
  const auth = createAuth({
    ...o,
    allowedHosts: hostAllowList(o.host, o.allowedHosts),
    registry,
    log,
    addressOf: (req) => guard.addressOf(req.socket),
  });
  const queue = createBatchQueue(o.maxQueuedIds ?? DEFAULT_MAX_QUEUED_IDS, guard.refused);
  const respondError = errorResponder(o.logger);
  let closing = false;

  await tags.refresh();
  const missing = tags.missing();
  if (missing.length > 0) {
    throw new IdleaseError(
      'UNKNOWN_TAG',
      `--tags names tags that do not exist: ${missing.join(', ')}. Add them first: ${missing.map((t) => `\`${adminCommand} tag add ${shellWord(t)}\``).join(', ')}.`,
    );
  }

  /**
   * Ready means: the database answers within 1 s and the server is not shutting down. A tag out
   * of IDs is that tag's problem (its requests fail with EXHAUSTED), reported per tag, never a
   * reason to take the whole server out of rotation. Without the token: ready or not, nothing else.
   */
  // One probe a second at most, shared by every caller, on a connection of its own (probe.ts):
  // a flood of /readyz neither flips readiness nor queues in front of leases.
  const prober = createProber(o.knex, db);
  await prober.probe(5_000); // opens its connection now, not at the first /readyz
  const database = singleFlightCache(async () => {
    const answer = await prober.probe(1_000);
    return answer === 'ok' ? 'ok' : answer === 'late' ? 'no answer within 1000 ms' : 'unreachable';
  });
  async function readiness(full: boolean): Promise<{ status: number; body: unknown }> {
    const db = await database.get();
    const ready = db === 'ok' && !closing;
    return { status: ready ? 200 : 503, body: full ? { ready, database: db, tags: tags.report() } : { ready } };
  }
  // At most one render a second whatever the number of scrapers or tags (a render at 5,000 tags is ~9.5 MB).
  const renders = new Counter({
    name: 'idlease_serve_metrics_renders_total',
    help: 'Renders of /metrics (at most one a second, shared by every scraper)',
    registers: [registry],
  });
  // Kept as bytes: each scrape of a 9 MB render would otherwise encode the string again (and measure it first).
  const metricsText = singleFlightCache(async () => {
    renders.inc();
    return renderMetrics(registry);
  });

  let listenUrl = `${o.host}:${o.port}`; // the port once listening (0 picks one)
  const statusPage = createStatusPage({
    allocators,
    registry,
    connections: () => guard.byState(),
    queuedIds: () => queue.queuedIds,
    name: () => listenUrl,
  });

  const table = new RouteTable(
    routes({
      allocators,
      store: createKnexSegmentStore(o.knex, { table: o.table, schema: o.schema }),
      auth,
      maxBatch: o.maxBatch ?? DEFAULT_MAX_BATCH,
      maxLeaseStep: Math.min(o.maxLeaseStep ?? 10_000_000, MAX_ROW_STEP),
      adminCommand,
      turn: (req, ids) => queue.turn(guard.addressOf(req.socket), ids, !guard.mayAnswerBatch(req.socket)),
      readiness,
      metrics: async () => ({ body: await metricsText.get(), contentType: registry.contentType }),
      status: (query) => statusPage.render(query),
    }),
  );

  async function route(req: http.IncomingMessage, res: http.ServerResponse, credential: Credential): Promise<void> {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q < 0 ? url : url.slice(0, q);
    const found = table.find(path, req.method ?? 'GET');
    if (!found.match) {
      if (found.allowed.length > 0) {
        res.setHeader('allow', found.allowed.join(', '));
        throw new HttpError(405, 'METHOD_NOT_ALLOWED', `Use ${found.allowed.join(' or ')} here.`);
      }
      throw new HttpError(404, 'NOT_FOUND', `No route ${JSON.stringify(path.slice(0, 100))}. Routes: ${table.describe()}.`);
    }
    const { route: r, params } = found.match;
    auth.check(req, r.access, credential);
    if (closing && r.access !== 'open')
      throw new HttpError(503, 'SHUTTING_DOWN', 'The server is shutting down; retry on another instance.');
    await r.handle({ req, res, params, query: q < 0 ? '' : url.slice(q + 1), credential });
  }

  function handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    const url = req.url ?? '';
    // Liveness ahead of any work: no router, no auth, no queue.
    if (url === '/healthz' && (req.method === 'GET' || req.method === 'HEAD')) {
      sendJson(res, 200, { status: 'ok' });
      limiter.done(res);
      return;
    }
    // Authenticate first, on every route: the same work whatever the token, route or tag (auth.ts).
    const credential = auth.credentialOf(req);
    // An anonymous scrape of /metrics is refused here, ahead of the router and of any promise:
    // 16 such scrapers flooding it took an operator's own scrape at 5,000 tags from 59 to 264 ms.
    // An anonymous /status likewise (with the challenge that makes a browser ask for the token).
    if (credential === 'none' && auth.required && (req.method === 'GET' || req.method === 'HEAD')) {
      const refusal = url === '/metrics' ? UNAUTHORIZED : isStatus(url) ? STATUS_UNAUTHORIZED : undefined;
      if (refusal !== undefined && auth.hostAllowed(req)) {
        respondError(req, res, refusal);
        limiter.done(res);
        return;
      }
    }
    // The hot route without the router: a served tag spelled plainly, no query string. The tag is
    // looked up only once the token has opened the route, so a wrong token cannot time which tags exist.
    // Only tags spelled plainly are found by the raw path (tags.ts: plainAllocators), with no test of it per request.
    if (url.startsWith(LEAF_PREFIX) && req.method === 'GET' && !closing) {
      const a = auth.opens(credential) && auth.hostAllowed(req) ? tags.plainAllocators.get(url.slice(LEAF_PREFIX.length)) : undefined;
      if (a) {
        // From memory with no promise while the segment lasts. Not for a request pipelined behind
        // an answer node has not flushed yet (its response has no socket until then): that one
        // takes the promise, so the limiter queues what follows it and the pipeline bounds
        // (connections.ts, guard.ts: held bytes) count what a client that does not read holds.
        const id = res.socket !== null ? a.nextInMemory() : undefined;
        if (id !== undefined) {
          sendText(res, String(id));
          limiter.done(res);
          return;
        }
        a.next().then(
          (id) => {
            sendText(res, String(id));
            limiter.done(res);
          },
          (err: unknown) => {
            respondError(req, res, err);
            limiter.done(res);
          },
        );
        return;
      }
    }
    const done = () => limiter.done(res);
    route(req, res, credential).then(done, (err: unknown) => {
      respondError(req, res, err);
      done();
    });
  }

  const limiter = createConnectionLimiter(o, guard, handle);
  const server = http.createServer(
    { maxHeaderSize: 8 * 1024, requestTimeout: 30_000, headersTimeout: 10_000, keepAliveTimeout: 5_000 },
    (req, res) => {
      // A connection refused with 503 by the guard: its answer is written, nothing else is.
      if (!guard.admitted(req.socket)) return;
      const length = Number(req.headers['content-length'] ?? 0);
      if (length > MAX_BODY || req.headers['transfer-encoding'] !== undefined) {
        respondError(req, res, new HttpError(413, 'PAYLOAD_TOO_LARGE', `Requests carry no body (at most ${MAX_BODY} bytes).`));
        req.destroy();
        return;
      }
      if (closing) res.setHeader('connection', 'close');
      req.resume();
      limiter.run(req, res);
    },
  );
  limiter.apply(server);
  server.prependListener('connection', (socket: Socket) => guard.admit(socket));
  server.on('clientError', (err: NodeJS.ErrnoException, socket) => answerClientError(err, socket));
  await listen(server, o.host, o.port);
  listenUrl = urlOf(server);

  return {
    url: listenUrl,
    allocators: tags.allocators,
    async close(timeoutMs = 10_000) {
      closing = true;
      tags.closing = true;
      const drained = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      await settlesWithin(drained, timeoutMs);
      server.closeAllConnections();
      await Promise.all([allocators.close(), prober.close()]);
    },
  };
}

/** /status with or without a query string. */
const isStatus = (url: string): boolean => url.startsWith('/status') && (url.length === 7 || url[7] === '?');

const LOOPBACK_NAMES = ['localhost', '127.0.0.1', '::1'];

/**
 * The Host names answered: the loopback names, the listen address and --allowed-hosts. On a
 * wildcard address (0.0.0.0, ::) the names clients use are not known here: any, unless
 * --allowed-hosts lists them.
 */
function hostAllowList(host: string, extra: readonly string[] | undefined): string[] | undefined {
  const wildcard = host === '0.0.0.0' || host === '::' || host === '';
  if (wildcard && extra === undefined) return undefined;
  return [...LOOPBACK_NAMES, ...(wildcard ? [] : [host.replace(/^\[(.*)\]$/, '$1')]), ...(extra ?? [])];
}
