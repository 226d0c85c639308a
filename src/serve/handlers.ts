/**
 * The routes of `idlease serve`, one small function each, and the table that lists them: a new
 * endpoint is one function and one row.
 *
 *   GET  /api/segment/get/{tag}           the next ID as text (Leaf's API)
 *   GET  /api/snowflake/get/{key}         a snowflake ID as text (Leaf's API; the key is only validated, as in Leaf)
 *   GET  /v1/segment/{tag}/ids?n=N        {"ids": ["…", …]}
 *   POST /v1/segment/{tag}/lease?step=S   {"start": "…", "end": "…"} — a range for a remote client
 *   GET  /api/redis/get/{tag}             with a Redis client: the next ID of the tag's Redis sequence (one order across servers)
 *   GET  /v1/redis/{tag}/ids?n=N          the same, a batch
 *   GET  /metrics  /healthz  /readyz      (HEAD too)
 *   GET  /status?q=…&page=N               the status page (HTML; the token as a bearer or as HTTP Basic's password)
 */
import { typedConnectionError } from '../dialects/connection-errors.js';
import { IdleaseError, isIdleaseError } from '../errors.js';
import type { SegmentStore } from '../segment/store.js';
import { shellWord } from '../shell.js';
import type { ServeAllocators } from './allocators.js';
import type { Auth } from './auth.js';
import { HttpError } from './http-errors.js';
import { STATUS_HEADERS } from './status.js';
import { sendIdRanges, sendIds, sendJson, sendText } from './http.js';
import { intParam, queryParam, type Route, type RouteContext } from './router.js';

export interface HandlerDeps {
  readonly allocators: ServeAllocators;
  readonly store: SegmentStore;
  readonly auth: Auth;
  readonly maxBatch: number;
  readonly maxLeaseStep: number;
  readonly adminCommand: string;
  /** Wait for this batch's turn (batch-queue.ts): 503 BUSY when the budget of queued IDs is spent. */
  turn(req: RouteContext['req'], ids: number): Promise<void>;
  /** /readyz's status and body (`full`: the caller may see the details). */
  readiness(full: boolean): Promise<{ status: number; body: unknown }>;
  /** /metrics's body and content type. */
  metrics(): Promise<{ body: Buffer; contentType: string }>;
  /** /status's page for a query string, and the ms it took (status.ts). */
  status(query: string): Promise<{ body: Buffer; ms: number }>;
}

type Handler = (d: HandlerDeps, ctx: RouteContext) => Promise<void>;

const segmentNext: Handler = async (d, { res, params }) => {
  sendText(res, String(await (await d.allocators.tags.allocatorFor(params.tag!)).next()));
};

const snowflakeNext: Handler = async (d, { res }) => {
  sendText(res, String(await d.allocators.nextSnowflake()));
};

const segmentIds: Handler = async (d, { req, res, params, query, credential }) => {
  const tag = params.tag!;
  const n = intParam(query, 'n', 1, d.maxBatch);
  if (queryParam(query, 'create') === '1') {
    if (!d.auth.mayCreate(credential))
      throw new HttpError(
        403,
        'FORBIDDEN',
        `Tags are created over HTTP only with the token on a server started with --allow-create; else: \`${d.adminCommand} tag add ${shellWord(tag)}\`.`,
      );
    await d.allocators.tags.create(tag, queryParam(query, 'start'), queryParam(query, 'step'));
  }
  const allocator = await d.allocators.tags.allocatorFor(tag);
  await d.turn(req, n);
  res.setHeader('cache-control', 'no-store'); // IDs: never from a cache (http.ts sendText)
  sendIdRanges(res, await allocator.nextRanges(n));
};

