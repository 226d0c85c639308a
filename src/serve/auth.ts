/**
 * Who may ask `idlease serve` for what. Three secrets can open the /api and /v1 routes: the
 * operator's token (`--token`, `--token-file`, `$IDLEASE_TOKEN`) and, on the embedded
 * database, a secret made anew for each run and written only into the directory's lock file
 * (mode 0600), which the `idlease` CLI of the same user presents to draw through the server.
 * Creating a tag over HTTP takes that run secret, or the token on a server started with
 * `--allow-create`. Tokens are compared in constant time, as digests.
 *
 * Two browser defences stand before any route: an optional list of Host names (against DNS
 * rebinding), and a POST must carry a header a cross-site form cannot send (`Authorization`,
 * or `X-Idlease`), so a page in a browser cannot lease ranges without a preflight it never gets.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type http from 'node:http';
import { HttpError } from './http-errors.js';

export type Access = 'open' | 'token' | 'metrics';

export interface AuthOptions {
  readonly token?: string;
  /** The per-run secret of the lock file (embedded database only). */
  readonly runSecret?: string;
  readonly protectMetrics?: boolean;
  readonly allowCreate?: boolean;
  /** Host header values (without port) accepted; undefined: any. */
  readonly allowedHosts?: readonly string[];
}

export interface Auth {
  /** Whether a token or run secret exists at all (a server without either is open on /api and /v1). */
  readonly required: boolean;
  /** Throw 401/403/421 unless `req` may use a route of this access. */
  check(req: http.IncomingMessage, access: Access): void;
  /** The request carries the token or the run secret (or none is required). */
  authorized(req: http.IncomingMessage): boolean;
  /** The request may create a missing tag. */
  mayCreate(req: http.IncomingMessage): boolean;
}

const digest = (s: string): Buffer => createHash('sha256').update(s).digest();

function bearerMatches(req: http.IncomingMessage, expected: Buffer | undefined): boolean {
  if (expected === undefined) return false;
  const h = req.headers.authorization;
  if (typeof h !== 'string' || !h.startsWith('Bearer ')) return false;
  return timingSafeEqual(digest(h.slice(7)), expected);
}

export function createAuth(o: AuthOptions): Auth {
  const token = o.token === undefined ? undefined : digest(o.token);
  const run = o.runSecret === undefined ? undefined : digest(o.runSecret);
  const required = token !== undefined;
  const hosts = o.allowedHosts === undefined ? undefined : new Set(o.allowedHosts.map((h) => h.toLowerCase()));
  const authorized = (req: http.IncomingMessage) => !required || bearerMatches(req, token) || bearerMatches(req, run);
  return {
    required,
    authorized,
    mayCreate: (req) => bearerMatches(req, run) || (o.allowCreate === true && bearerMatches(req, token)),
    check(req, access) {
      if (hosts !== undefined) {
        const host = (req.headers.host ?? '')
          .replace(/:\d+$/, '')
          .replace(/^\[(.*)\]$/, '$1')
          .toLowerCase();
        if (!hosts.has(host)) throw new HttpError(421, 'MISDIRECTED', 'This server does not answer for that Host (--allowed-hosts).');
      }
      if (req.method === 'POST' && req.headers.authorization === undefined && req.headers['x-idlease'] === undefined)
        throw new HttpError(
          403,
          'FORBIDDEN',
          'A POST must carry Authorization or an X-Idlease header (what a cross-site form cannot send): e.g. -H "X-Idlease: 1".',
        );
      const needsToken = access === 'token' || (access === 'metrics' && o.protectMetrics === true);
      if (needsToken && !authorized(req))
        throw new HttpError(401, 'UNAUTHORIZED', 'Send Authorization: Bearer <token> (the token the server was started with).');
    },
  };
}
