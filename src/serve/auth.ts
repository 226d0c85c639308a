/**
 * Who may ask `idlease serve` for what. Three secrets can open the /api and /v1 routes: the
 * operator's token (`--token`, `--token-file`, `$IDLEASE_TOKEN`) and, on the embedded
 * database, a secret made anew for each run and written only into the directory's lock file
 * (mode 0600), which the `idlease` CLI of the same user presents to draw through the server.
 * Creating a tag over HTTP takes that run secret, or the token on a server started with
 * `--allow-create`. Tokens are compared in constant time, as digests.
 *
 * /metrics takes the token too whenever one is set (Prometheus sends `authorization`); only the
 * health endpoints stay open. The scheme is matched case-insensitively (RFC 9110 §11.1). Wrong
 * tokens are counted and, past 10 a minute from one address, answered 429 + Retry-After
 * without being checked, so guessing costs the guesser time, not the server.
 *
 * Two browser defences stand before any route: a list of Host names (against DNS rebinding; on
 * by default: the loopback names and the listen address, extended by --allowed-hosts), and a POST must carry a header a cross-site form cannot send (`Authorization`,
 * or `X-Idlease`), so a page in a browser cannot lease ranges without a preflight it never gets.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type http from 'node:http';
import { Counter, type Registry } from 'prom-client';
import { HttpError } from './http-errors.js';

export type Access = 'open' | 'token' | 'metrics';

export interface AuthOptions {
  readonly token?: string;
  /** The per-run secret of the lock file (embedded database only). */
  readonly runSecret?: string;
  readonly allowCreate?: boolean;
  /** Host header values (without port) accepted; undefined: any. */
  readonly allowedHosts?: readonly string[];
  /** Where wrong-token attempts are counted. */
  readonly registry?: Registry;
  /** Rate-limited warning lines (guard.ts's rateLimitedLog). */
  readonly log?: (event: string, fields: Record<string, unknown>, msg: string) => void;
  /** The client address a wrong-token limit counts against. */
  readonly addressOf?: (req: http.IncomingMessage) => string;
}

/** Wrong tokens one address may send per window before its requests are refused unchecked. */
const FAILURES_PER_WINDOW = 10;
const FAILURE_WINDOW_MS = 60_000;

export interface Auth {
  /** Whether a token or run secret exists at all (a server without either is open on /api and /v1). */
  readonly required: boolean;
  /** Throw 401/403/421 unless `req` may use a route of this access. */
  check(req: http.IncomingMessage, access: Access): void;
  /** The request carries the token or the run secret (or none is required). */
  authorized(req: http.IncomingMessage): boolean;
  /** The Host header names this server (or no list is kept). */
  hostAllowed(req: http.IncomingMessage): boolean;
  /** The request's address sent too many wrong tokens lately (its requests go through check(), which answers 429). */
  limitedNow(req: http.IncomingMessage): boolean;
  /** The request may create a missing tag. */
  mayCreate(req: http.IncomingMessage): boolean;
}

const digest = (s: string): Buffer => createHash('sha256').update(s).digest();

/** The credentials of `Authorization: Bearer <token>`, the scheme in any case. */
function bearerOf(req: http.IncomingMessage): string | undefined {
  const h = req.headers.authorization;
  if (typeof h !== 'string' || h.length < 7 || h[6] !== ' ' || h.slice(0, 6).toLowerCase() !== 'bearer') return undefined;
  return h.slice(7);
}

function bearerMatches(req: http.IncomingMessage, expected: Buffer | undefined): boolean {
  if (expected === undefined) return false;
  const given = bearerOf(req);
  return given !== undefined && timingSafeEqual(digest(given), expected);
}