const segmentLease: Handler = async (d, { res, params, query }) => {
  const tag = params.tag!;
  const step = intParam(query, 'step', 1, d.maxLeaseStep);
  await d.allocators.tags.allocatorFor(tag); // only served tags
  // The same one-statement lease the allocators use: this range overlaps nobody's.
  const r = await d.store.lease(tag, step).catch((err: unknown) => {
    // A database that is unreachable or did not answer within the statement bound is the
    // database's state, not a bug here: 503, retry. Anything else stays what it is (500).
    const typed = typedConnectionError(err);
    if (isIdleaseError(typed)) throw typed;
    if (err instanceof Error && /did not answer within/.test(err.message))
      throw new IdleaseError('DB_UNAVAILABLE', 'The remote lease statement did not answer within its bound.', { cause: err });
    throw err;
  });
  if (r.kind === 'unknown') throw new IdleaseError('UNKNOWN_TAG', `Tag ${JSON.stringify(tag)} has no row.`);
  if (r.kind === 'full')
    throw new IdleaseError('EXHAUSTED', `Tag ${JSON.stringify(tag)} cannot lease ${step} more IDs below 2^63−1 (max_id ${r.maxId}).`);
  d.allocators.tags.countRemoteLease(tag, step);
  res.setHeader('cache-control', 'no-store');
  sendJson(res, 200, { start: (r.end - BigInt(step) + 1n).toString(), end: r.end.toString() });
};

const redisNext: Handler = async (d, { res, params }) => {
  sendText(res, String(await (await d.allocators.sequenceFor(params.tag!)).next()));
};

const redisIds: Handler = async (d, { req, res, params, query }) => {
  const n = intParam(query, 'n', 1, d.maxBatch);
  const sequence = await d.allocators.sequenceFor(params.tag!);
  await d.turn(req, n);
  res.setHeader('cache-control', 'no-store');
  sendIds(res, await sequence.nextBatch(n));
};

/** Also answered before the router (server.ts); here for HEAD and for the route list. */
const healthz: Handler = async (_d, { res }) => {
  sendJson(res, 200, { status: 'ok' });
};

// The fuller body only for the right token; a wrong one is counted and limited as on /api, so this
// open route is no faster oracle for guessing than /api is.
const readyz: Handler = async (d, { req, res, credential }) => {
  const r = await d.readiness(d.auth.fuller(req, credential));
  sendJson(res, r.status, r.body);
};

const metrics: Handler = async (d, { res }) => {
  const { body, contentType } = await d.metrics();
  res.writeHead(200, { 'content-type': contentType, 'content-length': body.length });
  res.end(body);
};

const status: Handler = async (d, { res, query }) => {
  const { body, ms } = await d.status(query);
  // Server-Timing: the browser's network panel (and the tests) see what the page cost the server.
  res.writeHead(200, { ...STATUS_HEADERS, 'server-timing': `render;dur=${ms.toFixed(1)}`, 'content-length': body.length });
  res.end(body);
};

type Row = Omit<Route, 'handle'> & { readonly handler: Handler };

const ROUTES: readonly Row[] = [
  { method: 'GET', path: '/api/segment/get/{tag}', access: 'token', handler: segmentNext },
  { method: 'GET', path: '/api/snowflake/get/{key}', access: 'token', handler: snowflakeNext },
  { method: 'GET', path: '/v1/segment/{tag}/ids', access: 'token', handler: segmentIds },
  { method: 'POST', path: '/v1/segment/{tag}/lease', access: 'token', handler: segmentLease },
  { method: 'GET', path: '/api/redis/get/{tag}', access: 'token', handler: redisNext },
  { method: 'GET', path: '/v1/redis/{tag}/ids', access: 'token', handler: redisIds },
  { method: 'GET', path: '/healthz', access: 'open', head: true, handler: healthz },
  { method: 'GET', path: '/readyz', access: 'open', head: true, handler: readyz },
  { method: 'GET', path: '/metrics', access: 'metrics', head: true, handler: metrics },
  { method: 'GET', path: '/status', access: 'status', handler: status },
];

/** The route table bound to this server's parts. */
export function routes(d: HandlerDeps): Route[] {
  return ROUTES.map(({ handler, ...row }) => ({ ...row, handle: (ctx: RouteContext) => handler(d, ctx) }));
}