export function createAuth(o: AuthOptions): Auth {
  const token = o.token === undefined ? undefined : digest(o.token);
  const run = o.runSecret === undefined ? undefined : digest(o.runSecret);
  const required = token !== undefined;
  const hosts = o.allowedHosts === undefined ? undefined : new Set(o.allowedHosts.map((h) => h.toLowerCase()));
  const authorized = (req: http.IncomingMessage) => !required || bearerMatches(req, token) || bearerMatches(req, run);
  const failuresCounter =
    o.registry &&
    new Counter({
      name: 'idlease_serve_auth_failures_total',
      help: 'Requests refused for a missing or wrong token (limited: past 10 a minute from one address, refused unchecked with 429)',
      labelNames: ['result'],
      registers: [o.registry],
    });
  failuresCounter?.inc({ result: 'unauthorized' }, 0);
  failuresCounter?.inc({ result: 'limited' }, 0);
  const failures = new Map<string, { since: number; count: number }>();
  const addressOf = o.addressOf ?? ((req: http.IncomingMessage) => req.socket.remoteAddress ?? '?');
  // The verdict per raw Host header value: clients send the same few, and this runs on the hot route.
  const verdicts = new Map<string, boolean>();
  const hostAllowed = (req: http.IncomingMessage): boolean => {
    if (hosts === undefined) return true;
    const raw = req.headers.host ?? '';
    const known = verdicts.get(raw);
    if (known !== undefined) return known;
    const host = raw
      .replace(/:\d+$/, '')
      .replace(/^\[(.*)\]$/, '$1')
      .toLowerCase();
    const ok = hosts.has(host);
    if (verdicts.size < 256) verdicts.set(raw, ok);
    return ok;
  };

  /** Refuse a request without (the right) token, counting wrong ones per address. */
  function refuse(req: http.IncomingMessage): never {
    const address = addressOf(req);
    if (req.headers.authorization !== undefined) {
      const now = Date.now();
      let f = failures.get(address);
      if (f === undefined || now - f.since > FAILURE_WINDOW_MS) {
        // Forget the quiet addresses now and then, so guessing from many addresses does not grow the map without end.
        if (failures.size > 10_000) for (const [a, v] of failures) if (now - v.since > FAILURE_WINDOW_MS) failures.delete(a);
        failures.set(address, (f = { since: now, count: 0 }));
      }
      f.count++;
      failuresCounter?.inc({ result: 'unauthorized' });
      o.log?.('auth-failed', { address, inWindow: f.count }, `a request from ${address} carried a wrong token`);
    }
    throw new HttpError(401, 'UNAUTHORIZED', 'Send Authorization: Bearer <token> (the token the server was started with).');
  }

  /** An address past its wrong-token allowance is refused before its token is looked at. */
  function limited(req: http.IncomingMessage): void {
    const f = failures.get(addressOf(req));
    if (f === undefined || f.count < FAILURES_PER_WINDOW) return;
    const left = f.since + FAILURE_WINDOW_MS - Date.now();
    if (left <= 0) return;
    failuresCounter?.inc({ result: 'limited' });
    throw new HttpError(
      429,
      'TOO_MANY_ATTEMPTS',
      'Too many requests with a wrong token from this address; retry later with the right one.',
      {
        'retry-after': String(Math.ceil(left / 1000)),
      },
    );
  }

  return {
    required,
    authorized,
    hostAllowed,
    limitedNow: (req) => failures.size > 0 && (failures.get(addressOf(req))?.count ?? 0) >= FAILURES_PER_WINDOW,
    mayCreate: (req) => bearerMatches(req, run) || (o.allowCreate === true && bearerMatches(req, token)),
    check(req, access) {
      if (!hostAllowed(req))
        throw new HttpError(
          421,
          'MISDIRECTED',
          'This server does not answer for that Host (the listen address, loopback names and --allowed-hosts).',
        );
      if (req.method === 'POST' && req.headers.authorization === undefined && req.headers['x-idlease'] === undefined)
        throw new HttpError(
          403,
          'FORBIDDEN',
          'A POST must carry Authorization or an X-Idlease header (what a cross-site form cannot send): e.g. -H "X-Idlease: 1".',
        );
      // /metrics is the 'metrics' access: the token whenever one is set (tag names, rates and a render's cost are not for anyone).
      if (access !== 'open' && required) {
        limited(req);
        if (!authorized(req)) refuse(req);
      }
    },
  };
}
